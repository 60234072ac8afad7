package collective

import (
	"testing"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/shm"
	"github.com/vccl-go/vccl/transport/tcp"
)

// shm's QPs move their traffic in Poll and TCP's do not (its writer
// goroutine finishes sends): the drivers of the one keep their processor,
// of the other lend it.
func TestTransportsLendAsTheyMove(t *testing.T) {
	if lendsProcessor([]transport.QP{nil, (*shm.QP)(nil)}) {
		t.Error("a driver of shm QPs lends its processor")
	}
	if !lendsProcessor([]transport.QP{nil, (*tcp.QP)(nil)}) {
		t.Error("a driver of TCP QPs keeps its processor")
	}
}
