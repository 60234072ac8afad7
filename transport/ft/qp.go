package ft

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
)

const (
	// maxBatchFrames bounds the frames one writev carries.
	maxBatchFrames = 128
	// maxBatchBytes stops adding data to a batch once its payload reaches
	// this size.
	maxBatchBytes = 256 << 10
	// byeTimeout bounds Close's wait for its goodbye to go out.
	byeTimeout = 50 * time.Millisecond
	// drainTimeout bounds how long a path whose writes found the peer's
	// end closed goes on reading what the peer sent before.
	drainTimeout = 50 * time.Millisecond
)

type sendWR struct {
	wr     transport.WR
	telID  uint64
	path   flowtel.Path // the path it was last transmitted on
	replay bool         // transmitted again after a path change
	// A small send is copied at post time (wr.Buf is then the copy, own
	// the pooled buffer): it completes as soon as it was written, as with
	// tcp, in order; a larger one when the peer acknowledges it.
	own  *[]byte
	sent bool // written whole at least once
	done bool // its completion was queued
}

// eagerMax is the largest send that is copied and completes once written.
const eagerMax = 64 << 10

// eagerPool holds the copies of small sends, in three size classes.
var eagerPool = [3]sync.Pool{
	{New: func() any { b := make([]byte, 1<<10); return &b }},
	{New: func() any { b := make([]byte, 8<<10); return &b }},
	{New: func() any { b := make([]byte, eagerMax); return &b }},
}

func eagerClass(n int) int {
	switch {
	case n <= 1<<10:
		return 0
	case n <= 8<<10:
		return 1
	}
	return 2
}

// release returns a small send's copy to its pool. The copy may still be
// read by a write on a path the peer has left; what that path carries is
// dropped on arrival (the peer delivered the message already), so reuse is
// safe.
func (s *sendWR) release() {
	if s.own != nil {
		eagerPool[eagerClass(cap(*s.own))].Put(s.own)
		s.own = nil
	}
}

type recvWR struct {
	wr    transport.WR
	telID uint64
}

// QP is one end of a fault-tolerant link: a connection per path, each with
// a reader and a writer goroutine, a monitor goroutine, and, on the side
// that dialled, a prober that reconnects down paths (the other side accepts
// the reconnections).
type QP struct {
	core    *transport.Core
	b       Backend
	prm     Params
	key     string
	token   string
	dialer  bool
	remote  [Paths]string // the peer's listen addresses (dialler)
	ifnames [Paths]string
	accs    [Paths]*transport.Acceptor // where reconnections arrive (acceptor)
	release func()                     // drops the listener reference (acceptor)
	closed  atomic.Bool

	ctx  context.Context // cancelled when the QP dies
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu          sync.Mutex
	claimed     sync.Cond // signalled when claim clears
	paths       [Paths]*path
	gen         [Paths]uint64 // generation of each path's latest connection
	why         [Paths]error  // why each path last went down
	probing     bool
	lastErrDown int64         // when a path last went down by a socket error
	probeNow    chan struct{} // wakes the prober at once; cap 1
	// linkless is when the last path went down by an error, 0 while a
	// path is up: the link then waits (LinkTimeout) for a path to come back.
	linkless int64
	closing  bool // Close is saying goodbye: no more data goes out
	byeSeen  bool // the peer said goodbye, having sent byeAt messages
	byeAt    uint64
	err      error // why the QP stopped; nil while it runs
	errSt    flowtel.Status
	sendsFlushed,
	recvsFlushed bool

	// Send side: data this end sends.
	tx        *path // where data, credits and acks go; nil while no path is up
	txIdx     int   // the path data left on last
	txEpoch   uint32
	sends     flowtel.FIFO[sendWR] // posted, not acknowledged; sends.At(0) is message sendBase
	allAcked  chan struct{}        // Close's linger: signalled when sends empties
	sendBase  uint64
	sendNext  uint64 // next message to transmit on tx
	sendOff   uint64 // bytes of message sendNext already transmitted on tx
	sendDone  uint64 // sends below this one have had their completion queued
	credits   flowtel.FIFO[uint64]
	creditsIn uint64 // credits received; credits.At(i) is the size of credit sendBase+i

	// Receive side: data the peer sends.
	rx         *path // where the peer's data is accepted from (its latest resync)
	rxEpoch    uint32
	recvs      flowtel.FIFO[recvWR] // posted, not delivered; recvs.At(0) is message recvBase
	recvBase   uint64
	recvOff    uint64 // bytes of message recvBase received so far from rx
	claim      *path  // the path reading into recvs.At(0)'s buffer now
	creditNext uint64 // next credit to send
	ackSent    uint64 // acknowledged count last sent on tx

	backupSince int64
	stats       Stats
}

var _ transport.QP = (*QP)(nil)

type qpSetup struct {
	b       Backend
	prm     Params
	key     string
	conns   [Paths]*net.TCPConn
	gens    [Paths]uint64
	ifnames [Paths]string
	remote  [Paths]string
	accs    [Paths]*transport.Acceptor
	release func()
	dialer  bool
}

func newQP(cfg transport.Config, s qpSetup) (*QP, error) {
	q := &QP{core: transport.NewCore(Name, cfg), b: s.b, prm: s.prm, key: s.key, token: cfg.Token, allAcked: make(chan struct{}, 1),
		dialer: s.dialer, remote: s.remote, ifnames: s.ifnames, accs: s.accs, release: s.release,
		probeNow: make(chan struct{}, 1)}
	q.claimed.L = &q.mu
	q.ctx, q.stop = context.WithCancel(context.Background())
	q.core.SetPath(0)
	now := nanotime()
	q.mu.Lock()
	for i, c := range s.conns {
		q.gen[i] = s.gens[i]
		q.paths[i] = q.newPath(i, c, s.gens[i], now)
	}
	q.tx, q.rx = q.paths[0], q.paths[0]
	for _, pa := range q.paths {
		q.startPath(pa)
	}
	q.wg.Add(1)
	go q.monitor()
	if !q.dialer {
		for i := range Paths {
			q.wg.Add(1)
			go q.acceptLoop(i)
		}
	}
	q.mu.Unlock()
	return q, nil
}

// Info describes the QP; Path, Local and Remote are those of the path data
// leaves on now.
func (q *QP) Info() transport.Info {
	q.mu.Lock()
	local, remote := "", ""
	if q.tx != nil {
		local, remote = q.tx.local, q.tx.remote
	}
	q.mu.Unlock()
	in := q.core.Info(local, remote)
	in.Path = q.core.Path()
	return in
}

// Outstanding returns the WRs posted and not yet polled.
func (q *QP) Outstanding() int { return q.core.Outstanding() }

// Poll moves completions into dst.
func (q *QP) Poll(dst []transport.WC) int { return q.core.Poll(dst) }

// Err returns why the link is gone (every path down), or nil while one path
// is up. A path failure that traffic survives on the other path is not an
// error.
func (q *QP) Err() error { return q.core.Err() }

// PostSend queues a send. It needs the peer's next credit: if none has
// arrived yet the send waits, recorded as credit_wait. It completes when the
// peer acknowledges it, so its buffer is kept for a replay until then.
func (q *QP) PostSend(wr transport.WR) error {
	id, ok, err := q.admit(transport.OpSend, &wr)
	if !ok {
		return err
	}
	seq := q.sendBase + uint64(q.sends.Len())
	s := sendWR{wr: wr, telID: id}
	if len(wr.Buf) <= eagerMax {
		s.own = eagerPool[eagerClass(len(wr.Buf))].Get().(*[]byte)
		s.wr.Buf = (*s.own)[:copy(*s.own, wr.Buf)]
	}
	q.sends.Push(s)
	hasCredit := q.creditsIn > seq
	if !hasCredit {
		q.core.CreditWait(id, &wr)
	}
	tx := q.tx
	q.mu.Unlock()
	if hasCredit && tx != nil {
		tx.signal()
	}
	return nil
}

// admit checks and accounts a WR and returns with q.mu held to queue it;
// ok is false, q.mu not held, when the WR was refused (err) or, its side of
// the link flushed already, completed at once (err nil).
func (q *QP) admit(op transport.Opcode, wr *transport.WR) (id uint64, ok bool, err error) {
	if id, err = q.core.Admit(op, wr, q.closed.Load()); err != nil {
		return 0, false, err
	}
	q.mu.Lock()
	flushed := q.sendsFlushed
	if op == transport.OpRecv {
		flushed = q.recvsFlushed
	}
	if !flushed {
		return id, true, nil
	}
	q.core.Fail(op, wr, id, q.errSt, q.err)
	q.mu.Unlock()
	return 0, false, nil
}

// PostRecv queues a receive and a credit announcing its size to the peer.
func (q *QP) PostRecv(wr transport.WR) error {
	id, ok, err := q.admit(transport.OpRecv, &wr)
	if !ok {
		return err
	}
	q.recvs.Push(recvWR{wr: wr, telID: id})
	tx := q.tx
	q.mu.Unlock()
	if tx != nil {
		tx.signal()
	}
	return nil
}

// Close flushes this end's WRs (StatusFlushed, ErrClosed), closes every
// connection, which the peer sees as a lost link, and waits for the QP's
// goroutines to exit.
func (q *QP) Close() error {
	if q.closed.Swap(true) {
		q.wg.Wait()
		return nil
	}
	// Linger until the peer has acknowledged what was sent: a message on a
	// path that goes down now can still be replayed on another, which it
	// cannot once the goodbye has gone (bounded by the link timeout).
	deadline := time.Now().Add(q.prm.LinkTimeout)
	q.mu.Lock()
	for q.err == nil && q.sends.Len() > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		q.mu.Unlock()
		t := time.NewTimer(left)
		select {
		case <-q.allAcked:
		case <-t.C:
		}
		t.Stop()
		q.mu.Lock()
	}
	q.mu.Unlock()
	// Say goodbye on every path, so the peer ends the link at once rather
	// than failing over, then wait (briefly) for the writers to send it.
	q.mu.Lock()
	var sent []chan struct{}
	if q.err == nil {
		q.closing = true
		for _, pa := range q.paths {
			if pa != nil {
				// Acknowledge what was delivered first: a peer whose last
				// send we received must see it complete, not fail.
				// The goodbye says how many messages were sent: the peer
				// ends the link once it has them all, whichever path the
				// goodbye arrives on first.
				pa.ctl = append(pa.ctl, Header{Type: FrameAck, Seq: q.recvBase}, Header{Type: FrameBye, Seq: q.sendNext})
				pa.signal()
				sent = append(sent, pa.byeSent)
			}
		}
	}
	q.mu.Unlock()
	if len(sent) > 0 {
		t := time.NewTimer(byeTimeout)
		for _, c := range sent {
			select {
			case <-c:
			case <-t.C:
			}
		}
		t.Stop()
	}
	q.mu.Lock()
	q.die(fmt.Errorf("%w: ft QP to rank %d", transport.ErrClosed, q.core.Config().Peer), flowtel.StatusFlushed)
	q.mu.Unlock()
	q.wg.Wait()
	return nil
}

// die stops the QP for good: every WR completes with err, every connection
// closes, every goroutine ends. q.mu held.
func (q *QP) die(err error, st flowtel.Status) {
	if q.err != nil {
		return
	}
	q.err, q.errSt = err, st
	if st == flowtel.StatusError {
		q.core.SetDead(err)
		if !errors.Is(err, errPeerClosed) {
			q.b.logger().Warn("vccl: ft link lost", "rank", q.core.Config().Rank, "peer", q.core.Config().Peer, "err", err)
		}
	}
	q.stop()
	for i, pa := range q.paths {
		if pa != nil {
			pa.shut()
			q.paths[i] = nil
		}
	}
	q.tx = nil
	q.noteBackup(nanotime(), false)
	for q.sends.Len() > 0 {
		s := q.sends.PopFront()
		s.release()
		if !s.done {
			q.core.CompleteOn(transport.WC{ID: s.wr.ID, Op: transport.OpSend, Status: st, Err: err}, s.telID, s.wr.Tag, s.path, st)
		}
	}
	q.sendsFlushed = true
	q.flushRecvs()
	q.claimed.Broadcast()
	if q.release != nil {
		q.release()
	}
}

// flushRecvs completes the receives with the QP's error once no path is
// writing into one. q.mu held.
func (q *QP) flushRecvs() {
	if q.err == nil || q.recvsFlushed || q.claim != nil {
		return
	}
	for q.recvs.Len() > 0 {
		v := q.recvs.PopFront()
		q.core.Fail(transport.OpRecv, &v.wr, v.telID, q.errSt, q.err)
	}
	q.recvsFlushed = true
}

// linkError names the link and why each of its paths went down, and why it
// gave up (extra, may be nil).
func (q *QP) linkError(extra error) error {
	var b strings.Builder
	for i := range Paths {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s path", pathName(i))
		if q.ifnames[i] != "" {
			fmt.Fprintf(&b, " on %s", q.ifnames[i])
		}
		fmt.Fprintf(&b, ": %v", q.why[i])
	}
	if extra != nil {
		fmt.Fprintf(&b, "; %v", extra)
	}
	return fmt.Errorf("%w: ft link to rank %d lost, every path is down (%s)", transport.ErrPeerDead, q.core.Config().Peer, b.String())
}

func pathName(i int) string {
	if i == 0 {
		return "primary"
	}
	return "backup"
}

// How a path went down.
type downCause uint8

const (
	bySilence  downCause = iota // the monitor heard nothing (or no progress)
	byError                     // a socket error: reset, EOF, failed write
	byNotice                    // the peer declared it down
	byLastWait                  // the last path, silent for LinkTimeout: no grace
)

// sameCrash is how close together every path of a link must fail by a
// socket error for the link to end at once: the kernel of a process that
// dies closes all its connections together.
const sameCrash = 50 * time.Millisecond

// pathDown declares pa dead: its connection closes, the peer is told on the
// other paths (unless it told us), and if data left on pa it moves to the
// best path still up, replaying what the peer has not acknowledged. With no
// path left the link waits LinkTimeout for one to come back, or dies at once
// when the paths failed as a crashed peer's do. q.mu held.
func (q *QP) pathDown(pa *path, why error, how downCause) {
	if q.err != nil || q.paths[pa.idx] != pa {
		return // already down, replaced, or the QP is gone
	}
	if q.closing || q.byeSeen {
		// Close is under way here, or the peer's: its connections close.
		// The link ends when the path its data comes on does.
		q.paths[pa.idx] = nil
		pa.shut()
		if q.byeSeen && (pa == q.rx || q.best() == nil) {
			q.peerClosed()
		}
		return
	}
	q.paths[pa.idx] = nil
	q.why[pa.idx] = fmt.Errorf("%s->%s: %w", pa.local, pa.remote, why)
	pa.shut()
	q.stats.LinkDowns++
	totals.linkDowns.Add(1)
	q.core.LinkEvent(flowtel.KindLinkDown, flowtel.Path(pa.idx), 0)
	q.b.logger().Warn("vccl: ft path down", "rank", q.core.Config().Rank, "peer", q.core.Config().Peer,
		"path", pathName(pa.idx), "local", pa.local, "remote", pa.remote, "why", why)
	best := q.best()
	if best == nil {
		now := nanotime()
		switch {
		case how == byLastWait:
			q.die(q.linkError(nil), flowtel.StatusError)
			return
		case how == byError && q.lastErrDown != 0 && time.Duration(now-q.lastErrDown) < sameCrash:
			q.die(q.linkError(fmt.Errorf("every path failed within %v: rank %d's process is gone", sameCrash, q.core.Config().Peer)), flowtel.StatusError)
			return
		}
		// Every path is down, but the last one by an error, which may be
		// the peer closing it after a false alarm of its own: hold the
		// WRs while a path may come back. The dialler reconnects at once
		// (and gives up at once if the peer's process is gone); the link
		// dies if no path is back within LinkTimeout.
		q.tx = nil
		q.linkless = now
		q.startProbe()
		return
	}
	if how == byError {
		q.lastErrDown = nanotime()
	}
	if how != byNotice {
		for _, o := range q.paths {
			if o != nil {
				o.ctl = append(o.ctl, Header{Type: FramePathDown, Aux: uint32(pa.idx), Seq: pa.gen})
				o.signal()
			}
		}
	}
	if q.tx == pa {
		q.switchTx(best)
	}
	q.startProbe()
}

// startProbe starts the prober on the dialler's side, or wakes it. q.mu held.
func (q *QP) startProbe() {
	if !q.dialer {
		return
	}
	if !q.probing {
		q.probing = true
		q.wg.Add(1)
		go q.probe()
	}
	select {
	case q.probeNow <- struct{}{}:
	default:
	}
}

// best returns the path data should use: the lowest one up.
func (q *QP) best() *path {
	for _, pa := range q.paths {
		if pa != nil {
			return pa
		}
	}
	return nil
}

// switchTx moves this end's data to pa in a new epoch: pa first carries a
// resync frame, then every message the peer has not acknowledged again,
// from its first byte, then the rest; credits for every receive not yet
// delivered are sent again too. The peer drops what it already has, so each
// message is delivered once and in order. q.mu held.
func (q *QP) switchTx(pa *path) {
	prevIdx := q.txIdx
	q.tx, q.txIdx = pa, pa.idx
	q.txEpoch++
	var bytes, wrs uint64
	end := q.sendNext
	if q.sendOff > 0 {
		end++
	}
	for i := q.sendBase; i < end; i++ {
		s := q.sends.At(int(i - q.sendBase))
		s.replay = true
		bytes += uint64(len(s.wr.Buf))
		wrs++
	}
	q.sendNext, q.sendOff = q.sendBase, 0
	q.creditNext = q.recvBase
	q.ackSent = 0
	q.core.SetPath(flowtel.Path(pa.idx))
	now := nanotime()
	q.stats.RetransmittedWRs += wrs
	q.stats.RetransmittedBytes += bytes
	totals.retransWRs.Add(wrs)
	totals.retransBytes.Add(bytes)
	if pa.idx != prevIdx {
		kind := flowtel.KindFailover
		if pa.idx < prevIdx {
			kind = flowtel.KindFailback
			q.stats.Failbacks++
			totals.failbacks.Add(1)
		} else {
			q.stats.Failovers++
			totals.failovers.Add(1)
		}
		q.core.LinkEvent(kind, flowtel.Path(pa.idx), int(bytes))
		q.b.logger().Info("vccl: ft "+kind.String(), "rank", q.core.Config().Rank, "peer", q.core.Config().Peer,
			"to", pathName(pa.idx), "replayed_wrs", wrs, "replayed_bytes", bytes)
	}
	q.noteBackup(now, pa.idx != 0)
	pa.signal()
}

// noteBackup accounts the time spent off the primary. q.mu held.
func (q *QP) noteBackup(now int64, onBackup bool) {
	switch {
	case onBackup && q.backupSince == 0:
		q.backupSince = now
	case !onBackup && q.backupSince != 0:
		d := time.Duration(now - q.backupSince)
		q.stats.TimeOnBackup += d
		totals.backupNs.Add(int64(d))
		q.backupSince = 0
	}
}

// install makes conn (generation gen) path i's connection, replacing an
// older one, and moves data to it if it is better than the path in use.
func (q *QP) install(i int, conn *net.TCPConn, gen uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil || gen < q.gen[i] || gen == q.gen[i] && q.paths[i] != nil {
		conn.Close()
		return
	}
	q.gen[i] = max(q.gen[i], gen)
	pa := q.newPath(i, conn, gen, nanotime())
	old := q.paths[i]
	wasTx := old != nil && q.tx == old
	if old != nil {
		q.paths[i] = nil
		q.why[i] = fmt.Errorf("%s->%s: replaced by a new connection", old.local, old.remote)
		old.shut()
		q.stats.LinkDowns++
		totals.linkDowns.Add(1)
		q.core.LinkEvent(flowtel.KindLinkDown, flowtel.Path(i), 0)
	}
	q.paths[i] = pa
	q.linkless = 0
	q.stats.LinkUps++
	totals.linkUps.Add(1)
	q.core.LinkEvent(flowtel.KindLinkUp, flowtel.Path(i), 0)
	q.b.logger().Info("vccl: ft path up", "rank", q.core.Config().Rank, "peer", q.core.Config().Peer,
		"path", pathName(i), "local", pa.local, "remote", pa.remote)
	q.startPath(pa)
	if wasTx || q.tx == nil || i < q.tx.idx {
		q.switchTx(pa)
	}
}

// probe reconnects down paths, every Probe interval (at once when woken),
// until all are up or the QP dies. It runs on the side that dialled the
// link. With every path down, a peer that refuses every reconnection is a
// process that is gone, and the link dies at once.
func (q *QP) probe() {
	defer q.wg.Done()
	t := time.NewTicker(q.prm.Probe)
	defer t.Stop()
	for {
		q.mu.Lock()
		var down []int
		var gens []uint64
		if q.err == nil {
			for i, pa := range q.paths {
				if pa == nil {
					q.gen[i]++
					down = append(down, i)
					gens = append(gens, q.gen[i])
				}
			}
		}
		if len(down) == 0 {
			q.probing = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		refused := 0
		for k, i := range down {
			if !ifRunning(q.ifnames[i]) {
				// Our own interface is not back yet: a dial now would only
				// fail, or send an address resolution the link drops.
				continue
			}
			ctx, cancel := context.WithTimeout(q.ctx, max(2*q.prm.Probe, 100*time.Millisecond))
			conn, err := q.b.dialPath(ctx, q.ifnames[i], q.remote[i], q.key, i, gens[k], q.token)
			cancel()
			if err == nil {
				q.install(i, conn, gens[k])
			} else if errors.Is(err, syscall.ECONNREFUSED) {
				refused++
			}
		}
		if refused == Paths {
			q.mu.Lock()
			if q.linkless != 0 && q.up() == 0 {
				q.die(q.linkError(fmt.Errorf("rank %d refuses reconnection on every path: its process is gone", q.core.Config().Peer)), flowtel.StatusError)
			}
			q.mu.Unlock()
		}
		select {
		case <-t.C:
		case <-q.probeNow:
		case <-q.ctx.Done():
		}
	}
}

// acceptLoop installs the reconnections of path i that the dialler makes.
func (q *QP) acceptLoop(i int) {
	defer q.wg.Done()
	for {
		c, err := q.accs[i].Accept(q.ctx, pathKey(q.key, i))
		if err != nil {
			return
		}
		conn, gen, err := q.b.hello(q.ctx, c, i)
		if err != nil {
			continue
		}
		q.install(i, conn, gen)
	}
}

// monitor sends heartbeats and declares silent or stuck paths down.
func (q *QP) monitor() {
	defer q.wg.Done()
	every := max(q.prm.Heartbeat/2, time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := nanotime()
	// How late this goroutine's recent ticks came: a host whose CPUs are
	// oversubscribed delays our ticks and, as much, the kernel's handling
	// of packets and acknowledgements (softirqs run in threads that
	// compete for the same CPUs). A path's silence is judged against
	// DeadAfter plus twice the worst lateness of the last 2×DeadAfter, so
	// starvation, measured, is not taken for a dead path; on an idle host
	// the lateness is a fraction of a millisecond and detection is as
	// fast as before.
	lates := make([]time.Duration, max(int(2*q.prm.DeadAfter/every), 1))
	li := 0
	for {
		select {
		case <-tick.C:
		case <-q.ctx.Done():
			return
		}
		now := nanotime()
		// A tick this late means this process was not running: what looks
		// like silence may be our own, so judge nothing this time.
		starved := time.Duration(now-last) > q.prm.DeadAfter/2
		lates[li] = max(time.Duration(now-last)-every, 0)
		li = (li + 1) % len(lates)
		slack := 2 * slices.Max(lates)
		last = now
		q.mu.Lock()
		if q.err == nil && q.linkless != 0 && time.Duration(now-q.linkless) > q.prm.LinkTimeout {
			q.die(q.linkError(fmt.Errorf("no path came back within %v", q.prm.LinkTimeout)), flowtel.StatusError)
		}
		if q.err == nil && q.tx != nil && !q.closing && q.recvBase > q.ackSent {
			// Acknowledgements nobody waits for, not sent with data yet.
			if q.tx.writeNow(Header{Type: FrameAck, Seq: q.recvBase}) {
				q.ackSent = q.recvBase
			}
		}
		for _, pa := range q.paths {
			if pa == nil || q.err != nil {
				continue
			}
			if time.Duration(now-pa.lastHB) >= q.prm.Heartbeat {
				if pa.heartbeat() {
					pa.lastHB = now
				} else if !pa.hbDue {
					pa.hbDue = true
					pa.signal()
				}
			}
			if starved {
				continue
			}
			if silent := time.Duration(now - pa.lastRx.Load()); silent > q.prm.DeadAfter {
				// What our reader saw may lag what the kernel received
				// (the reader may be waiting to be scheduled): ask it.
				info := pa.tcpInfo()
				if ks := kernelSilence(info); ks >= 0 && ks < silent {
					silent = ks
				}
				if silent <= q.prm.DeadAfter+slack {
					continue
				}
				// One path silent while the peer's heartbeats still
				// arrive on another is a path failure: fast, once its
				// packets are not acknowledged either (or our interface is
				// down); after LinkTimeout whatever TCP says (a proxy that
				// stops forwarding still acknowledges). Every path silent
				// together is the peer's process not running, or ours, or
				// the whole network: it counts only once no packet is
				// acknowledged for LinkTimeout (the peer's kernel answers
				// for a process that is merely stalled, which the calls'
				// own deadline covers, and moving data would not help).
				heard := q.othersHeard(pa, now)
				running := ifRunning(q.ifnames[pa.idx])
				switch {
				case heard && !running:
					q.pathDown(pa, fmt.Errorf("nothing received for %v, and interface %s is down", silent.Round(time.Millisecond), q.ifnames[pa.idx]), bySilence)
				case heard && !acked(info, q.prm.DeadAfter+slack):
					q.pathDown(pa, fmt.Errorf("nothing received for %v while the other path hears the peer, and no TCP acknowledgement (limit %v)",
						silent.Round(time.Millisecond), (q.prm.DeadAfter+slack).Round(time.Millisecond)), bySilence)
				case heard && silent > q.prm.LinkTimeout:
					q.pathDown(pa, fmt.Errorf("nothing received for %v while the other path hears the peer (limit %v)",
						silent.Round(time.Millisecond), q.prm.LinkTimeout), bySilence)
				case !heard && silent > q.prm.LinkTimeout && (!running || !acked(info, q.prm.LinkTimeout)):
					how := bySilence
					if q.up() == 1 {
						how = byLastWait
					}
					q.pathDown(pa, fmt.Errorf("nothing received and no TCP acknowledgement for %v (limit %v)", silent.Round(time.Millisecond), q.prm.LinkTimeout), how)
				}
				continue
			}
			// The peer's heartbeats keep arriving on this path, for half
			// the progress timeout at least, all saying it reads nothing
			// we send: the path fails one way. (A peer that was not
			// running sent none meanwhile; a backlog of its heartbeats
			// read after our own stall arrives all at once.)
			if stuck := time.Duration(now - pa.peerRxAt); stuck > q.prm.Progress && pa.txBytes.Load() > pa.peerRx &&
				pa.peerSame >= int(q.prm.Progress/q.prm.Heartbeat)/4 && time.Duration(now-pa.peerSameAt) > q.prm.Progress/2 {
				q.pathDown(pa, fmt.Errorf("the peer read none of the last %d bytes sent for %v (limit %v)",
					pa.txBytes.Load()-pa.peerRx, stuck.Round(time.Millisecond), q.prm.Progress), bySilence)
			}
		}
		q.mu.Unlock()
	}
}

// othersHeard reports whether a heartbeat arrived on a path other than pa
// in the last half DeadAfter. Heartbeats, unlike data, all come from the
// peer's monitor goroutine: one arriving means the peer's process runs.
// q.mu held.
func (q *QP) othersHeard(pa *path, now int64) bool {
	for _, o := range q.paths {
		if o != nil && o != pa && time.Duration(now-o.lastHBRx.Load()) < q.prm.DeadAfter/2 {
			return true
		}
	}
	return false
}

// up counts the paths up. q.mu held.
func (q *QP) up() int {
	n := 0
	for _, pa := range q.paths {
		if pa != nil {
			n++
		}
	}
	return n
}

// The receive side, called by path readers.

// onAck completes the sends the peer acknowledged: every message below n.
func (q *QP) onAck(pa *path, n uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil || n <= q.sendBase {
		return nil
	}
	if top := q.sendBase + uint64(q.sends.Len()); n > top {
		return fmt.Errorf("protocol error: acknowledgement of %d messages, only %d sent", n, top)
	}
	defer func() {
		if q.sends.Len() == 0 {
			select {
			case q.allAcked <- struct{}{}:
			default:
			}
		}
	}()
	for q.sendBase < n {
		s := q.sends.PopFront()
		credit := q.credits.PopFront()
		q.sendBase++
		s.release()
		q.stats.SendsAcked++
		totals.sendsAcked.Add(1)
		if s.done {
			continue
		}
		wc := transport.WC{ID: s.wr.ID, Op: transport.OpSend, Bytes: len(s.wr.Buf)}
		if uint64(len(s.wr.Buf)) > credit {
			wc.Status, wc.Err, wc.Bytes = flowtel.StatusError, transport.TooLargeError(len(s.wr.Buf), int(credit)), 0
		}
		st := wc.Status
		if st == flowtel.StatusOK {
			q.stats.SendsCompleted++
			totals.sendsCompleted.Add(1)
			if s.replay {
				st = flowtel.StatusRetransmitted
			}
		}
		q.core.CompleteOn(wc, s.telID, s.wr.Tag, s.path, st)
	}
	q.sendDone = max(q.sendDone, q.sendBase)
	if q.sendNext < n {
		// Delivered on the path we left: no need to replay it.
		q.sendNext, q.sendOff = n, 0
	}
	q.completeWritten()
	return nil
}

// completeWritten queues the completions of small sends written whole, in
// posting order: it stops at the first send that is not (a large one
// waiting for its acknowledgement, or one not written yet). q.mu held.
func (q *QP) completeWritten() {
	for q.sendDone < q.sendBase+uint64(q.sends.Len()) {
		s := q.sends.At(int(q.sendDone - q.sendBase))
		if !s.done {
			if s.own == nil || !s.sent {
				return
			}
			s.done = true
			q.stats.SendsCompleted++
			totals.sendsCompleted.Add(1)
			st := flowtel.StatusOK
			if s.replay {
				st = flowtel.StatusRetransmitted
			}
			q.core.CompleteOn(transport.WC{ID: s.wr.ID, Op: transport.OpSend, Bytes: len(s.wr.Buf)}, s.telID, s.wr.Tag, s.path, st)
		}
		q.sendDone++
	}
}

// markWritten notes that the messages seqs were written whole (a batch's
// small sends that fit their credit). q.mu held.
func (q *QP) markWritten(seqs []uint64) {
	for _, seq := range seqs {
		if seq >= q.sendBase && seq < q.sendBase+uint64(q.sends.Len()) {
			q.sends.At(int(seq - q.sendBase)).sent = true
		}
	}
	q.completeWritten()
}

// onCredit takes the peer's credit number seq; a replayed one it already has
// is ignored.
func (q *QP) onCredit(seq, size uint64) error {
	q.mu.Lock()
	if q.err != nil || seq < q.creditsIn {
		q.mu.Unlock()
		return nil
	}
	if seq > q.creditsIn {
		q.mu.Unlock()
		return fmt.Errorf("protocol error: credit %d, want %d", seq, q.creditsIn)
	}
	q.credits.Push(size)
	q.creditsIn++
	i := int(seq - q.sendBase)
	waiting := i < q.sends.Len()
	if waiting {
		// The send was posted before its credit: it waited.
		s := q.sends.At(i)
		q.core.Granted(s.telID, s.wr.Tag, len(s.wr.Buf))
	}
	tx := q.tx
	q.mu.Unlock()
	if waiting && tx != nil {
		tx.signal()
	}
	return nil
}

// onResync: the peer's data comes on pa from now on, starting again at
// message first.
func (q *QP) onResync(pa *path, epoch uint32, first uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil || epoch <= q.rxEpoch {
		return nil
	}
	if first > q.recvBase {
		return fmt.Errorf("protocol error: the peer resumes at message %d, but %d is the next one due", first, q.recvBase)
	}
	q.rxEpoch = epoch
	q.rx = pa
	// A message half received on the old path starts again from its
	// first byte.
	q.recvOff = 0
	return nil
}

// errPeerClosed marks the error of a link the peer closed.
var errPeerClosed = errors.New("the peer closed the link")

// onBye: the peer closed the link after sending n messages. The link ends
// once they are all delivered (the last may still be on the way on
// another path).
func (q *QP) onBye(n uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.byeSeen, q.byeAt = true, n
	if q.recvBase >= n {
		q.peerClosed()
	}
}

// peerClosed ends the link the peer closed. q.mu held.
func (q *QP) peerClosed() {
	q.die(fmt.Errorf("%w: ft link to rank %d: %w", transport.ErrPeerDead, q.core.Config().Peer, errPeerClosed), flowtel.StatusError)
}

// onPathDown: the peer declared path i (generation gen) dead.
func (q *QP) onPathDown(i uint32, gen uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if int(i) >= Paths {
		return
	}
	if pa := q.paths[i]; pa != nil && pa.gen == gen {
		q.pathDown(pa, errors.New("the peer declared it down"), byNotice)
	}
}

// onData handles a data frame read from pa, reading its payload straight
// into the receive it belongs to, or past it when it is a duplicate or came
// on a path the peer has left.
func (q *QP) onData(pa *path, h Header) error {
	payload := h.Len
	if h.Flags&FlagTooLarge != 0 {
		payload = 0
	}
	q.mu.Lock()
	for q.err == nil && q.rx == pa && q.claim != nil && q.claim != pa {
		// The old path is still writing a segment into the buffer.
		q.claimed.Wait()
	}
	if q.err != nil || q.rx != pa || h.Seq < q.recvBase {
		if q.err == nil && q.rx == pa {
			q.stats.Duplicates++
			totals.duplicates.Add(1)
		}
		q.mu.Unlock()
		return pa.discard(payload)
	}
	if h.Seq > q.recvBase {
		q.mu.Unlock()
		return fmt.Errorf("protocol error: message %d arrived while %d is due", h.Seq, q.recvBase)
	}
	if q.recvs.Len() == 0 {
		q.mu.Unlock()
		return fmt.Errorf("protocol error: message %d of %d bytes with no receive posted", h.Seq, h.Len)
	}
	r := q.recvs.At(0)
	if h.Flags&FlagTooLarge != 0 {
		q.deliver(pa, h, transport.TooLargeError(int(h.Len), len(r.wr.Buf)))
		q.mu.Unlock()
		return nil
	}
	if h.Off != q.recvOff {
		q.mu.Unlock()
		return fmt.Errorf("protocol error: message %d segment at byte %d, want %d", h.Seq, h.Off, q.recvOff)
	}
	if size := len(r.wr.Buf); h.Off+h.Len > uint64(size) {
		// size read under q.mu: once it is released, Close may clear r's slot.
		q.mu.Unlock()
		return fmt.Errorf("protocol error: message %d reaches byte %d of a %d-byte receive", h.Seq, h.Off+h.Len, size)
	}
	buf := r.wr.Buf[h.Off : h.Off+h.Len]
	q.claim = pa
	q.mu.Unlock()

	err := pa.readPayload(buf)

	q.mu.Lock()
	defer q.mu.Unlock()
	q.claim = nil
	q.claimed.Broadcast()
	if err != nil || q.err != nil || q.rx != pa {
		// Failed or overtaken by a path change: the message comes again.
		q.flushRecvs()
		return err
	}
	q.recvOff += h.Len
	if h.Flags&FlagEnd != 0 {
		q.deliver(pa, h, nil)
	}
	return nil
}

// deliver completes the receive of message recvBase. q.mu held.
func (q *QP) deliver(pa *path, h Header, err error) {
	v := q.recvs.PopFront()
	wc := transport.WC{ID: v.wr.ID, Op: transport.OpRecv, Bytes: int(q.recvOff)}
	st := flowtel.StatusOK
	if err != nil {
		wc.Status, wc.Err, wc.Bytes = flowtel.StatusError, err, 0
		st = flowtel.StatusError
	} else if h.Flags&FlagReplay != 0 {
		st = flowtel.StatusRetransmitted
	}
	q.core.CompleteOn(wc, v.telID, v.wr.Tag, flowtel.Path(pa.idx), st)
	q.recvBase++
	q.recvOff = 0
	q.stats.RecvsDelivered++
	totals.recvsDelivered.Add(1)
	if q.byeSeen && q.recvBase >= q.byeAt {
		q.peerClosed()
		return
	}
	// A sender that waits for the acknowledgement (a large send) gets it
	// at once, from this goroutine, on the path the message came on
	// (acknowledgements count from any path), or else with our writer's
	// next batch. Other acknowledgements only free the sender's copies:
	// they go with the next batch or the next heartbeat tick.
	if h.Flags&FlagAckNow == 0 || q.closing {
		return
	}
	if pa.writeNow(Header{Type: FrameAck, Seq: q.recvBase}) {
		if pa == q.tx {
			q.ackSent = q.recvBase
		}
		return
	}
	if q.tx != nil {
		q.tx.signal()
	}
}

// fillBatch appends to pa's batch what pa should send now: its control
// frames, and when data leaves on pa, the resync of a new epoch, the
// acknowledgement, credits and data segments. q.mu held.
func (q *QP) fillBatch(pa *path, w *writerState) {
	for _, h := range pa.ctl {
		w.add(h, nil)
		w.bye = w.bye || h.Type == FrameBye
	}
	pa.ctl = pa.ctl[:0]
	if q.closing {
		return
	}
	if pa.hbDue {
		pa.hbDue = false
		pa.lastHB = nanotime()
		w.add(Header{Type: FrameHeartbeat, Seq: pa.rxBytes.Load()}, nil)
	}
	if q.tx != pa || q.err != nil {
		return
	}
	if pa.epochSent != q.txEpoch {
		pa.epochSent = q.txEpoch
		w.add(Header{Type: FrameResync, Aux: q.txEpoch, Seq: q.sendBase}, nil)
	}
	if q.recvBase > q.ackSent {
		q.ackSent = q.recvBase
		w.add(Header{Type: FrameAck, Seq: q.recvBase}, nil)
	}
	// A receive can be delivered before its credit is sent again after a
	// path change (switchTx rewinds creditNext): the peer has that credit.
	q.creditNext = max(q.creditNext, q.recvBase)
	for q.creditNext < q.recvBase+uint64(q.recvs.Len()) && w.n < maxBatchFrames-1 {
		r := q.recvs.At(int(q.creditNext - q.recvBase))
		w.add(Header{Type: FrameCredit, Seq: q.creditNext, Len: uint64(len(r.wr.Buf))}, nil)
		q.creditNext++
	}
	for q.sendNext < q.sendBase+uint64(q.sends.Len()) && q.creditsIn > q.sendNext &&
		w.n < maxBatchFrames && w.payload < maxBatchBytes {
		i := int(q.sendNext - q.sendBase)
		s := q.sends.At(i)
		credit := *q.credits.At(i)
		total := uint64(len(s.wr.Buf))
		s.path = flowtel.Path(pa.idx)
		var flags uint8
		if s.replay {
			flags |= FlagReplay
		}
		if s.own == nil {
			flags |= FlagAckNow
		}
		if total > credit {
			w.add(Header{Type: FrameData, Flags: flags | FlagTooLarge | FlagEnd, Seq: q.sendNext, Len: total}, nil)
			q.sendNext++
			continue
		}
		seg := min(total-q.sendOff, uint64(q.prm.Segment))
		if q.sendOff+seg == total {
			flags |= FlagEnd
		}
		w.add(Header{Type: FrameData, Flags: flags, Seq: q.sendNext, Off: q.sendOff, Len: seg}, s.wr.Buf[q.sendOff:q.sendOff+seg])
		if flags&FlagEnd != 0 && s.own != nil && !s.sent {
			w.written = append(w.written, q.sendNext)
		}
		if flags&FlagEnd != 0 {
			q.sendNext++
			q.sendOff = 0
		} else {
			q.sendOff += seg
		}
	}
}
