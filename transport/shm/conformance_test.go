//go:build linux

package shm

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// crash kills q's end as a crashed process would: the socket closes and the
// mapping goes, with no flush and no "closed" state left in the segment.
func crash(q transport.QP) { q.(*QP).crash() }

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Factory{Backend: Backend{}, Kill: crash})
}

// TestConformanceCMA runs the suite with every message of cmaMin bytes or
// more by single copy, whatever the copy rate into the ring.
func TestConformanceCMA(t *testing.T) {
	cmaAlways.Store(true)
	defer cmaAlways.Store(false)
	transporttest.Run(t, transporttest.Factory{Backend: Backend{}, Kill: crash})
}

// TestConformanceSmallRing runs the suite through the smallest ring, where
// every large message wraps, pads and splits its records many times over
// (no single copy, which would take the large messages past the ring).
func TestConformanceSmallRing(t *testing.T) {
	defer func(old int) { cmaMin = old }(cmaMin)
	cmaMin = 0
	transporttest.Run(t, transporttest.Factory{Backend: Backend{RingSize: 64 << 10}, Kill: crash, Large: 1<<20 + 4097})
}

func TestRingSizeChecked(t *testing.T) {
	past := 1
	past <<= 31 // 2 GiB, past the 1 GiB limit (negative where int has 32 bits)
	for _, n := range []int{3 << 20, 32 << 10, past, -1} {
		if qp, err := (Backend{RingSize: n}).Dial(context.Background(), "@nowhere", "k", transport.Config{}); err == nil {
			qp.Close()
			t.Fatalf("RingSize %d accepted", n)
		}
	}
}

// TestSetSpinningHandsOver: an owner that says it is about to sleep hands
// the wait to the background goroutine, which moves the message and wakes
// the owner through its Notifier without the owner polling; the owner's
// next poll that finds work takes the wait back.
func TestSetSpinningHandsOver(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}, Kill: crash})
	b := p.B.(*QP)
	b.SetSpinning(false)
	if b.handed.Load() {
		t.Fatal("handed over with nothing outstanding")
	}
	dst := make([]byte, 256<<10)
	if err := b.PostRecv(transport.WR{ID: 7, Buf: dst}); err != nil {
		t.Fatal(err)
	}
	b.SetSpinning(false)
	if !b.handed.Load() {
		t.Fatal("SetSpinning(false) with a receive outstanding did not hand the wait over")
	}
	msg := bytes.Repeat([]byte{0x5a}, len(dst))
	if err := p.A.PostSend(transport.WR{ID: 1, Buf: msg}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(transporttest.Deadline)
	wcs := make([]transport.WC, 4)
	for got := false; !got; {
		select {
		case <-p.NotB.C():
		case <-deadline:
			t.Fatal("no completion signalled while the owner slept")
		}
		n := b.Poll(wcs)
		for _, wc := range wcs[:n] {
			if wc.ID != 7 || wc.Status != flowtel.StatusOK || !bytes.Equal(dst, msg) {
				t.Fatalf("completion %+v", wc)
			}
			got = true
		}
	}
	if b.handed.Load() {
		t.Fatal("the owner's poll that found the completion did not take the wait back")
	}
	transporttest.WaitN(t, p.A, p.NotA, 1)
}
