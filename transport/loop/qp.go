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

// PostSend delivers the send into the oldest receive the peer has posted,
// or queues it, waiting for credit, until the peer posts one.
func (q *QP) PostSend(wr transport.WR) error { return q.post(transport.OpSend, &wr) }

// PostRecv takes the oldest send the peer queued, or queues the receive.
func (q *QP) PostRecv(wr transport.WR) error { return q.post(transport.OpRecv, &wr) }

// post matches a WR with the oldest WR of the other kind the peer queued,
// or queues it. A send to a peer that has closed fails; a receive still
// takes what the peer sent before it closed.
func (q *QP) post(op transport.Opcode, wr *transport.WR) error {
	id, err := q.core.Admit(op, wr, q.closed.Load())
	if err != nil {
		return err
	}
	p := pendingWR{wr: *wr, telID: id}
	lk, peer := q.link, 1-q.side
	mine, theirs := &lk.sends, &lk.recvs
	if op == transport.OpRecv {
		mine, theirs = &lk.recvs, &lk.sends
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	switch {
	case len(theirs[peer]) > 0 && (op == transport.OpRecv || !lk.closed[peer]):
		o := theirs[peer][0]
		theirs[peer] = theirs[peer][1:]
		if op == transport.OpSend {
			lk.deliver(q, p, lk.ends[peer], o)
			break
		}
		sender := lk.ends[peer]
		sender.core.Granted(o.telID, o.wr.Tag, len(o.wr.Buf))
		lk.deliver(sender, o, q, p)
	case lk.closed[peer]:
		q.fail(p, op, flowtel.StatusError, fmt.Errorf("%w: loop peer of rank %d closed", transport.ErrPeerDead, q.core.Config().Rank))
	default:
		mine[q.side] = append(mine[q.side], p)
		if op == transport.OpSend {
			q.core.CreditWait(id, wr)
		}
	}
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
