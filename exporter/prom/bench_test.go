package prom

import (
	"context"
	"testing"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
)

// BenchmarkConsume measures records per second through the collector: an
// 8-rank ring all-reduce (14 steps, 4 records each) per iteration.
func BenchmarkConsume(b *testing.B) {
	c := New(WithWorldSize(8))
	j := ringJob{comm: 1, ranks: 8, seq: 1, bytes: 64 << 20, base: 1000, stepNs: 1000}
	recs := j.records(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for k := range recs {
			recs[k].CollSeq = uint64(i + 1)
			recs[k].WrID += 1 << 20 // later WRs on the same QPs
		}
		c.Consume(context.Background(), recs)
	}
	b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkConsumeSmallCalls is the live endpoint's fold of small calls: a
// 2-rank mailbox all-reduce's six records a call (coll_begin, a send and a
// receive posted and completed, coll_end), folded with a window as the
// telemetry package wires it, in batches of 512 calls.
func BenchmarkConsumeSmallCalls(b *testing.B) {
	c := New(WithWorldSize(2), WithWindow(flowtel.NewWindow(flowtel.WindowConfig{})))
	const calls = 512
	recs := make([]flowtel.Record, 0, 6*calls)
	tag := func(r flowtel.Record, seq uint64, ts int64) flowtel.Record {
		r.Comm, r.Rank, r.CollSeq, r.TsNs = 1, 0, seq, ts
		r.Op, r.Algo, r.Dtype = collective.OpAllReduce, collective.AlgoDirect, collective.Float32
		return r
	}
	for i := range uint64(calls) {
		ts := int64(i) * 2000
		recs = append(recs,
			tag(flowtel.Record{Kind: flowtel.KindCollBegin, Peer: -1, Bytes: 1024, Step: 1}, i+1, ts),
			tag(flowtel.Record{Kind: flowtel.KindWRPost, Peer: 1, QP: 1, WrID: flowtel.WRID(i, false), Bytes: 1024, Depth: 1}, i+1, ts),
			tag(flowtel.Record{Kind: flowtel.KindWRPost, Peer: 1, QP: 1, WrID: flowtel.WRID(i, true), Bytes: 1024, Depth: 2}, i+1, ts),
			tag(flowtel.Record{Kind: flowtel.KindWC, Peer: 1, QP: 1, WrID: flowtel.WRID(i, false), Bytes: 1024, Depth: 1}, i+1, ts+1500),
			tag(flowtel.Record{Kind: flowtel.KindWC, Peer: 1, QP: 1, WrID: flowtel.WRID(i, true), Bytes: 1024}, i+1, ts+1500),
			tag(flowtel.Record{Kind: flowtel.KindCollEnd, Peer: -1, Bytes: 1024}, i+1, ts+1500))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c.Consume(context.Background(), recs)
		// Later calls and WRs each round, as a rank's stream goes on.
		for k := range recs {
			recs[k].CollSeq += calls
			if recs[k].Kind == flowtel.KindWRPost || recs[k].Kind == flowtel.KindWC {
				recs[k].WrID += 2 * calls
			}
			recs[k].TsNs += 2000 * calls
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*calls), "ns/call")
}
