package launch

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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

flags:
`

// ParseArgs parses vcclrun's command line (without the program name). Flags
// end at "--" or at the first argument that is not a flag: everything after
// that is the program and its arguments, untouched.
func ParseArgs(args []string) (Config, error) {
	fs := flag.NewFlagSet("vcclrun", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := Config{}
	fs.IntVar(&cfg.N, "n", 0, "number of ranks to start (required, ≥ 1)")
	fs.DurationVar(&cfg.Grace, "grace", 5*time.Second, "time between SIGTERM and SIGKILL when stopping ranks")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "stop the job after this long (0: no limit)")
	fs.BoolVar(&cfg.TagOutput, "tag-output", true, `prefix every output line with "[rank] " (--tag-output=false to turn off)`)
	fs.StringVar(&cfg.Bind, "bind-to", BindCore, "bind each rank to cores of its own when the ranks fit (core), or not (none)")
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

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// Usage writes the usage text and flag defaults to w.
func Usage(w io.Writer) {
	fs := flag.NewFlagSet("vcclrun", flag.ContinueOnError)
	var c Config
	fs.IntVar(&c.N, "n", 0, "number of ranks to start (required, ≥ 1)")
	fs.DurationVar(&c.Grace, "grace", 5*time.Second, "time between SIGTERM and SIGKILL when stopping ranks")
	fs.DurationVar(&c.Timeout, "timeout", 0, "stop the job after this long (0: no limit)")
	fs.BoolVar(&c.TagOutput, "tag-output", true, `prefix every output line with "[rank] " (--tag-output=false to turn off)`)
	fs.StringVar(&c.Bind, "bind-to", BindCore, "bind each rank to cores of its own when the ranks fit (core), or not (none)")
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
