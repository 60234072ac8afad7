package bench

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/otel"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/telemetry"
)

// startExporters turns on every exporter a job can have, through the
// telemetry package as any program gets them: Arrow traces in dir, the live
// endpoint with Prometheus metrics (as VCCL_TELEMETRY_ADDR says) and
// OpenTelemetry spans built from the records and thrown away, so that the
// sweep measures what telemetry costs with all of them attached. The
// communicator must be made with collective.WithTelemetryAttachers(false)
// and col, which startExporters starts; the returned func shuts everything
// down.
func startExporters(ctx context.Context, comm *collective.Comm, col *flowtel.Collector, dir string) (func() error, error) {
	cfg, err := telemetry.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	cfg.Spans, cfg.SpanOptions = true, append(cfg.SpanOptions, otel.WithProtocol("stdout"), otel.WithStdout(io.Discard))
	ex, err := telemetry.Attach(ctx, comm, cfg)
	if err != nil {
		return nil, err
	}
	col.Start()
	return func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The collector first: its Shutdown finishes the trace.
		return errors.Join(col.Shutdown(sctx), ex.Close(sctx))
	}, nil
}
