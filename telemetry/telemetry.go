package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/exporter/otel"
	"github.com/vccl-go/vccl/exporter/prom"
	"github.com/vccl-go/vccl/flowtel"
)

// Name is the name the package's attacher is registered under
// (collective.RegisterTelemetry); communicator errors name it.
const Name = "vccl/telemetry"

// Config says which exporters Attach connects. The zero Config connects
// none.
type Config struct {
	// Dir receives the traces (Arrow or Parquet, VCCL_TELEMETRY_FORMAT),
	// one file series per rank, and the live endpoints' endpoints.json.
	// Empty: no traces.
	Dir string
	// ArrowOptions are passed to arrow.New after WithDir (compression,
	// format, rotation, …; ConfigFromEnv puts VCCL_TELEMETRY_FORMAT's and
	// VCCL_TELEMETRY_ARROW_ROTATE's here).
	ArrowOptions []arrow.Option

	// Window sizes the per-link window the live endpoint serves (zero:
	// flowtel's defaults; VCCL_TELEMETRY_WINDOW).
	Window flowtel.WindowConfig

	// Live serves the rank's live endpoint (Prometheus /metrics, the
	// windows, the latest records) at Addr, written as VCCL_TELEMETRY_ADDR
	// is: host:port, :port or a port, where a port P other than 0 means
	// P+rank; empty: 127.0.0.1 and a free port.
	Live bool
	Addr string

	// Spans turns OpenTelemetry spans on. SpanOptions are passed to
	// otel.New, after the communicator's world size; ConfigFromEnv puts
	// otel.WithEnv there, so that the OTEL_* variables choose where spans
	// go.
	Spans       bool
	SpanOptions []otel.Option
}

// Exporters are what Attach connected to a communicator, and where its
// telemetry goes. A nil field is an exporter not connected.
type Exporters struct {
	Dir     string          // the trace directory ("" without traces)
	Arrow   *arrow.Sink     // the rank's Arrow trace
	Live    *live.Server    // the rank's live endpoint
	Metrics *prom.Collector // the Prometheus metrics served on Live's /metrics
	Spans   *otel.Exporter  // OpenTelemetry spans
}

// Attach connects the exporters cfg asks for to c's collector and starts
// the live endpoint. Call it before the collector starts, so that the sinks
// see every record: a program that makes its communicator with
// collective.WithTelemetryAttachers(false) and its own collector
// (collective.WithCollector) starts that collector after Attach. The
// collector's Shutdown finishes the Arrow files and sends the last spans
// (they are its sinks); Exporters.Close stops the live endpoint. ctx bounds
// the attaching only.
func Attach(ctx context.Context, c *collective.Comm, cfg Config) (*Exporters, error) {
	col := c.Collector()
	if col == nil {
		return nil, fmt.Errorf("telemetry: rank %d has telemetry off (set %s=1 or use collective.WithTelemetry)", c.Rank(), flowtel.EnvTelemetry)
	}
	e := &Exporters{Dir: cfg.Dir}
	if err := e.start(ctx, c, cfg); err != nil {
		// No collector will shut these down.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), announceWait)
		defer cancel()
		e.shutdown(sctx)
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	// Every exporter is built before the first sink is added, so that a
	// failure leaves the collector as it was.
	if e.Arrow != nil {
		col.AddSink(e.Arrow)
	}
	if e.Metrics != nil {
		// It updates the live endpoint's window too, with one fold.
		col.AddSink(e.Metrics)
		col.AddSink(e.Live.RecordSink())
	}
	if e.Spans != nil {
		col.AddSink(e.Spans)
		// A collective's span is the child of the span in its caller's
		// context.
		c.ObserveCalls(e.Spans.CallStarted)
	}
	return e, nil
}

// start builds the exporters cfg asks for.
func (e *Exporters) start(ctx context.Context, c *collective.Comm, cfg Config) error {
	var err error
	if cfg.Dir != "" {
		if err := makeDir(cfg.Dir); err != nil {
			return fmt.Errorf("trace directory %s: %w", cfg.Dir, err)
		}
		if e.Arrow, err = arrow.New(arrow.MetaOf(c), append([]arrow.Option{arrow.WithDir(cfg.Dir)}, cfg.ArrowOptions...)...); err != nil {
			return err
		}
	}
	if cfg.Spans {
		if e.Spans, err = otel.New(ctx, append([]otel.Option{otel.WithWorldSize(c.Size()), otel.WithRank(c)}, cfg.SpanOptions...)...); err != nil {
			return err
		}
		e.Spans.AddComm(c)
	}
	if !cfg.Live {
		return nil
	}
	addr, _, err := live.AddrFromEnv(func(string) string { return cfg.Addr }, c.Rank())
	if err != nil {
		return err
	}
	// The metrics and the window are views over the same events: one
	// fold, the metrics', feeds both (a fold costs a rank bound to one
	// core as much as either view). Attach adds the metrics and the
	// window's records as sinks; live.Start, given the window, adds none.
	win := flowtel.NewWindow(cfg.Window, flowtel.WithWindowClock(c.Clock()))
	e.Metrics = prom.New(prom.WithWorldSize(c.Size()), prom.WithWindow(win))
	e.Metrics.AddComm(c)
	// The announcement outlives ctx: rank 0 gathers every rank's endpoint
	// in the background, until Close.
	if e.Live, err = live.Start(context.WithoutCancel(ctx), c, live.Config{Addr: addr, Dir: cfg.Dir, Window: win, Metrics: e.Metrics.Handler()}); err != nil {
		return err
	}
	if e.Arrow != nil {
		sink := e.Arrow
		e.Live.AddInfo("arrow", func() any { return sink.Stats() })
	}
	// The live endpoint serves the rank's records (/v1/records); vccl-top
	// runs the analysis over every rank's, not the rank itself.
	return nil
}

// makeDir creates dir if it does not exist, with a .gitignore of "*".
func makeDir(dir string) error {
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("# Written by VCCL-Go's telemetry: traces, not sources.\n*\n"), 0o644)
}

// shutdown releases what a failed Attach made: no collector will.
func (e *Exporters) shutdown(ctx context.Context) {
	if e.Live != nil {
		e.Live.Close(ctx)
	}
	if e.Arrow != nil {
		e.Arrow.Shutdown(ctx)
	}
	if e.Spans != nil {
		e.Spans.Shutdown(ctx)
	}
}

// announceWait bounds how long Close waits for rank 0 to finish gathering
// the ranks' endpoints: every rank announced its own while it attached, so
// it takes long only when a rank died.
const announceWait = 10 * time.Second

// Close stops the live endpoint. The collector's Shutdown, not Close,
// finishes the Arrow files and sends the last spans. Close of a nil
// Exporters does nothing.
func (e *Exporters) Close(ctx context.Context) error {
	if e == nil || e.Live == nil {
		return nil
	}
	// Let rank 0's gathering of the endpoints end by itself: cut short, it
	// logs a warning. Its error is logged already and not the caller's.
	wctx, cancel := context.WithTimeout(ctx, announceWait)
	e.Live.WaitAnnounced(wctx)
	cancel()
	return e.Live.Close(ctx)
}

// Outputs says where this rank's telemetry goes, a line each, for a
// report; it first writes what the Arrow sink holds to its files.
func (e *Exporters) Outputs(ctx context.Context) []string {
	if e == nil {
		return nil
	}
	var lines []string
	if e.Arrow != nil {
		if err := e.Arrow.Flush(ctx); err != nil {
			lines = append(lines, fmt.Sprintf("Arrow trace: %v", err))
		}
		lines = append(lines, fmt.Sprintf("Arrow trace: %s (%s format, finished when the job exits)", strings.Join(e.Arrow.Files(), ", "), e.Arrow.Format()))
	}
	if e.Live != nil {
		lines = append(lines, fmt.Sprintf("live endpoint (while the job runs): %s", e.Live.URL()))
	}
	if e.Spans != nil {
		lines = append(lines, "OpenTelemetry spans: sent where the OTEL_* variables say")
	}
	return lines
}
