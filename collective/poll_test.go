package collective

import (
	"testing"

	"github.com/vccl-go/vccl/transport"
)

// countingQP is a recQP that counts its polls.
type countingQP struct {
	recQP
	polls int
}

func (q *countingQP) Poll(dst []transport.WC) int {
	q.polls++
	return q.recQP.Poll(dst)
}

// A step polls the QPs with WRs outstanding and leaves the others alone:
// over TCP each Poll of an idle QP is a system call.
func TestStepPollsOnlyBusyQPs(t *testing.T) {
	busy, idle := &countingQP{}, &countingQP{}
	e := &engine{qps: []transport.QP{nil, busy, idle}, wcs: make([]transport.WC, 4)}
	wr := transport.WR{ID: 7, Buf: make([]byte, 8)}
	if err := busy.PostRecv(wr); err != nil {
		t.Fatal(err)
	}
	e.step()
	if busy.polls == 0 || idle.polls != 0 {
		t.Fatalf("with a receive posted on one QP: %d polls of it, %d of the idle one; want some and none", busy.polls, idle.polls)
	}
	// Its completion is polled, after which it is idle too.
	busy.complete(wr, 8)
	e.step()
	if busy.Outstanding() != 0 {
		t.Fatalf("the completion was not polled: %d outstanding", busy.Outstanding())
	}
	before := busy.polls
	e.step()
	if busy.polls != before || idle.polls != 0 {
		t.Fatalf("with nothing outstanding: %d more polls of the first QP, %d of the second; want none", busy.polls-before, idle.polls)
	}
}
