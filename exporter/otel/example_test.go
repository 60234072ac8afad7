package otel_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/otel"
	"github.com/vccl-go/vccl/flowtel"
)

// The exporter is a sink of the communicator's collector; spans leave
// through OTLP as the OTEL_* environment variables say (here: whatever
// OTEL_EXPORTER_OTLP_ENDPOINT names, over OTEL_EXPORTER_OTLP_PROTOCOL).
func Example_job() {
	ctx := context.Background()
	comm, err := collective.NewFromEnv(ctx, collective.WithTelemetry(true))
	if err != nil {
		log.Fatal(err)
	}
	exp, err := otel.New(ctx, otel.WithEnv(os.Getenv))
	if err != nil {
		log.Fatal(err)
	}
	exp.AddComm(comm) // world size, clock and trace-id salt
	comm.Collector().AddSink(exp)

	grads := make([]float32, 1<<20)
	if err := collective.AllReduce(ctx, comm, grads, grads, collective.Sum); err != nil {
		log.Fatal(err)
	}
	comm.Close() // shuts its collector down, and with it the exporter: spans are flushed
}

// Records in, spans out: one span per collective and rank, one child per
// peer and step.
func ExampleExporter() {
	ctx := context.Background()
	mem := tracetest.NewInMemoryExporter()
	exp, err := otel.New(ctx, otel.WithSpanExporter(mem), otel.WithWorldSize(2))
	if err != nil {
		log.Fatal(err)
	}
	col := flowtel.NewCollector()
	col.AddSink(exp)
	col.Start()
	defer col.Shutdown(ctx)

	// Rank 0 of a 2-rank all-reduce of 1 MiB: one step, 512 KiB each way,
	// 100µs. Real records come from the communicator's engines.
	rec := col.NewRecorder()
	t0 := flowtel.Monotonic()
	ar := flowtel.Record{Comm: 1, Rank: 0, CollSeq: 1, Op: collective.OpAllReduce,
		Algo: collective.AlgoRing, Dtype: collective.Float32}
	at := func(dt time.Duration, kind flowtel.Kind, peer int32, wr uint64, bytes uint64) {
		r := ar
		r.TsNs, r.Kind, r.Peer, r.WrID, r.Bytes = t0+int64(dt), kind, peer, wr, bytes
		rec.Record(&r)
	}
	at(0, flowtel.KindCollBegin, -1, 0, 1<<20)
	at(1*time.Microsecond, flowtel.KindWRPost, 1, flowtel.WRID(0, true), 1<<19)
	at(2*time.Microsecond, flowtel.KindWRPost, 1, flowtel.WRID(0, false), 1<<19)
	at(60*time.Microsecond, flowtel.KindWC, 1, flowtel.WRID(0, false), 1<<19)
	at(99*time.Microsecond, flowtel.KindWC, 1, flowtel.WRID(0, true), 1<<19)
	at(100*time.Microsecond, flowtel.KindCollEnd, -1, 0, 1<<20)

	col.Flush(ctx) // every record so far is in the exporter
	exp.Flush(ctx) // and every finished span in mem
	for _, s := range mem.GetSpans() {
		fmt.Printf("%s %v:", s.Name, s.EndTime.Sub(s.StartTime))
		for _, kv := range s.Attributes {
			switch kv.Key {
			case "vccl.op", "vccl.peer", "vccl.send_bytes", "vccl.busbw_gbps":
				fmt.Printf(" %s=%v", kv.Key, kv.Value.String())
			}
		}
		fmt.Println()
	}
	// Output:
	// allreduce.step 98µs: vccl.peer=1 vccl.send_bytes=524288
	// allreduce 100µs: vccl.op=allreduce vccl.busbw_gbps=10.48576
}
