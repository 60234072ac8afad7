package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vccl-go/vccl/analyzer"
	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/exporter/prom"
	"github.com/vccl-go/vccl/flowtel"
)

// DefaultTraceDir is where the demo writes its Arrow traces and
// endpoints.json when VCCL_TELEMETRY_DIR is not set.
const DefaultTraceDir = "vccl-trace"

// Exporters are where a rank's telemetry goes besides its report: an Arrow
// trace in Dir and, unless VCCL_TELEMETRY_ADDR is off, a live endpoint.
type Exporters struct {
	Dir   string
	Arrow *arrow.Sink
	Live  *live.Server // nil when off
}

// StartExporters attaches an Arrow sink writing into dir to col, c's
// collector, and serves c's live endpoint, announced in c's rendezvous
// store and in dir/endpoints.json. Call it before col.Start, so that the
// trace holds every record. A directory it creates gets a .gitignore, so a
// trace written inside a work tree is never committed by accident.
func StartExporters(ctx context.Context, c *collective.Comm, col *flowtel.Collector, dir string) (*Exporters, error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("# Written by vccl-demo: telemetry traces, not sources.\n*\n"), 0o644)
	}
	sink, err := arrow.New(arrow.MetaOf(c), arrow.WithDir(dir))
	if err != nil {
		return nil, err
	}
	col.AddSink(sink)
	// Prometheus metrics, served on the live endpoint's /metrics.
	metrics := prom.New(prom.WithWorldSize(c.Size()))
	metrics.AddComm(c)
	col.AddSink(metrics)
	e := &Exporters{Dir: dir, Arrow: sink}
	if _, on, err := live.AddrFromEnv(os.Getenv, c.Rank()); err != nil {
		return nil, err
	} else if on {
		if e.Live, err = live.Start(ctx, c, live.Config{Dir: dir, Metrics: metrics.Handler()}); err != nil {
			return nil, err
		}
		e.Live.AddInfo("arrow", func() any { return sink.Stats() })
		if err := analyzer.PublishLive(e.Live, analyzer.Options{}, 0); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Outputs writes what the Arrow sink holds to its files and says where
// they are, for this rank's part of the report.
func (e *Exporters) Outputs(ctx context.Context) []string {
	if e == nil {
		return nil
	}
	var lines []string
	if err := e.Arrow.Flush(ctx); err != nil {
		lines = append(lines, fmt.Sprintf("Arrow trace: %v", err))
	}
	lines = append(lines, fmt.Sprintf("Arrow trace: %s (%s format, finished when the job exits)", strings.Join(e.Arrow.Files(), ", "), e.Arrow.Format()))
	if e.Live != nil {
		lines = append(lines, fmt.Sprintf("live endpoint (while the job runs): %s", e.Live.URL()))
	}
	return lines
}

// Close stops the live endpoint. The collector's Shutdown finishes the
// Arrow files.
func (e *Exporters) Close(ctx context.Context) error {
	if e == nil || e.Live == nil {
		return nil
	}
	return e.Live.Close(ctx)
}
