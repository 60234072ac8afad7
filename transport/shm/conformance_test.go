//go:build linux

package shm

import (
	"testing"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Factory{
		Backend: Backend{},
		// A crash: the socket closes and the mapping goes, with no flush
		// and no "closed" state left in the segment.
		Kill: func(q transport.QP) { q.(*QP).crash() },
	})
}
