package otel

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/exporter/otel/otelcoltest"
	"github.com/vccl-go/vccl/flowtel"
)

// The spans of a synthetic all-reduce reach the real OpenTelemetry
// Collector over both OTLP protocols, as the environment configures them.
func TestCollectorReceivesSpans(t *testing.T) {
	col := otelcoltest.Start(t)
	for _, proto := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(proto, "/", "_"), func(t *testing.T) {
			port := col.GRPC
			if proto != "grpc" {
				port = col.HTTP
			}
			service := "vccl-test-" + strings.ReplaceAll(proto, "/", "-")
			t.Setenv("OTEL_TRACES_EXPORTER", "")
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", fmt.Sprintf("http://127.0.0.1:%d", port))
			t.Setenv("OTEL_SERVICE_NAME", service)
			t.Setenv(EnvWREvents, "1")
			sendToCollector(t, col, service)
		})
	}
}

func sendToCollector(t *testing.T, col *otelcoltest.Collector, service string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exp, err := New(ctx, WithEnv(os.Getenv))
	if err != nil {
		t.Fatal(err)
	}
	comm := fakeComm{id: 0xc0ffee, uid: "collector-test-" + service, size: 2}
	exp.AddComm(comm)
	c := flowtel.NewCollector(flowtel.WithMaxIdle(time.Millisecond))
	c.AddSink(exp)
	c.Start()

	// A 2-rank ring all-reduce recorded by two recorders, as two channels'
	// engines would, stamped a moment ago.
	now := flowtel.Monotonic()
	j := ringJob{comm: comm.id, ranks: 2, seq: 42, bytes: 4 << 20, base: now - 10e6, stepNs: 1e6, credit: true}
	for r := range 2 {
		rec := c.NewRecorder()
		for _, x := range j.records(r) {
			rec.Record(&x)
		}
	}
	if err := c.Shutdown(ctx); err != nil { // drains, then shuts the exporter down: flushes over OTLP
		t.Fatal(err)
	}

	spans := col.WaitSpans(t, service, 6, nil)
	byID := map[string]*otelcoltest.Span{}
	var colls, steps []*otelcoltest.Span
	for i := range spans {
		s := &spans[i]
		if s.Scope != ScopeName {
			t.Errorf("span %s of scope %q", s.Name, s.Scope)
		}
		byID[s.SpanID] = s
		switch s.Name {
		case "allreduce":
			colls = append(colls, s)
		case "allreduce.step":
			steps = append(steps, s)
		default:
			t.Errorf("unexpected span %q", s.Name)
		}
	}
	if len(colls) != 2 || len(steps) != 4 {
		t.Fatalf("%d collective and %d step spans, want 2 and 4", len(colls), len(steps))
	}
	wantTrace := traceIDFor(comm.uid, comm.id, 42).String()
	ranks := map[int64]bool{}
	for _, s := range colls {
		if s.TraceID != wantTrace || s.ParentSpanID != "" {
			t.Errorf("collective span trace %s parent %q, want trace %s and no parent", s.TraceID, s.ParentSpanID, wantTrace)
		}
		rank, _ := s.Attr("vccl.rank").(int64)
		ranks[rank] = true
		for k, want := range map[string]any{
			"vccl.comm": "00c0ffee", "vccl.coll_seq": int64(42), "vccl.op": "allreduce", "vccl.algo": "ring",
			"vccl.dtype": "float32", "vccl.bytes": int64(4 << 20), "vccl.world_size": int64(2),
		} {
			if got := s.Attr(k); got != want {
				t.Errorf("rank %d: %s = %v (%T), want %v", rank, k, got, got, want)
			}
		}
		dur := otelcoltest.Nanos(s.End) - otelcoltest.Nanos(s.Start)
		if dur != j.end()-j.base {
			t.Errorf("rank %d: span lasts %d ns, want %d", rank, dur, j.end()-j.base)
		}
		// The spans carry wall-clock times of a moment ago.
		if age := time.Since(time.Unix(0, otelcoltest.Nanos(s.Start))); age < 0 || age > time.Minute {
			t.Errorf("rank %d: span started %v ago", rank, age)
		}
		algbw, _ := s.Attr("vccl.algbw_gbps").(float64)
		busbw, _ := s.Attr("vccl.busbw_gbps").(float64)
		if want := float64(j.bytes) / float64(dur); algbw != want || busbw != want {
			t.Errorf("rank %d: algbw %v busbw %v, want %v", rank, algbw, busbw, want)
		}
	}
	if !ranks[0] || !ranks[1] {
		t.Errorf("ranks %v", ranks)
	}
	for _, s := range steps {
		p := byID[s.ParentSpanID]
		if p == nil || p.Name != "allreduce" || s.TraceID != p.TraceID {
			t.Fatalf("step span %s: parent %q is not a collective span of its trace", s.SpanID, s.ParentSpanID)
		}
		if s.Attr("vccl.rank") != p.Attr("vccl.rank") {
			t.Errorf("step of rank %v under rank %v", s.Attr("vccl.rank"), p.Attr("vccl.rank"))
		}
		if otelcoltest.Nanos(s.Start) < otelcoltest.Nanos(p.Start) || otelcoltest.Nanos(s.End) > otelcoltest.Nanos(p.End) {
			t.Errorf("step outside its collective")
		}
		if s.Attr("vccl.send_bytes") != int64(2<<20) || s.Attr("vccl.recv_bytes") != int64(2<<20) || s.Attr("vccl.peer") == nil {
			t.Errorf("step attributes %v", s.Attributes)
		}
		wantEvents := 4
		if s.Attr("vccl.rank") == int64(0) && s.Attr("vccl.step") == int64(0) {
			wantEvents = 6 // and the credit wait and grant
			if s.Attr("vccl.credit_wait_ns") != int64(j.stepNs/4) {
				t.Errorf("credit wait %v", s.Attr("vccl.credit_wait_ns"))
			}
		}
		if len(s.Events) != wantEvents {
			t.Errorf("rank %v step %v: %d WR events, want %d", s.Attr("vccl.rank"), s.Attr("vccl.step"), len(s.Events), wantEvents)
		}
		for _, ev := range s.Events {
			if ts := otelcoltest.Nanos(ev.Time); ts < otelcoltest.Nanos(s.Start) || ts > otelcoltest.Nanos(s.End) {
				t.Errorf("event %s outside its step", ev.Name)
			}
		}
	}
}
