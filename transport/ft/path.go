package ft

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vccl-go/vccl/flowtel"
)

// readAhead is a reader's header buffer: a read that fetches a header may
// fetch the next small frames too, or the first bytes of a payload.
const readAhead = 4 << 10

// path is one connection of a link.
type path struct {
	q             *QP
	idx           int
	gen           uint64
	conn          *net.TCPConn
	local, remote string

	wake     chan struct{} // wakes the writer; cap 1
	dead     chan struct{} // closed by shut
	shutOnce sync.Once
	byeSent  chan struct{} // closed by the writer once a bye went out, or it exited

	blackhole atomic.Bool // a test fault: nothing crosses the path

	// wmu serialises writes to the connection: the writer's batches and
	// the monitor's heartbeats.
	wmu     sync.Mutex
	partial []byte // the rest of a heartbeat the socket took only part of (under wmu)

	lastRx   atomic.Int64  // when a byte last arrived
	lastHBRx atomic.Int64  // when a heartbeat last arrived
	rxBytes  atomic.Uint64 // bytes read from the connection
	txBytes  atomic.Uint64 // bytes written to it

	// Under q.mu.
	ctl        []Header // control frames to send
	hbDue      bool     // the writer should add a heartbeat: the monitor could not
	lastHB     int64
	epochSent  uint32 // the tx epoch whose resync went out on this path
	peerRx     uint64 // bytes the peer last reported reading from this path
	peerRxAt   int64  // when that count last grew
	peerSame   int    // heartbeats since, all reporting the same count
	peerSameAt int64  // when the first of them arrived

	w writerState // writer goroutine only
	r readerState // reader goroutine only
}

type writerState struct {
	hdrs    [maxBatchFrames * HeaderSize]byte
	iov     [][]byte
	bufs    net.Buffers
	n       int
	payload int
	bye     bool
	written []uint64 // small sends whose last byte this batch carries
}

func (w *writerState) reset() {
	clear(w.iov) // drop references to user buffers
	w.iov = w.iov[:0]
	w.n, w.payload, w.bye = 0, 0, false
	w.written = w.written[:0]
}

func (w *writerState) add(h Header, payload []byte) {
	b := w.hdrs[w.n*HeaderSize : (w.n+1)*HeaderSize : (w.n+1)*HeaderSize]
	PutHeader(b, h)
	w.iov = append(w.iov, b)
	if len(payload) > 0 {
		w.iov = append(w.iov, payload)
		w.payload += len(payload)
	}
	w.n++
}

type readerState struct {
	buf     [readAhead]byte
	r, w    int
	scratch []byte
}

var nanotime = flowtel.Monotonic

func (q *QP) newPath(i int, conn *net.TCPConn, gen uint64, now int64) *path {
	pa := &path{q: q, idx: i, gen: gen, conn: conn, local: conn.LocalAddr().String(), remote: conn.RemoteAddr().String(),
		wake: make(chan struct{}, 1), dead: make(chan struct{}), byeSent: make(chan struct{}), lastHB: now, peerRxAt: now}
	pa.lastRx.Store(now)
	pa.lastHBRx.Store(now)
	pa.w.iov = make([][]byte, 0, 2*maxBatchFrames)
	return pa
}

// startPath starts pa's goroutines. q.mu held.
func (q *QP) startPath(pa *path) {
	q.wg.Add(2)
	go pa.writeLoop()
	go pa.readLoop()
}

func (pa *path) signal() {
	select {
	case pa.wake <- struct{}{}:
	default:
	}
}

// shut closes the connection, which ends both goroutines.
func (pa *path) shut() {
	pa.shutOnce.Do(func() {
		close(pa.dead)
		pa.conn.Close()
	})
}

// flushPartial writes what is left of a heartbeat. pa.wmu held.
func (pa *path) flushPartial() error {
	for len(pa.partial) > 0 {
		n, err := pa.conn.Write(pa.partial)
		pa.txBytes.Add(uint64(n))
		pa.partial = pa.partial[n:]
		if err != nil {
			return err
		}
	}
	return nil
}

// heartbeat writes a heartbeat frame now, without blocking, unless the
// writer is busy writing (its bytes tell the peer the path is alive) or
// the socket is full; it reports whether the frame went out. The monitor
// sends every path's heartbeats itself, so a goroutine that is not
// scheduled silences all paths of the link alike, which the peer does not
// mistake for one path failing.
func (pa *path) heartbeat() bool {
	return pa.writeNow(Header{Type: FrameHeartbeat, Seq: pa.rxBytes.Load()})
}

// writeNow writes one control frame from the calling goroutine, without
// blocking, unless the writer is writing or the socket is full; it reports
// whether the frame went out (the rest of a frame the socket took only
// part of is the writer's to finish).
func (pa *path) writeNow(h Header) bool {
	if pa.blackhole.Load() || !pa.wmu.TryLock() {
		return false
	}
	defer pa.wmu.Unlock()
	if len(pa.partial) > 0 {
		return false
	}
	rc, err := pa.conn.SyscallConn()
	if err != nil {
		return false
	}
	var b [HeaderSize]byte
	PutHeader(b[:], h)
	n := 0
	rc.Write(func(fd uintptr) bool {
		n, err = unix.Write(int(fd), b[:])
		return true // never wait for room
	})
	if n <= 0 {
		return false
	}
	pa.txBytes.Add(uint64(n))
	if n < HeaderSize {
		pa.partial = append([]byte(nil), b[n:]...)
		pa.signal()
	}
	return true
}

// writeLoop sends what fillBatch gives it, one writev per batch, until the
// path is shut.
func (pa *path) writeLoop() {
	q := pa.q
	defer q.wg.Done()
	byeOnce := sync.OnceFunc(func() { close(pa.byeSent) })
	defer byeOnce()
	w := &pa.w
	for {
		q.mu.Lock()
		if q.paths[pa.idx] != pa {
			q.mu.Unlock()
			return
		}
		w.reset()
		q.fillBatch(pa, w)
		bye := w.bye
		q.mu.Unlock()
		if w.n == 0 || pa.blackhole.Load() {
			select {
			case <-pa.wake:
			case <-pa.dead:
			}
			continue
		}
		pa.wmu.Lock()
		var n int64
		err := pa.flushPartial()
		if err == nil {
			w.bufs = w.iov
			n, err = w.bufs.WriteTo(pa.conn)
		}
		pa.wmu.Unlock()
		pa.txBytes.Add(uint64(n))
		if err == nil && len(w.written) > 0 {
			q.mu.Lock()
			q.markWritten(w.written)
			q.mu.Unlock()
		}
		w.reset()
		if err != nil {
			if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) {
				// The peer closed its end. What it sent before closing
				// (its last messages, its goodbye) may still wait in our
				// socket, readable after the reset: the reader takes
				// it and ends the path when it reaches the end, within
				// drainTimeout. Ending the path here would throw away a
				// closing peer's last messages.
				pa.conn.SetReadDeadline(time.Now().Add(drainTimeout))
				return
			}
			q.mu.Lock()
			q.pathDown(pa, fmt.Errorf("write: %w", err), byError)
			q.mu.Unlock()
			return
		}
		if bye {
			byeOnce()
		}
	}
}

// readLoop reads frames until the connection fails or is shut.
func (pa *path) readLoop() {
	q := pa.q
	defer q.wg.Done()
	err := pa.readFrames()
	q.mu.Lock()
	q.pathDown(pa, err, byError)
	q.mu.Unlock()
}

func (pa *path) readFrames() error {
	q := pa.q
	r := &pa.r
	for {
		if err := pa.fill(HeaderSize); err != nil {
			return readErr(err)
		}
		h, err := DecodeHeader(r.buf[r.r:r.w])
		if err != nil {
			return fmt.Errorf("protocol error: %w", err)
		}
		r.r += HeaderSize
		switch h.Type {
		case FrameHeartbeat:
			pa.lastHBRx.Store(nanotime())
			q.mu.Lock()
			if h.Seq > pa.peerRx {
				pa.peerRx, pa.peerRxAt, pa.peerSame = h.Seq, nanotime(), 0
			} else {
				if pa.peerSame == 0 {
					pa.peerSameAt = nanotime()
				}
				pa.peerSame++
			}
			q.mu.Unlock()
		case FrameAck:
			err = q.onAck(pa, h.Seq)
		case FrameCredit:
			err = q.onCredit(h.Seq, h.Len)
		case FrameResync:
			err = q.onResync(pa, h.Aux, h.Seq)
		case FramePathDown:
			q.onPathDown(h.Aux, h.Seq)
		case FrameData:
			err = q.onData(pa, h)
		case FrameBye:
			q.onBye(h.Seq)
		default:
			err = fmt.Errorf("protocol error: unexpected %s frame", h.Type)
		}
		if err != nil {
			return err
		}
	}
}

func readErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("connection closed by the peer (%w)", err)
	}
	return err
}

// read reads into p from the connection, noting the arrival.
func (pa *path) read(p []byte) (int, error) {
	n, err := pa.conn.Read(p)
	if pa.blackhole.Load() {
		<-pa.dead
		return 0, errors.New("blackholed (test fault)")
	}
	if n > 0 {
		pa.lastRx.Store(nanotime())
		pa.rxBytes.Add(uint64(n))
	}
	return n, err
}

// fill makes at least n bytes available in the read-ahead buffer.
func (pa *path) fill(n int) error {
	r := &pa.r
	if r.w-r.r >= n {
		return nil
	}
	if r.r > 0 {
		r.w = copy(r.buf[:], r.buf[r.r:r.w])
		r.r = 0
	}
	for r.w < n {
		k, err := pa.read(r.buf[r.w:])
		r.w += k
		if err != nil && r.w < n {
			return err
		}
	}
	return nil
}

// readPayload fills dst: first from the read-ahead buffer, then from the
// connection straight into dst.
func (pa *path) readPayload(dst []byte) error {
	r := &pa.r
	n := copy(dst, r.buf[r.r:r.w])
	r.r += n
	for n < len(dst) {
		k, err := pa.read(dst[n:])
		n += k
		if err != nil && n < len(dst) {
			return readErr(err)
		}
	}
	return nil
}

// discard reads past n payload bytes.
func (pa *path) discard(n uint64) error {
	r := &pa.r
	k := min(n, uint64(r.w-r.r))
	r.r += int(k)
	n -= k
	if n == 0 {
		return nil
	}
	if r.scratch == nil {
		r.scratch = make([]byte, 64<<10)
	}
	for n > 0 {
		k, err := pa.read(r.scratch[:min(n, uint64(len(r.scratch)))])
		n -= uint64(k)
		if err != nil && n > 0 {
			return readErr(err)
		}
	}
	return nil
}
