package otel

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkConsume measures records per second through the exporter, spans
// going to a no-op span exporter: an 8-rank ring all-reduce (14 steps) per
// iteration, WR events off and on.
func BenchmarkConsume(b *testing.B) {
	for _, rate := range []float64{0, 1} {
		name := "events=off"
		if rate > 0 {
			name = "events=on"
		}
		b.Run(name, func(b *testing.B) {
			e, err := New(context.Background(), WithSpanExporter(&memExporterDiscard{}), WithWREvents(rate),
				WithEnv(func(string) string { return "" }))
			if err != nil {
				b.Fatal(err)
			}
			defer e.Shutdown(context.Background())
			j := ringJob{comm: 1, ranks: 8, bytes: 64 << 20, base: 1000, stepNs: 1000}
			recs := j.records(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				for k := range recs {
					recs[k].CollSeq = uint64(i + 1)
				}
				e.Consume(context.Background(), recs)
			}
			b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
		})
	}
}

type memExporterDiscard struct{ memExporter }

func (*memExporterDiscard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
