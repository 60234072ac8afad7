package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/term"
)

// Main is vccl-bench: it parses args, joins the job the environment
// describes, runs the sweep and prints on rank 0. It returns the exit
// status: 0, 1 when a run failed or a result was wrong, 2 for a bad command
// line. stderr is passed as a file so the progress bar can tell whether it
// is a terminal.
func Main(ctx context.Context, args []string, stdout io.Writer, stderr *os.File) int {
	cfg, err := ParseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		Usage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "vccl-bench: %v\n(vccl-bench -h for usage)\n", err)
		return 2
	}
	telemetry, err := flowtel.ParseEnabled(os.Getenv(flowtel.EnvTelemetry))
	if err != nil {
		fmt.Fprintf(stderr, "vccl-bench: %v\n", err)
		return 2
	}
	var copts []collective.Option
	if cfg.Telemetry != "" {
		telemetry = cfg.Telemetry != "off" // alternate pauses and resumes it
		copts = append(copts, collective.WithTelemetry(telemetry))
	}
	if cfg.Exporters != "" && !telemetry {
		fmt.Fprintf(stderr, "vccl-bench: --exporters needs --telemetry on\n")
		return 2
	}
	// The exporters the environment asks for (the telemetry package's
	// attacher) come with telemetry on, but for the measuring modes:
	// --telemetry alternate times the records alone, and --exporters
	// attaches the exporters itself (with alternate, they write in the
	// "on" blocks and sit idle in the "off" ones), as does --attach with
	// what the attacher would have attached: each block then ends with
	// its records delivered (Options.Settle).
	if cfg.Telemetry == "alternate" || cfg.Exporters != "" {
		copts = append(copts, collective.WithTelemetryAttachers(false))
	}
	var col *flowtel.Collector
	var exporters string // the ones attached, for the report
	var settle func(context.Context) error
	if cfg.Exporters != "" || cfg.Attach {
		col = flowtel.NewCollector()
		copts = append(copts, collective.WithCollector(col))
	}
	comm, err := collective.NewFromEnv(ctx, copts...)
	if err != nil {
		fmt.Fprintf(stderr, "vccl-bench: %v\n", err)
		return 1
	}
	defer comm.Close()
	if col != nil {
		var stop func(context.Context) error
		stop, settle, exporters, err = startExporters(ctx, comm, col, cfg.Exporters, cfg.Spans)
		if err != nil {
			opt := "--exporters"
			if cfg.Attach {
				opt = "--attach"
			}
			fmt.Fprintf(stderr, "vccl-bench: %s: %v\n", opt, err)
			return 1
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := stop(sctx); err != nil {
				fmt.Fprintf(stderr, "vccl-bench: rank %d: stopping the exporters: %v\n", comm.Rank(), err)
			}
		}()
	}
	opts := Options{Telemetry: telemetry, Alternate: cfg.Telemetry == "alternate", Exporters: exporters}
	if opts.Alternate {
		opts.Settle = settle
	}
	if cfg.Device == "gpu" {
		d, err := openDevice(ctx, comm, cfg, telemetry)
		if err != nil {
			fmt.Fprintf(stderr, "vccl-bench: rank %d: %v\n", comm.Rank(), err)
			return 1
		}
		defer func() {
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := d.close(cctx); err != nil {
				fmt.Fprintf(stderr, "vccl-bench: rank %d: closing the GPU: %v\n", comm.Rank(), err)
			}
		}()
		opts.device = d
		if comm.Rank() == 0 && !cfg.JSON {
			d.describe(stdout)
		}
	}
	if comm.Rank() == 0 {
		if !cfg.JSON {
			opts.Table = stdout
		}
		// Only where someone sees it: straight to a terminal, or through a
		// launcher that shows status lines (vcclrun on a terminal), which
		// keeps the bar below the table lines. Through other launchers'
		// pipes it would land between them.
		if cfg.Progress == "auto" && term.StatusLines(stderr, os.Getenv(term.StatusLinesVar)) {
			opts.Progress = NewProgress(stderr, "vccl-bench "+cfg.Coll.String())
		}
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s.rank%d", cfg.CPUProfile, comm.Rank()))
		if err != nil {
			fmt.Fprintf(stderr, "vccl-bench: --cpuprofile: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "vccl-bench: --cpuprofile: %v\n", err)
			return 1
		}
	}
	rep, err := Run(ctx, comm, cfg, opts)
	if cfg.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		fmt.Fprintf(stderr, "vccl-bench: rank %d: %v\n", comm.Rank(), err)
		return 1
	}
	if comm.Rank() == 0 && cfg.JSON {
		if err := WriteJSON(stdout, rep); err != nil {
			fmt.Fprintf(stderr, "vccl-bench: %v\n", err)
			return 1
		}
	}
	if comm.Rank() == 0 && cfg.JSONFile != "" {
		if err := writeJSONFile(cfg.JSONFile, rep); err != nil {
			fmt.Fprintf(stderr, "vccl-bench: --json-file: %v\n", err)
			return 1
		}
	}
	// Leave together. Without this a rank that finished its last call and
	// closed can make a peer whose last receive has arrived but is not yet
	// polled fail that call as "rank N is unreachable" (seen over TCP: the
	// engine checks the QP's error before draining its completions). The
	// results are in by now, so an error here changes nothing.
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_ = comm.Barrier(bctx)
	cancel()
	if rep.Wrong > 0 {
		if comm.Rank() == 0 {
			fmt.Fprintf(stderr, "vccl-bench: %d wrong elements\n", rep.Wrong)
		}
		return 1
	}
	return 0
}
