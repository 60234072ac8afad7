// Package bench is vccl-bench: nccl-tests' sweeps, columns and checks over a
// VCCL-Go communicator. Main is the command; Run is the sweep on any
// communicator, so tests drive it on collective.NewLocal ranks.
package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/vccl-go/vccl/collective"
)

// Config is one vccl-bench invocation.
type Config struct {
	Coll       Collective
	MinBytes   int64
	MaxBytes   int64
	Factor     float64
	Op         collective.ReduceOp
	Type       collective.Datatype
	Iters      int
	Warmup     int
	Check      bool
	Root       int
	JSON       bool
	JSONFile   string // also write the JSON document there, beside the table
	Telemetry  string // "" (VCCL_TELEMETRY decides), "on", "off" or "alternate"
	Progress   string // "auto" (only when stderr is a terminal) or "off"
	CPUProfile string // write a CPU profile per rank to CPUProfile.rankN
	Exporters  string // with telemetry on or alternate, a directory: the exporters on, traces written there
	Spans      bool   // with Exporters: OpenTelemetry spans too
	Attach     bool   // with Telemetry "alternate": the 'on' blocks with the exporters --telemetry on attaches
	Device     string // "host", "shared" or "gpu": where the buffers live
	VsNCCL     bool   // with Device "gpu": NCCL on the same buffers, row by row
	SMs        int    // with Device "gpu": the reduction kernel's grid (0: gpu/ce's default)
}

// DefaultConfig is nccl-tests' defaults where they carry over.
func DefaultConfig() Config {
	return Config{MinBytes: 32 << 20, MaxBytes: 32 << 20, Factor: 2, Op: collective.Sum,
		Type: collective.Float32, Iters: 20, Warmup: 5, Check: true, Progress: "auto", Device: "host"}
}

const usageHead = `usage: vccl-bench COLLECTIVE [flags]

Measures one collective over a sweep of sizes, in the mould of nccl-tests,
on the communicator of this process (collective.NewFromEnv: run it under
vcclrun -n N, torchrun, mpirun or srun). Only rank 0 prints.

collectives: allreduce allgather reducescatter broadcast reduce alltoall sendrecv

Sizes are bytes with optional K, M or G (powers of 1024): -b 8 -e 64M -f 4.
Columns: size (bytes, the larger of send and receive buffers), count (the
count argument of the call), time (µs, mean over iterations, averaged over
ranks), algbw = size/time and busbw = algbw × nccl-tests' factor for the
collective (GB/s), #wrong (elements differing from the tool's reference,
summed over ranks; N/A without -c 1). Library knobs come from the
environment: VCCL_TRANSPORT, VCCL_ALGO, VCCL_NCHANNELS, VCCL_CHUNK_SIZE, ...
With telemetry on (VCCL_TELEMETRY=1 or --telemetry on), so are the exporters:
Arrow traces in VCCL_TELEMETRY_DIR, the live endpoint at VCCL_TELEMETRY_ADDR,
OpenTelemetry spans where the OTEL_* variables ask for them.

flags:
`

// ParseArgs parses the command line (without the program name). The
// collective is the first argument, or the only one left after the flags.
func ParseArgs(args []string) (Config, error) {
	cfg := DefaultConfig()
	fs, vals := flags(&cfg)
	fs.SetOutput(io.Discard)
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	switch {
	case name == "" && fs.NArg() > 0:
		name = fs.Arg(0)
		if fs.NArg() > 1 {
			return Config{}, fmt.Errorf("unexpected arguments after the collective: %s", strings.Join(fs.Args()[1:], " "))
		}
	case fs.NArg() > 0:
		return Config{}, fmt.Errorf("unexpected arguments: %s (flags go after the collective; nothing may follow them)", strings.Join(fs.Args(), " "))
	}
	if name == "" {
		return Config{}, errors.New("no collective given (allreduce, allgather, reducescatter, broadcast, reduce, alltoall or sendrecv)")
	}
	var err error
	if cfg.Coll, err = ParseCollective(name); err != nil {
		return Config{}, err
	}
	if cfg.MinBytes, err = ParseSize(vals.min); err != nil {
		return Config{}, fmt.Errorf("-b %q: %w", vals.min, err)
	}
	if cfg.MaxBytes, err = ParseSize(vals.max); err != nil {
		return Config{}, fmt.Errorf("-e %q: %w", vals.max, err)
	}
	if cfg.Factor, err = strconv.ParseFloat(vals.factor, 64); err != nil || math.IsNaN(cfg.Factor) {
		return Config{}, fmt.Errorf("-f %q: not a number", vals.factor)
	}
	if cfg.Op, err = collective.ParseReduceOp(strings.ToLower(vals.op)); err != nil {
		return Config{}, fmt.Errorf("-o %q: want sum, prod, min, max or avg", vals.op)
	}
	if cfg.Type, err = collective.ParseDatatype(strings.ToLower(vals.dtype)); err != nil {
		return Config{}, fmt.Errorf("-d %q: want int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32 or float64", vals.dtype)
	}
	switch vals.check {
	case 0, 1:
		cfg.Check = vals.check == 1
	default:
		return Config{}, fmt.Errorf("-c %d: want 0 or 1", vals.check)
	}
	switch v := strings.ToLower(vals.telemetry); v {
	case "", "env":
		cfg.Telemetry = ""
	case "on", "1", "true":
		cfg.Telemetry = "on"
	case "off", "0", "false":
		cfg.Telemetry = "off"
	case "alternate":
		cfg.Telemetry = "alternate"
	default:
		return Config{}, fmt.Errorf("--telemetry %q: want on, off or alternate", vals.telemetry)
	}
	switch v := strings.ToLower(vals.progress); v {
	case "auto", "off":
		cfg.Progress = v
	default:
		return Config{}, fmt.Errorf("--progress %q: want auto or off", vals.progress)
	}
	return cfg, cfg.validate()
}

type flagVals struct {
	min, max, factor, op, dtype, telemetry, progress string
	check                                            int
}

func flags(cfg *Config) (*flag.FlagSet, *flagVals) {
	fs := flag.NewFlagSet("vccl-bench", flag.ContinueOnError)
	v := &flagVals{min: FormatSize(cfg.MinBytes), max: FormatSize(cfg.MaxBytes), factor: strconv.FormatFloat(cfg.Factor, 'g', -1, 64),
		op: cfg.Op.String(), dtype: cfg.Type.String(), progress: cfg.Progress, check: 1}
	fs.StringVar(&v.min, "b", v.min, "smallest size in bytes (K, M, G suffixes)")
	fs.StringVar(&v.max, "e", v.max, "largest size in bytes (K, M, G suffixes)")
	fs.StringVar(&v.factor, "f", v.factor, "multiply the size by this from one step to the next (> 1)")
	fs.StringVar(&v.op, "o", v.op, "reduction: sum, prod, min, max or avg")
	fs.StringVar(&v.dtype, "d", v.dtype, "datatype: int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64 (or nccl-tests' names: float, half, double, ...)")
	fs.IntVar(&cfg.Iters, "n", cfg.Iters, "timed iterations per size")
	fs.IntVar(&cfg.Warmup, "w", cfg.Warmup, "warm-up iterations per size")
	fs.IntVar(&v.check, "c", v.check, "1: check every result against the tool's own reference; 0: don't")
	fs.IntVar(&cfg.Root, "r", cfg.Root, "root rank of broadcast and reduce")
	fs.BoolVar(&cfg.JSON, "json", false, "print one JSON document instead of the table")
	fs.StringVar(&cfg.JSONFile, "json-file", "", "also write the --json document to `FILE` (rank 0), with the table on stdout: one run, both forms")
	fs.StringVar(&v.telemetry, "telemetry", "", "flow telemetry on or off (default: VCCL_TELEMETRY), or alternate: every size timed with telemetry off and on in alternating blocks of one launch (each the median over its blocks), both printed with their busbw ratio; on, the exporters VCCL_TELEMETRY_DIR, VCCL_TELEMETRY_ADDR and OTEL_* ask for are attached, but for alternate, which times the records alone unless --exporters or --attach is given")
	fs.StringVar(&v.progress, "progress", v.progress, "progress bar on stderr: auto (when stderr is a terminal, or under vcclrun on a terminal, which shows it below the table) or off")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write each rank's CPU profile of the sweep to `PREFIX`.rankN (go tool pprof)")
	fs.StringVar(&cfg.Device, "device", cfg.Device, "where the buffers live: host (the Go heap), shared (host memory from shm.AllocShared, which peers on the host read without a system call), or gpu (device memory through the collective API, one GPU per rank; needs a GPU)")
	fs.BoolVar(&cfg.VsNCCL, "vs-nccl", false, "with --device gpu: run NCCL (libnccl.so.2 via $VCCL_NCCL_LIB or the torch pip package) on the same buffers and print its row and the ratio")
	fs.IntVar(&cfg.SMs, "sms", 0, "with --device gpu: thread blocks (so at most SMs) of the reduction kernel (0: default)")
	fs.StringVar(&cfg.Exporters, "exporters", "", "with --telemetry on or alternate, turn the exporters on (Arrow traces into `DIR`, Prometheus /metrics on the live endpoint, scraped every second), to measure what they cost; with alternate the 'on' blocks run with them writing")
	fs.BoolVar(&cfg.Attach, "attach", false, "with --telemetry alternate, the 'on' blocks run with the exporters --telemetry on attaches (what VCCL_TELEMETRY_DIR, VCCL_TELEMETRY_ADDR and OTEL_* ask for; with none of them set, the live endpoint, which folds every record), to measure what telemetry costs as a job turns it on")
	fs.BoolVar(&cfg.Spans, "spans", false, "with --exporters, OpenTelemetry spans too (built, encoded by the stdout exporter and discarded)")
	return fs, v
}

func (c *Config) validate() error {
	switch {
	case c.MinBytes > c.MaxBytes:
		return fmt.Errorf("-b %s is larger than -e %s", FormatSize(c.MinBytes), FormatSize(c.MaxBytes))
	case c.MinBytes != c.MaxBytes && !(c.Factor > 1):
		return fmt.Errorf("-f %g: want a factor above 1 to step from -b to -e", c.Factor)
	case c.MaxBytes > 1<<40:
		return fmt.Errorf("-e %s: more than 1 TiB per buffer", FormatSize(c.MaxBytes))
	case c.Iters < 1:
		return fmt.Errorf("-n %d: want at least 1 iteration", c.Iters)
	case c.Warmup < 0:
		return fmt.Errorf("-w %d: must not be negative", c.Warmup)
	case c.Root < 0:
		return fmt.Errorf("-r %d: must not be negative", c.Root)
	case c.Device != "host" && c.Device != "shared" && c.Device != "gpu":
		return fmt.Errorf("--device %q: want host, shared or gpu", c.Device)
	case c.VsNCCL && c.Device != "gpu":
		return errors.New("--vs-nccl needs --device gpu")
	case c.SMs < 0:
		return fmt.Errorf("--sms %d: must not be negative", c.SMs)
	case c.Spans && c.Exporters == "":
		return errors.New("--spans needs --exporters")
	case c.Attach && c.Telemetry != "alternate":
		return errors.New("--attach needs --telemetry alternate (--telemetry on attaches the exporters itself)")
	case c.Attach && c.Exporters != "":
		return errors.New("--attach and --exporters: choose one (--exporters attaches its own)")
	case c.Telemetry == "alternate" && c.Device == "gpu":
		return errors.New("--telemetry alternate times host buffers only (--device host or shared)")
	}
	return nil
}

// Usage writes the usage text and flag defaults to w.
func Usage(w io.Writer) {
	cfg := DefaultConfig()
	fs, _ := flags(&cfg)
	fs.SetOutput(w)
	fmt.Fprint(w, usageHead)
	fs.PrintDefaults()
}

// ParseSize reads a byte count: 4096, 64K, 16M, 1G (powers of 1024; a
// trailing B or iB is allowed: 64KiB).
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "B")
	t = strings.TrimSuffix(t, "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("not a byte size (want e.g. 8, 64K, 16M, 1G)")
	}
	if n > math.MaxInt64/mult {
		return 0, errors.New("byte size too large")
	}
	return n * mult, nil
}

// FormatSize writes n with the largest K, M or G suffix that divides it.
func FormatSize(n int64) string {
	for _, u := range []struct {
		s string
		v int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return strconv.FormatInt(n/u.v, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// Sizes returns the sweep: min, min×f, min×f², … up to max (each step at
// least one byte larger), as nccl-tests does with -f.
func Sizes(min, max int64, factor float64) []int64 {
	out := []int64{min}
	if min == max || !(factor > 1) {
		return out
	}
	for s := min; ; {
		next := int64(float64(s) * factor)
		if next <= s {
			next = s + 1
		}
		if next > max {
			return out
		}
		out = append(out, next)
		s = next
	}
}
