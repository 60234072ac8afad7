package otel

import (
	"context"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
)

// fakeComm stands for a *collective.Comm.
type fakeComm struct {
	id   uint32
	uid  string
	size int
}

func (c fakeComm) ID() uint32            { return c.id }
func (c fakeComm) UID() string           { return c.uid }
func (c fakeComm) Size() int             { return c.size }
func (c fakeComm) Clock() *flowtel.Clock { return nil }

// ringJob describes a synthetic ring all-reduce, as the engine and the
// transports would record it.
type ringJob struct {
	comm    uint32
	ranks   int
	seq     uint64
	bytes   uint64 // payload
	base    int64  // coll_begin time
	stepNs  int64  // duration of one step
	channel uint16
	op      collective.Op
	parts   uint32 // channel parts the call was split into (0: 1)
	credit  bool   // rank 0's first send waits for credit (stepNs/4)
}

// records returns rank's records: coll_begin, per step a receive and a send
// posted and completed, coll_end after the last step.
func (j ringJob) records(rank int) []flowtel.Record {
	n := j.ranks
	steps := 2 * (n - 1)
	chunk := j.bytes / uint64(n)
	next, prev := int32((rank+1)%n), int32((rank-1+n)%n)
	op := j.op
	if op == 0 {
		op = collective.OpAllReduce
	}
	tag := func(r flowtel.Record) flowtel.Record {
		r.Comm, r.Rank, r.CollSeq, r.Channel = j.comm, int32(rank), j.seq, j.channel
		r.Op, r.Algo, r.Dtype = op, collective.AlgoRing, collective.Float32
		return r
	}
	var out []flowtel.Record
	out = append(out, tag(flowtel.Record{TsNs: j.base, Kind: flowtel.KindCollBegin, Peer: -1, Bytes: j.bytes, Step: max(j.parts, 1)}))
	for s := range steps {
		t0 := j.base + int64(s)*j.stepNs + 10
		id := uint64(s)
		qpSend, qpRecv := uint32(next)+1, uint32(prev)+1
		out = append(out,
			tag(flowtel.Record{TsNs: t0, Kind: flowtel.KindWRPost, Peer: prev, QP: qpRecv, WrID: flowtel.WRID(id, true), Bytes: chunk, Step: uint32(s), Depth: 1}),
			tag(flowtel.Record{TsNs: t0 + 1, Kind: flowtel.KindWRPost, Peer: next, QP: qpSend, WrID: flowtel.WRID(id, false), Bytes: chunk, Step: uint32(s), Depth: 1}))
		if j.credit && rank == 0 && s == 0 {
			out = append(out,
				tag(flowtel.Record{TsNs: t0 + 2, Kind: flowtel.KindCreditWait, Peer: next, QP: qpSend, WrID: flowtel.WRID(id, false), Bytes: chunk, Step: uint32(s), Depth: 1}),
				tag(flowtel.Record{TsNs: t0 + 2 + j.stepNs/4, Kind: flowtel.KindCreditGrant, Peer: next, QP: qpSend, WrID: flowtel.WRID(id, false), Bytes: chunk, Step: uint32(s), Depth: 1}))
		}
		out = append(out,
			tag(flowtel.Record{TsNs: t0 + j.stepNs/2, Kind: flowtel.KindWC, Peer: next, QP: qpSend, WrID: flowtel.WRID(id, false), Bytes: chunk, Step: uint32(s)}),
			tag(flowtel.Record{TsNs: t0 + j.stepNs - 20, Kind: flowtel.KindWC, Peer: prev, QP: qpRecv, WrID: flowtel.WRID(id, true), Bytes: chunk, Step: uint32(s)}))
	}
	out = append(out, tag(flowtel.Record{TsNs: j.base + int64(steps)*j.stepNs, Kind: flowtel.KindCollEnd, Peer: -1, Bytes: j.bytes}))
	return out
}

// end is the coll_end time of the job.
func (j ringJob) end() int64 { return j.base + int64(2*(j.ranks-1))*j.stepNs }

// memExporter keeps every span it is given, across Shutdown (tracetest's
// InMemoryExporter forgets them on Shutdown).
type memExporter struct {
	mu    sync.Mutex
	spans tracetest.SpanStubs
}

func (m *memExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.spans = append(m.spans, tracetest.SpanStubsFromReadOnlySpans(spans)...)
	return nil
}

func (m *memExporter) Shutdown(context.Context) error { return nil }

func (m *memExporter) Spans() tracetest.SpanStubs {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append(tracetest.SpanStubs(nil), m.spans...)
}
