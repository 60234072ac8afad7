// Command topjob is the job vccl-top's end-to-end test runs under vcclrun:
// every rank does all-reduces and all-gathers with flow telemetry on,
// serves its live endpoint (exporter/live, with exporter/prom's metrics on
// /metrics) and writes a zstd-compressed Arrow trace into
// VCCL_TELEMETRY_DIR. Rank 0 prints where the rendezvous store is
// ("rendezvous HOST:PORT"), for `vccl-top --job`.
//
// When a collective fails (a peer died) or the rank is told to stop
// (SIGTERM, SIGINT), the rank stops calling collectives but keeps its
// endpoint up for -linger, as a wedged job would, then exits: vccl-top
// should show the dead rank down and the others up.
//
//	vcclrun -n 4 --grace 60s -- topjob [-duration 0] [-pause 5ms] [-linger 30s]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/exporter/prom"
	"github.com/vccl-go/vccl/flowtel"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "topjob:", err)
		os.Exit(1)
	}
}

func run() error {
	duration := flag.Duration("duration", 0, "stop calling collectives after this long (0: until stopped)")
	pause := flag.Duration("pause", 5*time.Millisecond, "sleep between iterations (leaves the CPU to the others)")
	linger := flag.Duration("linger", 0, "keep the endpoint up this long after the last collective")
	count := flag.Int("count", 256<<10, "float32 elements per all-reduce")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	col := flowtel.NewCollector()
	comm, err := collective.NewFromEnv(ctx, collective.WithCollector(col))
	if err != nil {
		return err
	}
	defer comm.Close()
	if comm.Rank() == 0 {
		fmt.Printf("rendezvous %s\n", net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT")))
	}
	if dir := os.Getenv(arrow.EnvDir); dir != "" {
		sink, err := arrow.New(arrow.MetaOf(comm), arrow.WithDir(dir), arrow.WithCompression(arrow.CompressionZstd),
			arrow.WithFlushInterval(250*time.Millisecond))
		if err != nil {
			return err
		}
		col.AddSink(sink)
	}
	metrics := prom.New(prom.WithWorldSize(comm.Size()))
	metrics.AddComm(comm)
	col.AddSink(metrics)
	var srv *live.Server
	if addr, on, err := live.AddrFromEnv(os.Getenv, comm.Rank()); err != nil {
		return err
	} else if on {
		wc, err := flowtel.ParseWindowEnv(os.Getenv(flowtel.EnvWindow))
		if err != nil {
			return err
		}
		cfg := live.Config{Addr: addr, Dir: os.Getenv(live.EnvDir), WindowConfig: wc, Metrics: metrics.Handler()}
		if srv, err = live.Start(ctx, comm, cfg); err != nil {
			return err
		}
		fmt.Printf("rank %d of %d: pid %d, live endpoint %s\n", comm.Rank(), comm.Size(), os.Getpid(), srv.URL())
	} else {
		fmt.Printf("rank %d of %d: pid %d\n", comm.Rank(), comm.Size(), os.Getpid())
	}
	col.Start()

	var deadline <-chan time.Time
	if *duration > 0 {
		deadline = time.After(*duration)
	}
	data := make([]float32, *count)
	gather := make([]float32, 4096*comm.Size())
	var callErr error
loop:
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			break loop
		case <-deadline:
			break loop
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if i%8 == 7 {
			callErr = collective.AllGather(cctx, comm, data[:4096], gather)
		} else {
			callErr = collective.AllReduce(cctx, comm, data, data, collective.Sum)
		}
		cancel()
		if callErr != nil {
			break
		}
		time.Sleep(*pause)
	}
	if callErr != nil && !errors.Is(callErr, context.Canceled) {
		fmt.Printf("rank %d: collectives stopped: %v\n", comm.Rank(), callErr)
	}
	if *linger > 0 {
		fmt.Printf("rank %d: endpoint stays up for %v\n", comm.Rank(), *linger)
		// Signals stay caught: vcclrun's SIGTERM after a rank died does
		// not cut the linger short (its SIGKILL after --grace does).
		time.Sleep(*linger)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if srv != nil {
		srv.Close(sctx)
	}
	comm.Close()
	return col.Shutdown(sctx)
}
