package tcp

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// waitQueued waits until q's socket holds at least n unread bytes.
func waitQueued(t *testing.T, q *QP, n int) {
	t.Helper()
	deadline := time.Now().Add(transporttest.Deadline)
	for {
		got, err := unix.IoctlGetInt(q.sock.fd, unix.SIOCINQ)
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// pollN polls q until n completions came, all successful.
func pollN(t *testing.T, q *QP, n int) {
	t.Helper()
	wcs := make([]transport.WC, n)
	deadline := time.Now().Add(transporttest.Deadline)
	for got := 0; got < n; {
		k := q.Poll(wcs[got:])
		for _, wc := range wcs[got : got+k] {
			if wc.Err != nil {
				t.Fatal(wc.Err)
			}
		}
		got += k
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completions", got, n)
		}
	}
}

// The credits and completions one socket read brings share one clock
// reading (decision 0040), taken after the posts they answer; two
// readings of the clock differ, so equal stamps are one reading.
func TestEventsOfOneReadShareStamp(t *testing.T) {
	p := connect(t, Backend{}, "")
	qa, qb := p.A.(*QP), p.B.(*QP)
	qa.SetSpinning(true) // the reader goroutines park: only Polls read
	qb.SetSpinning(true)
	waitParked(t, qa)
	waitParked(t, qb)
	const n = 100
	// Two eager sends, written in one batch, wait in B's socket.
	if err := qa.PostSend(transport.WR{ID: 1, Buf: make([]byte, n), More: true}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(transport.WR{ID: 2, Buf: make([]byte, n)}); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, qb, 2*(HeaderSize+n))
	for i := range 2 {
		if err := qb.PostRecv(transport.WR{ID: uint64(10 + i), Buf: make([]byte, n)}); err != nil {
			t.Fatal(err)
		}
	}
	// B's Poll writes both credits at once and reads both messages.
	pollN(t, qb, 2)
	waitQueued(t, qa, 2*HeaderSize)
	pollN(t, qa, 2)

	drain := func(r *flowtel.Ring) []flowtel.Record {
		out := make([]flowtel.Record, r.Len())
		return out[:r.Drain(out)]
	}
	shared := func(side string, recs []flowtel.Record, kinds ...flowtel.Kind) {
		t.Helper()
		var posted, stamp int64
		seen := 0
		for _, r := range recs {
			switch {
			case r.Kind == flowtel.KindWRPost || r.Kind == flowtel.KindCreditWait:
				posted = max(posted, r.TsNs)
			case r.Kind == kinds[0] || len(kinds) > 1 && r.Kind == kinds[1]:
				if seen == 0 {
					stamp = r.TsNs
				}
				if r.TsNs != stamp {
					t.Errorf("%s: %v stamped %d, the read's other events %d", side, r.Kind, r.TsNs, stamp)
				}
				seen++
			}
		}
		if want := 2 * len(kinds); seen != want {
			t.Fatalf("%s: %d records of %v, want %d", side, seen, kinds, want)
		}
		if stamp < posted {
			t.Errorf("%s: events stamped %d, before the posts they answer (%d)", side, stamp, posted)
		}
	}
	shared("receiver", drain(p.RingB), flowtel.KindWC)
	shared("sender", drain(p.RingA), flowtel.KindCreditGrant, flowtel.KindWC)
}
