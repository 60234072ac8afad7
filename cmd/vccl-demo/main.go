// Command vccl-demo is the job `make run` starts under vcclrun: ping-pong and
// all-reduces with flow telemetry on, then a per-link and per-collective
// report computed from the telemetry records.
//
//	vcclrun -n 2 vccl-demo [-iters 20]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/demo"
)

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
	col.Start()
	comm, err := collective.NewFromEnv(ctx, collective.WithCollector(col))
	if err != nil {
		return err
	}
	defer comm.Close()
	return demo.Run(ctx, comm, cfg, win, colls, os.Stdout)
}
