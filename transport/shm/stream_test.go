//go:build linux

package shm

import (
	"bytes"
	"math"
	"testing"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// TestStreamedRecordsArrive: a sender whose copies ran slow streams a
// message's records into the ring (non-temporal stores, an unaligned tail
// too) and the reducing receive gets every byte.
func TestStreamedRecordsArrive(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}, Kill: crash})
	a := p.A.(*QP)
	a.mu.Lock()
	a.copyRate = 0.5
	a.mu.Unlock()
	const records = 10
	msg := patternOf(records*chunkMax+77, 9)
	exchangeOne(t, p, msg, addBytes, "streamed")
	a.mu.Lock()
	streamed, rate := a.streamed, a.copyRate
	a.mu.Unlock()
	if streamed != records*chunkMax || rate != 0.5 {
		t.Fatalf("%d bytes streamed (copy rate %.1f), want %d (0.5: no timed copy)", streamed, rate, records*chunkMax)
	}
	// The receiver timed its reads of the streamed records (the tail's
	// is too short to time) and published their rate, none for plain ones.
	b := p.B.(*QP)
	if plain, streamed := b.seg.in.readRate[0].Load(), math.Float64frombits(b.seg.in.readRate[1].Load()); plain != 0 || streamed <= 0 {
		t.Fatalf("receiver's read rates: plain %v, streamed %.1f bytes/ns; want 0 and more", math.Float64frombits(plain), streamed)
	}
}

// TestNoCMAWhileReducing: on a link that carries reducing receives (a ring
// all-reduce's), the plain receives posted after one do not offer single
// copy, so the reduced chunks never wait behind a read by address; after
// reduceQuiet of them, plain receives offer it again.
func TestNoCMAWhileReducing(t *testing.T) {
	p, a, _ := cmaPair(t)
	big := patternOf(cmaMin+4096, 11)
	exchangeOne(t, p, big, nil, "single copy") // the probe passes
	sum := make([]byte, len(big))
	plain := make([]byte, len(big))
	src := bytes.Repeat([]byte{1}, len(big))
	if err := p.B.PostRecv(transport.WR{ID: 1, Buf: sum, Src: src, Reduce: addBytes}); err != nil {
		t.Fatal(err)
	}
	if err := p.B.PostRecv(transport.WR{ID: 2, Buf: plain}); err != nil {
		t.Fatal(err)
	}
	for id := range uint64(2) {
		if err := p.A.PostSend(transport.WR{ID: 10 + id, Buf: big}); err != nil {
			t.Fatal(err)
		}
	}
	for _, wc := range append(transporttest.WaitN(t, p.A, p.NotA, 2), transporttest.WaitN(t, p.B, p.NotB, 2)...) {
		if wc.Status != flowtel.StatusOK {
			t.Fatalf("wr %d: %v (%v)", wc.ID, wc.Status, wc.Err)
		}
	}
	want := make([]byte, len(big))
	for i := range big {
		want[i] = big[i] + 1
	}
	if !bytes.Equal(sum, want) || !bytes.Equal(plain, big) {
		t.Fatalf("data: reduced equal %v, plain equal %v", bytes.Equal(sum, want), bytes.Equal(plain, big))
	}
	if sent, _, _, _ := cmaCounts(a); sent != 1 {
		t.Fatalf("%d single-copy records, want 1 (the probe's exchange only)", sent)
	}
	for range reduceQuiet - 1 {
		exchangeOne(t, p, big[:100], nil, "small plain")
	}
	exchangeOne(t, p, big, nil, "single copy again")
	if sent, _, _, _ := cmaCounts(a); sent != 2 {
		t.Fatalf("%d single-copy records after %d plain receives, want 2", sent, reduceQuiet)
	}
}
