// Command vccl-demo is the job `make run` starts under vcclrun: ping-pong and
// all-reduces with flow telemetry on, then a per-link and per-collective
// report computed from the telemetry records. Its exporters are the
// telemetry package's, as any program's: every rank also writes its records
// to an Arrow trace in VCCL_TELEMETRY_DIR (default ./vccl-trace here), serves
// its live endpoint while it runs (VCCL_TELEMETRY_ADDR) and sends spans where
// the OTEL_* variables ask; the report says where they are.
//
//	vcclrun -n 2 vccl-demo [-iters 20] [-trace-dir DIR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/demo"
	"github.com/vccl-go/vccl/telemetry"
)

// defaultTraceDir is where the demo writes its Arrow traces and
// endpoints.json when VCCL_TELEMETRY_DIR is not set: `make run` shows them.
const defaultTraceDir = "vccl-trace"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "vccl-demo:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := demo.DefaultConfig()
	flag.IntVar(&cfg.Iters, "iters", cfg.Iters, "repetitions of each measurement")
	timeout := flag.Duration("timeout", 2*time.Minute, "deadline of the whole job")
	tcfg, err := telemetry.ConfigFromEnv()
	if err != nil {
		return err
	}
	if tcfg.Dir == "" {
		tcfg.Dir = defaultTraceDir
	}
	flag.StringVar(&tcfg.Dir, "trace-dir", tcfg.Dir, "directory of the Arrow traces and endpoints.json (empty: none; default $"+telemetry.EnvDir+" or "+defaultTraceDir+")")
	flag.Parse()
	if cfg.Iters < 1 {
		return fmt.Errorf("-iters %d: want at least 1", cfg.Iters)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// The whole run in one window: the report covers every completion.
	win := flowtel.NewWindow(flowtel.WindowConfig{N: 1 << 16, T: time.Hour})
	colls := demo.NewCollStats()
	col := flowtel.NewCollector()
	col.AddSink(win)
	col.AddSink(colls)
	// The demo attaches its exporters itself (its trace directory has a
	// default and a flag), so the communicator runs no registered ones.
	comm, err := collective.NewFromEnv(ctx, collective.WithCollector(col), collective.WithTelemetryAttachers(false))
	if err != nil {
		return err
	}
	// Before the collector starts: the trace gets every record.
	ex, err := telemetry.Attach(ctx, comm, tcfg)
	if err != nil {
		comm.Close()
		return err
	}
	// The report is read once the job is over: the live endpoint, which
	// vcclrun pointed at while the job ran, is gone by then.
	cfg.Outputs = func(ctx context.Context) []string {
		return slices.DeleteFunc(ex.Outputs(ctx), func(l string) bool { return ex.Live != nil && strings.Contains(l, ex.Live.URL()) })
	}
	col.Start()
	err = demo.Run(ctx, comm, cfg, win, colls, os.Stdout)
	// Wind down: the endpoint (with the store still up, which rank 0's
	// announcement may read), the communicator, then the collector, whose
	// Shutdown delivers the last records, finishes the Arrow files and sends
	// the last spans.
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	rank, job, size := comm.Rank(), flowtel.JobID(comm.ID()), comm.Size()
	err = errors.Join(err, ex.Close(sctx), comm.Close(), col.Shutdown(sctx))
	if err == nil && ex.Arrow != nil && rank == 0 {
		// The diagnosis of the job just run, once every rank's trace is
		// finished.
		err = demo.Analyze(sctx, ex.Dir, job, size, os.Stdout)
		if err == nil {
			fmt.Printf("\nThe traces stay in %s/ (pyarrow, DuckDB and Arrow JS read them): vccl-top --replay %s plays the job again, vccl-analyze %s diagnoses it.\n", ex.Dir, ex.Dir, ex.Dir)
		}
	}
	return err
}
