package collective

import (
	"testing"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
)

// recordsOnlyBox stands for a peer's mailbox where only its presence
// matters (begin and end call none of its methods).
type recordsOnlyBox struct{ transport.Mailbox }

// recordsPath returns rank 0 of 2's mailbox path writing into ring, and a
// 1 KiB float32 all-reduce request.
func recordsPath(ring *flowtel.Ring) (*Comm, *smallPath, *request) {
	c := &Comm{rank: 0, size: 2}
	s := &smallPath{boxes: []transport.Mailbox{nil, recordsOnlyBox{}}, qpids: []uint32{0, 7}, rec: flowtel.NewRecorder(ring, nil), comm: 9}
	c.small = s
	buf := make([]byte, 1024)
	return c, s, &request{call: call{op: OpAllReduce}, dt: Float32, in: buf, out: buf}
}

// begin and end write their records in place over the ring's previous lap:
// every field must be theirs, none left from what the slot held.
func TestSmallRecordsOverwriteSlots(t *testing.T) {
	ring, err := flowtel.NewRing(8)
	if err != nil {
		t.Fatal(err)
	}
	junk := flowtel.Record{TsNs: -1, CollSeq: ^uint64(0), WrID: ^uint64(0), Bytes: ^uint64(0), Rank: -1, Peer: -1,
		QP: ^uint32(0), Comm: ^uint32(0), Depth: ^uint32(0), Step: ^uint32(0), Channel: ^uint16(0),
		Kind: 0xff, Status: 0xff, Op: 0xff, Algo: 0xff, Dtype: 0xff, Path: 0xff}
	for range ring.Cap() {
		ring.Push(&junk)
	}
	ring.Drain(make([]flowtel.Record, ring.Cap()))

	c, s, rq := recordsPath(ring)
	s.begin(c, 5, rq, 1024)
	s.end(c, 5, rq, 1024, flowtel.StatusFlushed)
	got := make([]flowtel.Record, 8)
	if n := ring.Drain(got); n != 6 {
		t.Fatalf("drained %d records, want 6", n)
	}
	coll := func(kind flowtel.Kind, st flowtel.Status) flowtel.Record {
		return flowtel.Record{Kind: kind, Status: st, Rank: 0, Peer: -1, Comm: 9, CollSeq: 5,
			Op: uint8(OpAllReduce), Algo: uint8(AlgoDirect), Dtype: uint8(Float32), Bytes: 1024, Step: 1}
	}
	wr := func(kind flowtel.Kind, st flowtel.Status, id uint64, depth uint32) flowtel.Record {
		return flowtel.Record{Kind: kind, Status: st, WrID: id, Depth: depth, Rank: 0, Peer: 1, QP: 7, Comm: 9, CollSeq: 5,
			Op: uint8(OpAllReduce), Algo: uint8(AlgoDirect), Dtype: uint8(Float32), Bytes: 1024}
	}
	want := []flowtel.Record{
		coll(flowtel.KindCollBegin, flowtel.StatusOK),
		wr(flowtel.KindWRPost, flowtel.StatusOK, flowtel.WRID(0, false), 1),
		wr(flowtel.KindWRPost, flowtel.StatusOK, flowtel.WRID(0, true), 2),
		wr(flowtel.KindWC, flowtel.StatusFlushed, flowtel.WRID(0, false), 1),
		wr(flowtel.KindWC, flowtel.StatusFlushed, flowtel.WRID(0, true), 0),
		coll(flowtel.KindCollEnd, flowtel.StatusFlushed),
	}
	for i := range want {
		if got[i].TsNs <= 0 {
			t.Errorf("record %d stamped %d, want a time", i, got[i].TsNs)
		}
		want[i].TsNs = got[i].TsNs
		if got[i] != want[i] {
			t.Errorf("record %d\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// BenchmarkSmallRecords is what a 2-rank mailbox call's telemetry costs
// the caller: begin's and end's records written into a ring, drained
// outside the timer.
func BenchmarkSmallRecords(b *testing.B) {
	ring, err := flowtel.NewRing(1 << 15)
	if err != nil {
		b.Fatal(err)
	}
	c, s, rq := recordsPath(ring)
	dst := make([]flowtel.Record, ring.Cap())
	b.ResetTimer()
	for i := range b.N {
		if i&1023 == 0 {
			b.StopTimer()
			ring.Drain(dst)
			b.StartTimer()
		}
		s.begin(c, uint64(i), rq, len(rq.in))
		s.end(c, uint64(i), rq, len(rq.in), flowtel.StatusOK)
	}
}
