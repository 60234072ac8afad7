package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
)

const (
	// maxBatchFrames bounds the frames one writev carries.
	maxBatchFrames = 128
	// maxBatchBytes stops adding sends to a batch once its payload reaches
	// this size, so small sends are coalesced but a batch does not delay the
	// completion of its first send behind megabytes of later ones.
	maxBatchBytes = 256 << 10
	// readAhead is the reader's header buffer. A read that fetches a header
	// may also fetch up to this many bytes after it: the next small frames,
	// or the first bytes of a payload, which are copied from here into the
	// receive buffer. The rest of a payload is read from the socket straight
	// into the receive buffer.
	readAhead = 4 << 10
)

type sendWR struct {
	wr    transport.WR
	telID uint64
}

type recvWR struct {
	wr    transport.WR
	telID uint64
}

// QP is one end of a TCP queue pair: one connection, a writer goroutine that
// sends frames and a reader goroutine that receives them.
type QP struct {
	core          *transport.Core
	conn          *net.TCPConn
	local, remote string
	closed        atomic.Bool // Close was called: posts are refused

	mu      sync.Mutex
	sends   queue[sendWR] // posted sends not yet taken by the writer; the i-th matches credits' i-th
	credits queue[uint64] // credits from the peer (receive sizes) not yet used
	recvs   queue[recvWR] // posted receives whose data frame has not arrived
	grants  queue[uint64] // credits to send the peer (sizes of receives posted)
	err     error         // why the QP stopped; nil while it runs
	errSt   flowtel.Status
	// Set once the reader (writer) goroutine has flushed its WRs and
	// exited; from then on a post completes at once with err.
	readerDone, writerDone bool

	wake     chan struct{} // wakes the writer; cap 1, signals coalesce
	dead     chan struct{} // closed when the QP stops
	deadOnce sync.Once
	wg       sync.WaitGroup

	w writerState // writer goroutine only
	r readerState // reader goroutine only
}

var _ transport.QP = (*QP)(nil)

type writerState struct {
	hdrs     [maxBatchFrames * HeaderSize]byte
	iov      [][]byte
	bufs     net.Buffers
	batch    []sendJob
	dataSeq  uint32
	grantSeq uint32
}

type sendJob struct {
	s   sendWR
	err error // non-nil: too large for its receive
}

type readerState struct {
	buf       [readAhead]byte
	r, w      int
	dataSeq   uint32
	creditSeq uint32
	hasFlight bool
	inflight  recvWR
}

func newQP(conn *net.TCPConn, cfg transport.Config) *QP {
	q := &QP{
		core:   transport.NewCore(Name, cfg),
		conn:   conn,
		local:  conn.LocalAddr().String(),
		remote: conn.RemoteAddr().String(),
		wake:   make(chan struct{}, 1),
		dead:   make(chan struct{}),
	}
	q.w.iov = make([][]byte, 0, 2*maxBatchFrames)
	q.w.batch = make([]sendJob, 0, maxBatchFrames)
	q.wg.Add(2)
	go q.writeLoop()
	go q.readLoop()
	return q
}

func (q *QP) Info() transport.Info { return q.core.Info(q.local, q.remote) }

func (q *QP) Outstanding() int { return q.core.Outstanding() }

func (q *QP) Poll(dst []transport.WC) int { return q.core.Poll(dst) }

// Err returns why the connection to the peer is gone, or nil while it is up
// (and after this end's own Close). It is set, and the Notifier signalled,
// as soon as the loss is seen, even with no WR outstanding.
func (q *QP) Err() error { return q.core.Err() }

func (q *QP) check(wr *transport.WR) error {
	if q.closed.Load() {
		return transport.ErrClosed
	}
	if len(wr.Buf) > MaxFrameLen {
		return fmt.Errorf("tcp: WR %d of %d bytes exceeds the maximum message of %d bytes", wr.ID, len(wr.Buf), MaxFrameLen)
	}
	return transport.CheckWR(wr)
}

// PostSend queues a send for the writer. It needs the peer's next credit: if
// none has arrived yet the send waits, recorded as credit_wait.
func (q *QP) PostSend(wr transport.WR) error {
	if err := q.check(&wr); err != nil {
		return err
	}
	id := q.core.Posted(transport.OpSend, &wr)
	q.mu.Lock()
	if q.writerDone {
		q.core.Complete(transport.WC{ID: wr.ID, Op: transport.OpSend, Status: q.errSt, Err: q.err}, id, wr.Tag)
		q.mu.Unlock()
		return nil
	}
	idx := q.sends.len()
	q.sends.push(sendWR{wr: wr, telID: id})
	hasCredit := q.credits.len() > idx
	if !hasCredit {
		q.core.CreditWait(id, &wr)
	}
	q.mu.Unlock()
	if hasCredit {
		q.signal()
	}
	return nil
}

// PostRecv queues a receive and a credit announcing its size to the peer.
func (q *QP) PostRecv(wr transport.WR) error {
	if err := q.check(&wr); err != nil {
		return err
	}
	id := q.core.Posted(transport.OpRecv, &wr)
	q.mu.Lock()
	if q.readerDone {
		q.core.Complete(transport.WC{ID: wr.ID, Op: transport.OpRecv, Status: q.errSt, Err: q.err}, id, wr.Tag)
		q.mu.Unlock()
		return nil
	}
	q.recvs.push(recvWR{wr: wr, telID: id})
	q.grants.push(uint64(len(wr.Buf)))
	q.mu.Unlock()
	q.signal()
	return nil
}

func (q *QP) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Close flushes this end's WRs (StatusFlushed, ErrClosed), closes the
// connection, which the peer sees as a lost peer, and waits for the QP's
// goroutines to exit.
func (q *QP) Close() error {
	if q.closed.Swap(true) {
		q.wg.Wait()
		return nil
	}
	q.stop(fmt.Errorf("%w: tcp QP %s -> %s", transport.ErrClosed, q.local, q.remote), flowtel.StatusFlushed)
	q.wg.Wait()
	return nil
}

// stop records why the QP stops (the first reason wins), then wakes both
// goroutines by closing dead and the connection. A lost connection (st is
// StatusError), as opposed to Close, is also published through Core.SetDead.
func (q *QP) stop(err error, st flowtel.Status) {
	q.mu.Lock()
	first := q.err == nil
	if first {
		q.err, q.errSt = err, st
	}
	q.mu.Unlock()
	if first && st == flowtel.StatusError {
		q.core.SetDead(err)
	}
	q.deadOnce.Do(func() {
		close(q.dead)
		q.conn.Close()
	})
}

// peerDead is the error of WRs lost with the connection.
func (q *QP) peerDead(cause error) error {
	if errors.Is(cause, io.EOF) || errors.Is(cause, io.ErrUnexpectedEOF) {
		cause = fmt.Errorf("connection closed by the peer (%w)", cause)
	}
	return fmt.Errorf("%w: tcp peer %s (rank %d): %w", transport.ErrPeerDead, q.remote, q.core.Config().Peer, cause)
}

// writeLoop sends credits and matched sends, batching what is ready into one
// writev, until the QP stops; it then completes every send it holds.
func (q *QP) writeLoop() {
	defer q.wg.Done()
	w := &q.w
	for {
		q.mu.Lock()
		if q.err != nil {
			q.mu.Unlock()
			break
		}
		nhdr, payload := 0, 0
		w.iov = w.iov[:0]
		w.batch = w.batch[:0]
		for q.grants.len() > 0 && nhdr < maxBatchFrames {
			h := w.hdrs[nhdr*HeaderSize : (nhdr+1)*HeaderSize : (nhdr+1)*HeaderSize]
			PutHeader(h, Header{Type: FrameCredit, Seq: w.grantSeq, Len: q.grants.pop()})
			w.grantSeq++
			w.iov = append(w.iov, h)
			nhdr++
		}
		for q.sends.len() > 0 && q.credits.len() > 0 && nhdr < maxBatchFrames && payload < maxBatchBytes {
			s := q.sends.pop()
			credit := q.credits.pop()
			h := w.hdrs[nhdr*HeaderSize : (nhdr+1)*HeaderSize : (nhdr+1)*HeaderSize]
			nhdr++
			n := uint64(len(s.wr.Buf))
			job := sendJob{s: s}
			if n > credit {
				job.err = transport.TooLargeError(len(s.wr.Buf), int(credit))
				PutHeader(h, Header{Type: FrameData, Flags: FlagTooLarge, Seq: w.dataSeq, Len: n})
				w.iov = append(w.iov, h)
			} else {
				PutHeader(h, Header{Type: FrameData, Seq: w.dataSeq, Len: n})
				w.iov = append(w.iov, h)
				if n > 0 {
					w.iov = append(w.iov, s.wr.Buf)
				}
				payload += int(n)
			}
			w.dataSeq++
			w.batch = append(w.batch, job)
		}
		q.mu.Unlock()

		if nhdr == 0 {
			select {
			case <-q.wake:
			case <-q.dead:
			}
			continue
		}
		w.bufs = w.iov
		_, err := w.bufs.WriteTo(q.conn)
		clear(w.iov) // drop references to user buffers
		if err != nil {
			q.stop(q.peerDead(err), flowtel.StatusError)
			break
		}
		for i := range w.batch {
			j := &w.batch[i]
			wc := transport.WC{ID: j.s.wr.ID, Op: transport.OpSend, Bytes: len(j.s.wr.Buf)}
			if j.err != nil {
				wc.Status, wc.Err, wc.Bytes = flowtel.StatusError, j.err, 0
			}
			q.core.Complete(wc, j.s.telID, j.s.wr.Tag)
		}
		clear(w.batch)
		w.batch = w.batch[:0]
	}
	// Flush: the batch that failed first, then the queue, in posting order.
	q.mu.Lock()
	err, st := q.err, q.errSt
	for i := range w.batch {
		j := &w.batch[i]
		q.core.Complete(transport.WC{ID: j.s.wr.ID, Op: transport.OpSend, Status: st, Err: err}, j.s.telID, j.s.wr.Tag)
	}
	clear(w.batch)
	w.batch = w.batch[:0]
	for q.sends.len() > 0 {
		s := q.sends.pop()
		q.core.Complete(transport.WC{ID: s.wr.ID, Op: transport.OpSend, Status: st, Err: err}, s.telID, s.wr.Tag)
	}
	q.writerDone = true
	q.mu.Unlock()
}

// readLoop reads frames until the connection fails, then completes every
// receive it holds.
func (q *QP) readLoop() {
	defer q.wg.Done()
	err := q.readFrames()
	q.stop(err, flowtel.StatusError)
	r := &q.r
	q.mu.Lock()
	err, st := q.err, q.errSt
	if r.hasFlight {
		f := &r.inflight
		q.core.Complete(transport.WC{ID: f.wr.ID, Op: transport.OpRecv, Status: st, Err: err}, f.telID, f.wr.Tag)
		r.hasFlight, r.inflight = false, recvWR{}
	}
	for q.recvs.len() > 0 {
		v := q.recvs.pop()
		q.core.Complete(transport.WC{ID: v.wr.ID, Op: transport.OpRecv, Status: st, Err: err}, v.telID, v.wr.Tag)
	}
	q.readerDone = true
	q.mu.Unlock()
}

// readFrames runs the read side; it returns the error that ended it.
func (q *QP) readFrames() error {
	r := &q.r
	for {
		if err := q.fill(HeaderSize); err != nil {
			return q.peerDead(err)
		}
		h, err := DecodeHeader(r.buf[r.r:r.w])
		if err != nil {
			return q.peerDead(fmt.Errorf("protocol error: %w", err))
		}
		r.r += HeaderSize
		switch h.Type {
		case FrameCredit:
			if h.Seq != r.creditSeq {
				return q.peerDead(fmt.Errorf("protocol error: credit frame %d, want %d", h.Seq, r.creditSeq))
			}
			r.creditSeq++
			q.mu.Lock()
			q.credits.push(h.Len)
			i := q.credits.len() - 1
			waiting := i < q.sends.len()
			if waiting {
				// The i-th send was posted before its credit: it waited.
				s := q.sends.at(i)
				q.core.Granted(s.telID, s.wr.Tag, len(s.wr.Buf))
			}
			q.mu.Unlock()
			if waiting {
				q.signal()
			}
		case FrameData:
			if h.Seq != r.dataSeq {
				return q.peerDead(fmt.Errorf("protocol error: data frame %d, want %d", h.Seq, r.dataSeq))
			}
			r.dataSeq++
			q.mu.Lock()
			if q.recvs.len() == 0 {
				q.mu.Unlock()
				return q.peerDead(fmt.Errorf("protocol error: data frame %d of %d bytes with no receive posted", h.Seq, h.Len))
			}
			r.inflight, r.hasFlight = q.recvs.pop(), true
			q.mu.Unlock()
			f := &r.inflight
			wc := transport.WC{ID: f.wr.ID, Op: transport.OpRecv}
			switch {
			case h.Flags&FlagTooLarge != 0:
				wc.Status, wc.Err = flowtel.StatusError, transport.TooLargeError(int(h.Len), len(f.wr.Buf))
			case h.Len > uint64(len(f.wr.Buf)):
				return q.peerDead(fmt.Errorf("protocol error: data frame %d of %d bytes for a receive of %d bytes", h.Seq, h.Len, len(f.wr.Buf)))
			default:
				dst := f.wr.Buf[:h.Len]
				n := copy(dst, r.buf[r.r:r.w])
				r.r += n
				if n < len(dst) {
					if _, err := io.ReadFull(q.conn, dst[n:]); err != nil {
						return q.peerDead(err)
					}
				}
				wc.Bytes = len(dst)
			}
			q.core.Complete(wc, f.telID, f.wr.Tag)
			r.hasFlight, r.inflight = false, recvWR{}
		}
	}
}

// fill makes at least n bytes available in the read-ahead buffer.
func (q *QP) fill(n int) error {
	r := &q.r
	if r.w-r.r >= n {
		return nil
	}
	if r.r > 0 {
		r.w = copy(r.buf[:], r.buf[r.r:r.w])
		r.r = 0
	}
	for r.w < n {
		k, err := q.conn.Read(r.buf[r.w:])
		r.w += k
		if err != nil && r.w < n {
			return err
		}
	}
	return nil
}

// queue is a FIFO ring that reuses its storage, so steady traffic does not
// allocate.
type queue[T any] struct {
	buf  []T
	head int
	n    int
}

func (q *queue[T]) len() int { return q.n }

func (q *queue[T]) push(v T) {
	if q.n == len(q.buf) {
		nb := make([]T, max(16, 2*len(q.buf)))
		for i := range q.n {
			nb[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = v
	q.n++
}

func (q *queue[T]) pop() T {
	v := q.buf[q.head]
	var zero T
	q.buf[q.head] = zero
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	return v
}

// at returns the i-th element from the head.
func (q *queue[T]) at(i int) *T { return &q.buf[(q.head+i)&(len(q.buf)-1)] }
