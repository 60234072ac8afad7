package otel

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
)

func newTestExporter(t *testing.T, opts ...Option) (*Exporter, *memExporter) {
	t.Helper()
	mem := &memExporter{}
	opts = append([]Option{WithSpanExporter(mem), WithEnv(func(string) string { return "" })}, opts...)
	e, err := New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Shutdown(context.Background()) })
	return e, mem
}

func flush(t *testing.T, e *Exporter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func attrs(s tracetest.SpanStub) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

func byName(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func TestCollectiveAndStepSpans(t *testing.T) {
	e, mem := newTestExporter(t)
	e.AddComm(fakeComm{id: 0xabc, uid: "job-1", size: 2})
	j := ringJob{comm: 0xabc, ranks: 2, seq: 7, bytes: 8 << 20, base: 1_000_000, stepNs: 500_000, credit: true}
	for r := range 2 {
		if err := e.Consume(context.Background(), j.records(r)); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, e)
	spans := mem.Spans()
	colls := byName(spans, "allreduce")
	steps := byName(spans, "allreduce.step")
	if len(colls) != 2 || len(steps) != 4 || len(spans) != 6 {
		t.Fatalf("got %d spans (%d allreduce, %d steps), want 2 collectives with 2 steps each", len(spans), len(colls), len(steps))
	}
	durNs := j.end() - j.base
	wantAlgBW := float64(j.bytes) / float64(durNs)
	for _, c := range colls {
		a := attrs(c)
		rank := a["vccl.rank"].AsInt64()
		if got := c.EndTime.Sub(c.StartTime); got != time.Duration(durNs) {
			t.Errorf("rank %d: span lasts %v, want %v", rank, got, time.Duration(durNs))
		}
		for k, want := range map[string]any{
			"vccl.comm": "00000abc", "vccl.coll_seq": int64(7), "vccl.op": "allreduce", "vccl.algo": "ring",
			"vccl.dtype": "float32", "vccl.bytes": int64(8 << 20), "vccl.world_size": int64(2), "vccl.channels": int64(1),
		} {
			if got := a[k].AsInterface(); got != want {
				t.Errorf("rank %d: %s = %v, want %v", rank, k, got, want)
			}
		}
		if got := a["vccl.algbw_gbps"].AsFloat64(); math.Abs(got-wantAlgBW) > 1e-9 {
			t.Errorf("rank %d: algbw %v, want %v", rank, got, wantAlgBW)
		}
		// All-reduce over 2 ranks: busbw = algbw * 2(n-1)/n = algbw.
		if got := a["vccl.busbw_gbps"].AsFloat64(); math.Abs(got-wantAlgBW) > 1e-9 {
			t.Errorf("rank %d: busbw %v, want %v", rank, got, wantAlgBW)
		}
		if _, ok := a["vccl.incomplete"]; ok {
			t.Errorf("rank %d: complete collective marked incomplete", rank)
		}
		if c.Parent.IsValid() {
			t.Errorf("rank %d: collective span has a parent", rank)
		}
	}
	// Both ranks' spans of one collective share a trace.
	if colls[0].SpanContext.TraceID() != colls[1].SpanContext.TraceID() {
		t.Errorf("ranks' spans in different traces: %v %v", colls[0].SpanContext.TraceID(), colls[1].SpanContext.TraceID())
	}
	if want := traceIDFor("job-1", 0xabc, 7); colls[0].SpanContext.TraceID() != want {
		t.Errorf("trace id %v, want %v", colls[0].SpanContext.TraceID(), want)
	}
	parents := map[[8]byte]tracetest.SpanStub{}
	for _, c := range colls {
		parents[c.SpanContext.SpanID()] = c
	}
	for _, s := range steps {
		p, ok := parents[s.Parent.SpanID()]
		if !ok || s.SpanContext.TraceID() != p.SpanContext.TraceID() {
			t.Fatalf("step span %v is not a child of a collective span", attrs(s))
		}
		a, pa := attrs(s), attrs(p)
		if a["vccl.rank"] != pa["vccl.rank"] {
			t.Errorf("step of rank %v under the collective of rank %v", a["vccl.rank"], pa["vccl.rank"])
		}
		if s.StartTime.Before(p.StartTime) || s.EndTime.After(p.EndTime) {
			t.Errorf("step %v [%v, %v] outside its collective [%v, %v]", a["vccl.step"], s.StartTime, s.EndTime, p.StartTime, p.EndTime)
		}
		chunk := int64(j.bytes / 2)
		if a["vccl.send_bytes"].AsInt64() != chunk || a["vccl.recv_bytes"].AsInt64() != chunk ||
			a["vccl.wrs"].AsInt64() != 2 || a["vccl.completions"].AsInt64() != 2 || a["vccl.max_depth"].AsInt64() != 1 {
			t.Errorf("step attributes %v", a)
		}
		wantWait := int64(0)
		if a["vccl.rank"].AsInt64() == 0 && a["vccl.step"].AsInt64() == 0 {
			wantWait = j.stepNs / 4
		}
		if got := a["vccl.credit_wait_ns"].AsInt64(); got != wantWait {
			t.Errorf("rank %v step %v: credit wait %d ns, want %d", a["vccl.rank"], a["vccl.step"], got, wantWait)
		}
		if len(s.Events) != 0 {
			t.Errorf("WR events with sampling off: %d", len(s.Events))
		}
	}
	if st := e.Stats(); st.Collectives != 2 || st.Steps != 4 || st.Open != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestPointToPoint(t *testing.T) {
	e, mem := newTestExporter(t, WithWorldSize(2))
	const seq = 1<<63 | 3
	recs := []flowtel.Record{
		{TsNs: 100, Kind: flowtel.KindCollBegin, Comm: 1, Rank: 0, Peer: -1, CollSeq: seq, Op: collective.OpSend, Bytes: 4096},
		{TsNs: 110, Kind: flowtel.KindWRPost, Comm: 1, Rank: 0, Peer: 1, CollSeq: seq, Op: collective.OpSend, WrID: flowtel.WRID(0, false), Bytes: 4096},
		{TsNs: 190, Kind: flowtel.KindWC, Comm: 1, Rank: 0, Peer: 1, CollSeq: seq, Op: collective.OpSend, WrID: flowtel.WRID(0, false), Bytes: 4096},
		{TsNs: 200, Kind: flowtel.KindCollEnd, Comm: 1, Rank: 0, Peer: -1, CollSeq: seq, Op: collective.OpSend, Bytes: 4096},
	}
	e.Consume(context.Background(), recs)
	flush(t, e)
	sends := byName(mem.Spans(), "send")
	if len(sends) != 1 {
		t.Fatalf("got %d send spans", len(sends))
	}
	a := attrs(sends[0])
	if a["vccl.coll_seq"].AsInt64() != 3 || !a["vccl.p2p"].AsBool() {
		t.Errorf("p2p attributes %v", a)
	}
	// 4096 bytes in 100 ns: 40.96 GB/s; point-to-point busbw = algbw.
	if a["vccl.algbw_gbps"].AsFloat64() != 40.96 || a["vccl.busbw_gbps"].AsFloat64() != 40.96 {
		t.Errorf("bandwidth %v %v", a["vccl.algbw_gbps"], a["vccl.busbw_gbps"])
	}
	if steps := byName(mem.Spans(), "send.step"); len(steps) != 1 || attrs(steps[0])["vccl.peer"].AsInt64() != 1 {
		t.Errorf("send steps %v", steps)
	}
}

func TestWREventSampling(t *testing.T) {
	e, mem := newTestExporter(t, WithWREvents(1))
	j := ringJob{comm: 5, ranks: 2, seq: 1, bytes: 1 << 20, base: 1000, stepNs: 1000, credit: true}
	e.Consume(context.Background(), j.records(0))
	flush(t, e)
	steps := byName(mem.Spans(), "allreduce.step")
	if len(steps) != 2 {
		t.Fatalf("%d steps", len(steps))
	}
	ev := steps[0].Events // step 0 of rank 0: post, post, credit_wait, credit_grant, wc, wc
	var names []string
	for _, x := range ev {
		names = append(names, x.Name)
	}
	if got := strings.Join(names, ","); got != "wr_post,wr_post,credit_wait,credit_grant,wc,wc" {
		t.Errorf("events %s", got)
	}
	for _, x := range ev {
		m := map[string]attribute.Value{}
		for _, kv := range x.Attributes {
			m[string(kv.Key)] = kv.Value
		}
		if _, ok := m["vccl.wr_id"]; !ok || m["vccl.bytes"].AsInt64() != 1<<19 {
			t.Errorf("event %s attributes %v", x.Name, m)
		}
	}

	// A fraction samples whole collectives, the same ones on every rank.
	pick := func(rate float64) map[uint64]bool {
		got := map[uint64]bool{}
		for seq := uint64(1); seq <= 1000; seq++ {
			if sampled(9, seq, rate) {
				got[seq] = true
			}
		}
		return got
	}
	a, b := pick(0.25), pick(0.25)
	if len(a) < 180 || len(a) > 320 {
		t.Errorf("rate 0.25 sampled %d of 1000", len(a))
	}
	for s := range a {
		if !b[s] {
			t.Fatal("sampling is not deterministic")
		}
	}
	if len(pick(0)) != 0 || len(pick(1)) != 1000 {
		t.Error("rates 0 and 1")
	}

	// The cap bounds the events kept per step.
	e2, mem2 := newTestExporter(t, WithWREvents(1), WithMaxEventsPerStep(3))
	e2.Consume(context.Background(), j.records(0))
	flush(t, e2)
	for _, s := range byName(mem2.Spans(), "allreduce.step") {
		if len(s.Events) > 3 {
			t.Errorf("%d events over the cap", len(s.Events))
		}
	}
	if st := e2.Stats(); st.EventsCapped != 4 { // 6+4 events, 3+3 kept
		t.Errorf("capped %d", st.EventsCapped)
	}
}

func TestWREventsFromEnv(t *testing.T) {
	env := map[string]string{EnvWREvents: "1"}
	mem := &memExporter{}
	e, err := New(context.Background(), WithSpanExporter(mem), WithEnv(func(k string) string { return env[k] }))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	if e.cfg.wrEvents != 1 {
		t.Errorf("rate %v", e.cfg.wrEvents)
	}
	env[EnvWREvents] = "2"
	if _, err := New(context.Background(), WithSpanExporter(mem), WithEnv(func(k string) string { return env[k] })); err == nil || !strings.Contains(err.Error(), EnvWREvents) {
		t.Errorf("bad rate: %v", err)
	}
}

func TestSplitOverChannels(t *testing.T) {
	e, mem := newTestExporter(t, WithWorldSize(2))
	ctx := context.Background()
	// seq 1 runs on channels 0 and 1; channel 1's records come in a later
	// batch, after channel 0's part has ended. Its begins say it has two
	// parts.
	a := ringJob{comm: 2, ranks: 2, seq: 1, bytes: 1 << 20, base: 1000, stepNs: 1000, parts: 2}
	b := a
	b.channel, b.base = 1, 1500
	e.Consume(ctx, append(a.records(0)[:1], b.records(0)[:1]...)) // both begins
	e.Consume(ctx, a.records(0)[1:])
	if n := len(mem.Spans()); n != 0 || e.Stats().Open != 1 {
		t.Fatalf("exported %d spans with a part still running", n)
	}
	e.Consume(ctx, b.records(0)[1:])
	flush(t, e)
	colls := byName(mem.Spans(), "allreduce")
	if len(colls) != 1 {
		t.Fatalf("%d collective spans", len(colls))
	}
	at := attrs(colls[0])
	if at["vccl.channels"].AsInt64() != 2 || at["vccl.bytes"].AsInt64() != 2<<20 {
		t.Errorf("split collective %v", at)
	}
	if got, want := colls[0].EndTime.Sub(colls[0].StartTime), time.Duration(b.end()-a.base); got != want {
		t.Errorf("span %v, want %v", got, want)
	}
	if n := len(byName(mem.Spans(), "allreduce.step")); n != 4 {
		t.Errorf("%d steps, want 2 per channel", n)
	}

	// seq 2 is small and runs on channel 0 alone: its span ends with its
	// one part.
	c := ringJob{comm: 2, ranks: 2, seq: 2, bytes: 64, base: 9000, stepNs: 100}
	e.Consume(ctx, c.records(0))
	flush(t, e)
	if n := len(byName(mem.Spans(), "allreduce")); n != 2 || e.Stats().Open != 0 {
		t.Errorf("a one-part collective left open: %d spans", n)
	}
	// Records of an exported collective are late, not a new collective.
	e.Consume(ctx, c.records(0)[1:3])
	if st := e.Stats(); st.Late != 2 || st.Open != 0 {
		t.Errorf("late records: %+v", st)
	}
}

func TestIncompleteLostAndFailed(t *testing.T) {
	e, mem := newTestExporter(t, WithWorldSize(2))
	ctx := context.Background()
	j := ringJob{comm: 3, ranks: 2, seq: 1, bytes: 1 << 20, base: 1000, stepNs: 1000}
	recs := j.records(0)
	e.Consume(ctx, recs[:len(recs)-1]) // no coll_end
	e.Consume(ctx, []flowtel.Record{{TsNs: 5000, Kind: flowtel.KindLost, Rank: 0, Peer: -1, Comm: 3, Bytes: 12}})
	e.Consume(ctx, []flowtel.Record{{TsNs: 5100, Kind: flowtel.KindFailover, Comm: 3, Rank: 0, Peer: 1, Path: 1, QP: 9}})

	f := ringJob{comm: 3, ranks: 2, seq: 2, bytes: 1 << 20, base: 10000, stepNs: 1000}
	frecs := f.records(0)
	frecs[len(frecs)-1].Status = flowtel.StatusError
	e.Consume(ctx, frecs)

	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	colls := byName(mem.Spans(), "allreduce")
	if len(colls) != 2 {
		t.Fatalf("%d collective spans", len(colls))
	}
	for _, c := range colls {
		a := attrs(c)
		switch a["vccl.coll_seq"].AsInt64() {
		case 1:
			if !a["vccl.incomplete"].AsBool() || !a["vccl.records_lost"].AsBool() {
				t.Errorf("seq 1: %v", a)
			}
			if _, ok := a["vccl.algbw_gbps"]; ok {
				t.Error("bandwidth of an incomplete collective")
			}
			if len(c.Events) != 1 || c.Events[0].Name != "failover" {
				t.Errorf("seq 1 events %v", c.Events)
			}
		case 2:
			if c.Status.Code != codes.Error || a["vccl.status"].AsString() != "error" || a["error.type"].AsString() != "error" {
				t.Errorf("seq 2 status %v %v, error.type %v", c.Status, a["vccl.status"], a["error.type"])
			}
		}
	}
	if st := e.Stats(); st.LostRecords != 12 || st.Incomplete != 1 {
		t.Errorf("stats %+v", st)
	}
}

// A call made with a span in its context has its collective span under
// that span, in its trace; one made without is a root of the collective's
// own trace. Steps stay under their collective.
func TestCallerSpanIsParent(t *testing.T) {
	e, mem := newTestExporter(t, WithWorldSize(2))
	ctx := context.Background()
	caller := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	e.CallStarted(trace.ContextWithSpanContext(ctx, caller), 5, 0, 1)
	e.CallStarted(ctx, 5, 0, 2)                                       // no span: a root
	e.CallStarted(trace.ContextWithSpanContext(ctx, caller), 5, 1, 1) // rank 1's call 1, not exported here
	for seq := uint64(1); seq <= 2; seq++ {
		e.Consume(ctx, ringJob{comm: 5, ranks: 2, seq: seq, bytes: 1 << 20, base: int64(seq) * 1e6, stepNs: 1000}.records(0))
	}
	flush(t, e)
	spans := mem.Spans()
	colls := byName(spans, "allreduce")
	if len(colls) != 2 {
		t.Fatalf("%d collective spans", len(colls))
	}
	for _, c := range colls {
		switch seq := attrs(c)["vccl.coll_seq"].AsInt64(); seq {
		case 1:
			if c.Parent.SpanID() != caller.SpanID() || c.SpanContext.TraceID() != caller.TraceID() {
				t.Errorf("seq 1: parent %v in trace %v, want the caller's %v", c.Parent.SpanID(), c.SpanContext.TraceID(), caller.SpanID())
			}
		case 2:
			if c.Parent.IsValid() || c.SpanContext.TraceID() != traceIDFor("", 5, 2) {
				t.Errorf("seq 2: parent %v, trace %v: want a root of the collective's trace", c.Parent, c.SpanContext.TraceID())
			}
		}
		for _, s := range byName(spans, "allreduce.step") {
			if s.Parent.SpanID() == c.SpanContext.SpanID() && s.SpanContext.TraceID() != c.SpanContext.TraceID() {
				t.Errorf("step in trace %v under a collective of trace %v", s.SpanContext.TraceID(), c.SpanContext.TraceID())
			}
		}
	}
	// The parents of calls never exported are forgotten, newest kept.
	e2, _ := newTestExporter(t, WithMaxOpen(2))
	for seq := uint64(1); seq <= 3; seq++ {
		e2.CallStarted(trace.ContextWithSpanContext(ctx, caller), 1, 0, seq)
	}
	e2.parents.mu.Lock()
	_, has1 := e2.parents.m[collKey{1, 0, 1}]
	n := len(e2.parents.m)
	e2.parents.mu.Unlock()
	if n != 2 || has1 {
		t.Errorf("%d parents kept (the oldest: %v), want the 2 newest", n, has1)
	}
}

// CallStarted, on every call's path, costs a context lookup without a span.
func BenchmarkCallStartedNoSpan(b *testing.B) {
	e, err := New(context.Background(), WithProtocol("none"))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for i := range b.N {
		e.CallStarted(ctx, 1, 0, uint64(i))
	}
}

func TestMaxOpenEvicts(t *testing.T) {
	e, mem := newTestExporter(t, WithMaxOpen(2))
	for seq := uint64(1); seq <= 3; seq++ {
		e.Consume(context.Background(), []flowtel.Record{{TsNs: int64(seq) * 100, Kind: flowtel.KindCollBegin, Comm: 1, CollSeq: seq, Op: 1, Peer: -1}})
	}
	flush(t, e)
	spans := mem.Spans()
	if len(spans) != 1 || attrs(spans[0])["vccl.coll_seq"].AsInt64() != 1 || !attrs(spans[0])["vccl.incomplete"].AsBool() {
		t.Fatalf("evicted %v", spans)
	}
	if st := e.Stats(); st.Evicted != 1 || st.Open != 2 {
		t.Errorf("stats %+v", st)
	}
}

// blockingExporter blocks every export until released.
type blockingExporter struct{ release chan struct{} }

func (b *blockingExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return nil
}
func (b *blockingExporter) Shutdown(context.Context) error { return nil }

func TestConsumeNeverBlocksOnExport(t *testing.T) {
	be := &blockingExporter{release: make(chan struct{})}
	e, err := New(context.Background(), WithSpanExporter(be), WithEnv(func(string) string { return "" }),
		WithBatchOptions(sdktrace.WithMaxQueueSize(16), sdktrace.WithMaxExportBatchSize(4)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for seq := uint64(1); seq <= 500; seq++ {
			j := ringJob{comm: 4, ranks: 4, seq: seq, bytes: 1 << 20, base: int64(seq) * 1e6, stepNs: 1000}
			e.Consume(context.Background(), j.records(0))
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Consume blocked behind a stuck span exporter")
	}
	if st := e.Stats(); st.Collectives != 500 {
		t.Errorf("stats %+v", st)
	}
	close(be.release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStdoutFromEnv(t *testing.T) {
	var buf bytes.Buffer
	env := map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "vccl-stdout-test"}
	t.Setenv("OTEL_SERVICE_NAME", env["OTEL_SERVICE_NAME"]) // the resource reads the real environment
	e, err := New(context.Background(), WithStdout(&buf), WithEnv(func(k string) string { return env[k] }))
	if err != nil {
		t.Fatal(err)
	}
	j := ringJob{comm: 6, ranks: 2, seq: 1, bytes: 1024, base: 1000, stepNs: 1000}
	e.Consume(context.Background(), j.records(1))
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&buf)
	var names []string
	for dec.More() {
		var s struct {
			Name     string
			Resource []struct {
				Key   string
				Value struct{ Value any }
			}
		}
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("stdout output: %v", err)
		}
		names = append(names, s.Name)
		found := false
		for _, kv := range s.Resource {
			found = found || (kv.Key == "service.name" && kv.Value.Value == "vccl-stdout-test")
		}
		if !found {
			t.Errorf("span %s without service.name from OTEL_SERVICE_NAME: %v", s.Name, s.Resource)
		}
	}
	if strings.Join(names, ",") != "allreduce.step,allreduce.step,allreduce" {
		t.Errorf("stdout spans %v", names)
	}
}

func TestProtocolSelection(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		wantErr string
	}{
		{map[string]string{"OTEL_TRACES_EXPORTER": "none"}, ""},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "zipkin"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "http/json"},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, "carrier-pigeon"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "zipkin"},
	} {
		e, err := New(context.Background(), WithEnv(func(k string) string { return c.env[k] }))
		if c.wantErr == "" {
			if err != nil {
				t.Errorf("%v: %v", c.env, err)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			e.Shutdown(ctx) // nothing was exported: returns at once
			cancel()
		} else if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%v: err %v, want one naming %q", c.env, err, c.wantErr)
		}
	}
}

// A real job: two ranks in one process sharing a collector, telemetry on.
func TestLocalJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	col := flowtel.NewCollector(flowtel.WithMaxIdle(time.Millisecond))
	e, mem := newTestExporter(t)
	col.AddSink(e)
	col.Start()
	comms, err := collective.NewLocal(ctx, 2, collective.WithCollector(col), collective.WithTransport("loop"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range comms {
		e.AddComm(c)
	}
	errs := make(chan error, 2)
	for _, c := range comms {
		go func() {
			buf := make([]float32, 1<<16)
			for i := range buf {
				buf[i] = 1
			}
			errs <- collective.AllReduce(ctx, c, buf, buf, collective.Sum)
		}()
	}
	for range comms {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range comms {
		c.Close()
	}
	if err := col.Shutdown(ctx); err != nil { // drains into the exporter and shuts it down
		t.Fatal(err)
	}
	colls := byName(mem.Spans(), "allreduce")
	if len(colls) != 2 {
		t.Fatalf("%d all-reduce spans, want one per rank", len(colls))
	}
	if colls[0].SpanContext.TraceID() != colls[1].SpanContext.TraceID() {
		t.Error("ranks in different traces")
	}
	for _, c := range colls {
		a := attrs(c)
		if a["vccl.bytes"].AsInt64() != 4<<16 || a["vccl.world_size"].AsInt64() != 2 || a["vccl.busbw_gbps"].AsFloat64() <= 0 {
			t.Errorf("attributes %v", a)
		}
		if _, ok := a["vccl.incomplete"]; ok {
			t.Errorf("incomplete: %v", a)
		}
		if d := c.EndTime.Sub(c.StartTime); d <= 0 || time.Since(c.StartTime) > time.Minute || time.Since(c.StartTime) < 0 {
			t.Errorf("span times %v..%v", c.StartTime, c.EndTime)
		}
	}
	if n := len(byName(mem.Spans(), "allreduce.step")); n < 2 {
		t.Errorf("%d step spans", n)
	}
}
