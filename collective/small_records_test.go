package collective

import (
	"fmt"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/flowtel/flowteltest"
	"github.com/vccl-go/vccl/transport"
)

// recordsOnlyBox stands for a peer's mailbox where only its presence
// matters (begin and end call none of its methods).
type recordsOnlyBox struct{ transport.Mailbox }

// recordsPath returns rank 0 of 2's mailbox path writing into ring, and a
// 1 KiB float32 all-reduce request.
func recordsPath(ring *flowtel.Ring) (*Comm, *smallPath, *request) {
	c := &Comm{rank: 0, size: 2}
	s := &smallPath{boxes: []transport.Mailbox{nil, recordsOnlyBox{}}, qpids: []uint32{0, 7}, rec: flowtel.NewRecorder(ring, nil), comm: 9, peer: 1}
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
	// Any kind but 0xff, which marks a slot holding an Exchange entry.
	junk := flowtel.Record{TsNs: -1, CollSeq: ^uint64(0), WrID: ^uint64(0), Bytes: ^uint64(0), Rank: -1, Peer: -1,
		QP: ^uint32(0), Comm: ^uint32(0), Depth: ^uint32(0), Step: ^uint32(0), Channel: ^uint16(0),
		Kind: 0xfe, Status: 0xff, Op: 0xff, Algo: 0xff, Dtype: 0xff, Path: 0xff}
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

// A 2-rank call's Exchange entries expand into exactly the records the
// per-peer writer (a path with more peers) writes for the same call, field
// for field, timestamps included, whatever room each Drain has.
func TestSmallExchangeRecords(t *testing.T) {
	calls := []struct {
		op     Op
		root   int
		in     int
		out    int
		status flowtel.Status
	}{
		{OpAllReduce, 0, 1024, 1024, flowtel.StatusOK},
		{OpAllReduce, 0, 8 << 10, 8 << 10, flowtel.StatusError},
		{OpAllGather, 0, 4096, 8192, flowtel.StatusOK},
		{OpBroadcast, 0, 512, 512, flowtel.StatusFlushed},
		{OpBroadcast, 1, 0, 512, flowtel.StatusOK},
		{OpBarrier, 0, 0, 0, flowtel.StatusOK},
	}
	write := func(peer int) []flowtel.Record {
		clk := flowteltest.NewFakeClock(1000)
		ring, err := flowtel.NewRing(64)
		if err != nil {
			t.Fatal(err)
		}
		c, s, _ := recordsPath(ring)
		c.rank = 1
		s.boxes, s.qpids = []transport.Mailbox{recordsOnlyBox{}, nil}, []uint32{7, 0}
		s.peer = peer
		s.rec = flowtel.NewRecorder(ring, clk.Clock())
		var got []flowtel.Record
		dst := make([]flowtel.Record, 2) // less than an entry's records: expansions split across Drains
		for i, tc := range calls {
			rq := &request{call: call{op: tc.op, root: tc.root, redop: Max}, dt: Int64, in: make([]byte, tc.in), out: make([]byte, tc.out)}
			s.begin(c, uint64(10+i), rq, tc.in)
			clk.Advance(time.Microsecond)
			s.end(c, uint64(10+i), rq, tc.in, tc.status)
			clk.Advance(time.Microsecond)
			for n := ring.Drain(dst); n > 0; n = ring.Drain(dst) {
				got = append(got, dst[:n]...)
			}
		}
		return got
	}
	want, got := write(-1), write(0)
	if len(want) != 6*len(calls) {
		t.Fatalf("the per-peer writer wrote %d records, want %d", len(want), 6*len(calls))
	}
	if len(got) != len(want) {
		t.Fatalf("the exchange writer's entries expanded into %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d\n got %v\nwant %v", i, got[i], want[i])
		}
	}
}

// A dropped Exchange entry counts as the three records it stands for, in
// Dropped and in the KindLost record the next call's records carry.
func TestSmallExchangeDropped(t *testing.T) {
	ring, err := flowtel.NewRing(2)
	if err != nil {
		t.Fatal(err)
	}
	c, s, rq := recordsPath(ring)
	s.begin(c, 1, rq, len(rq.in))
	s.end(c, 1, rq, len(rq.in), flowtel.StatusOK) // the ring is full: begin's and end's entries take both slots
	s.begin(c, 2, rq, len(rq.in))                 // dropped
	if d := ring.Dropped(); d != 3 {
		t.Fatalf("Dropped after one lost entry = %d, want 3", d)
	}
	recs := make([]flowtel.Record, 8)
	if n := ring.Drain(recs); n != 6 {
		t.Fatalf("drained %d records, want 6", n)
	}
	s.end(c, 2, rq, len(rq.in), flowtel.StatusOK)
	n := ring.Drain(recs)
	if n != 4 || recs[0].Kind != flowtel.KindLost || recs[0].Bytes != 3 || recs[3].Kind != flowtel.KindCollEnd {
		t.Fatalf("after the loss drained %d records %v, want lost(3) then end's 3", n, fmt.Sprint(recs[:n]))
	}
}

// BenchmarkSmallRecords is what a 2-rank mailbox call's telemetry costs
// the caller: begin's and end's records written into a ring ("exchange":
// as the two Exchange entries a 2-rank path writes; "records": as the six
// records a path with more peers writes a peer), drained outside the
// timer; "+drain" times the drain too (the collector's share, on the same
// CPU when a rank is bound to one).
func BenchmarkSmallRecords(b *testing.B) {
	for _, peer := range []int{1, -1} {
		for _, drain := range []bool{false, true} {
			name := map[bool]string{true: "exchange", false: "records"}[peer >= 0]
			if drain {
				name += "+drain"
			}
			b.Run(name, func(b *testing.B) {
				ring, err := flowtel.NewRing(1 << 15)
				if err != nil {
					b.Fatal(err)
				}
				c, s, rq := recordsPath(ring)
				s.peer = peer
				dst := make([]flowtel.Record, 4096)
				b.ResetTimer()
				for i := range b.N {
					if i&1023 == 0 {
						if !drain {
							b.StopTimer()
						}
						for ring.Drain(dst) > 0 {
						}
						if !drain {
							b.StartTimer()
						}
					}
					s.begin(c, uint64(i), rq, len(rq.in))
					s.end(c, uint64(i), rq, len(rq.in), flowtel.StatusOK)
				}
			})
		}
	}
}

// The engine's coll_begin and coll_end are written in place over the
// ring's previous lap too: every field its own.
func TestEngineCollRecordsOverwriteSlots(t *testing.T) {
	ring, err := flowtel.NewRing(4)
	if err != nil {
		t.Fatal(err)
	}
	junk := flowtel.Record{TsNs: -1, CollSeq: ^uint64(0), WrID: ^uint64(0), Bytes: ^uint64(0), Rank: -1, Peer: 5,
		QP: ^uint32(0), Comm: ^uint32(0), Depth: ^uint32(0), Step: ^uint32(0), Channel: ^uint16(0),
		Kind: 0xfe, Status: 0xff, Op: 0xff, Algo: 0xff, Dtype: 0xff, Path: 0xff}
	for range ring.Cap() {
		ring.Push(&junk)
	}
	ring.Drain(make([]flowtel.Record, ring.Cap()))

	e := &engine{channel: 3, rank: 1, comm: 9, rec: flowtel.NewRecorder(ring, nil)}
	tk := &task{call: call{op: OpAllReduce, count: 256, esize: 4}, dt: Float32, sched: &schedule{algo: AlgoRing}, seq: 7, parts: 2}
	for i, st := range []flowtel.Status{flowtel.StatusOK, flowtel.StatusError} {
		kind := []flowtel.Kind{flowtel.KindCollBegin, flowtel.KindCollEnd}[i]
		e.coll(ring.Reserve(), tk, 100, kind, st)
		ring.Commit()
		got := make([]flowtel.Record, 2)
		if n := ring.Drain(got); n != 1 {
			t.Fatalf("drained %d records, want 1", n)
		}
		want := flowtel.Record{TsNs: 100, CollSeq: 7, Bytes: 1024, Rank: 1, Peer: -1, Comm: 9, Step: 2, Channel: 3,
			Kind: kind, Status: st, Op: uint8(OpAllReduce), Algo: uint8(AlgoRing), Dtype: uint8(Float32)}
		if got[0] != want {
			t.Errorf("\n got %v\nwant %v", got[0], want)
		}
	}
}
