//go:build linux

package shm

import (
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
)

// Progress. Whoever holds QP.mu moves data: the owner inside Poll (and,
// for a bounded amount, inside PostSend/PostRecv), or the QP's background
// goroutine when the owner is not polling.
//
// Waking. A side's "sleeping" flag in the segment asks the peer to wake
// that side's background goroutine (FUTEX_WAKE on its bell) when it next
// publishes; the waker clears it. Only the background goroutine raises it,
// when it waits for the peer with the owner away, so beside a polling owner
// the peer's hot path makes no system call. Beside such an owner the
// background goroutine stays out of the way: it naps on a Go timer (napMin
// doubling to napMax while the owner keeps polling through the naps), takes
// no lock and moves nothing, so it never holds the progress lock while the
// owner spins on it, and no thread of ours blocks in a system call (a
// blocked thread makes the runtime hand its processor over and wake
// threads, costly on a 2-core VM). An owner whose polls have found nothing
// for armAfter (about when collective's engine stops spinning: it spins
// 200 us, yields as long, then sleeps on its Notifier) hands the wait over:
// it kicks the background goroutine (at once when the engine says it is
// about to sleep: SetSpinning), which moves what arrived, raises the
// flag and sleeps on the futex until the peer publishes; it then moves the
// data and signals the Notifier. An owner that sleeps without a long idle
// run (one that polls once and sleeps) is found out at the end of a nap,
// polled fewer than activePolls times through it.
const (
	postBudget = 64 << 10 // bytes a PostSend/PostRecv copies inline
	passBudget = 1 << 20  // bytes one Poll or background pass copies

	armAfter    = 200 * time.Microsecond // idle polling after which the owner hands the wait to the background goroutine
	activePolls = 8                      // polls during a nap that mean "the owner is polling"
	yieldAfter  = 50 * time.Microsecond  // idle polling after which the owner yields its core between polls
	napMin      = 20 * time.Microsecond  // first nap beside a polling owner
	napMax      = 1 * time.Millisecond   // longest: one wake-up a millisecond beside a busy-polling owner
	sleepMax    = 100 * time.Millisecond // futex timeout with the flag up, a backstop: closure and peer death ring the bell
	spinFor     = 20 * time.Microsecond  // peer-word polling before the background goroutine sleeps, owner away
	headBatch   = 4 << 10                // a consumed record this large publishes head at once
	streamMin   = 4 << 10                // a WR.Stream record this large is copied past the caches
)

type sendOp struct {
	wr      transport.WR
	telID   uint64
	idx     uint64 // the credit (the peer's receive) this send consumes
	off     int    // payload bytes published
	limit   int    // size of the matched receive, once started
	waited  bool   // recorded credit_wait: owes a credit_grant
	started bool
	cmaOK   bool // the receive takes single copy
	pull    bool // the receive asks for it (transport.WR.Pull)
	cma     bool // published by address: waits for the receiver's read
}

// eagerSend is a send of at most eagerMax bytes published ahead of its
// credit: it completes when the credit comes, with TooLargeError if the
// receive turns out smaller (the receiver fails its end alike), so both
// ends agree as they do for a send that waited.
type eagerSend struct {
	wr    transport.WR
	telID uint64
	idx   uint64
}

type recvOp struct {
	wr      transport.WR
	telID   uint64
	msgLen  int
	off     int
	started bool
	cma     bool // offered single copy in its credit
}

type goneReason struct {
	err     error
	corrupt bool // the peer broke the ring protocol: nothing more is read from it
}

// QP is one end of a shared-memory queue pair.
type QP struct {
	core    *transport.Core
	seg     *segment
	side    int
	conn    *net.UnixConn
	local   string
	remote  string
	peerPid int
	rmask   uint64
	slots   uint64

	// Owner state.
	nsend     uint64        // credit index of the next send
	polls     atomic.Uint64 // Poll calls, read by the background goroutine
	idlePolls int           // polls in a row that moved nothing
	idleStart int64         // when they began, or when another QP last moved data (monotonic ns)
	idleGen   uint64        // busyGen when idleStart was taken
	armed     bool          // this idle run handed the wait over
	handed    atomic.Bool   // the owner handed the wait to the background goroutine

	closed   atomic.Bool
	live     sync.RWMutex // owner calls hold it shared to touch the mapping; Close takes it to unmap
	unmapped bool

	// WRs posted, not yet taken by a pass.
	pmu     sync.Mutex
	pclosed bool
	psends  []sendOp
	precvs  []recvOp
	posts   atomic.Uint64 // WRs ever queued

	// Progress state, guarded by mu.
	mu        sync.Mutex
	drained   uint64 // posts taken so far
	spareS    []sendOp
	spareR    []recvOp
	sends     flowtel.FIFO[sendOp]
	eager     flowtel.FIFO[eagerSend] // published ahead of their credits, in credit order
	recvs     flowtel.FIFO[recvOp]
	otail     uint64               // out ring: bytes published
	ohead     uint64               // out ring: last head seen
	ocredits  uint64               // last posted count seen
	pread     uint64               // last read count seen from the peer (the credits it has taken)
	ihead     uint64               // in ring: bytes consumed
	ipub      uint64               // in ring: head last published
	itail     uint64               // in ring: last tail seen
	firstSeen uint64               // messages whose first record arrived
	credPub   uint64               // receives announced to the peer
	unann     flowtel.FIFO[uint64] // credit words (size, creditCMA) of the receives not yet announced, in order
	notify    bool                 // something was published: wake the peer if it sleeps
	starved   bool                 // the last pass stopped on its budget, not on the peer
	ncomp     uint64               // completions queued (Close's flush too, under mu)

	// Single copy (cma_linux.go), guarded by mu.
	cma          *cmaPeer           // nil: cannot read the peer
	noCMA        error              // why cma is nil from the start
	probed       bool               // the probe ran (cma is nil if it failed)
	cmaOff       bool               // sender: a read failed, keep to the ring
	cmaSent      uint64             // sender: single-copy records published
	cmaFails     uint64             // sender: failures acknowledged
	cmaIn        uint64             // receiver: single-copy records finished
	cmaInFail    uint64             // receiver: of those, failed
	copyRate     float64            // sender: its recent copies into the ring, bytes per ns (moving average; 0: not known yet)
	rateFirst    [rateStart]float64 // sender: the timed copies before copyRate is known
	rateFirstN   int                // sender: how many of rateFirst are taken
	teeUntimed   int                // sender: records teed untimed since the last timed one (teeRecheck)
	streamed     int                // sender: bytes streamed into the ring in this spell (0: not streaming)
	spell        int                // sender: bytes this streamed spell lasts
	spellSend    float64            // sender: the streamed rate at the end of the last spell, bytes per ns (0: to be measured)
	spellRead    float64            // sender: the receiver's read rate of streamed records then (0: not known)
	plainSince   int                // sender: bytes copied plainly while slow since the last spell (replainAfter: measure a spell again)
	relap        int                // sender: bytes still to copy plainly, untimed, before the rate is measured afresh
	streamRate   float64            // sender: its recent streamed copies into the ring, bytes per ns (0: to be measured)
	exchangeTill uint64             // sender: sends before this index count as an exchange (exchanging)
	cmaTrial     int                // sender: exchange sends still to try by single copy (exchangeCMA)
	ringSends    int                // sender: exchange sends through the ring since single copy was last tried
	cmaRetry     int                // sender: ring sends before single copy is tried again (0: cmaRetryMin)
	cmaStale     bool               // sender: the receiver's published read rate is to be measured afresh
	cmaBytes     int                // sender: bytes sent by single copy since the streamed rate was last measured
	cmaRateIn    float64            // receiver: its recent single-copy reads, bytes per ns (published in cmaRate)
	readRateIn   [2]float64         // receiver: its recent reads out of plain and streamed records, bytes per ns (published in readRate)
	quietCMA     int                // receiver: plain receives still to announce without single copy since a reducing one
	closeRest    int                // receiver: plain receives still to announce without single copy since the cores looked close
	handoff      int64              // receiver: the least publish-to-read time of the single-copy records in this window (ns)
	handoffN     int                // receiver: single-copy records in this window
	closeSeen    int                // receiver: windows in a row whose least trip said close

	gone atomic.Pointer[goneReason]
	mbox *Mailbox

	kick   chan struct{}
	stop   chan struct{}
	bgIdle atomic.Bool
	wg     sync.WaitGroup
}

var _ transport.Reducer = (*QP)(nil)

func newQP(seg *segment, side int, conn *net.UnixConn, cfg transport.Config, local, remote string, peerPid int) *QP {
	q := &QP{
		core: transport.NewCore(Name, cfg), seg: seg, side: side, conn: conn,
		local: local, remote: remote, peerPid: peerPid,
		rmask: uint64(seg.geo.ring - 1), slots: uint64(seg.geo.slots),
		kick: make(chan struct{}, 1), stop: make(chan struct{}),
	}
	q.cma, q.noCMA = openCMAPeer(peerPid)
	q.mbox = newMailbox(q)
	q.wg.Add(2)
	go q.run()
	go q.watch()
	return q
}

func (q *QP) Info() transport.Info { return q.core.Info(q.local, q.remote) }

// ReducesOnReceive reports true: a reduced receive reduces straight out of
// the ring.
func (q *QP) ReducesOnReceive() bool { return true }

// TeesOnSend reports true: a send's tee is written as its payload goes
// into the ring (copyTee, or after a timed record), or, by address or
// eagerly, right after it.
func (q *QP) TeesOnSend() bool { return true }

func (q *QP) Outstanding() int { return q.core.Outstanding() }

// PostSend queues a send; it copies up to postBudget bytes into the ring at
// once when the peer has a receive posted, or when the send is at most
// eagerMax bytes.
func (q *QP) PostSend(wr transport.WR) error { return q.post(transport.OpSend, &wr) }

// PostRecv queues a receive and announces it to the peer as a credit.
func (q *QP) PostRecv(wr transport.WR) error { return q.post(transport.OpRecv, &wr) }

// post hands a checked WR to the progress pass through the post lists.
func (q *QP) post(op transport.Opcode, wr *transport.WR) error {
	if err := q.core.Check(wr, q.closed.Load()); err != nil {
		return err
	}
	if op == transport.OpRecv && wr.Reduce != nil && len(wr.Src) < len(wr.Buf) {
		return fmt.Errorf("shm: receive %d reduces %d bytes with a source of %d", wr.ID, len(wr.Buf), len(wr.Src))
	}
	q.live.RLock()
	defer q.live.RUnlock()
	if q.unmapped {
		return transport.ErrClosed
	}
	id := q.core.Posted(op, wr)
	var s sendOp
	if op == transport.OpSend {
		s = sendOp{wr: *wr, telID: id, idx: q.nsend}
		q.nsend++
		if len(wr.Buf) > eagerMax && q.gone.Load() == nil && q.seg.out.posted.Load() <= s.idx {
			// The receive this send needs is not posted yet. A send of at
			// most eagerMax bytes moves without it, so it waits for no
			// credit (and looks at none here: the peer's words are a cache
			// miss each, and this one would come before the data).
			s.waited = true
			q.core.CreditWait(id, wr)
		}
	}
	q.busy()
	q.pmu.Lock()
	if q.pclosed {
		q.pmu.Unlock()
		q.complete(wr, id, op, flowtel.StatusFlushed, 0, transport.ErrClosed)
		return nil
	}
	if op == transport.OpSend {
		q.psends = append(q.psends, s)
	} else {
		q.precvs = append(q.precvs, recvOp{wr: *wr, telID: id})
	}
	q.posts.Add(1)
	q.pmu.Unlock()
	q.afterPost()
	return nil
}

// afterPost moves the new WR at once if no one else is moving data, and
// makes sure the background goroutine watches for what is left. The caller
// holds q.live shared.
func (q *QP) afterPost() {
	if q.mu.TryLock() {
		q.pass(postBudget, false)
		pending := q.pending()
		starved := q.starved
		q.mu.Unlock()
		if pending && q.bgIdle.Load() {
			q.wakeBG()
		} else if starved {
			// Work is left that needs no peer: wake the background
			// goroutine if it sleeps on the peer (an owner that polls
			// finds it anyway, and pays nothing here).
			ring(q.seg.me)
		}
		return
	}
	q.wakeBG()
}

func (q *QP) wakeBG() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
	ring(q.seg.me)
}

// wakeBGNow wakes the background goroutine wherever it waits (closure,
// peer death).
func (q *QP) wakeBGNow() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
	q.seg.me.bell.Add(1)
	futexWake(q.seg.me.bell, 1)
}

// ring wakes side's waiter if it announced that it sleeps.
func ring(sc sideCtl) {
	if sc.sleeping.Load() != 0 && sc.sleeping.CompareAndSwap(1, 0) {
		sc.bell.Add(1)
		futexWake(sc.bell, 1)
	}
}

// Poll moves data (unless another goroutine is doing so) and returns the
// completions.
func (q *QP) Poll(dst []transport.WC) int {
	q.polls.Add(1)
	q.live.RLock()
	yield := false
	if !q.unmapped && q.mu.TryLock() {
		if q.pass(passBudget, true) {
			q.busy()
		} else {
			yield = q.idle()
		}
		q.mu.Unlock()
	}
	q.live.RUnlock()
	if yield {
		// Waiting on a peer that may be waiting for this core: on a loaded
		// machine a spinning owner would hold it for a whole time slice.
		// With nothing else to run, this returns at once.
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
	n := q.core.Poll(dst)
	if n > 0 {
		q.busy()
	}
	return n
}

// busyGen changes whenever an owner of any QP of this process finds or
// gives work. An owner that polls one idle QP while it moves data on others
// (an engine with several peers) is not waiting: its idle QP neither yields
// the core nor hands its wait over. A counter, not a time: busy runs a few
// times in every call, and a clock read costs tens of times what a plain
// store does (more on VMs). Racing owners may store the same value; it
// still changes, which is all idle looks at.
var busyGen atomic.Uint64

// busy notes that the owner found or gave work: it takes the wait back.
// Owner.
func (q *QP) busy() {
	busyGen.Store(busyGen.Load() + 1)
	q.idlePolls = 0
	if q.armed {
		q.armed = false
		q.handed.Store(false)
	}
}

// idle notes a poll that moved nothing with WRs outstanding. After
// yieldAfter of them, with no progress on any QP of the process meanwhile,
// it reports that the owner should yield its core (every 16th poll); after
// armAfter the owner may back off and sleep next, so it hands the wait to
// the background goroutine. The idle run is timed from its 16th poll: most
// waits of a small message end before, and read no clock. Owner, under mu.
func (q *QP) idle() (yield bool) {
	if !q.pending() {
		q.idlePolls = 0
		return false
	}
	q.idlePolls++
	if q.idlePolls&15 != 0 {
		return false
	}
	now := flowtel.Monotonic()
	if g := busyGen.Load(); q.idlePolls == 16 || g != q.idleGen {
		q.idleStart, q.idleGen = now, g
		return false
	}
	waited := now - q.idleStart
	if !q.armed && waited >= int64(armAfter) {
		q.armed = true
		q.handed.Store(true)
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
	return waited >= int64(yieldAfter)
}

// ProgressesInline says that Poll moves all of the QP's traffic itself:
// its goroutines (run, watch) only stand in for an owner that stops
// polling, so an owner that yields while it waits need not lend them its
// processor (collective's engine).
func (q *QP) ProgressesInline() {}

// SetSpinning is how an owner that backs off (collective's engine) says
// whether it polls without pause. It says false just before it sleeps on
// the Notifier: the QP then hands the wait to the background goroutine at
// once, not after armAfter. Owner.
func (q *QP) SetSpinning(on bool) {
	if on || q.armed || q.core.Outstanding() == 0 {
		return
	}
	q.armed = true
	q.handed.Store(true)
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

func (q *QP) complete(wr *transport.WR, telID uint64, op transport.Opcode, st flowtel.Status, n int, err error) {
	q.ncomp++
	q.core.Complete(transport.WC{ID: wr.ID, Op: op, Status: st, Bytes: n, Err: err}, telID, wr.Tag)
}

// pass is one round of progress: take new WRs, publish sends, announce
// receives, and, if consume, take what arrived and complete the eager
// sends whose credits came, copying at most budget bytes each way. A post
// passes without consuming: a small send goes out before its poster's
// receive looks at the ring. The caller holds q.mu with the mapping live.
// It reports whether anything moved.
func (q *QP) pass(budget int, consume bool) bool {
	q.starved = false
	if q.closed.Load() {
		return false
	}
	moved := false
	if q.posts.Load() != q.drained {
		q.drainPosts()
		moved = true
	}
	if g := q.gone.Load(); g != nil {
		return q.failAll(g) || moved
	}
	// Sends first, then credits: what the peer waits for leaves before
	// this side looks at what the peer wrote (each look at a word the
	// peer wrote since is a cache miss, a few hundred ns here).
	if q.sends.Len() > 0 {
		b := budget
		moved = q.sendPass(&b) || moved
		q.starved = b <= 0
	}
	if q.owed() {
		moved = q.publishCredits() || moved
	}
	if q.recvs.Len() > 0 {
		if !consume {
			q.starved = true // left for the owner's next Poll, or the background goroutine
		} else {
			b := budget
			moved = q.recvPass(&b) || moved
			if g := q.gone.Load(); g != nil {
				return q.failAll(g) || moved
			}
			q.starved = q.starved || b <= 0
		}
	}
	if consume && q.eager.Len() > 0 {
		moved = q.settleEager() || moved
	}
	if q.notify {
		q.notify = false
		ring(q.seg.peer)
	}
	return moved
}

// pending reports whether WRs or credits wait for progress. Under mu.
func (q *QP) pending() bool { return q.sends.Len()+q.eager.Len()+q.recvs.Len() > 0 || q.owed() }

// owed reports whether receives, completed or not, wait to be announced:
// eager messages can fill receives whose credits the peer has not had
// yet, and their sends complete only when it has. Under mu.
func (q *QP) owed() bool { return q.unann.Len() > 0 }

func (q *QP) drainPosts() {
	q.pmu.Lock()
	ps, pr := q.psends, q.precvs
	q.psends, q.precvs = q.spareS[:0], q.spareR[:0]
	q.drained = q.posts.Load()
	q.pmu.Unlock()
	for i := range ps {
		q.sends.Push(ps[i])
	}
	if len(pr) > 0 && !q.probed {
		q.probe()
	}
	// In an exchange (large sends queued beside) the sender decides by
	// both modes' costs (exchangeCMA): the close-cores rest, which would
	// put half of each call on the ring, does not apply.
	rest := q.closeRest > 0 && !q.sendsBig()
	for i := range pr {
		w := uint64(len(pr[i].wr.Buf))
		// A reducing receive combines as it copies: it keeps to the ring.
		// So do the next reduceQuiet plain receives after one (a ring
		// all-reduce's link, its all-gather chunks): a single-copy
		// message holds the ring behind it until it is read, and what
		// waits there is the next chunks to reduce.
		switch {
		case pr[i].wr.Pull && q.probed && q.cma != nil:
			w |= creditCMA | creditPull
			pr[i].cma = true
		case pr[i].wr.Reduce != nil:
			q.quietCMA = reduceQuiet
		case q.quietCMA > 0:
			q.quietCMA--
		case rest && q.closeRest > 0:
			q.closeRest--
		case q.probed && q.cma != nil:
			w |= creditCMA
			pr[i].cma = true
		}
		q.recvs.Push(pr[i])
		q.unann.Push(w)
	}
	clear(ps)
	clear(pr)
	q.spareS, q.spareR = ps[:0], pr[:0]
}

// recvPass copies arrived records into the posted receives.
func (q *QP) recvPass(budget *int) bool {
	in := &q.seg.in
	rb := in.ring
	moved := false
	for *budget > 0 && q.recvs.Len() > 0 {
		if q.ihead == q.itail {
			q.itail = in.tail.Load()
			if q.ihead == q.itail {
				break
			}
			if q.itail-q.ihead > uint64(len(rb)) || q.itail&(recAlign-1) != 0 {
				q.protocolError("tail %d beyond head %d", q.itail, q.ihead)
				return true
			}
		}
		pos := int(q.ihead & q.rmask)
		flags, n, msgLen := getRec(rb, pos)
		if flags&fPad != 0 {
			if q.ihead+uint64(len(rb)-pos) > q.itail {
				q.protocolError("padding beyond tail %d", q.itail)
				return true
			}
			q.ihead += uint64(len(rb) - pos)
			continue
		}
		size := recSize(n)
		if n > len(rb) || pos+size > len(rb) || q.ihead+uint64(size) > q.itail {
			q.protocolError("record of %d bytes at %d", n, q.ihead)
			return true
		}
		r := q.recvs.Front()
		if flags&fFirst != 0 {
			eager := flags&fEager != 0
			if r.started || msgLen > math.MaxInt || !eager && q.firstSeen >= q.credPub {
				q.protocolError("message start of %d bytes (message %d, %d credits)", msgLen, q.firstSeen, q.credPub)
				return true
			}
			if eager && (flags != fFirst|fLast|fEager || msgLen != uint64(n) || n > eagerMax) {
				q.protocolError("eager record %#x of %d bytes for a message of %d", flags, n, msgLen)
				return true
			}
			if flags&fCMA != 0 {
				if flags != fFirst|fLast|fCMA || n != 16 || !r.cma || msgLen > uint64(len(r.wr.Buf)) {
					q.protocolError("single-copy record %#x of %d bytes for a message of %d into a receive of %d (offered: %v)", flags, n, msgLen, len(r.wr.Buf), r.cma)
					return true
				}
				addr := binary.LittleEndian.Uint64(rb[pos+recHdr:])
				q.noteHandoff(flowtel.Monotonic() - int64(binary.LittleEndian.Uint64(rb[pos+recHdr+8:])))
				q.ihead += uint64(size)
				moved = true
				if !q.readCMA(r, int(msgLen), addr) {
					return true
				}
				*budget -= int(msgLen)
				continue
			}
			r.started = true
			r.msgLen = int(msgLen)
			q.firstSeen++
			if eager && r.msgLen > len(r.wr.Buf) {
				// The sender reads this receive's size from its credit
				// and fails its send alike.
				q.ihead += uint64(size)
				q.complete(&r.wr, r.telID, transport.OpRecv, flowtel.StatusError, 0, transport.TooLargeError(r.msgLen, len(r.wr.Buf)))
				q.recvs.PopFront()
				moved = true
				continue
			}
			if flags&fTooBig != 0 {
				q.ihead += uint64(size)
				q.complete(&r.wr, r.telID, transport.OpRecv, flowtel.StatusError, 0, transport.TooLargeError(r.msgLen, len(r.wr.Buf)))
				q.recvs.PopFront()
				moved = true
				continue
			}
			if r.msgLen > len(r.wr.Buf) {
				q.protocolError("message of %d bytes for a receive of %d", r.msgLen, len(r.wr.Buf))
				return true
			}
		} else if !r.started {
			q.protocolError("continuation without a start")
			return true
		}
		if r.off+n > r.msgLen {
			q.protocolError("message overruns its length %d", r.msgLen)
			return true
		}
		var t0 int64
		if n >= rateSample {
			t0 = flowtel.Monotonic()
		}
		if r.wr.Reduce != nil {
			// Records start at multiples of recAlign and their payloads
			// are cut to multiples of recAlign-recHdr (see sendPass), so
			// r.off is a multiple of transport.ReducePiece.
			r.wr.Reduce(r.wr.Buf[r.off:r.off+n], rb[pos+recHdr:pos+recHdr+n], r.wr.Src[r.off:r.off+n])
		} else if r.wr.Stream && n >= streamMin {
			copyStream(r.wr.Buf[r.off:r.off+n], rb[pos+recHdr:pos+recHdr+n])
		} else {
			copy(r.wr.Buf[r.off:r.off+n], rb[pos+recHdr:pos+recHdr+n])
		}
		if t0 != 0 {
			q.noteRingRead(flags&fStream != 0, n, flowtel.Monotonic()-t0)
		}
		r.off += n
		*budget -= n
		q.ihead += uint64(size)
		moved = true
		if size >= headBatch {
			q.ipub = q.ihead
			in.head.Store(q.ihead)
			q.notify = true
		}
		if flags&fLast != 0 {
			if r.off != r.msgLen {
				q.protocolError("message of %d bytes ended at %d", r.msgLen, r.off)
				return true
			}
			q.complete(&r.wr, r.telID, transport.OpRecv, flowtel.StatusOK, r.msgLen, nil)
			q.recvs.PopFront()
		}
	}
	if q.ipub != q.ihead {
		q.ipub = q.ihead
		in.head.Store(q.ihead)
		q.notify = true
	}
	return moved
}

// noteHandoff takes the time from a single-copy record's publication (the
// sender's clock, stored in the record) to this side's reading of it. The
// least of a window of handoffWindow records is the cores' cache-line
// hand-off with nothing in the way (a record and the tail written, read):
// if closeWindows windows in a row say the cores are close, the next
// closeRest receives do not offer
// single copy, so the sender's copies go through the ring, where it times
// them again on lines the ring is using (chooseCMA).
func (q *QP) noteHandoff(ns int64) {
	if q.handoffN == 0 || ns < q.handoff {
		q.handoff = ns
	}
	if q.handoffN++; q.handoffN < handoffWindow {
		return
	}
	q.closeSeen++
	if q.handoff >= closeHandoff {
		q.closeSeen = 0
	} else if q.closeSeen >= closeWindows {
		q.closeRest, q.closeSeen = cmaCloseRest, 0
	}
	q.handoffN = 0
}

// readCMA copies a single-copy message from the sender's memory into r and
// acknowledges it; a failed read is acknowledged as such and the message
// comes again through the ring. It reports false if the peer turned out to
// be gone.
func (q *QP) readCMA(r *recvOp, msgLen int, addr uint64) bool {
	in := &q.seg.in
	err := errNoCMA
	switch {
	case q.cma != nil && r.wr.Reduce != nil:
		var partial bool
		if partial, err = q.readReduce(r, msgLen, addr); err != nil && partial && err != errPeerExited {
			// The ring's copy would be reduced again into what is
			// reduced already.
			q.markGone(fmt.Errorf("shm: single-copy read from pid %d failed midway through a reducing receive: %w", q.peerPid, err))
			return false
		}
	case q.cma != nil:
		t0 := flowtel.Monotonic()
		err = q.cma.read(r.wr.Buf[:msgLen], addr, false)
		if err == nil && msgLen >= rateSample {
			q.noteRead(msgLen, flowtel.Monotonic()-t0)
		}
	}
	// The sender flushes its send only after announcing its close, so a
	// read that sees no close read a buffer the sender still held.
	if err == errPeerExited || q.seg.peer.state.Load() == stateClosed {
		q.markGone(fmt.Errorf("%w: shm peer (pid %d) left during a single-copy read", transport.ErrPeerDead, q.peerPid))
		return false
	}
	if err != nil {
		// Stored before the done count, which the sender reads first.
		q.cmaInFail++
		in.cmaFail.Store(q.cmaInFail)
		if q.cma != nil {
			q.warnNoCMA(err)
		}
		q.cma.close()
		q.cma = nil // later receives keep to the ring
	} else {
		r.started, r.msgLen, r.off = true, msgLen, msgLen
		q.firstSeen++
		q.complete(&r.wr, r.telID, transport.OpRecv, flowtel.StatusOK, msgLen, nil)
		q.recvs.PopFront()
	}
	q.cmaIn++
	in.cmaDone.Store(q.cmaIn)
	q.ipub = q.ihead
	in.head.Store(q.ihead)
	q.notify = true
	return true
}

// readReduce reads a reducing receive's message out of the sender's memory
// piece by piece into a bounce buffer that stays in the core's cache, and
// reduces each piece into the receive as it comes. partial reports that a
// piece was reduced before an error.
func (q *QP) readReduce(r *recvOp, msgLen int, addr uint64) (partial bool, err error) {
	if v := q.cma.mem.view(addr, msgLen); v != nil {
		// The peer's shared buffer, mapped here: reduced straight from it.
		for off := 0; off < msgLen; off += pullPiece {
			end := min(off+pullPiece, msgLen)
			r.wr.Reduce(r.wr.Buf[off:end], v[off:end], r.wr.Src[off:end])
		}
		if err := q.cma.alive(); err != nil {
			return true, err
		}
		return false, nil
	}
	b := bounces.Get().(*[pullPiece]byte)
	defer bounces.Put(b)
	for off := 0; off < msgLen; {
		n := min(pullPiece, msgLen-off)
		if err := q.cma.read(b[:n], addr+uint64(off), false); err != nil {
			return off > 0, err
		}
		r.wr.Reduce(r.wr.Buf[off:off+n], b[:n], r.wr.Src[off:off+n])
		off += n
	}
	return false, nil
}

// pullPiece is the piece a reducing single-copy read moves at a time: a
// multiple of transport.ReducePiece, small enough to stay in the L2 beside
// the partial sum it is reduced into, large enough that the system call
// and the peer check are a small part of it.
const pullPiece = 128 << 10

// bounces holds the pieces' buffers: one per P in use, so a rank's QPs
// share the one that is warm in its core's cache.
var bounces = sync.Pool{New: func() any { return new([pullPiece]byte) }}

// probe finds out, once the peer has published its probe word, whether this
// side can read the peer's memory; its receives offer single copy if so.
func (q *QP) probe() {
	if q.cma == nil {
		q.probed = true
		if q.noCMA != nil {
			q.warnNoCMA(q.noCMA)
		}
		return
	}
	if q.seg.peer.probe.Load() == 0 {
		return // the acceptor has not attached yet
	}
	q.probed = true
	if err := q.probePeer(q.cma); err != nil {
		q.cma.close()
		q.cma = nil
		q.warnNoCMA(err)
	}
}

// probePeer returns nil if c reads the peer: only the process the socket's
// credentials name, and only if the segment names the same one.
func (q *QP) probePeer(c *cmaPeer) error {
	if pid := q.seg.pid(1 - q.side); pid != q.peerPid {
		return fmt.Errorf("the segment names pid %d, the socket pid %d", pid, q.peerPid)
	}
	return c.probe(q.seg.peer)
}

// publishCredits announces posted receives to the peer: their sizes in the
// slot array, then their count. Slot i%slots is reused only once the peer
// says (its read word) that it has read credit i: an eager message may
// arrive, and be consumed, before its sender has looked at its credit.
func (q *QP) publishCredits() bool {
	in := &q.seg.in
	want := q.credPub + uint64(q.unann.Len())
	if q.credPub >= want {
		return false
	}
	if q.credPub >= q.pread+q.slots {
		q.pread = in.read.Load()
		if q.pread > q.credPub {
			q.protocolError("peer read %d of %d credits", q.pread, q.credPub)
			return false
		}
	}
	lim := min(q.pread+q.slots, want)
	if q.credPub >= lim {
		return false
	}
	for ; q.credPub < lim; q.credPub++ {
		in.sizes[q.credPub&(q.slots-1)].Store(*q.unann.Front())
		q.unann.PopFront()
	}
	in.posted.Store(q.credPub)
	q.notify = true
	return true
}

// credited reports whether the peer has announced credit idx.
func (q *QP) credited(idx uint64) bool {
	if idx >= q.ocredits {
		q.ocredits = q.seg.out.posted.Load()
	}
	return idx < q.ocredits
}

// takeCredit reads the size of receive idx, which the peer has announced,
// and whether it takes single copy, and says so (the read word) so that
// the peer may reuse its slot.
func (q *QP) takeCredit(idx uint64) (limit int, cma, pull bool) {
	out := &q.seg.out
	w := out.sizes[idx&(q.slots-1)].Load()
	out.read.Store(idx + 1)
	q.notify = true // a peer that ran out of slots waits for this
	return int(min(w&^creditBits, math.MaxInt)), w&creditCMA != 0, w&creditPull != 0
}

// settleEager completes the eager sends whose credits have come.
func (q *QP) settleEager() bool {
	moved := false
	for q.eager.Len() > 0 {
		e := q.eager.Front()
		if !q.credited(e.idx) {
			break
		}
		if limit, _, _ := q.takeCredit(e.idx); len(e.wr.Buf) > limit {
			q.complete(&e.wr, e.telID, transport.OpSend, flowtel.StatusError, 0, transport.TooLargeError(len(e.wr.Buf), limit))
		} else {
			q.complete(&e.wr, e.telID, transport.OpSend, flowtel.StatusOK, len(e.wr.Buf), nil)
		}
		q.eager.PopFront()
		moved = true
	}
	return moved
}

// sendEager publishes s, at most eagerMax bytes, as one record ahead of its
// credit. It reports false when the ring has no room for it yet.
func (q *QP) sendEager(s *sendOp) bool {
	rb := q.seg.out.ring
	n := len(s.wr.Buf)
	need := recSize(n)
	pos, ok := q.reserveWhole(need)
	if !ok {
		return false
	}
	putRec(rb, pos, fFirst|fLast|fEager, n, n)
	copy(rb[pos+recHdr:pos+recHdr+n], s.wr.Buf)
	copy(s.wr.Tee, s.wr.Buf)
	q.otail += uint64(need)
	q.seg.out.tail.Store(q.otail)
	q.notify = true
	return true
}

// sendPass settles the eager sends whose credits came, then publishes the
// sends that have credit, chunk by chunk, as far as the ring has room, and
// the small ones that have none yet eagerly.
func (q *QP) sendPass(budget *int) bool {
	out := &q.seg.out
	rb := out.ring
	R := len(rb)
	moved := false
	for q.sends.Len() > 0 && *budget > 0 {
		s := q.sends.Front()
		if !s.started {
			if len(s.wr.Buf) <= eagerMax {
				if !q.sendEager(s) {
					break
				}
				*budget -= len(s.wr.Buf)
				q.eager.Push(eagerSend{wr: s.wr, telID: s.telID, idx: s.idx})
				q.sends.PopFront()
				moved = true
				continue
			}
			// Credits are taken in order: the eager sends' first.
			moved = q.settleEager() || moved
			if q.eager.Len() > 0 || !q.credited(s.idx) {
				break
			}
			s.started = true
			s.limit, s.cmaOK, s.pull = q.takeCredit(s.idx)
			if s.waited {
				q.core.Granted(s.telID, s.wr.Tag, len(s.wr.Buf))
			}
			moved = true
		}
		buf := s.wr.Buf
		if s.cma {
			// Published by address: wait for the receiver's read.
			if out.cmaDone.Load() != q.cmaSent {
				return moved
			}
			moved = true
			if f := out.cmaFail.Load(); f != q.cmaFails {
				q.cmaFails, q.cmaOff, s.cma = f, true, false // resend through the ring
			} else {
				q.complete(&s.wr, s.telID, transport.OpSend, flowtel.StatusOK, len(buf), nil)
				q.sends.PopFront()
				continue
			}
		} else if s.off == 0 && s.cmaOK && !q.cmaOff && len(buf) <= s.limit && q.singleCopy(s, len(buf)) {
			if !q.sendCMA(buf) {
				return moved
			}
			s.cma = true
			q.noteSingleCopy(len(buf))
			// While the receiver reads buf.
			copyTeeWhole(s.wr.Tee, buf)
			*budget -= len(buf)
			return true // the ring waits behind this message until it is read
		}
		for {
			n := min(len(buf)-s.off, chunkMax)
			flags := uint32(0)
			if s.off == 0 {
				flags = fFirst
			}
			tooBig := len(buf) > s.limit
			if tooBig {
				n = 0
				flags |= fTooBig | fLast
			}
			need := recSize(n)
			pos := int(q.otail & q.rmask)
			contig := R - pos
			if need > contig {
				if n > 0 && contig >= minSplit {
					n, need = contig-recHdr, contig
				} else {
					// Pad to the end of the ring and start over at 0.
					if !q.room(contig) {
						return moved
					}
					putRec(rb, pos, fPad, 0, 0)
					q.otail += uint64(contig)
					continue
				}
			}
			if !q.room(need) {
				free := R - int(q.otail-q.ohead)
				if n == 0 || free < minSplit {
					return moved
				}
				n, need = free-recHdr, free
			}
			if !tooBig && s.off+n == len(buf) {
				flags |= fLast
			}
			mode := q.ringCopyFor(n, s.cmaOK && !q.streamWins(q.exchanging(s.idx)))
			if mode == copyStreamed {
				flags |= fStream
			}
			putRec(rb, pos, flags, n, len(buf))
			dst, src := rb[pos+recHdr:pos+recHdr+n], buf[s.off:s.off+n]
			var tee []byte
			if s.wr.Tee != nil {
				tee = s.wr.Tee[s.off : s.off+n]
			}
			switch {
			case mode == copyStreamed:
				t0 := flowtel.Monotonic()
				copyStream(dst, src)
				q.noteStream(n, flowtel.Monotonic()-t0)
				copy(tee, src)
			case mode == copyTimed && (tee == nil || timedTurn(&q.teeUntimed, teeRecheck)):
				t0 := flowtel.Monotonic()
				copy(dst, src)
				q.noteCopy(n, flowtel.Monotonic()-t0)
				copy(tee, src)
			case tee != nil && n >= rateSample:
				copyTee(dst, tee, src)
			default:
				copy(dst, src)
				copy(tee, src)
			}
			q.otail += uint64(need)
			out.tail.Store(q.otail)
			q.notify = true
			moved = true
			s.off += n
			*budget -= n
			if flags&fLast != 0 {
				if tooBig {
					q.complete(&s.wr, s.telID, transport.OpSend, flowtel.StatusError, 0, transport.TooLargeError(len(buf), s.limit))
				} else {
					q.complete(&s.wr, s.telID, transport.OpSend, flowtel.StatusOK, len(buf), nil)
				}
				q.sends.PopFront()
				break
			}
			if *budget <= 0 {
				return moved
			}
		}
	}
	return moved
}

// singleCopy decides whether a send of n bytes whose receive offered single
// copy takes it: any of pullMin bytes or more where the receive asked for
// it, else by chooseCMA.
func (q *QP) singleCopy(s *sendOp, n int) bool {
	if s.pull {
		return n >= pullMin
	}
	return cmaMin > 0 && n >= cmaMin && q.chooseCMA(s.idx)
}

// pullMin is the smallest message a receive that asks for single copy
// (transport.WR.Pull) gets by it: below it the record through the ring
// costs less than the read's system call and its acknowledgement.
const pullMin = 16 << 10

// chooseCMA decides whether a send the receiver offered single copy for
// takes it: only while this side's copies into the ring run slow (see
// cma_linux.go), and then unless a streamed ring delivers more
// (streamWins). It sends none through the ring to measure them again: a
// copy into a ring that single copy has left idle writes lines that are
// cold in either placement, and times slow enough to keep close QPs on
// single copy. The receiver, which times each single-copy record's
// hand-off, stops offering it for a while when the cores look close
// (noteHandoff); the ring's copies are timed again then.
//
// In an exchange (receives queued beside the send, as in a 2-rank
// all-gather or send/recv pair) it decides by cost even while the copies
// run fast: see exchangeCMA.
func (q *QP) chooseCMA(idx uint64) bool {
	if cmaAlways.Load() {
		return true
	}
	ex := q.exchanging(idx)
	if ex && !q.copiesSlow() {
		return q.exchangeCMA()
	}
	return q.copiesSlow() && !q.streamWins(ex)
}

// exchanging reports whether the QP carries an exchange: a receive of
// cmaMin bytes or more queued beside this send (credit index idx), or
// beside one of the last exchangeSends sends (the first sends of a 2-rank
// all-gather step are posted before its receives). Smaller receives do
// not count: every collective call exchanges its signature headers, a
// broadcast too. Under mu.
func (q *QP) exchanging(idx uint64) bool {
	for i := range q.recvs.Len() {
		if len(q.recvs.At(i).wr.Buf) >= cmaMin {
			q.exchangeTill = idx + exchangeSends
			return true
		}
	}
	return idx < q.exchangeTill
}

// sendsBig reports whether a send of cmaMin bytes or more is queued.
// Under mu.
func (q *QP) sendsBig() bool {
	for i := range q.sends.Len() {
		if len(q.sends.At(i).wr.Buf) >= cmaMin {
			return true
		}
	}
	return false
}

// exchangeSends: see exchanging.
const exchangeSends = 16

// exchangeCMA decides single copy for a send of an exchange whose copies
// into the ring run fast, by what each mode costs a byte: through the
// ring each core makes both copies of every byte, one after the other
// (ringCost, duplex), against one read by single copy. Single copy is
// tried first, for a trial of cmaTrial sends (the receiver's moving
// average of its reads then holds only theirs), and again after
// cmaRetryMin sends through the ring, then twice as many each time it
// loses, up to cmaRetryMax, so that a trial where the ring is cheaper is
// a small share of the sends. A trial's reads run slower than single copy
// does once both sides use it (what each side's copies cost depends on
// what the other side's do), so single copy keeps an exchange unless the
// ring costs less by a factor cmaBias; a rate frozen since the last trial
// decides nothing, hence the retries.
//
// Which mode wins depends on the host: where cores hand cache lines over
// quickly single copy can beat the ring for an exchange, and where the
// ring's copies are cheap against single copy's page-by-page reads the
// ring wins; the rates decide per QP rather than a rule per host
// (BENCHMARKS.md has the runs on each kind of host).
func (q *QP) exchangeCMA() bool {
	if q.cmaTrial > 0 {
		q.cmaTrial--
		return true
	}
	cr := 0.0
	if !q.cmaStale {
		cr = math.Float64frombits(q.seg.out.cmaRate.Load())
	}
	if cr == 0 {
		q.cmaTrial = cmaTrial - 1
		return true
	}
	rr := math.Float64frombits(q.seg.out.readRate[0].Load())
	if q.copyRate == 0 || rr == 0 {
		return false // the ring not measured yet: measure it
	}
	if 1/cr < cmaBias*ringCost(q.copyRate, rr, true) {
		q.cmaRetry = 0
		return true
	}
	if q.cmaRetry == 0 {
		q.cmaRetry = cmaRetryMin
	}
	if q.ringSends++; q.ringSends >= q.cmaRetry {
		q.ringSends, q.cmaTrial = 0, cmaTrial
		q.cmaRetry = min(2*q.cmaRetry, cmaRetryMax)
	}
	return false
}

// cmaTrial, cmaRetryMin, cmaRetryMax, cmaBias: see exchangeCMA.
const (
	cmaBias     = 1.5
	cmaTrial    = 32
	cmaRetryMin = 256
	cmaRetryMax = 8192
)

// streamWins reports whether, while this side's plain copies into the ring
// run slow, a streamed ring beats single copy: see streamBeatsCMA. A send
// of an exchange (exchanging: as in all-gather) counts as duplex, also
// when it is decided before its step's receive is queued or after that
// receive completed: judged by the receives queued at that moment, such
// sends of a far 2-rank all-gather took a streamed ring now and then, each
// rank on its own, and the other rank's next reads ran slower beside it.
func (q *QP) streamWins(duplex bool) bool {
	if !q.copiesSlow() {
		return false
	}
	cr := 0.0
	if !q.cmaStale {
		cr = math.Float64frombits(q.seg.out.cmaRate.Load())
	}
	return streamBeatsCMA(q.streamRate, cr, duplex)
}

// streamBeatsCMA decides between a streamed ring and single copy from what
// each delivered last: the sender's streamed copies into the ring
// (streamRate) and the receiver's single-copy reads (cmaRate), bytes per
// ns, 0 where not measured yet. A mode not yet measured is tried first,
// streaming before single copy. Streamed, the receiver's copy out of the
// ring runs beside the sender's copy in, so the ring delivers about the
// sender's rate.
//
// In an exchange (duplex: all-gather) it is single copy: there each core
// makes both copies of every byte through a ring, against one read by
// single copy, and the sender's rate does not say what the ring
// delivers: choosing by the rates there picked the ring for exchanges that
// single copy carried faster.
//
// Single copy reads pin the sender's pages one 4 KiB page at a time, so
// for a one-way send between far cores a streamed ring, whose two copies
// overlap, can deliver more; the rates say which.
func streamBeatsCMA(streamRate, cmaRate float64, duplex bool) bool {
	switch {
	case duplex:
		return false
	case streamRate == 0:
		return true
	case cmaRate == 0:
		return false
	}
	return streamRate > cmaRate
}

// noteStream adds a streamed copy of n bytes that took ns to the moving
// average of the streamed rate.
func (q *QP) noteStream(n int, ns int64) {
	q.streamRate = movingRate(q.streamRate, rateOf(n, ns))
}

// noteSingleCopy counts a send by single copy; after restreamAfter bytes
// the streamed rate is measured afresh, so that a QP single copy carries
// tries the ring again.
func (q *QP) noteSingleCopy(n int) {
	// This message's read publishes a fresh rate before the next send is
	// decided: the ring waits behind it.
	q.cmaStale = false
	if q.cmaBytes += n; q.cmaBytes >= restreamAfter {
		q.cmaBytes, q.streamRate = 0, 0
	}
}

// noteRead adds a single-copy read of n bytes that took ns to the moving
// average this receiver publishes for the sender's choice.
func (q *QP) noteRead(n int, ns int64) {
	q.cmaRateIn = movingRate(q.cmaRateIn, rateOf(n, ns))
	q.seg.in.cmaRate.Store(math.Float64bits(q.cmaRateIn))
}

// rateOf is n bytes in ns, in bytes per ns.
func rateOf(n int, ns int64) float64 { return float64(n) / float64(max(ns, 1)) }

// movingRate folds the rate r into the moving average avg (0: none yet).
func movingRate(avg, r float64) float64 {
	if avg == 0 {
		return r
	}
	return avg + (r-avg)/4
}

// ringCopy is how a record goes into the ring.
type ringCopy uint8

const (
	copyPlain    ringCopy = iota // copy, untimed
	copyTimed                    // copy, timed: a sample of the copy rate
	copyStreamed                 // non-temporal stores (copyStream)
)

func (c ringCopy) String() string {
	return [...]string{copyPlain: "plain", copyTimed: "timed", copyStreamed: "streamed"}[c]
}

// ringCopyFor decides how the next record of n bytes goes into the ring
// (cmaOK: its receive offered single copy, which the sender did not take
// on the copy rate alone, so this copy measures it). Records of rateSample
// bytes or more are timed while this side's copies run fast. While they
// run slow (the far placement, where each plain store first waits for the
// line the peer's core last read), the ring is streamed past the caches
// for a spell if that delivers more (streamCheaper); a spell's end
// measures what it delivered.
//
// A plain copy timed while the ring is streamed says nothing of plain
// copies: a streamed line goes to memory, the receiver's read then holds
// it alone, and a plain store must fetch it back from that core. Such
// copies ran at 2.2-2.4 bytes per ns in either placement, where a ring
// kept plain ran at 40 (2 ranks, 64 MiB all-reduce), so a QP that once
// streamed never left. So after a spell the ring goes plain again for a
// whole lap, untimed, and the rate is then measured afresh.
//
// A new QP's first copies may time slow (on the 16-core Xeon host they
// are what puts all-gather's QPs on single copy, which wins there), so a
// slow start tries a short spell rather than deciding anything.
func (q *QP) ringCopyFor(n int, cmaOK bool) ringCopy {
	switch {
	case q.relap > 0:
		q.lapPlain(n)
		return copyPlain
	case n < rateSample:
		return copyPlain
	case cmaOK || !q.copiesSlow():
		// (A send whose receive offered single copy and that came
		// here anyway, not for a streamed ring's sake, is the one that
		// measures the rate for chooseCMA: copied plainly and timed.)
		return copyTimed
	case q.streamed == 0 && !q.streamCheaper():
		if q.plainSince += n; q.plainSince >= replainAfter {
			q.plainSince, q.spellSend, q.spellRead = 0, 0, 0
		}
		return copyTimed
	case q.streamed == 0:
		// A trial spell (nothing measured) lasts two laps, so that the
		// receiver has read a lap of it when it ends.
		q.spell = restreamAfter
		if !q.streamMeasured() {
			q.spell = 2 * len(q.seg.out.ring)
		}
	}
	if q.streamed += n; q.streamed >= q.spell {
		q.spellSend = q.streamRate
		q.spellRead = math.Float64frombits(q.seg.out.readRate[1].Load())
		q.streamed, q.plainSince, q.relap, q.cmaStale = 0, 0, len(q.seg.out.ring), true
		q.lapPlain(n)
		return copyPlain
	}
	return copyStreamed
}

// streamCheaper reports whether, while this side's plain copies into the
// ring run slow, a streamed spell delivers more than the plain ring: what
// the last spell measured (or not measured yet: it is tried) against
// the plain copies now. Each mode's cost is the sender's copy in and the
// receiver's copy out (ringCost): the sender's rate alone misleads, since
// a close pair's plain copies into the ring can time slow (under cmaBelow)
// while the receiver reads them from cache far faster than it reads a
// streamed record from memory.
func (q *QP) streamCheaper() bool {
	if !q.streamMeasured() {
		return true
	}
	duplex := q.recvs.Len() > 0
	plain := ringCost(q.copyRate, math.Float64frombits(q.seg.out.readRate[0].Load()), duplex)
	return ringCost(q.spellSend, q.spellRead, duplex) < plain
}

// streamMeasured reports whether a spell measured what the streamed ring
// delivers, and neither the plain ring's copies since (replainAfter) nor
// single copy's (noteSingleCopy) have asked for it afresh.
func (q *QP) streamMeasured() bool { return q.spellSend != 0 && q.streamRate != 0 }

// ringCost is the ns per byte a ring delivers whose sender copies in at
// send and whose receiver copies out at read (bytes per ns; 0: not known,
// counted as free). In an exchange (duplex) each core makes both copies,
// one after the other; one way, the receiver's copy runs beside the
// sender's and the slower decides.
func ringCost(send, read float64, duplex bool) float64 {
	inv := func(r float64) float64 {
		if r == 0 {
			return 0
		}
		return 1 / r
	}
	if duplex {
		return inv(send) + inv(read)
	}
	return max(inv(send), inv(read))
}

// noteRingRead adds a copy of n bytes out of the ring (a record the
// sender streamed or not) that took ns to the moving average this
// receiver publishes for the sender's choice.
func (q *QP) noteRingRead(streamed bool, n int, ns int64) {
	i := 0
	if streamed {
		i = 1
	}
	q.readRateIn[i] = movingRate(q.readRateIn[i], rateOf(n, ns))
	q.seg.in.readRate[i].Store(math.Float64bits(q.readRateIn[i]))
}

// lapPlain counts n bytes copied plainly into the lap after a streamed
// spell; at its end the rate is measured afresh.
func (q *QP) lapPlain(n int) {
	if q.relap -= n; q.relap <= 0 {
		q.relap, q.copyRate, q.rateFirstN = 0, 0, 0
	}
}

// timedTurn counts a record in *untimed and reports whether it is the one
// in every that is copied plainly and timed (the count then starts over).
func timedTurn(untimed *int, every int) bool {
	if *untimed++; *untimed < every {
		return false
	}
	*untimed = 0
	return true
}

// copiesSlow reports whether this side's timed copies into the ring run
// below cmaBelow.
func (q *QP) copiesSlow() bool { return q.copyRate != 0 && q.copyRate < cmaBelow }

// noteCopy adds a copy of n bytes into the ring that took ns to the
// moving average of the copy rate. The average starts at the median of
// the first rateStart copies: one copy alone (the first from a cold
// buffer, a descheduled one) decided the first mode and, with it, the
// next copies' lines.
func (q *QP) noteCopy(n int, ns int64) {
	r := rateOf(n, ns)
	if q.copyRate != 0 {
		q.copyRate = movingRate(q.copyRate, r)
		return
	}
	q.rateFirst[q.rateFirstN] = r
	if q.rateFirstN++; q.rateFirstN == rateStart {
		first := q.rateFirst
		slices.Sort(first[:])
		q.copyRate, q.rateFirstN = first[rateStart/2], 0
	}
}

// copyTee copies src into dst and tee, teePiece bytes at a time, so each
// piece of src is read from memory or L2 once and copied the second time
// from L1, and the stores into the ring (lines the peer's core read last)
// alternate with stores into the sender's own buffer.
func copyTee(dst, tee, src []byte) {
	for o := 0; o < len(src); o += teePiece {
		e := min(o+teePiece, len(src))
		copy(dst[o:e], src[o:e])
		copy(tee[o:e], src[o:e])
	}
}

// copyTeeWhole copies a single-copy send's payload into its tee (the
// caller's output, read by its next call or step). Up to cachedMax it goes
// in pieces under the size from which memmove (amd64) writes past the
// caches, so the tee stays in them; copied whole, a 2 MiB tee went to
// memory. Larger tees are copied whole: their lines would leave the cache
// before anything reads them. 2 ranks, all-gather out of place, shared
// memory, AMD EPYC host (16 MiB L3), 3 interleaved launches each, whole
// -> pieces (us), by output (the tee is half of it): 2 MiB 210-218 ->
// 124-137, 4 MiB 442-460 -> 342-417 (Open MPI 320-360), 8 MiB 973-1188
// -> 1291-1370.
func copyTeeWhole(tee, src []byte) {
	n := min(len(tee), len(src))
	if n > cachedMax {
		copy(tee, src)
		return
	}
	for o := 0; o < n; o += cachedPiece {
		e := min(o+cachedPiece, n)
		copy(tee[o:e], src[o:e])
	}
}

// cachedMax is the largest tee copyTeeWhole keeps in the caches;
// cachedPiece its piece, half of memmove's non-temporal threshold (1 MiB).
const (
	cachedMax   = 2 << 20
	cachedPiece = 512 << 10
)

// teeRecheck: of the records a send with a tee puts into the ring, one in
// teeRecheck is copied plainly and timed (the rate chooseCMA reads),
// then copied into the tee; the rest go through copyTee untimed. With
// every record timed through copyTee (counted as 1.5 records), the tee's
// stores (the caller's output, from L3 or memory for large calls) had slow
// spells that took close QPs to single copy, and those launches ran slow.
// Timing a sample instead keeps the rate honest; the sample is sparse
// because each timed record gives up copyTee's single pass.
const teeRecheck = 16

// teePiece is copyTee's piece: a page, well inside L1. A 64 KiB record
// copied whole into the ring and then into the tee (its second read from
// L2) was no faster than the two copies apart.
const teePiece = 4 << 10

// sendCMA publishes buf's address as one single-copy record. It reports
// false when the ring has no room for it yet.
func (q *QP) sendCMA(buf []byte) bool {
	rb := q.seg.out.ring
	const need = recAlign
	pos, ok := q.reserveWhole(need)
	if !ok {
		return false
	}
	putRec(rb, pos, fFirst|fLast|fCMA, 16, len(buf))
	binary.LittleEndian.PutUint64(rb[pos+recHdr:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))))
	binary.LittleEndian.PutUint64(rb[pos+recHdr+8:], uint64(flowtel.Monotonic()))
	q.otail += need
	q.seg.out.tail.Store(q.otail)
	q.cmaSent++
	q.notify = true
	return true
}

// reserveWhole finds room for a record of need bytes that must not wrap
// (an eager or single-copy one): at the ring's tail, or after padding to
// the ring's start. It reports false when the ring has no room yet; the
// padding, if written, goes out with the record.
func (q *QP) reserveWhole(need int) (pos int, ok bool) {
	rb := q.seg.out.ring
	pos = int(q.otail & q.rmask)
	if contig := len(rb) - pos; need > contig {
		if !q.room(contig) {
			return 0, false
		}
		putRec(rb, pos, fPad, 0, 0)
		q.otail += uint64(contig)
		pos = 0
	}
	return pos, q.room(need)
}

// room reports whether the out ring has need free bytes.
func (q *QP) room(need int) bool {
	R := uint64(len(q.seg.out.ring))
	if q.otail-q.ohead+uint64(need) <= R {
		return true
	}
	h := q.seg.out.head.Load()
	if h < q.ohead || h > q.otail {
		q.protocolError("peer head %d outside [%d, %d]", h, q.ohead, q.otail)
		return false
	}
	q.ohead = h
	return q.otail-q.ohead+uint64(need) <= R
}

func (q *QP) protocolError(format string, args ...any) {
	err := fmt.Errorf("%w: shm peer (pid %d) broke the ring protocol: %s", transport.ErrPeerDead, q.peerPid, fmt.Sprintf(format, args...))
	q.gone.CompareAndSwap(nil, &goneReason{err: err, corrupt: true})
	q.wakeBGNow()
	q.conn.Close() // the peer learns it too
}

// failAll completes every WR with the reason the peer is gone, after
// delivering the messages it published completely before it went (unless
// it broke the protocol).
func (q *QP) failAll(g *goneReason) bool {
	if !q.pending() {
		return false
	}
	if b := math.MaxInt; q.recvs.Len() > 0 && !g.corrupt {
		q.recvPass(&b)
	}
	if !g.corrupt {
		// The peer may have taken these messages and announced their
		// receives before it went: a rank leaving after its last
		// collective.
		q.settleEager()
		// Or read the send it was given by address, and acknowledged it.
		if q.sends.Len() > 0 {
			out := &q.seg.out
			if s := q.sends.Front(); s.cma && out.cmaDone.Load() == q.cmaSent && out.cmaFail.Load() == q.cmaFails {
				q.complete(&s.wr, s.telID, transport.OpSend, flowtel.StatusOK, len(s.wr.Buf), nil)
				q.sends.PopFront()
			}
		}
	}
	err := g.err
	for q.eager.Len() > 0 {
		e := q.eager.Front()
		q.complete(&e.wr, e.telID, transport.OpSend, flowtel.StatusError, 0, err)
		q.eager.PopFront()
	}
	for q.sends.Len() > 0 {
		s := q.sends.Front()
		q.complete(&s.wr, s.telID, transport.OpSend, flowtel.StatusError, 0, err)
		q.sends.PopFront()
	}
	for q.recvs.Len() > 0 {
		r := q.recvs.Front()
		q.complete(&r.wr, r.telID, transport.OpRecv, flowtel.StatusError, 0, err)
		q.recvs.PopFront()
	}
	return true
}

func (q *QP) markGone(err error) {
	q.gone.CompareAndSwap(nil, &goneReason{err: err})
	q.wakeBGNow()
}

// peerWords is what the peer writes that this side waits on.
type peerWords struct{ tail, head, posted, read, cmaDone uint64 }

func (q *QP) peerWords() peerWords {
	return peerWords{q.seg.in.tail.Load(), q.seg.out.head.Load(), q.seg.out.posted.Load(), q.seg.in.read.Load(), q.seg.out.cmaDone.Load()}
}

// run is the background progress goroutine.
func (q *QP) run() {
	defer q.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	nap := napMin
	lastPolls := q.polls.Load()
	for !q.closed.Load() {
		if p := q.polls.Load(); p-lastPolls >= activePolls && !q.handed.Load() {
			// The owner polls: it moves the data. Look again later.
			lastPolls = p
			q.nap(timer, nap)
			nap = min(2*nap, napMax)
			continue
		}
		nap = napMin
		seen := q.posts.Load()
		snap := q.peerWords()
		lastPolls = q.polls.Load()
		if !q.mu.TryLock() {
			q.nap(timer, nap) // the owner (or Close) is moving data
			continue
		}
		n0 := q.ncomp
		moved := q.pass(passBudget, true)
		pending := q.pending()
		completed := q.ncomp != n0
		q.mu.Unlock()
		if completed {
			// The Notifier readied the owner on this P: let it run now
			// rather than when this goroutine next blocks.
			runtime.Gosched()
		}
		switch {
		case !pending:
			q.idleWait(seen)
			lastPolls = q.polls.Load()
		case !moved:
			q.waitPeer(seen, snap)
		}
	}
}

// nap waits d beside a polling owner, which moves what the peer publishes
// and takes its own posts. A kick (the owner handing the wait over, a post
// the owner could not take, closure, peer death) ends it early.
func (q *QP) nap(t *time.Timer, d time.Duration) {
	t.Reset(d)
	select {
	case <-t.C:
	case <-q.kick:
		t.Stop()
	case <-q.stop:
		t.Stop()
	}
}

// idleWait parks the background goroutine while the QP has no WRs.
func (q *QP) idleWait(seen uint64) {
	q.bgIdle.Store(true)
	if q.posts.Load() == seen && q.gone.Load() == nil && !q.closed.Load() {
		select {
		case <-q.kick:
		case <-q.stop:
		}
	}
	q.bgIdle.Store(false)
}

// waitPeer waits for the peer with the owner away: it polls the peer's
// words for spinFor (an owner that handed the wait over still polls for a
// while, so then it does not), then sleeps on the futex with the sleeping
// flag up, so the peer's next publication wakes it. An owner that polls
// again sends it back to napping.
func (q *QP) waitPeer(seen uint64, snap peerWords) {
	p0 := q.polls.Load()
	changed := func() bool {
		return q.posts.Load() != seen || q.gone.Load() != nil || q.closed.Load() || q.peerWords() != snap ||
			q.polls.Load()-p0 >= activePolls && !q.handed.Load()
	}
	if !q.handed.Load() {
		t0 := flowtel.Monotonic()
		for i := 0; ; i++ {
			if changed() {
				return
			}
			if i&63 == 63 && flowtel.Monotonic()-t0 >= int64(spinFor) {
				break
			}
		}
	}
	me := q.seg.me
	seq := me.bell.Load()
	me.sleeping.Store(1)
	if !changed() {
		futexWait(me.bell, seq, sleepMax)
	}
}

// watch holds the Unix socket: its end of file is the peer's exit, crashed
// or not.
func (q *QP) watch() {
	defer q.wg.Done()
	var b [16]byte
	for {
		if _, err := q.conn.Read(b[:]); err != nil {
			break
		}
	}
	if q.closed.Load() {
		return
	}
	why := "died"
	if q.seg.peer.state.Load() == stateClosed {
		why = "closed its queue pair"
	}
	q.markGone(fmt.Errorf("%w: shm peer (pid %d) %s", transport.ErrPeerDead, q.peerPid, why))
}

// Close flushes this end's WRs, tells the peer and releases the segment.
func (q *QP) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.pmu.Lock()
	q.pclosed = true
	ps, pr := q.psends, q.precvs
	q.psends, q.precvs = nil, nil
	q.pmu.Unlock()
	close(q.stop)
	q.wakeBGNow()
	q.mu.Lock()
	// The peer reads it when our socket closes: "closed", not "died".
	// Announced before the flush: a peer that reads a send's buffer by
	// address checks it after the read (readCMA).
	q.seg.me.state.Store(stateClosed)
	flushAll(q, transport.OpSend, &q.eager, nil, func(e *eagerSend) (*transport.WR, uint64) { return &e.wr, e.telID })
	flushAll(q, transport.OpSend, &q.sends, ps, func(s *sendOp) (*transport.WR, uint64) { return &s.wr, s.telID })
	flushAll(q, transport.OpRecv, &q.recvs, pr, func(r *recvOp) (*transport.WR, uint64) { return &r.wr, r.telID })
	q.mu.Unlock()
	q.release()
	return nil
}

// flushAll completes, as flushed by Close, the WRs queued in f and then
// those of rest (taken from the post lists), oldest first, emptying f; ref
// gives an element's WR and telemetry id.
func flushAll[T any](q *QP, op transport.Opcode, f *flowtel.FIFO[T], rest []T, ref func(*T) (*transport.WR, uint64)) {
	for f.Len() > 0 {
		wr, id := ref(f.Front())
		q.complete(wr, id, op, flowtel.StatusFlushed, 0, transport.ErrClosed)
		f.PopFront()
	}
	for i := range rest {
		wr, id := ref(&rest[i])
		q.complete(wr, id, op, flowtel.StatusFlushed, 0, transport.ErrClosed)
	}
}

// crash abandons the QP as a killed process would: no flush, no goodbye in
// the segment; the socket closes and the mapping goes away.
func (q *QP) crash() {
	if q.closed.Swap(true) {
		return
	}
	q.pmu.Lock()
	q.pclosed = true
	q.pmu.Unlock()
	close(q.stop)
	q.wakeBGNow()
	q.release()
}

func (q *QP) release() {
	q.conn.Close()
	q.wg.Wait()
	q.live.Lock()
	q.unmapped = true
	unix.Munmap(q.seg.mem)
	q.live.Unlock()
	q.cma.close()
	q.mbox.closeReader()
}
