//go:build linux

package shm

import (
	"context"
	"testing"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// crash kills q's end as a crashed process would: the socket closes and the
// mapping goes, with no flush and no "closed" state left in the segment.
func crash(q transport.QP) { q.(*QP).crash() }

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Factory{Backend: Backend{}, Kill: crash})
}

// TestConformanceSmallRing runs the suite through the smallest ring, where
// every large message wraps, pads and splits its records many times over.
func TestConformanceSmallRing(t *testing.T) {
	transporttest.Run(t, transporttest.Factory{Backend: Backend{RingSize: 64 << 10}, Kill: crash, Large: 1<<20 + 4097})
}

func TestRingSizeChecked(t *testing.T) {
	for _, n := range []int{3 << 20, 32 << 10, 2 << 30, -1} {
		if qp, err := (Backend{RingSize: n}).Dial(context.Background(), "@nowhere", "k", transport.Config{}); err == nil {
			qp.Close()
			t.Fatalf("RingSize %d accepted", n)
		}
	}
}
