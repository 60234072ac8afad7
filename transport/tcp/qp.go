package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
)

const (
	// maxBatchFrames bounds the frames one writev carries.
	maxBatchFrames = 128
	// maxBatchBytes stops adding sends to a batch once its payload reaches
	// this size, so a batch does not hold the completion of its first send
	// behind many megabytes of later ones. It is a megabyte, not less,
	// because each writev costs a system call and a pass of the kernel's
	// TCP output over loopback, so one large write moves bytes faster than
	// several small ones; larger batches delay the first completion of a
	// multi-megabyte call more than they save (BENCHMARKS.md, TCP tables).
	maxBatchBytes = 1 << 20
	// readAhead is the read side's header buffer. A read that fetches a
	// header may also fetch up to this many bytes after it: the next small
	// frames, or the first bytes of a payload, which are copied from here
	// into the receive buffer. The rest of a payload is read from the socket
	// straight into the receive buffer.
	readAhead = 4 << 10
	// eagerMax is the largest send that may go before its credit, and
	// eagerWindow how many may be ahead of their credits at once: the
	// receiver keeps at most eagerWindow such messages (each at most
	// eagerMax) for receives not yet posted. eagerMax leaves room for a
	// header in front of 64 KiB: the collective's signature check sends a
	// 64 KiB payload behind 64 bytes, and at 64 KiB flat that message
	// waited for its credit, a round trip in a 2-rank 64 KiB all-reduce.
	eagerMax    = 68 << 10
	eagerWindow = 16
	// pollBudget bounds the bytes one Poll reads from the socket, so a poll
	// during a large transfer returns to its caller (who may have reductions
	// to run) instead of copying megabytes first.
	pollBudget = 256 << 10
	// closeFlush bounds how long Close waits for the credits this end
	// still owes the peer to be written.
	closeFlush = 200 * time.Millisecond
)

type sendWR struct {
	wr    transport.WR
	telID uint64
}

type recvWR struct {
	wr    transport.WR
	telID uint64
}

// eagerSend is a send taken for writing before its credit came; it
// completes once written and credited (with an error if the credit's
// receive is too small).
type eagerSend struct {
	s      sendWR
	credit uint64
}

// QP is one end of a TCP queue pair: one connection, written by whoever
// posts (or by the writer goroutine when the socket is full) and read by
// whoever polls (or by the reader goroutine while nobody does).
type QP struct {
	core          *transport.Core
	sock          *sockFD
	local, remote string
	closed        atomic.Bool   // Close was called: posts are refused
	spinning      atomic.Bool   // the owner polls without pause (SetSpinning)
	rwaiting      atomic.Bool   // the reader goroutine waits in poll(2), or is about to
	rparked       atomic.Bool   // the reader goroutine waits on arm: it reads nothing until spinning stops
	arm           chan struct{} // wakes the reader goroutine when spinning stops

	mu        sync.Mutex
	sends     flowtel.FIFO[sendWR]    // posted sends not yet taken for writing
	credits   flowtel.FIFO[uint64]    // credits from the peer (receive sizes) no send has used yet
	eager     flowtel.FIFO[eagerSend] // sends taken ahead of their credits, not yet completed
	ncredited int                     // eager[:ncredited] have their credit
	nwritten  int                     // eager[:nwritten] are written
	recvs     flowtel.FIFO[recvWR]    // posted receives whose data frame has not arrived
	early     flowtel.FIFO[[]byte]    // eager messages that came before their receive
	spare     [][]byte                // buffers of delivered early messages, for reuse
	grants    flowtel.FIFO[uint64]    // credits to send the peer (sizes of receives posted)
	wbusy     bool                    // a goroutine owns the write side (w)
	handoff   bool                    // that owner left w's batch to the writer goroutine
	// wheld: the socket was full and the QP's owner spins, so the batch
	// stays in w for the owner's next Poll or PostSend to go on writing
	// (wbusy stays set). Changed under mu; read without it by Poll.
	wheld atomic.Bool
	err   error // why the QP stopped; nil while it runs
	errSt flowtel.Status
	// Set once the reader (writer) goroutine has flushed its WRs and
	// exited; from then on a post completes at once with err.
	readerDone, writerDone bool

	wake     chan struct{} // wakes the writer; cap 1, signals coalesce
	dead     chan struct{} // closed when the QP stops
	deadOnce sync.Once
	wg       sync.WaitGroup

	w       writerState // owned by whoever set wbusy
	rmu     sync.Mutex  // owns the read side: the reader goroutine or a Poll
	r       readerState // under rmu
	writeFn func(fd int)
	pollFn  func(fd int)
	// Owner only: credits, or sends flagged More, were queued and not
	// written, for the next PostSend or Poll to carry.
	grantsHeld bool
}

var _ transport.QP = (*QP)(nil)

type writerState struct {
	hdrs     [maxBatchFrames * HeaderSize]byte
	iovBuf   [][]byte // backing array of iov
	iov      [][]byte // the batch's bytes not yet written
	vec      []syscall.Iovec
	jobs     []sendJob // the batch's credited sends
	neager   int       // the batch's eager sends (the unwritten head of QP.eager)
	dataSeq  uint32
	grantSeq uint32
	n        int // writeFn's result
	err      error
}

type sendJob struct {
	s   sendWR
	err error // non-nil: too large for its receive
}

// Where the payload being read goes.
const (
	toRecv    = iota // a posted receive (or nowhere: too large for it)
	toEarly          // a buffer kept until its receive is posted
	toNowhere        // nowhere: an eager message too large for its receive
)

type readerState struct {
	buf       [readAhead]byte
	r, w      int
	dataSeq   uint32
	creditSeq uint32
	// The data frame whose payload is being read.
	inPayload bool
	dst       []byte // where the payload goes; nil: dropped
	need      int    // payload bytes still to come
	off       int
	dest      int    // toRecv, toEarly or toNowhere
	hasCur    bool   // cur is the receive it completes
	cur       recvWR //
	curErr    error  // the error cur completes with (a too-large eager message)
	done      bool   // the read side failed: nothing more is read
	err       error  // pollFn's result
	pumpDue   bool   // credits came that let sends go: pump before reading on
	// owner: the QP's owner reads (a Poll), so posts wait for it to end.
	// ts: then, the stamp of what the last read brought (Core.Stamp: read
	// at the first completion or credit it carries, shared by the rest);
	// 0 after each read. fresh: the stamp of one frame's events otherwise.
	owner     bool
	ts, fresh int64
}

// newQP makes the QP of conn, which it takes over (and closes: see sockFD).
func newQP(conn *net.TCPConn, cfg transport.Config) (*QP, error) {
	local, remote := conn.LocalAddr().String(), conn.RemoteAddr().String()
	sock, err := detach(conn)
	if err != nil {
		return nil, err
	}
	q := &QP{
		core:   transport.NewCore(Name, cfg),
		sock:   sock,
		local:  local,
		remote: remote,
		wake:   make(chan struct{}, 1),
		arm:    make(chan struct{}, 1),
		dead:   make(chan struct{}),
	}
	q.w.iovBuf = make([][]byte, 0, 2*maxBatchFrames)
	q.w.vec = make([]syscall.Iovec, 0, 2*maxBatchFrames)
	q.w.jobs = make([]sendJob, 0, maxBatchFrames)
	q.writeFn = func(fd int) { q.w.n, q.w.err = writevNB(fd, q.w.iov, q.w.vec) }
	q.pollFn = func(fd int) {
		if readable(fd) {
			q.r.owner = true
			q.r.err = q.readAvail(fd, pollBudget)
			q.r.owner = false
		}
	}
	q.wg.Add(2)
	go q.writeLoop()
	go q.readLoop()
	return q, nil
}

func (q *QP) Info() transport.Info { return q.core.Info(q.local, q.remote) }

func (q *QP) Outstanding() int { return q.core.Outstanding() }

// Poll first writes the credits PostRecv held back (and sends flagged
// More), and reads what the
// socket holds, on the caller's goroutine, unless the reader goroutine is
// reading; then it returns completions.
func (q *QP) Poll(dst []transport.WC) int {
	if q.grantsHeld || q.wheld.Load() {
		q.grantsHeld = false
		q.pump()
	}
	if q.rmu.TryLock() {
		var err error
		if !q.r.done {
			q.r.err = nil
			if q.sock.do(q.pollFn) == nil && q.r.err != nil {
				err = q.r.err
				q.r.done = true
			}
		}
		q.rmu.Unlock()
		if err != nil {
			q.stop(err, flowtel.StatusError)
		}
	}
	return q.core.Poll(dst)
}

// Err returns why the connection to the peer is gone, or nil while it is up
// (and after this end's own Close). It is set, and the Notifier signalled,
// as soon as the loss is seen, even with no WR outstanding.
func (q *QP) Err() error { return q.core.Err() }

// PostSend queues a send and writes it at once if the socket takes it
// (flagged More, with the send posted next). A send with no credit yet from
// the peer records credit_wait; up to
// eagerWindow sends of at most eagerMax bytes go anyway, and complete when
// their credit comes.
func (q *QP) PostSend(wr transport.WR) error {
	id, err := q.core.Admit(transport.OpSend, &wr, q.closed.Load())
	if err != nil {
		return err
	}
	q.mu.Lock()
	if q.writerDone {
		q.core.Fail(transport.OpSend, &wr, id, q.errSt, q.err)
		q.mu.Unlock()
		return nil
	}
	idx := q.sends.Len()
	q.sends.Push(sendWR{wr: wr, telID: id})
	if q.credits.Len() <= idx {
		q.core.CreditWait(id, &wr)
	}
	q.mu.Unlock()
	if wr.More {
		// The next post, or else the next Poll, writes it with what follows.
		q.grantsHeld = true
		return nil
	}
	q.grantsHeld = false // pump writes them
	q.pump()
	return nil
}

// PostRecv queues a receive, or fills it at once from a message that came
// ahead of it, and queues a credit announcing its size to the peer, for the
// next PostSend to carry or else the writer goroutine (while the owner
// spins: the next Poll).
func (q *QP) PostRecv(wr transport.WR) error {
	id, err := q.core.Admit(transport.OpRecv, &wr, q.closed.Load())
	if err != nil {
		return err
	}
	q.mu.Lock()
	switch {
	case q.early.Len() > 0:
		q.deliverEarly(recvWR{wr: wr, telID: id}, q.early.PopFront(), 0)
	case q.readerDone:
		q.core.Fail(transport.OpRecv, &wr, id, q.errSt, q.err)
		q.mu.Unlock()
		return nil
	default:
		q.recvs.Push(recvWR{wr: wr, telID: id})
	}
	q.grants.Push(uint64(len(wr.Buf)))
	q.mu.Unlock()
	if q.spinning.Load() {
		// The owner polls at once: the credit goes with the next send
		// posted (one writev for both) or from that Poll.
		q.grantsHeld = true
		return nil
	}
	// The writer goroutine sends the credit, unless a send posted before
	// it wakes takes the credit along (one writev, and one wake-up of a
	// peer that sleeps, for both).
	q.signal()
	return nil
}

// deliverEarly completes receive v with an early message, stamped at ts
// (0: now). q.mu held.
func (q *QP) deliverEarly(v recvWR, data []byte, ts int64) {
	wc := transport.WC{ID: v.wr.ID, Op: transport.OpRecv, TsNs: ts}
	if len(data) > len(v.wr.Buf) {
		wc.Status, wc.Err = flowtel.StatusError, transport.TooLargeError(len(data), len(v.wr.Buf))
	} else {
		wc.Bytes = copy(v.wr.Buf, data)
	}
	q.core.Complete(wc, v.telID, v.wr.Tag)
	if len(q.spare) < eagerWindow {
		q.spare = append(q.spare, data)
	}
}

// takeSpare returns a buffer of n bytes for an early message. q.mu held.
func (q *QP) takeSpare(n int) []byte {
	for i, b := range q.spare {
		if cap(b) >= n {
			last := len(q.spare) - 1
			q.spare[i] = q.spare[last]
			q.spare[last] = nil
			q.spare = q.spare[:last]
			return b[:n]
		}
	}
	return make([]byte, n, max(n, 4<<10))
}

func (q *QP) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Close writes the credits this end still owes the peer, flushes this
// end's WRs (StatusFlushed, ErrClosed), closes the connection, which the
// peer sees as a lost peer, and waits for the QP's goroutines to exit.
func (q *QP) Close() error {
	if q.closed.Swap(true) {
		q.wg.Wait()
		return nil
	}
	q.flushGrants()
	q.stop(fmt.Errorf("%w: tcp QP %s -> %s", transport.ErrClosed, q.local, q.remote), flowtel.StatusFlushed)
	q.wg.Wait()
	q.sock.release()
	return nil
}

// flushGrants writes the credits of receives already posted before the
// connection closes. The peer's eager send completes only once credited: a
// receive that it filled here may have completed, and its collective
// finished and closed this QP, before the writer goroutine sent the credit,
// and the peer's send would then fail with a lost peer although its data
// arrived. Bounded by closeFlush; a peer that is gone meanwhile ends it.
func (q *QP) flushGrants() {
	deadline := time.Now().Add(closeFlush)
	for {
		q.pump()
		q.mu.Lock()
		owed := q.err == nil && (q.grants.Len() > 0 || q.wbusy || q.handoff)
		q.mu.Unlock()
		if !owed || time.Now().After(deadline) {
			return
		}
		// The writer goroutine holds the write side and waits for room in
		// the socket: give it the time.
		time.Sleep(20 * time.Microsecond)
	}
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
	q.releaseHeld()
	q.mu.Unlock()
	if first && st == flowtel.StatusError {
		q.core.SetDead(err)
	}
	q.deadOnce.Do(func() {
		close(q.dead)
		q.sock.shutdown()
	})
}

// peerDead is the error of WRs lost with the connection.
func (q *QP) peerDead(cause error) error {
	if errors.Is(cause, io.EOF) || errors.Is(cause, io.ErrUnexpectedEOF) {
		cause = fmt.Errorf("connection closed by the peer (%w)", cause)
	}
	return fmt.Errorf("%w: tcp peer %s (rank %d): %w", transport.ErrPeerDead, q.remote, q.core.Config().Peer, cause)
}

// takeBatch fills w with what may be written now: credits, sends that have
// credit, and sends that may go ahead of theirs. It reports whether there is
// anything. q.mu held, by the owner of the write side to be.
func (q *QP) takeBatch() bool {
	w := &q.w
	nhdr, payload := 0, 0
	w.iov = w.iovBuf[:0]
	for q.grants.Len() > 0 && nhdr < maxBatchFrames {
		h := w.hdrs[nhdr*HeaderSize : (nhdr+1)*HeaderSize : (nhdr+1)*HeaderSize]
		PutHeader(h, Header{Type: FrameCredit, Seq: w.grantSeq, Len: q.grants.PopFront()})
		w.grantSeq++
		w.iov = append(w.iov, h)
		nhdr++
	}
	for q.sends.Len() > 0 && nhdr < maxBatchFrames && payload < maxBatchBytes {
		n := len(q.sends.At(0).wr.Buf)
		h := w.hdrs[nhdr*HeaderSize : (nhdr+1)*HeaderSize : (nhdr+1)*HeaderSize]
		switch {
		case q.credits.Len() > 0:
			s, credit := q.sends.PopFront(), q.credits.PopFront()
			job := sendJob{s: s}
			if uint64(n) > credit {
				job.err = transport.TooLargeError(n, int(credit))
				PutHeader(h, Header{Type: FrameData, Flags: FlagTooLarge, Seq: w.dataSeq, Len: uint64(n)})
				w.iov = append(w.iov, h)
			} else {
				PutHeader(h, Header{Type: FrameData, Seq: w.dataSeq, Len: uint64(n)})
				w.iov = append(w.iov, h, s.wr.Buf)
				payload += n
			}
			w.jobs = append(w.jobs, job)
		case n <= eagerMax && q.eager.Len()-q.ncredited < eagerWindow:
			q.eager.Push(eagerSend{s: q.sends.PopFront()})
			PutHeader(h, Header{Type: FrameData, Flags: FlagEager, Seq: w.dataSeq, Len: uint64(n)})
			w.iov = append(w.iov, h, q.eager.At(q.eager.Len()-1).s.wr.Buf)
			payload += n
			w.neager++
		default:
			return nhdr > 0
		}
		w.dataSeq++
		nhdr++
	}
	return nhdr > 0
}

// finishBatch completes the sends of a batch just written, at one clock
// reading (Core.Stamp).
func (q *QP) finishBatch() {
	w := &q.w
	var ts int64
	for i := range w.jobs {
		j := &w.jobs[i]
		wc := transport.WC{ID: j.s.wr.ID, Op: transport.OpSend, Bytes: len(j.s.wr.Buf), TsNs: q.core.Stamp(&ts)}
		if j.err != nil {
			wc.Status, wc.Err, wc.Bytes = flowtel.StatusError, j.err, 0
		}
		q.core.Complete(wc, j.s.telID, j.s.wr.Tag)
	}
	clear(w.jobs)
	w.jobs = w.jobs[:0]
	if w.neager > 0 {
		q.mu.Lock()
		q.nwritten += w.neager
		w.neager = 0
		q.completeEager(&ts)
		q.mu.Unlock()
	}
}

// completeEager completes the eager sends, oldest first, that are both
// written and credited, stamped with Core.Stamp(ts). q.mu held.
func (q *QP) completeEager(ts *int64) {
	for q.nwritten > 0 && q.ncredited > 0 {
		e := q.eager.PopFront()
		q.nwritten--
		q.ncredited--
		n := len(e.s.wr.Buf)
		wc := transport.WC{ID: e.s.wr.ID, Op: transport.OpSend, Bytes: n, TsNs: q.core.Stamp(ts)}
		if uint64(n) > e.credit {
			wc.Status, wc.Err, wc.Bytes = flowtel.StatusError, transport.TooLargeError(n, int(e.credit)), 0
		}
		q.core.Complete(wc, e.s.telID, e.s.wr.Tag)
	}
}

// credit takes the peer's next credit: it goes to the oldest eager send
// still without one, else waits for a send. It reports whether a send may
// now be written. Its records are stamped with Core.Stamp(ts). q.mu held.
func (q *QP) credit(size uint64, ts *int64) bool {
	if q.ncredited < q.eager.Len() {
		e := q.eager.At(q.ncredited)
		e.credit = size
		q.ncredited++
		q.core.GrantedAt(e.s.telID, e.s.wr.Tag, len(e.s.wr.Buf), q.core.Stamp(ts))
		q.completeEager(ts)
		return q.sends.Len() > 0
	}
	q.credits.Push(size)
	i := q.credits.Len() - 1
	if i < q.sends.Len() {
		// The i-th send was posted before its credit: it waited.
		s := q.sends.At(i)
		q.core.GrantedAt(s.telID, s.wr.Tag, len(s.wr.Buf), q.core.Stamp(ts))
		return true
	}
	return false
}

// pump writes what is ready on the caller's goroutine, without blocking,
// unless another goroutine is writing. What the socket does not take stays
// for the owner's next Poll while the owner spins, else goes to the writer
// goroutine, which waits for room; so does a write that fails, and the
// writer meets the failure again and handles it.
//
// A spinning owner keeps the batch because handing it off costs the owner
// its CPU: a rank bound to one CPU runs one goroutine at a time
// (GOMAXPROCS=1), and the writer's wait in poll(2), a system call the Go
// scheduler sees, holds the rank's P until sysmon takes it back, every
// time the socket fills; the owner then waits out sysmon's period with
// nothing to run.
func (q *QP) pump() {
	q.mu.Lock()
	switch {
	case q.wheld.Load():
		q.wheld.Store(false) // this goroutine goes on with it
	case q.wbusy || q.err != nil || !q.takeBatch():
		q.mu.Unlock()
		return
	default:
		q.wbusy = true
	}
	q.mu.Unlock()
	for {
		if !q.writeNow() {
			q.mu.Lock()
			if q.w.err == syscall.EAGAIN && q.err == nil && q.spinning.Load() {
				q.wheld.Store(true)
				q.mu.Unlock()
				return
			}
			q.handoff = true
			q.mu.Unlock()
			q.signal()
			return
		}
		q.finishBatch()
		q.mu.Lock()
		if q.err != nil || !q.takeBatch() {
			q.wbusy = false
			stopped := q.err != nil
			q.mu.Unlock()
			if stopped {
				q.signal() // the writer goroutine waits for the write side to flush it
			}
			return
		}
		q.mu.Unlock()
	}
}

// writeNow writes the batch without blocking and reports whether all of it
// went.
func (q *QP) writeNow() bool {
	w := &q.w
	for len(w.iov) > 0 {
		w.n, w.err = 0, nil
		if err := q.sock.do(q.writeFn); err != nil || w.err != nil {
			return false
		}
		w.advance(w.n)
	}
	return true
}

// writeAll writes the batch, waiting for room in the socket as needed.
// Writer goroutine.
func (q *QP) writeAll() error {
	w := &q.w
	for len(w.iov) > 0 {
		w.n, w.err = 0, nil
		if err := q.sock.do(q.writeFn); err != nil {
			return err
		}
		switch {
		case w.err == syscall.EAGAIN:
			if !q.sock.wait(unix.POLLOUT, false) {
				return net.ErrClosed
			}
		case w.err != nil:
			return w.err
		default:
			w.advance(w.n)
		}
	}
	return nil
}

// advance drops the first n written bytes of the batch.
func (w *writerState) advance(n int) {
	for len(w.iov) > 0 && n >= len(w.iov[0]) {
		n -= len(w.iov[0])
		w.iov[0] = nil
		w.iov = w.iov[1:]
	}
	if n > 0 {
		w.iov[0] = w.iov[0][n:]
	}
}

// writeLoop writes the batches that pump handed off or that nobody else
// took, waiting for room in the socket, until the QP stops; it then
// completes every send it holds.
func (q *QP) writeLoop() {
	defer q.wg.Done()
	w := &q.w
	dead := q.dead
	q.mu.Lock()
	for {
		own := false
		switch {
		case q.handoff:
			q.handoff, own = false, true
		case q.err == nil && !q.wbusy && q.takeBatch():
			q.wbusy, own = true, true
		}
		if !own {
			if q.err != nil && !q.wbusy {
				break
			}
			q.mu.Unlock()
			select {
			case <-q.wake:
			case <-dead:
				dead = nil // from now on the write side's owner signals wake
			}
			q.mu.Lock()
			continue
		}
		q.mu.Unlock()
		err := q.writeAll()
		w.iov = w.iov[:0]
		if err != nil {
			q.stop(q.peerDead(err), flowtel.StatusError)
			q.mu.Lock()
			break
		}
		q.finishBatch()
		q.mu.Lock()
		q.wbusy = false
	}
	// Flush, q.mu held: the batch that failed, then the sends waiting for
	// their credit, then the queue, in posting order.
	err, st := q.err, q.errSt
	for i := range w.jobs {
		j := &w.jobs[i]
		q.core.Complete(transport.WC{ID: j.s.wr.ID, Op: transport.OpSend, Status: st, Err: err}, j.s.telID, j.s.wr.Tag)
	}
	clear(w.jobs)
	w.jobs = w.jobs[:0]
	w.neager = 0
	clear(w.iovBuf[:cap(w.iovBuf)])
	for q.eager.Len() > 0 {
		e := q.eager.PopFront()
		q.core.Complete(transport.WC{ID: e.s.wr.ID, Op: transport.OpSend, Status: st, Err: err}, e.s.telID, e.s.wr.Tag)
	}
	q.ncredited, q.nwritten = 0, 0
	for q.sends.Len() > 0 {
		s := q.sends.PopFront()
		q.core.Complete(transport.WC{ID: s.wr.ID, Op: transport.OpSend, Status: st, Err: err}, s.telID, s.wr.Tag)
	}
	q.wbusy = true // nobody writes any more
	q.writerDone = true
	q.mu.Unlock()
}

// SetSpinning tells the QP whether its owner polls without pause (true) or
// may wait on the notifier between polls (false, the default). While the
// owner spins, the reader goroutine stays off Go's network poller, so a
// message that arrives wakes no thread: the owner's next Poll reads it; and
// PostRecv leaves its credit for the next PostSend or Poll to write, so a
// receive and a send posted together cost one writev; and a batch the
// socket did not take whole waits for the next Poll instead of the writer
// goroutine (pump says why). The owner must turn spinning off, and poll
// once, before it waits on the notifier.
func (q *QP) SetSpinning(on bool) {
	if q.spinning.Swap(on) == on {
		return
	}
	if on {
		// A reader left waiting in poll(2) would be woken by every
		// message that arrives, each time taking the CPU from the owner
		// that reads it (2-rank all-reduce over loopback, 1-64 KiB, 5000
		// calls a size: 862 context switches on a rank, 488 kicked).
		// Kick it out, to park on arm.
		if q.rwaiting.Load() {
			q.sock.kick()
		}
		return
	}
	q.mu.Lock()
	q.releaseHeld()
	q.mu.Unlock()
	select {
	case q.arm <- struct{}{}:
	default:
	}
}

// releaseHeld gives a batch the owner kept (wheld) to the writer goroutine:
// the owner stops polling without pause, or the QP stops and the writer
// flushes. q.mu held.
func (q *QP) releaseHeld() {
	if q.wheld.Load() {
		q.wheld.Store(false)
		q.handoff = true
		q.signal()
	}
}

// readLoop reads whenever the socket has data and no Poll is reading, and
// the owner is not spinning, until the connection fails; it then completes
// every receive it holds.
func (q *QP) readLoop() {
	defer q.wg.Done()
	var rerr error
	read := func(fd int) {
		if rerr = q.readAvail(fd, 0); rerr != nil {
			q.r.done = true
		}
	}
	var err error
	for rerr == nil && err == nil {
		if q.spinning.Load() {
			q.rparked.Store(true)
			select {
			case <-q.arm:
			case <-q.dead:
				err = net.ErrClosed
			}
			q.rparked.Store(false)
			continue
		}
		q.rmu.Lock()
		if !q.r.done {
			err = q.sock.do(read)
		}
		if q.r.done && rerr == nil {
			// A Poll found the failure; it stops the QP after releasing
			// rmu, so this goroutine may get there first: stop with the
			// same reason, not a made-up one.
			rerr = q.r.err
			if rerr == nil {
				err = io.ErrUnexpectedEOF
			}
		}
		q.rmu.Unlock()
		if err != nil || rerr != nil || q.spinning.Load() {
			continue
		}
		// The owner this read woke (through the Notifier) waits on this
		// processor: let it run first. A goroutine blocked in a system call
		// keeps its processor until the runtime's monitor takes it back,
		// tens of microseconds later.
		runtime.Gosched()
		// Wait until the socket is readable, unless the owner now spins.
		// rwaiting goes up before spinning is read, and SetSpinning reads
		// it after it sets spinning: one of the two sees the other.
		q.rwaiting.Store(true)
		if !q.spinning.Load() && !q.sock.wait(unix.POLLIN, true) {
			err = net.ErrClosed
		}
		q.rwaiting.Store(false)
	}
	if rerr == nil {
		rerr = q.peerDead(err)
	}
	q.stop(rerr, flowtel.StatusError)
	q.rmu.Lock()
	r := &q.r
	r.done = true
	q.mu.Lock()
	err, st := q.err, q.errSt
	if r.hasCur {
		q.core.Complete(transport.WC{ID: r.cur.wr.ID, Op: transport.OpRecv, Status: st, Err: err}, r.cur.telID, r.cur.wr.Tag)
	}
	r.hasCur, r.cur, r.dst, r.curErr = false, recvWR{}, nil, nil
	for q.recvs.Len() > 0 {
		v := q.recvs.PopFront()
		q.core.Complete(transport.WC{ID: v.wr.ID, Op: transport.OpRecv, Status: st, Err: err}, v.telID, v.wr.Tag)
	}
	q.readerDone = true
	q.mu.Unlock()
	q.rmu.Unlock()
}

// readAvail reads and handles frames until the socket has no more bytes
// (it then returns nil). With budget > 0 (a Poll, which comes back soon) it
// also stops once it has read budget bytes, or after a read that did not
// fill its buffer, which probably emptied the socket: the read that would
// prove it takes the socket's lock for nothing. It returns the error,
// wrapping transport.ErrPeerDead, that ends the read side. q.rmu held.
func (q *QP) readAvail(fd int, budget int) error {
	r := &q.r
	got := 0
	short := false
	for {
		if r.inPayload && r.need == 0 {
			q.endPayload()
			continue
		}
		if r.inPayload && r.w > r.r {
			n := min(r.w-r.r, r.need)
			if r.dst != nil {
				copy(r.dst[r.off:], r.buf[r.r:r.r+n])
			}
			r.r += n
			r.off += n
			r.need -= n
			continue
		}
		if !r.inPayload && r.w-r.r >= HeaderSize {
			h, err := DecodeHeader(r.buf[r.r:r.w])
			if err != nil {
				return q.peerDead(fmt.Errorf("protocol error: %w", err))
			}
			r.r += HeaderSize
			if err := q.frame(h); err != nil {
				return err
			}
			continue
		}
		// Nothing left in the buffer to handle: write what its credits
		// freed, then read.
		if r.pumpDue {
			r.pumpDue = false
			q.pump()
		}
		if budget > 0 && (got >= budget || short) {
			return nil
		}
		var n, want int
		var err error
		if r.inPayload && r.dst != nil && r.need >= readAhead {
			want = r.need
			n, err = readNB(fd, r.dst[r.off:r.off+r.need])
			if n > 0 {
				r.off += n
				r.need -= n
			}
		} else {
			if r.r > 0 {
				r.w = copy(r.buf[:], r.buf[r.r:r.w])
				r.r = 0
			}
			want = len(r.buf) - r.w
			n, err = readNB(fd, r.buf[r.w:])
			if n > 0 {
				r.w += n
			}
		}
		got += n
		short = n < want
		if n > 0 {
			r.ts = 0
		}
		switch {
		case err == syscall.EAGAIN:
			return nil
		case err != nil:
			return q.peerDead(err)
		case n == 0:
			return q.peerDead(io.EOF)
		}
	}
}

// readStamp is where the events of the frame being handled keep their
// clock reading (Core.Stamp). In the owner's Poll, the reading of the last
// read, which every WR it completes was posted before: the owner posts
// only after its Poll. On the reader goroutine the owner may post between
// two frames of one read, and a WR posted after the reading would be
// stamped complete before its post: there each frame reads anew. q.rmu
// held.
func (q *QP) readStamp() *int64 {
	r := &q.r
	if r.owner {
		return &r.ts
	}
	r.fresh = 0
	return &r.fresh
}

// frame handles a decoded header. q.rmu held.
func (q *QP) frame(h Header) error {
	r := &q.r
	switch h.Type {
	case FrameCredit:
		if h.Seq != r.creditSeq {
			return q.peerDead(fmt.Errorf("protocol error: credit frame %d, want %d", h.Seq, r.creditSeq))
		}
		r.creditSeq++
		q.mu.Lock()
		if q.credit(h.Len, q.readStamp()) {
			// Written once the frames already read are handled, so
			// that the sends these credits free go in one writev.
			r.pumpDue = true
		}
		q.mu.Unlock()
		return nil
	case FrameData:
	default:
		return q.peerDead(fmt.Errorf("protocol error: frame type %s", h.Type))
	}
	if h.Seq != r.dataSeq {
		return q.peerDead(fmt.Errorf("protocol error: data frame %d, want %d", h.Seq, r.dataSeq))
	}
	r.dataSeq++
	eager := h.Flags&FlagEager != 0
	q.mu.Lock()
	if q.recvs.Len() == 0 {
		switch {
		case !eager:
			q.mu.Unlock()
			return q.peerDead(fmt.Errorf("protocol error: data frame %d of %d bytes with no receive posted", h.Seq, h.Len))
		case h.Len > eagerMax:
			q.mu.Unlock()
			return q.peerDead(fmt.Errorf("protocol error: eager data frame %d of %d bytes, over the %d-byte limit", h.Seq, h.Len, eagerMax))
		case q.early.Len() >= eagerWindow:
			q.mu.Unlock()
			return q.peerDead(fmt.Errorf("protocol error: eager data frame %d is over %d messages ahead of the receives", h.Seq, eagerWindow))
		}
		r.dst = q.takeSpare(int(h.Len))
		q.mu.Unlock()
		r.inPayload, r.dest, r.need, r.off = true, toEarly, int(h.Len), 0
		return nil
	}
	r.cur, r.hasCur = q.recvs.PopFront(), true
	q.mu.Unlock()
	size := len(r.cur.wr.Buf)
	switch {
	case h.Flags&FlagTooLarge != 0:
		r.curErr = transport.TooLargeError(int(h.Len), size)
		r.inPayload, r.dest, r.dst, r.need, r.off = true, toNowhere, nil, 0, 0
	case h.Len > uint64(size) && !eager:
		return q.peerDead(fmt.Errorf("protocol error: data frame %d of %d bytes for a receive of %d bytes", h.Seq, h.Len, size))
	case h.Len > uint64(size):
		if h.Len > eagerMax {
			return q.peerDead(fmt.Errorf("protocol error: eager data frame %d of %d bytes, over the %d-byte limit", h.Seq, h.Len, eagerMax))
		}
		r.curErr = transport.TooLargeError(int(h.Len), size)
		r.inPayload, r.dest, r.dst, r.need, r.off = true, toNowhere, nil, int(h.Len), 0
	default:
		r.inPayload, r.dest, r.dst, r.need, r.off = true, toRecv, r.cur.wr.Buf[:h.Len], int(h.Len), 0
	}
	return nil
}

// endPayload completes what a fully read payload was for. q.rmu held.
func (q *QP) endPayload() {
	r := &q.r
	switch r.dest {
	case toEarly:
		q.mu.Lock()
		if q.recvs.Len() > 0 {
			q.deliverEarly(q.recvs.PopFront(), r.dst, q.core.Stamp(q.readStamp())) // its receive came meanwhile
		} else {
			q.early.Push(r.dst)
		}
		q.mu.Unlock()
	default:
		wc := transport.WC{ID: r.cur.wr.ID, Op: transport.OpRecv, Bytes: r.off, TsNs: q.core.Stamp(q.readStamp())}
		if r.curErr != nil {
			wc.Status, wc.Err, wc.Bytes = flowtel.StatusError, r.curErr, 0
		}
		q.core.Complete(wc, r.cur.telID, r.cur.wr.Tag)
	}
	r.inPayload, r.hasCur, r.cur, r.dst, r.curErr, r.need, r.off = false, false, recvWR{}, nil, nil, 0, 0
}
