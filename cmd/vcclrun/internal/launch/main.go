package launch

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vccl-go/vccl/internal/term"
)

const usage = `usage: vcclrun -n N [flags] [--] PROG [ARGS...]

Starts N local ranks of PROG with the torchrun-style environment (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT
set to a free port, VCCL_JOB_TOKEN set to a fresh token unless it, or
VCCL_JOB_TOKEN_FILE, is set already). At most 1024 ranks. Signals (SIGINT,
SIGTERM) and --timeout act from the first moment, while ranks still start.
Each rank is bound to cores of its own when the ranks fit in the CPUs
vcclrun may use, as Open MPI binds (--bind-to none lets the kernel place
them).
If a rank fails, the others get SIGTERM and, after the grace period, SIGKILL.
vcclrun exits 0 only if every rank exits 0.

Rank 0's stdout passes through as it is, so that what rank 0 prints (a
report, vccl-bench's table) reads as the program's own, as under mpirun;
every other line gets a "[rank] " prefix (--tag-output). On stderr vcclrun
says, as soon as the job has them, its job id and, once every rank serves
its live telemetry (VCCL_TELEMETRY=1 and the telemetry package), where it
is and the vccl-top command that watches the job (--quiet: neither).

flags:
`

// ParseArgs parses vcclrun's command line (without the program name). Flags
// end at "--" or at the first argument that is not a flag: everything after
// that is the program and its arguments, untouched.
func ParseArgs(args []string) (Config, error) {
	cfg := Config{}
	fs := flags(&cfg)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	switch {
	case !isSet(fs, "n"):
		return Config{}, errors.New("-n is required")
	case cfg.N < 1:
		return Config{}, fmt.Errorf("-n %d: need at least one rank", cfg.N)
	case cfg.N > MaxRanks:
		return Config{}, fmt.Errorf("-n %d: at most %d ranks on one host", cfg.N, MaxRanks)
	case cfg.Grace < 0:
		return Config{}, fmt.Errorf("--grace %v: must not be negative", cfg.Grace)
	case cfg.Timeout < 0:
		return Config{}, fmt.Errorf("--timeout %v: must not be negative", cfg.Timeout)
	case cfg.Bind != BindCore && cfg.Bind != BindNone:
		return Config{}, fmt.Errorf("--bind-to %q: want %s or %s", cfg.Bind, BindCore, BindNone)
	case fs.NArg() == 0:
		return Config{}, errors.New("no program given")
	}
	cfg.Prog, cfg.Args = fs.Arg(0), fs.Args()[1:]
	return cfg, nil
}

func flags(cfg *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("vcclrun", flag.ContinueOnError)
	fs.IntVar(&cfg.N, "n", 0, "number of ranks to start (required, ≥ 1)")
	fs.DurationVar(&cfg.Grace, "grace", 5*time.Second, "time between SIGTERM and SIGKILL when stopping ranks")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "stop the job after this long (0: no limit)")
	cfg.TagOutput = TagOutputAuto
	fs.Var((*tagFlag)(&cfg.TagOutput), "tag-output", `prefix output lines with "[rank] ": auto (every line but rank 0's stdout, which reads as the program's own), true (every line) or false (none)`)
	fs.StringVar(&cfg.Bind, "bind-to", BindCore, "bind each rank to cores of its own when the ranks fit (core), or not (none)")
	fs.BoolFunc("quiet", "don't print the job id and how to watch the job at its start", func(s string) error {
		q, err := strconv.ParseBool(s)
		cfg.Announce = !q
		return err
	})
	cfg.Announce = true
	return fs
}

// tagFlag is --tag-output: a boolean flag (--tag-output alone is true, as
// Open MPI's) that also takes auto.
type tagFlag string

func (f *tagFlag) String() string   { return string(*f) }
func (f *tagFlag) IsBoolFlag() bool { return true }

func (f *tagFlag) Set(s string) error {
	switch strings.ToLower(s) {
	case TagOutputAuto:
		*f = TagOutputAuto
	case "true", "1", "all":
		*f = TagOutputAll
	case "false", "0", "none":
		*f = TagOutputNone
	default:
		return fmt.Errorf("want auto, true or false")
	}
	return nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// Usage writes the usage text and flag defaults to w.
func Usage(w io.Writer) {
	var c Config
	fs := flags(&c)
	fs.SetOutput(w)
	fmt.Fprint(w, usage)
	fs.PrintDefaults()
}

// Main is vcclrun: it parses args, runs the job with stdout, stderr and the
// signals to forward, and returns the exit status. Messages of its own go
// to stderr, prefixed "vcclrun: ".
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, signals <-chan os.Signal) int {
	cfg, err := ParseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		Usage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "vcclrun: %v\n", err)
		Usage(stderr)
		return 2
	}
	cfg.Stdout, cfg.Stderr, cfg.Signals = stdout, stderr, signals
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(f) {
		cfg.StatusLine = true
	}
	err = Run(ctx, cfg)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "vcclrun: %v\n", err)
	return ExitCode(err)
}
