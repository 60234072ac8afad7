//go:build linux

package shm

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

func patternOf(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// published returns the bytes of records q has written into its out ring.
func published(q *QP) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.otail
}

// waitArrived waits until the records of n bytes are in b's ring, without
// any receive posted there to take them.
func waitArrived(t *testing.T, b *QP, n uint64) {
	t.Helper()
	deadline := time.Now().Add(transporttest.Deadline)
	for b.seg.in.tail.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d bytes of records arrived", b.seg.in.tail.Load(), n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Sends of at most eagerMax bytes go into the ring before their receives
// are posted and wait there; they complete only once their receives are
// announced. A larger send waits for its receive before it writes a byte.
func TestEagerAheadOfReceives(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
	a, b := p.A.(*QP), p.B.(*QP)
	sizes := []int{0, 1, 100, 1088, eagerMax, 3000}
	for i, n := range sizes {
		if err := a.PostSend(transport.WR{ID: uint64(i), Buf: patternOf(n, byte(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var want uint64
	for _, n := range sizes {
		want += uint64(recSize(n))
	}
	waitArrived(t, b, want)
	if got := published(a); got != want {
		t.Fatalf("published %d bytes of records, want %d", got, want)
	}
	big := patternOf(eagerMax+1, 9)
	if err := a.PostSend(transport.WR{ID: 99, Buf: big}); err != nil {
		t.Fatal(err)
	}
	if got := published(a); got != want {
		t.Fatalf("a send of eagerMax+1 bytes wrote records before its receive was posted (%d bytes, want %d)", got, want)
	}
	if n := a.Poll(make([]transport.WC, 8)); n != 0 {
		t.Fatalf("%d eager sends completed before their receives were posted", n)
	}
	sizes = append(sizes, len(big))
	dsts := make([][]byte, len(sizes))
	for i, n := range sizes {
		dsts[i] = make([]byte, n+5)
		if err := b.PostRecv(transport.WR{ID: uint64(i), Buf: dsts[i]}); err != nil {
			t.Fatal(err)
		}
	}
	rc := transporttest.WaitN(t, b, p.NotB, len(sizes))
	sc := transporttest.WaitN(t, a, p.NotA, len(sizes))
	for i, n := range sizes {
		if sc[i].Status != flowtel.StatusOK || sc[i].Bytes != n {
			t.Fatalf("send %d of %d bytes: %v %d bytes (%v)", i, n, sc[i].Status, sc[i].Bytes, sc[i].Err)
		}
		seed := byte(i)
		if n == len(big) {
			seed = 9
		}
		if rc[i].Status != flowtel.StatusOK || rc[i].Bytes != n || !bytes.Equal(dsts[i][:n], patternOf(n, seed)) {
			t.Fatalf("receive %d of %d bytes: %v %d bytes (%v)", i, n, rc[i].Status, rc[i].Bytes, rc[i].Err)
		}
	}
}

// An eager message larger than its receive fails both ends with the same
// TooLargeError, and the QP carries on.
func TestEagerTooSmall(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
	a, b := p.A.(*QP), p.B.(*QP)
	a.PostSend(transport.WR{ID: 1, Buf: patternOf(1000, 1)})
	a.PostSend(transport.WR{ID: 2, Buf: patternOf(10, 2)})
	waitArrived(t, b, uint64(recSize(1000)+recSize(10)))
	b.PostRecv(transport.WR{ID: 1, Buf: make([]byte, 10)})
	dst := make([]byte, 10)
	b.PostRecv(transport.WR{ID: 2, Buf: dst})
	rc := transporttest.WaitN(t, b, p.NotB, 2)
	sc := transporttest.WaitN(t, a, p.NotA, 2)
	for _, wc := range []transport.WC{sc[0], rc[0]} {
		if wc.ID != 1 || !errors.Is(wc.Err, transport.ErrTooLarge) {
			t.Fatalf("%s %d completed %v (%v), want ErrTooLarge", wc.Op, wc.ID, wc.Status, wc.Err)
		}
		if msg := wc.Err.Error(); !strings.Contains(msg, "1000") || !strings.Contains(msg, "10 bytes") {
			t.Fatalf("error %q does not name both sizes", msg)
		}
	}
	if sc[0].Err.Error() != rc[0].Err.Error() {
		t.Fatalf("the ends disagree: send %q, receive %q", sc[0].Err, rc[0].Err)
	}
	if sc[1].Err != nil || rc[1].Err != nil || !bytes.Equal(dst, patternOf(10, 2)) {
		t.Fatalf("the message after the refused one: send %v, receive %v", sc[1].Err, rc[1].Err)
	}
}

// Eager sends that fill the ring before any receive is posted wait for
// room, and all arrive, in order, once the receives come.
func TestEagerFillsRing(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{RingSize: 64 << 10}})
	a, b := p.A.(*QP), p.B.(*QP)
	const n, size = 200, 1 << 10 // three times the ring
	for i := range n {
		msg := patternOf(size, byte(i))
		copy(msg, strconv.Itoa(i))
		if err := a.PostSend(transport.WR{ID: uint64(i), Buf: msg}); err != nil {
			t.Fatal(err)
		}
	}
	fit := uint64(len(a.seg.out.ring) / recSize(size) * recSize(size))
	waitArrived(t, b, fit)
	if got := published(a); got > uint64(len(a.seg.out.ring)) {
		t.Fatalf("published %d bytes into a ring of %d with nothing consumed", got, len(a.seg.out.ring))
	}
	dsts := make([][]byte, n)
	for i := range n {
		dsts[i] = make([]byte, size)
		b.PostRecv(transport.WR{ID: uint64(i), Buf: dsts[i]})
	}
	rc := transporttest.WaitN(t, b, p.NotB, n)
	sc := transporttest.WaitN(t, a, p.NotA, n)
	for i := range n {
		want := patternOf(size, byte(i))
		copy(want, strconv.Itoa(i))
		if sc[i].ID != uint64(i) || sc[i].Err != nil || rc[i].ID != uint64(i) || rc[i].Err != nil || !bytes.Equal(dsts[i], want) {
			t.Fatalf("message %d: send %d %v, receive %d %v", i, sc[i].ID, sc[i].Err, rc[i].ID, rc[i].Err)
		}
	}
}

// A receiver may take an eager message and close at once (a rank leaving
// after its last collective): the sender's send, whose data arrived, must
// still complete, since the receive was announced before the close.
func TestEagerThenReceiverCloses(t *testing.T) {
	for round := range 5 {
		p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
		a, b := p.A.(*QP), p.B.(*QP)
		msg := patternOf(100, byte(round))
		a.PostSend(transport.WR{ID: 1, Buf: msg})
		waitArrived(t, b, uint64(recSize(len(msg))))
		dst := make([]byte, len(msg))
		b.PostRecv(transport.WR{ID: 1, Buf: dst})
		rc := transporttest.WaitN(t, b, p.NotB, 1)[0]
		b.Close()
		sc := transporttest.WaitN(t, a, p.NotA, 1)[0]
		if rc.Err != nil || !bytes.Equal(dst, msg) {
			t.Fatalf("round %d: receive %v", round, rc.Err)
		}
		if sc.Err != nil {
			t.Fatalf("round %d: the send whose data arrived failed when the receiver closed: %v", round, sc.Err)
		}
	}
}
