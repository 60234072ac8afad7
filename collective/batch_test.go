package collective

import (
	"context"
	"testing"

	"github.com/vccl-go/vccl/transport"
)

// recQP records the WRs posted to it and completes what the test queues.
type recQP struct {
	sends, recvs []transport.WR
	wcs          []transport.WC
	// watch, when set, is read at every send posted: whether a local copy
	// into it has run by then.
	watch  []byte
	copied []bool
	posted int // WRs posted whose completions have not been polled
}

func (q *recQP) PostSend(wr transport.WR) error {
	q.sends = append(q.sends, wr)
	q.posted++
	if q.watch != nil {
		q.copied = append(q.copied, q.watch[0] != 0)
	}
	return nil
}
func (q *recQP) PostRecv(wr transport.WR) error {
	q.recvs = append(q.recvs, wr)
	q.posted++
	return nil
}
func (q *recQP) Poll(dst []transport.WC) int {
	n := copy(dst, q.wcs)
	q.wcs = q.wcs[n:]
	q.posted -= n
	return n
}
func (q *recQP) Outstanding() int     { return q.posted }
func (q *recQP) Info() transport.Info { return transport.Info{Backend: "rec"} }
func (q *recQP) Close() error         { return nil }
func (q *recQP) complete(wr transport.WR, n int) {
	q.wcs = append(q.wcs, transport.WC{ID: wr.ID, Bytes: n})
}

// Over TCP a broadcast root's chunks, which the verify releases together
// with their credits already there, are posted back to back, every one but
// the last flagged More, so they leave in one write, and out of place
// before the root's copies into its output; the receiver's receives go
// ahead of the verify.
func TestBroadcastSendsBatched(t *testing.T) {
	const count, chunk = 256 << 10, 256 << 10 // 1 MiB of float32 in 4 chunks
	for _, inPlace := range []bool{true, false} {
		for _, batch := range []bool{true, false} {
			testBroadcastSends(t, count, chunk, inPlace, batch)
		}
	}
}

func testBroadcastSends(t *testing.T, count, chunk int, inPlace, batch bool) {
	scheds := make([]*schedule, 2)
	hdrs := make([][]byte, 2)
	for r := range 2 {
		cl := &call{op: OpBroadcast, rank: r, n: 2, count: count, esize: 4, inPlace: inPlace, chunk: chunk}
		s, err := build(cl, AlgoRing)
		if err != nil {
			t.Fatal(err)
		}
		if s, err = withSignature(s, cl, AlgoRing); err != nil {
			t.Fatal(err)
		}
		scheds[r] = s
		hdrs[r] = make([]byte, s.hdrBytes())
		sig := cl.signature(Float32, AlgoRing, 1)
		s.hdr.fill(hdrs[r], &sig)
	}
	if got := scheds[1].hdr.spec[0]; got != 4 {
		t.Fatalf("rank 1 posts %d receives ahead of its verify, want its 4 chunks", got)
	}

	qp := &recQP{}
	e := &engine{rank: 0, ranks: 2, qps: []transport.QP{nil, qp}, wcs: make([]transport.WC, 64), batch: batch}
	in, out := make([]byte, count*4), make([]byte, count*4)
	in[0] = 1
	if inPlace {
		out = in
	} else {
		qp.watch = out
	}
	cl := call{op: OpBroadcast, rank: 0, n: 2, count: count, esize: 4, inPlace: inPlace, chunk: chunk}
	tk := &task{call: cl, dt: Float32, sched: scheds[0], seq: 1, ctx: context.Background(), bufs: [][]byte{in, out, nil, nil}}
	tk.sig = cl.signature(Float32, AlgoRing, 1)
	e.admit(tk)
	e.step()
	if len(qp.recvs) != 1 || len(qp.sends) != 1 {
		t.Fatalf("before the verify: %d receives and %d sends posted, want the headers'", len(qp.recvs), len(qp.sends))
	}
	// Rank 1's header lands, and the root's is credited.
	h1 := scheds[1].hdr
	copy(qp.recvs[0].Buf, hdrs[1][h1.sendOff[0]:][:hdrSize])
	qp.complete(qp.recvs[0], hdrSize)
	qp.complete(qp.sends[0], hdrSize)
	e.step() // the completions
	e.step() // the verify and what it releases
	if tk.err != nil {
		t.Fatal(tk.err)
	}
	var more []bool
	for _, wr := range qp.sends[1:] {
		more = append(more, wr.More)
	}
	want := []bool{batch, batch, batch, false}
	if len(more) != len(want) {
		t.Fatalf("in place %v, batch %v: %d chunks sent, want %d", inPlace, batch, len(more), len(want))
	}
	for i := range want {
		if more[i] != want[i] {
			t.Fatalf("in place %v, batch %v: chunks flagged More %v, want %v", inPlace, batch, more, want)
		}
	}
	if batch && !inPlace {
		for i, c := range qp.copied[1:] {
			if c {
				t.Fatalf("chunk %d was posted after the root's copy into its output, which held the chunks flagged More before it", i)
			}
		}
	}
	if !inPlace {
		// The output is copied chunk by chunk as the sends leave.
		for _, wr := range qp.sends[1:] {
			qp.complete(wr, len(wr.Buf))
		}
		e.step()
		e.step()
		if out[0] != 1 {
			t.Fatal("the root's output was not copied once its sends completed")
		}
	}
}
