package collective

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/flowtel/flowteltest"
	"github.com/vccl-go/vccl/transport"
)

// recordsOnlyBox stands for a peer's mailbox where only its presence
// matters, and whether the peer published before this rank's begin
// (begin and end call no other method).
type recordsOnlyBox struct {
	transport.Mailbox
	arrived bool
}

func (b *recordsOnlyBox) Arrived(uint32) bool { return b.arrived }

// recordsPath returns rank 0 of 2's mailbox path writing into ring, and a
// 1 KiB float32 all-reduce request. The peer has not published.
func recordsPath(ring *flowtel.Ring) (*Comm, *smallPath, *request) {
	c := &Comm{rank: 0, size: 2}
	s := &smallPath{boxes: []transport.Mailbox{nil, &recordsOnlyBox{}}, qpids: []uint32{0, 7}, rec: flowtel.NewRecorder(ring, nil), comm: 9, peer: 1}
	s.initRecords(c.rank)
	c.small = s
	buf := make([]byte, 1024)
	return c, s, &request{call: call{op: OpAllReduce}, dt: Float32, in: buf, out: buf}
}

// begin and end write their records in place over the ring's previous lap:
// every field must be theirs, none left from what the slot held, whether
// they wrote two entries or one whole one.
func TestSmallRecordsOverwriteSlots(t *testing.T) {
	for _, arrived := range []bool{false, true} {
		t.Run(fmt.Sprintf("peer first=%v", arrived), func(t *testing.T) { testSmallRecordsOverwriteSlots(t, arrived) })
	}
}

func testSmallRecordsOverwriteSlots(t *testing.T, arrived bool) {
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
	s.boxes[1].(*recordsOnlyBox).arrived = arrived
	s.begin(c, 3, 5, rq, 1024)
	if s.held.on != arrived {
		t.Fatalf("begin held its records for end: %v, want %v (the peer published first: %v)", s.held.on, arrived, arrived)
	}
	s.end(c, 5, rq, 1024, flowtel.StatusFlushed)
	entries := 2
	if arrived {
		entries = 1
	}
	if ring.Len() != entries {
		t.Fatalf("the call wrote %d entries, want %d", ring.Len(), entries)
	}
	got := make([]flowtel.Record, 8)
	if n := ring.Drain(got); n != 6 {
		t.Fatalf("drained %d records, want 6", n)
	}
	coll := func(kind flowtel.Kind, st flowtel.Status) flowtel.Record {
		return flowtel.Record{Kind: kind, Status: st, Rank: 0, Peer: -1, Comm: 9, CollSeq: 5,
			Op: OpAllReduce, Algo: AlgoDirect, Dtype: Float32, Bytes: 1024, Step: 1}
	}
	wr := func(kind flowtel.Kind, st flowtel.Status, id uint64, depth uint32) flowtel.Record {
		return flowtel.Record{Kind: kind, Status: st, WrID: id, Depth: depth, Rank: 0, Peer: 1, QP: 7, Comm: 9, CollSeq: 5,
			Op: OpAllReduce, Algo: AlgoDirect, Dtype: Float32, Bytes: 1024}
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

// A call's Exchange entries expand into exactly the records a writer of
// v1 records writes for the same call through the primitives the engine's
// records go through (flowtel.CallFields, WRFields), field for field,
// timestamps included, whatever room each Drain has: with one peer (one
// whole entry where the peer published first) and with two (an entry per
// peer, the first carrying coll_begin and the last coll_end).
func TestSmallExchangeRecords(t *testing.T) {
	calls := []struct {
		op        Op
		root      int
		in        int
		out       int
		status    flowtel.Status
		peerFirst bool          // the peer published before begin: one whole entry
		took      time.Duration // from begin's clock reading to end's
	}{
		{OpAllReduce, 0, 1024, 1024, flowtel.StatusOK, false, time.Microsecond},
		{OpAllReduce, 0, 1024, 1024, flowtel.StatusOK, true, time.Microsecond},
		{OpAllReduce, 0, 64 << 10, 64 << 10, flowtel.StatusError, false, time.Microsecond},
		{OpAllReduce, 0, 64 << 10, 64 << 10, flowtel.StatusError, true, 3 * time.Second},
		{OpAllGather, 0, 4096, 8192, flowtel.StatusOK, true, time.Microsecond},
		{OpBroadcast, 0, 512, 512, flowtel.StatusFlushed, true, 0},
		{OpBroadcast, 1, 0, 512, flowtel.StatusOK, false, time.Microsecond},
		{OpBarrier, 0, 0, 0, flowtel.StatusOK, true, time.Microsecond},
		// Longer than a whole entry's uint32 of ns: two entries.
		{OpAllReduce, 0, 1024, 1024, flowtel.StatusOK, true, 5 * time.Second},
	}
	peerSets := [][]int{{0}, {0, 2}}
	// write runs the calls on rank 1's path to peers, the 2-rank path
	// when single.
	write := func(peers []int, single bool) []flowtel.Record {
		clk := flowteltest.NewFakeClock(1000)
		ring, err := flowtel.NewRing(64)
		if err != nil {
			t.Fatal(err)
		}
		c, s, _ := recordsPath(ring)
		c.rank, c.size = 1, 1+len(peers)
		s.boxes, s.qpids = make([]transport.Mailbox, c.size), make([]uint32, c.size)
		for _, p := range peers {
			s.boxes[p], s.qpids[p] = &recordsOnlyBox{}, uint32(7+p)
		}
		s.peer = -1
		if single {
			s.peer = peers[0]
		}
		s.initRecords(c.rank)
		s.rec = flowtel.NewRecorder(ring, clk.Clock())
		var got []flowtel.Record
		dst := make([]flowtel.Record, 2) // less than an entry's records: expansions split across Drains
		for i, tc := range calls {
			rq := &request{call: call{op: tc.op, root: tc.root, redop: Max}, dt: Int64, in: make([]byte, tc.in), out: make([]byte, tc.out)}
			if s.peer >= 0 {
				s.boxes[s.peer].(*recordsOnlyBox).arrived = tc.peerFirst
			}
			s.begin(c, uint32(i), uint64(10+i), rq, tc.in)
			clk.Advance(tc.took)
			s.end(c, uint64(10+i), rq, tc.in, tc.status)
			clk.Advance(time.Microsecond)
			for n := ring.Drain(dst); n > 0; n = ring.Drain(dst) {
				got = append(got, dst[:n]...)
			}
		}
		return got
	}
	// reference writes the same calls' records one by one.
	reference := func(peers []int) []flowtel.Record {
		var want []flowtel.Record
		put := func(f func(r *flowtel.Record)) {
			var r flowtel.Record
			f(&r)
			want = append(want, r)
		}
		ts := int64(1000)
		for i, tc := range calls {
			rq := &request{call: call{op: tc.op, root: tc.root, redop: Max}, dt: Int64, in: make([]byte, tc.in), out: make([]byte, tc.out)}
			cf := flowtel.CallFields{Seq: uint64(10 + i), Bytes: uint64(tc.out), Rank: 1, Comm: 9, Parts: 1, Op: tc.op, Algo: AlgoDirect, Dtype: Int64}
			wf := func(p int) *flowtel.WRFields {
				return &flowtel.WRFields{Seq: uint64(10 + i), Rank: 1, Peer: int32(p), QP: uint32(7 + p), Comm: 9, Op: tc.op, Algo: AlgoDirect, Dtype: Int64}
			}
			id := uint64(i)
			te := ts + int64(tc.took)
			put(func(r *flowtel.Record) { cf.Put(r, ts, flowtel.KindCollBegin, flowtel.StatusOK) })
			for _, p := range peers {
				put(func(r *flowtel.Record) {
					wf(p).Put(r, ts, flowtel.KindWRPost, flowtel.StatusOK, flowtel.WRID(id, false), tc.in, 1)
				})
				put(func(r *flowtel.Record) {
					wf(p).Put(r, ts, flowtel.KindWRPost, flowtel.StatusOK, flowtel.WRID(id, true), recvBytes(rq, p, len(rq.in)), 2)
				})
			}
			for _, p := range peers {
				put(func(r *flowtel.Record) {
					wf(p).Put(r, te, flowtel.KindWC, tc.status, flowtel.WRID(id, false), tc.in, 1)
				})
				put(func(r *flowtel.Record) {
					wf(p).Put(r, te, flowtel.KindWC, tc.status, flowtel.WRID(id, true), recvBytes(rq, p, len(rq.in)), 0)
				})
			}
			put(func(r *flowtel.Record) { cf.Put(r, te, flowtel.KindCollEnd, tc.status) })
			ts = te + int64(time.Microsecond)
		}
		return want
	}
	for _, peers := range peerSets {
		for _, single := range []bool{false, true} {
			if single && len(peers) > 1 {
				continue
			}
			want, got := reference(peers), write(peers, single)
			if len(got) != len(want) {
				t.Fatalf("peers %v (2-rank path: %v): the entries expanded into %d records, want %d", peers, single, len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("peers %v (2-rank path: %v): record %d\n got %v\nwant %v", peers, single, i, got[i], want[i])
				}
			}
		}
	}
}

// A dropped Exchange entry counts as the records it stands for (a whole
// one six), in Dropped and in the KindLost record the next call's records
// carry.
func TestSmallExchangeDropped(t *testing.T) {
	ring, err := flowtel.NewRing(2)
	if err != nil {
		t.Fatal(err)
	}
	c, s, rq := recordsPath(ring)
	call := func(k uint32) {
		s.begin(c, k, uint64(k), rq, len(rq.in))
		s.end(c, uint64(k), rq, len(rq.in), flowtel.StatusOK)
	}
	call(1) // the peer has not published: begin's and end's entries fill the ring
	s.boxes[1].(*recordsOnlyBox).arrived = true
	call(2) // one whole entry, dropped
	if d := ring.Dropped(); d != 6 {
		t.Fatalf("Dropped after a lost whole entry = %d, want 6", d)
	}
	recs := make([]flowtel.Record, 8)
	if n := ring.Drain(recs); n != 6 {
		t.Fatalf("drained %d records, want 6", n)
	}
	call(3)
	n := ring.Drain(recs)
	if n != 7 || recs[0].Kind != flowtel.KindLost || recs[0].Bytes != 6 || recs[1].CollSeq != 3 || recs[6].Kind != flowtel.KindCollEnd {
		t.Fatalf("after the loss drained %d records %v, want lost(6) then call 3's 6", n, fmt.Sprint(recs[:n]))
	}
}

// BenchmarkSmallRecords is what a 2-rank mailbox call's telemetry costs
// the caller: begin's and end's records written into a ring ("exchange":
// as the two Exchange entries a 2-rank path writes when the peer has not
// published at begin; "whole": as the one entry it writes when the peer
// had; "records": as the begin and end entries a path with more peers
// writes a peer, of the first and the last), drained outside the timer; "+drain" times the drain too (the
// collector's share, on the same CPU when a rank is bound to one).
func BenchmarkSmallRecords(b *testing.B) {
	for _, name := range []string{"exchange", "whole", "records"} {
		for _, drain := range []bool{false, true} {
			run := name
			if drain {
				run += "+drain"
			}
			b.Run(run, func(b *testing.B) {
				ring, err := flowtel.NewRing(1 << 15)
				if err != nil {
					b.Fatal(err)
				}
				c, s, rq := recordsPath(ring)
				if strings.HasPrefix(name, "records") {
					s.peer = -1
				}
				s.boxes[1].(*recordsOnlyBox).arrived = strings.HasPrefix(name, "whole")
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
					s.begin(c, uint32(i), uint64(i), rq, len(rq.in))
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
			Kind: kind, Status: st, Op: OpAllReduce, Algo: AlgoRing, Dtype: Float32}
		if got[0] != want {
			t.Errorf("\n got %v\nwant %v", got[0], want)
		}
	}
}

// The same collective run on both CPU paths of one communicator, the
// mailbox (a small call) and the engine (one larger than smallLimit),
// writes records of one shape on every rank: one coll_begin and one
// coll_end carrying the same fields (but the time, sequence number, size
// and algorithm), transfers whose wr_post each has its wc on the same
// queue pair and WR id, with the same bytes (a receive: at most the
// post's), every transfer record naming
// the call and the algorithm its coll records name, and the times in
// order (begin, posts, completions, end).
func TestPathsRecordOneShape(t *testing.T) {
	for _, tc := range []struct {
		op Op
		n  int
	}{{OpAllReduce, 2}, {OpAllReduce, 3}, {OpAllGather, 2}, {OpAllGather, 3}, {OpBroadcast, 3}} {
		t.Run(fmt.Sprintf("%v/%d ranks", tc.op, tc.n), func(t *testing.T) { testPathsRecordOneShape(t, tc.op, tc.n) })
	}
	// Where ranks outnumber cores (whatever this machine's cores).
	t.Run("crowded", func(t *testing.T) {
		crowded(t)
		testPathsRecordOneShape(t, OpAllReduce, 2)
	})
}

func testPathsRecordOneShape(t *testing.T, op Op, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	col, sink := memoryCollector()
	comms := newLocal(t, n, WithCollector(col), WithTransport("shm"))
	if comms[0].small == nil {
		t.Fatal("no mailbox path")
	}
	large := smallLimit(n, comms[0].engines[0].spins(), op)/4 + 4
	var tookSmall [2][]bool
	for i, floats := range []int{16, large} {
		tookSmall[i] = make([]bool, n)
		if err := runOnAll(comms, func(c *Comm) error {
			before := mailboxCalls(c)
			in := make([]float32, floats)
			var err error
			switch op {
			case OpAllReduce:
				err = AllReduce(ctx, c, in, in, Sum)
			case OpAllGather:
				err = AllGather(ctx, c, in, make([]float32, n*floats))
			case OpBroadcast:
				err = Broadcast(ctx, c, in, in, n-1)
			}
			tookSmall[i][c.Rank()] = mailboxCalls(c) != before
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Some large calls go by the mailboxes too, in slices (slices.go) or
	// by loans (loaned.go): then their records are held to the small
	// call's shape.
	spin := comms[0].engines[0].spins()
	sliced := slicesFor(op, n, spin) || comms[0].loanedFor(op, large*4, spin)
	for r := range n {
		if !tookSmall[0][r] || tookSmall[1][r] != sliced {
			t.Fatalf("rank %d: the small call took the mailbox: %v, the large one: %v; want true, %v", r, tookSmall[0][r], tookSmall[1][r], sliced)
		}
	}
	if err := col.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// calls[seq-1][rank]: the records of call seq on rank.
	calls := [2][][]flowtel.Record{make([][]flowtel.Record, n), make([][]flowtel.Record, n)}
	for _, r := range sink.Records() {
		if r.Comm == comms[0].ID() && (r.CollSeq == 1 || r.CollSeq == 2) && r.Rank >= 0 && int(r.Rank) < n {
			calls[r.CollSeq-1][r.Rank] = append(calls[r.CollSeq-1][r.Rank], r)
		}
	}
	for rank := range n {
		var colls [2][2]flowtel.Record // [path][begin, end]
		for path, recs := range [][]flowtel.Record{calls[0][rank], calls[1][rank]} {
			colls[path] = checkCallRecords(t, fmt.Sprintf("%s path, rank %d", []string{"mailbox", "engine"}[path], rank), recs, n)
		}
		for i := range 2 {
			m, e := colls[0][i], colls[1][i]
			m.TsNs, m.CollSeq, m.Bytes, m.Algo = e.TsNs, e.CollSeq, e.Bytes, e.Algo
			if m != e {
				t.Errorf("rank %d: the paths' %v records differ beyond time, sequence, size and algorithm:\nmailbox %v\n engine %v", rank, e.Kind, colls[0][i], colls[1][i])
			}
		}
	}
}

// checkCallRecords checks one call's records on one rank of n (what the
// record contract says of them, whichever path wrote them) and returns
// its coll_begin and coll_end.
func checkCallRecords(t *testing.T, what string, recs []flowtel.Record, n int) [2]flowtel.Record {
	t.Helper()
	var coll [2]flowtel.Record
	kinds := map[flowtel.Kind]int{}
	type wrKey struct {
		qp uint32
		id uint64
	}
	posts := map[wrKey]flowtel.Record{}
	for _, r := range recs {
		kinds[r.Kind]++
		switch r.Kind {
		case flowtel.KindCollBegin, flowtel.KindCollEnd:
			coll[map[flowtel.Kind]int{flowtel.KindCollBegin: 0, flowtel.KindCollEnd: 1}[r.Kind]] = r
			if r.Peer != -1 || r.QP != 0 || r.WrID != 0 || r.Depth != 0 || r.Step != 1 || r.Status != flowtel.StatusOK {
				t.Errorf("%s: %v: want no peer, QP, WR or depth, one channel part, status ok", what, r)
			}
		case flowtel.KindWRPost:
			posts[wrKey{r.QP, r.WrID}] = r
		case flowtel.KindWC:
			p, ok := posts[wrKey{r.QP, r.WrID}]
			// A receive may be posted with room for more than comes.
			if !ok || r.Bytes != p.Bytes && !(r.IsRecv() && r.Bytes < p.Bytes) || p.Peer != r.Peer || r.TsNs < p.TsNs || r.Status != flowtel.StatusOK {
				t.Errorf("%s: completion %v: its post %v (found %v) must precede it, with the same peer and bytes (a receive: at most the post's)", what, r, p, ok)
			}
			delete(posts, wrKey{r.QP, r.WrID})
		case flowtel.KindCreditWait, flowtel.KindCreditGrant, flowtel.KindHeartbeat:
		default:
			t.Errorf("%s: a %v record in a call", what, r.Kind)
		}
	}
	if kinds[flowtel.KindCollBegin] != 1 || kinds[flowtel.KindCollEnd] != 1 || kinds[flowtel.KindWRPost] == 0 || kinds[flowtel.KindWC] != kinds[flowtel.KindWRPost] {
		t.Fatalf("%s: wrote %v, want one coll_begin, one coll_end and a wc for each of its wr_posts", what, kinds)
	}
	if len(posts) > 0 {
		t.Errorf("%s: posts without completions: %v", what, posts)
	}
	begin, end := coll[0], coll[1]
	for _, r := range recs {
		if r.Kind != flowtel.KindWRPost && r.Kind != flowtel.KindWC {
			continue
		}
		if r.Peer < 0 || int(r.Peer) >= n || r.Peer == r.Rank || r.QP == 0 {
			t.Errorf("%s: transfer %v: want a peer rank and a queue pair", what, r)
		}
		if r.Op != begin.Op || r.Dtype != begin.Dtype || r.Algo != begin.Algo || r.Channel != begin.Channel || r.Path != begin.Path {
			t.Errorf("%s: transfer %v does not name the call %v", what, r, begin)
		}
		if r.TsNs < begin.TsNs || r.TsNs > end.TsNs {
			t.Errorf("%s: transfer %v outside its call's [%d, %d]", what, r, begin.TsNs, end.TsNs)
		}
	}
	return coll
}
