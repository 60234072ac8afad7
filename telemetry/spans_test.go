package telemetry

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/otel"
	"github.com/vccl-go/vccl/exporter/otel/otelcoltest"
	"github.com/vccl-go/vccl/flowtel"
)

// A program's own span is the parent of the collectives it calls with it,
// as the real OpenTelemetry Collector receives them; the spans' resource
// says which rank of which job sent them.
func TestSpansUnderCallerSpan(t *testing.T) {
	cleanEnv(t)
	col := otelcoltest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	service := fmt.Sprintf("vccl-parent-%d", os.Getpid())
	endpoint := fmt.Sprintf("localhost:%d", col.HTTP)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_SERVICE_NAME", service)

	// The program's tracing, exporting to the same collector.
	appExp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	app := sdktrace.NewTracerProvider(sdktrace.WithBatcher(appExp),
		sdktrace.WithResource(resource.NewSchemaless(resourceService(service+"-app"))))
	defer app.Shutdown(context.WithoutCancel(ctx))

	comms, err := collective.NewLocal(ctx, 2, collective.WithTelemetry(true), collective.WithTelemetryAttachers(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range comms {
		e, err := Attach(ctx, c, Config{Spans: true, SpanOptions: []otel.Option{otel.WithEnv(os.Getenv)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close(context.WithoutCancel(ctx)) })
	}
	steps := make([]trace.SpanContext, 2)
	errs := make(chan error, 2)
	for _, c := range comms {
		go func() {
			sctx, span := app.Tracer("app").Start(ctx, "train-step")
			steps[c.Rank()] = span.SpanContext()
			big, small := make([]float32, 1<<16), make([]float32, 8)
			err := collective.AllReduce(sctx, c, big, big, collective.Sum)
			if err == nil {
				err = collective.AllReduce(sctx, c, small, small, collective.Sum)
			}
			span.End()
			errs <- err
		}()
	}
	for range comms {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range comms {
		if err := c.Close(); err != nil { // sends the last spans
			t.Fatal(err)
		}
	}
	if err := app.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}

	spans := col.WaitSpans(t, service, 4, func(s *otelcoltest.Span) bool { return s.Name == "allreduce" })
	for _, s := range spans {
		rank, _ := s.Attr("vccl.rank").(int64)
		want := steps[rank]
		if s.TraceID != want.TraceID().String() || s.ParentSpanID != want.SpanID().String() {
			t.Errorf("rank %d all-reduce of %v bytes: trace %s parent %q, want the caller's span %s of trace %s",
				rank, s.Attr("vccl.bytes"), s.TraceID, s.ParentSpanID, want.SpanID(), want.TraceID())
		}
		job := flowtel.JobID(comms[0].ID())
		for k, v := range map[string]any{
			"vccl.rank": rank, "vccl.world_size": int64(2), "vccl.job.id": job,
			"service.instance.id": fmt.Sprintf("vccl-%s-rank%d", job, rank),
		} {
			if got := s.ResourceAttr(k); got != v {
				t.Errorf("rank %d: resource %s = %v, want %v", rank, k, got, v)
			}
		}
		for _, k := range []string{"host.name", "process.pid"} {
			if s.ResourceAttr(k) == nil {
				t.Errorf("rank %d: resource has no %s", rank, k)
			}
		}
		if s.Attr("vccl.comm") != job {
			t.Errorf("vccl.comm %v, want %s", s.Attr("vccl.comm"), job)
		}
	}
	// The parents themselves reached the collector, so the trace is whole.
	col.WaitSpans(t, service+"-app", 2, nil)
}

func resourceService(name string) attribute.KeyValue { return attribute.String("service.name", name) }
