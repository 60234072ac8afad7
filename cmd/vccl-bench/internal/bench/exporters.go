package bench

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/otel"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/demo"
)

// startExporters turns on every exporter a job can have, as `make run` does
// (Arrow traces in dir, Prometheus metrics on the live endpoint) plus
// OpenTelemetry spans built from the records and thrown away, so that the
// sweep measures what telemetry costs with all of them attached. It starts
// the collector; the returned func shuts everything down.
func startExporters(ctx context.Context, comm *collective.Comm, col *flowtel.Collector, dir string) (func() error, error) {
	ex, err := demo.StartExporters(ctx, comm, col, dir)
	if err != nil {
		return nil, err
	}
	spans, err := otel.New(ctx, otel.WithProtocol("stdout"), otel.WithStdout(io.Discard), otel.WithWorldSize(comm.Size()))
	if err != nil {
		return nil, err
	}
	spans.AddComm(comm)
	col.AddSink(spans)
	col.Start()
	return func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return errors.Join(ex.Close(sctx), col.Shutdown(sctx))
	}, nil
}
