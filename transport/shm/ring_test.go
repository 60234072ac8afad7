//go:build linux

package shm

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// TestCorruptRing writes bad records into a ring by hand: the receiver must
// fail its WRs with a protocol error wrapping ErrPeerDead, never panic or
// read out of bounds, and the sender must learn of it.
func TestCorruptRing(t *testing.T) {
	R := defaultRing
	cases := []struct {
		name    string
		write   func(ring []byte) (tail uint64)
		firstOK bool // the first message is sound; the bad one meets the next receive
	}{
		{"unaligned-tail", func(ring []byte) uint64 { putRec(ring, 0, fFirst|fLast, 1, 1); return 1 }, false},
		{"tail-beyond-ring", func(ring []byte) uint64 { return uint64(2 * R) }, false},
		{"huge-record", func(ring []byte) uint64 { putRec(ring, 0, fFirst|fLast, math.MaxInt32, math.MaxInt32); return 64 }, false},
		{"record-past-tail", func(ring []byte) uint64 { putRec(ring, 0, fFirst|fLast, 100, 100); return 64 }, false},
		{"continuation-first", func(ring []byte) uint64 { putRec(ring, 0, fLast, 4, 4); return 64 }, false},
		{"longer-than-receive", func(ring []byte) uint64 { putRec(ring, 0, fFirst|fLast, 32, 32); return 64 }, false},
		{"overrun", func(ring []byte) uint64 { putRec(ring, 0, fFirst|fLast, 8, 4); return 64 }, false},
		{"short-end", func(ring []byte) uint64 { putRec(ring, 0, fFirst|fLast, 4, 8); return 64 }, false},
		{"pad-past-tail", func(ring []byte) uint64 { putRec(ring, 0, fPad, 0, 0); return 64 }, false},
		{"eager-too-long", func(ring []byte) uint64 { putRec(ring, 0, fFirst|fLast|fEager, 4, 8); return 64 }, false},
		{"eager-split", func(ring []byte) uint64 { putRec(ring, 0, fFirst|fEager, 4, 4); return 64 }, false},
		{"eager-over-limit", func(ring []byte) uint64 {
			putRec(ring, 0, fFirst|fLast|fEager, eagerMax+16, eagerMax+16)
			return uint64(recSize(eagerMax + 16))
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
			a, b := p.A.(*QP), p.B.(*QP)
			if err := b.PostRecv(transport.WR{ID: 1, Buf: make([]byte, 16)}); err != nil {
				t.Fatal(err)
			}
			a.live.RLock()
			a.seg.out.tail.Store(tc.write(a.seg.out.ring))
			a.live.RUnlock()
			wc := transporttest.WaitN(t, b, p.NotB, 1)[0]
			if tc.firstOK {
				if wc.Status != flowtel.StatusOK {
					t.Fatalf("first receive: %v", wc.Err)
				}
				b.PostRecv(transport.WR{ID: 3, Buf: make([]byte, 16)})
				wc = transporttest.WaitN(t, b, p.NotB, 1)[0]
			}
			if wc.Status != flowtel.StatusError || !errors.Is(wc.Err, transport.ErrPeerDead) || !strings.Contains(wc.Err.Error(), "protocol") {
				t.Fatalf("receive completed %v: %v, want a protocol error wrapping ErrPeerDead", wc.Status, wc.Err)
			}
			// The sender hears of it: its socket closed.
			a.PostRecv(transport.WR{ID: 2, Buf: make([]byte, 1)})
			if wc := transporttest.WaitN(t, a, p.NotA, 1)[0]; !errors.Is(wc.Err, transport.ErrPeerDead) {
				t.Fatalf("sender's receive: %v, want ErrPeerDead", wc.Err)
			}
		})
	}
}

// TestCorruptRingNoCredit: a message that is not eager and starts before
// its receive was announced breaks the protocol. A receiver announces a
// receive before it reads the ring, so the only such message is one beyond
// the credit slots, whose reuse waits for the sender's read word: here the
// sender "sends" one message per slot and one more without ever reading a
// credit.
func TestCorruptRingNoCredit(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
	a, b := p.A.(*QP), p.B.(*QP)
	n := defaultSlots + 1
	for i := range n {
		if err := b.PostRecv(transport.WR{ID: uint64(i), Buf: make([]byte, 16)}); err != nil {
			t.Fatal(err)
		}
	}
	a.live.RLock()
	for i := range n {
		putRec(a.seg.out.ring, i*recAlign, fFirst|fLast, 4, 4)
	}
	a.seg.out.tail.Store(uint64(n * recAlign))
	a.live.RUnlock()
	wcs := transporttest.WaitN(t, b, p.NotB, n)
	for i, wc := range wcs[:n-1] {
		if wc.Status != flowtel.StatusOK {
			t.Fatalf("receive %d of %d, announced: %v", i, n, wc.Err)
		}
	}
	if wc := wcs[n-1]; !errors.Is(wc.Err, transport.ErrPeerDead) || !strings.Contains(wc.Err.Error(), "credits") {
		t.Fatalf("the receive beyond the slots completed %v: %v, want a protocol error", wc.Status, wc.Err)
	}
}

func TestGeometry(t *testing.T) {
	g := geometry{ring: defaultRing, slots: defaultSlots}
	if err := g.check(); err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, g.segSize())
	initSegment(mem, g, 1)
	if got, err := readGeometry(mem); err != nil || got != g {
		t.Fatalf("readGeometry = %v, %v", got, err)
	}
	// Every control word sits on its own line, and the rings on pages.
	for d := range 2 {
		b := g.dirBase(d)
		if b%pageSize != 0 || (b+g.ctlSize())%pageSize != 0 {
			t.Fatalf("direction %d at %d, ring at %d: not page aligned", d, b, b+g.ctlSize())
		}
	}
	for _, bad := range []func([]byte){
		func(m []byte) { u64At(m, offMagic).Store(1) },
		func(m []byte) { u32At(m, offVersion).Store(segVersion + 1) },
		func(m []byte) { u64At(m, offRing).Store(3 << 20) },
		func(m []byte) { u64At(m, offRing).Store(1 << 62) },
		func(m []byte) { u64At(m, offSlots).Store(1000) },
		func(m []byte) { u64At(m, offSegSize).Store(12345) },
	} {
		m := make([]byte, len(mem))
		copy(m, mem)
		bad(m)
		if _, err := readGeometry(m); err == nil {
			t.Fatalf("a bad header passed")
		}
	}
	if _, err := readGeometry(mem[:len(mem)-pageSize]); err == nil {
		t.Fatalf("a short segment passed")
	}
}
