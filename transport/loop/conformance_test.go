package loop

import (
	"testing"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Factory{
		Backend: Backend{},
		// An in-process peer dies by vanishing: its end closes with no
		// goodbye, which the survivor sees exactly as a crash.
		Kill: func(q transport.QP) { q.(*QP).link.hangUp(q.(*QP).side) },
	})
}
