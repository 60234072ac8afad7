package loop

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
)

// link joins the two ends of a QP. Its lock orders every hand-off between
// them, so completions on each side keep posting order.
type link struct {
	mu     sync.Mutex
	ends   [2]*QP
	recvs  [2][]pendingWR // receives posted by end i, not yet matched
	sends  [2][]pendingWR // sends by end i waiting for credit
	closed [2]bool        // end i is gone
}

type pendingWR struct {
	wr    transport.WR
	telID uint64
}

// QP is one end of an in-process queue pair.
type QP struct {
	core   *transport.Core
	link   *link
	side   int
	addr   string
	closed atomic.Bool
}

var _ transport.QP = (*QP)(nil)

func newQP(lk *link, side int, cfg transport.Config, addr string) *QP {
	q := &QP{core: transport.NewCore(Name, cfg), link: lk, side: side, addr: addr}
	lk.mu.Lock()
	lk.ends[side] = q
	lk.mu.Unlock()
	return q
}

func (q *QP) Info() transport.Info { return q.core.Info(q.addr, q.addr) }

func (q *QP) Outstanding() int { return q.core.Outstanding() }

// Err returns why the peer is gone, or nil.
func (q *QP) Err() error { return q.core.Err() }

func (q *QP) Poll(dst []transport.WC) int { return q.core.Poll(dst) }

func (q *QP) PostSend(wr transport.WR) error {
	id, err := q.core.Admit(transport.OpSend, &wr, q.closed.Load())
	if err != nil {
		return err
	}
	s := pendingWR{wr: wr, telID: id}
	lk, peer := q.link, 1-q.side
	lk.mu.Lock()
	switch {
	case lk.closed[peer]:
		lk.mu.Unlock()
		q.fail(s, transport.OpSend, flowtel.StatusError, fmt.Errorf("%w: loop peer of rank %d closed", transport.ErrPeerDead, q.core.Config().Rank))
		return nil
	case len(lk.recvs[peer]) > 0:
		r := lk.recvs[peer][0]
		lk.recvs[peer] = lk.recvs[peer][1:]
		lk.deliver(q, s, lk.ends[peer], r)
	default:
		lk.sends[q.side] = append(lk.sends[q.side], s)
		q.core.CreditWait(id, &wr)
	}
	lk.mu.Unlock()
	return nil
}

func (q *QP) PostRecv(wr transport.WR) error {
	id, err := q.core.Admit(transport.OpRecv, &wr, q.closed.Load())
	if err != nil {
		return err
	}
	r := pendingWR{wr: wr, telID: id}
	lk, peer := q.link, 1-q.side
	lk.mu.Lock()
	switch {
	case len(lk.sends[peer]) > 0:
		s := lk.sends[peer][0]
		lk.sends[peer] = lk.sends[peer][1:]
		sender := lk.ends[peer]
		sender.core.Granted(s.telID, s.wr.Tag, len(s.wr.Buf))
		lk.deliver(sender, s, q, r)
	case lk.closed[peer]:
		lk.mu.Unlock()
		q.fail(r, transport.OpRecv, flowtel.StatusError, fmt.Errorf("%w: loop peer of rank %d closed", transport.ErrPeerDead, q.core.Config().Rank))
		return nil
	default:
		lk.recvs[q.side] = append(lk.recvs[q.side], r)
	}
	lk.mu.Unlock()
	return nil
}

// deliver copies a matched send into its receive and completes both. The
// caller holds lk.mu.
func (lk *link) deliver(sender *QP, s pendingWR, receiver *QP, r pendingWR) {
	n := len(s.wr.Buf)
	if n > len(r.wr.Buf) {
		err := transport.TooLargeError(n, len(r.wr.Buf))
		sender.fail(s, transport.OpSend, flowtel.StatusError, err)
		receiver.fail(r, transport.OpRecv, flowtel.StatusError, err)
		return
	}
	copy(r.wr.Buf, s.wr.Buf)
	ts := sender.core.Now()
	sender.core.Complete(transport.WC{ID: s.wr.ID, Op: transport.OpSend, Bytes: n, TsNs: ts}, s.telID, s.wr.Tag)
	receiver.core.Complete(transport.WC{ID: r.wr.ID, Op: transport.OpRecv, Bytes: n, TsNs: ts}, r.telID, r.wr.Tag)
}

func (q *QP) fail(p pendingWR, op transport.Opcode, st flowtel.Status, err error) {
	q.core.Fail(op, &p.wr, p.telID, st, err)
}

// Close flushes this end's WRs and fails the peer's, as a vanished peer
// would.
func (q *QP) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.link.hangUp(q.side)
	return nil
}

// hangUp marks end side gone: its own WRs complete flushed, the peer's
// pending ones with a peer-dead error.
func (lk *link) hangUp(side int) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.closed[side] {
		return
	}
	lk.closed[side] = true
	if own := lk.ends[side]; own != nil {
		for _, p := range lk.recvs[side] {
			own.fail(p, transport.OpRecv, flowtel.StatusFlushed, transport.ErrClosed)
		}
		for _, p := range lk.sends[side] {
			own.fail(p, transport.OpSend, flowtel.StatusFlushed, transport.ErrClosed)
		}
	}
	lk.recvs[side], lk.sends[side] = nil, nil
	peer := 1 - side
	if other := lk.ends[peer]; other != nil {
		err := fmt.Errorf("%w: loop peer closed", transport.ErrPeerDead)
		other.core.SetDead(err)
		for _, p := range lk.recvs[peer] {
			other.fail(p, transport.OpRecv, flowtel.StatusError, err)
		}
		for _, p := range lk.sends[peer] {
			other.fail(p, transport.OpSend, flowtel.StatusError, err)
		}
		lk.recvs[peer], lk.sends[peer] = nil, nil
	}
}
