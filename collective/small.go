package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/shm"
)

// The small all-reduce over shared memory. On a communicator whose ranks
// all reach each other over shm, an all-reduce of at most smallLimit bytes
// per rank skips the progress engine: the caller writes its input into its
// mailbox slot of every peer's queue pair (transport.Mailboxer), publishes
// the call's number, waits for every peer's number, and reduces the peers'
// slots and its own copy, in rank order, into the output. No task, no
// engine token, no schedule, no signature header, no WR: one cache-line
// hand-off each way carries the call, where the engine's path adds its
// per-call bookkeeping to the transport's exchange, which at these sizes
// is most of the call's time (docs/design.md, "Small all-reduce over shared
// memory"; BENCHMARKS.md has the figures). Its records are written as
// Exchange entries, one per peer, that the ring's drain expands into the
// records the engine's path writes, in the same shape
// (TestPathsRecordOneShape).
//
// Every rank takes this path for the same calls: the choice depends only on
// what every rank knows alike (the ranks' hosts and processes, the forced
// transport and algorithm, the call's size), never on local state such as
// a busy engine. Calls on the path run one at a time, in the order they were
// made (a ticket taken with the call's sequence number), and each waits
// first for the async calls the engine still runs that were made before it,
// so it overtakes no earlier work; the engine's later calls do not wait for
// a path call still in flight (they share no queue with it).
//
// Slot reuse needs no acknowledgement: slot k&1 is rewritten at call k+2
// only after every peer published k+1, which it does after it finished
// reading call k. A call that fails after taking its ticket leaves the
// mailboxes out of step with the peers, so it fails the communicator, like
// an engine call that fails with transfers out.

// smallMax bounds what a mailbox all-reduce moves where the engines spin:
// its bytes per rank times the peers it copies them to (each into its
// slot of that peer's QP) and reads theirs from. A mailbox call does that
// many bytes of copying and reduction each way where the engine's ring
// does about twice its bytes, so the copies grow with the peers and the
// path keeps to 64 KiB of them: 2 ranks take it up to 64 KiB a rank, 3
// ranks to 32 KiB, 9 ranks to 8 KiB. Up to there it beat the engine
// wherever the ranks were placed (BENCHMARKS.md).
const smallMax = 64 << 10

// slotMax is the mailbox slot the path needs (shm's MailboxSlot): the
// most a call moves a rank.
const slotMax = 256 << 10

// smallLimit is the largest call of op, in bytes per rank, that takes the
// mailbox path as one whole call on a communicator of n ranks (n >= 2)
// whose engines spin or not (larger ones may go there in slices:
// slicesFor). Engines that may not spin (more of them than cores) wait for
// every step of a call through a sleep or a yield, which costs more than
// the mailbox's extra copies: a call with one hand-off waits once where
// the engine's steps wait each, so there the path takes a whole slot
// whatever n and op (4 ranks on 2 cores: all-reduce of 128-256 KiB 3-4x
// faster than the engine, decision 0047), but an all-reduce only up to
// half a slot: above, its slices copy about a quarter of what whole inputs
// copied to every peer and reduced there, for two more hand-offs (4 ranks
// on 2 cores, 256 KiB: 124-256 us against 183-442; at 128 KiB the
// hand-offs cost as much as they save; decision 0051). Between 2
// spinning ranks a broadcast or an all-gather, which reduce nothing, moves
// each byte once each way through the slots against the engine's single
// copy with its call check, credit and acknowledgement: there the path
// takes a broadcast up to a slot and an all-gather up to half of one a
// rank (decision 0046).
func smallLimit(n int, spin bool, op Op) int {
	switch {
	case !spin && op == OpAllReduce:
		return slotMax / 2
	case !spin:
		return slotMax
	case n == 2 && op == OpBroadcast:
		return slotMax
	case n == 2 && op == OpAllGather:
		return slotMax / 2
	}
	return smallMax / (n - 1)
}

// telLateMin is the size of a mailbox call's copies (its bytes per rank
// times its peers) from which begin's clock reading is taken before the
// copies, and its records written with end's, rather than both after the
// publication. Below it, begin's work after the publication runs while the
// peers take to see it, hidden by the wait; from it, the same work after
// the publication lengthens the call and at the end of the call it does
// not (vccl-bench --telemetry alternate; BENCHMARKS.md). Why work right
// after a large copy's publication costs more is not established.
const telLateMin = 32 << 10

// streamSlotMin is the smallest input that a broadcast's root, or an
// all-gather rank (which takes its own block from its input: the API hands
// the path an input in place or apart from the output, inputApart), writes
// into its slots past its caches (Mailbox.StreamSlot): each line a plain
// store writes is one the peer's core read at the call before last, and
// between far cores the store waits for the line to come back, which took
// most of a 64 KiB call. Where a rank reads its own slot afterwards (an
// all-reduce) the slot is written plainly: a streamed one would be read
// back from memory, and all-gather streamed that way ran slower (decision
// 0046). Below it, the few lines cost less
// than the memory round trip the peer's read of them then makes. From it,
// the rank measures which way is faster here (slotWrites, decision 0054):
// between cores that share their last-level cache, plain stores win.
const streamSlotMin = 16 << 10

// Waiting for a peer: poll without pause for smallSpin, then yield the core
// between polls until smallYield, then sleep on the peer's sequence word in
// slices of smallNap, checking the deadline, the abort board and the peer's
// connection between slices.
const (
	smallSpin  = 20 * time.Microsecond
	smallYield = 200 * time.Microsecond
	smallNap   = time.Millisecond
)

type smallPath struct {
	boxes []transport.Mailbox // by peer rank; nil for this rank
	own   transport.Mailbox   // the first peer's: its slot holds this rank's input
	qpids []uint32            // telemetry QP id of each peer's mailbox
	peer  int                 // the only peer of a 2-rank path; -1: more
	last  int                 // the last peer, whose end entry carries coll_end
	rec   *flowtel.Recorder   // the path's own: its calls run one at a time
	beat  flowtel.Heartbeat   // its waits', on rec
	comm  uint32

	// Under Comm.mu.
	issued uint32    // tickets handed out, to every collective call
	async  []*Handle // engine calls started async, maybe unfinished

	loans loanChoice // whether 2 ranks' all-reduces go by loans (its own lock)

	// The turn: tickets finish in order. done is written under turnMu.
	turnMu   sync.Mutex
	turn     *sync.Cond
	done     atomic.Uint32
	deferred []uint32 // engine calls' tickets to publish once the turn reaches them
	waiters  int

	// Under the turn.
	lastBox   uint32           // the last ticket that was a mailbox call
	wrs       uint64           // telemetry WR sequence
	held      heldBegin        // the running call's begin, while its records wait
	writes    [3][2]slotWrites // how data the peers alone read is handed over (writesFor)
	way       slotWay          // the running call's choice
	lent      []bool           // by peer: the running call's data the peer lent (for all-gathers and broadcasts)
	scratch   [][]byte         // a reduction by loans reads its peers' chunks here, one a worker (loaned.go)
	reduced   []byte           // and a reduce's rank other than the root its reduced block
	loanOrder []int            // and the peers whose blocks it has yet to gather

	// live is held while a call touches the mailboxes; teardown takes it
	// (after raising stopping) before the QPs unmap them.
	live     sync.Mutex
	dead     bool
	stopping atomic.Bool

	testFault func()      // tests only: called as a call starts, to make it panic
	testRead  func(q int) // tests only: called before a call by loans reads what rank q lent (an all-reduce's: its reduced block)
}

// newSmallPath returns the path of a communicator whose every pair of ranks
// is joined over shm with mailboxes, or nil. The caller holds the QPs.
func (c *Comm) newSmallPath(rec *flowtel.Recorder) *smallPath {
	if c.size < 2 || c.opts.algo != AlgoAuto && c.opts.algo != AlgoDirect {
		return nil
	}
	// Every pair, not only this rank's: ranks that disagreed would wait
	// for each other on different paths.
	if !c.everyPairShares(c.peers) {
		return nil
	}
	s := &smallPath{boxes: make([]transport.Mailbox, c.size), qpids: make([]uint32, c.size), lent: make([]bool, c.size), rec: rec, comm: c.id, peer: -1}
	for i := range 2 {
		s.writes[0][i].lends, s.writes[1][i].lends = true, true
	}
	if c.size == 2 {
		s.peer = 1 - c.rank
	}
	for p, qp := range c.qps[0] {
		if p == c.rank {
			continue
		}
		mb, ok := qp.(transport.Mailboxer)
		if !ok {
			return nil
		}
		s.boxes[p] = mb.Mailbox()
		if s.boxes[p].SlotSize() < slotMax {
			return nil
		}
		if s.own == nil {
			s.own = s.boxes[p]
		}
		s.qpids[p] = nextQPID.Add(1)
	}
	// Find out now, before the first call, which peers this rank can read
	// (and tell them): a rank lends only to peers that said they can.
	for _, b := range s.boxes {
		if b != nil {
			b.ReadsPeer()
		}
	}
	s.initRecords(c.rank)
	s.turn = sync.NewCond(&s.turnMu)
	return s
}

// writesFor is the table of slot-write choices of calls of op, in place
// or not: apart for the operations that may lend, and for calls in place,
// which copy nothing of their own beside the loan's read (a broadcast of
// 4 MiB in place lost a tenth lent, where apart it won a third: the
// slots' pieces keep both cores copying).
func (s *smallPath) writesFor(op Op, inPlace bool) *slotWrites {
	i := 0
	if inPlace {
		i = 1
	}
	switch op {
	case OpAllGather:
		return &s.writes[0][i]
	case OpBroadcast:
		return &s.writes[1][i]
	}
	return &s.writes[2][i]
}

// lendMin is the smallest input an all-gather's rank or a broadcast's root
// may lend (Mailbox.Lend): the size from which it measures how to hand its
// data over, and from which the peers look for a loan.
const lendMin = streamSlotMin

// lends reports whether the calls of op of n bytes a rank (a broadcast's
// root's buffer) may be lent, so that their readers look for a loan.
func lends(op Op, n int) bool { return (op == OpAllGather || op == OpBroadcast) && n >= lendMin }

// peersReadMe reports whether every peer said it can read this process's
// memory.
func (s *smallPath) peersReadMe() bool {
	for _, b := range s.boxes {
		if b != nil && !b.PeerReadsMine() {
			return false
		}
	}
	return true
}

// initRecords notes which peer's entries close a call's records.
func (s *smallPath) initRecords(rank int) {
	s.last = -1
	for p, b := range s.boxes {
		if b != nil && p != rank {
			s.last = p
		}
	}
}

// takesSmall reports whether a call takes the mailbox path: an
// all-reduce, broadcast or all-gather of at most smallLimit bytes per
// rank, or a larger one, or a reduce-scatter, that goes by loans
// (loanedFor) or in slices (slicesFor), a reduce that goes by loans, or
// a barrier, on a communicator that has the path. rq is
// validated; inline says whether it is a blocking call (which loanChoice
// may time). Ranks that decide otherwise (their engines' spinning differs)
// meet at the tag check and run the call on the engine together.
func (c *Comm) takesSmall(rq *request, inline bool) bool {
	if c.small == nil || rq.seq != 0 {
		return false
	}
	spin := c.engines[0].spins()
	limit := smallLimit(c.size, spin, rq.call.op)
	if uint64(len(rq.in)) > math.MaxUint32 || uint64(len(rq.out)) > math.MaxUint32 {
		return false // beyond what a call's Exchange entries carry (exchange)
	}
	switch rq.call.op {
	case OpAllReduce, OpAllGather:
		// Above the limit, some go by loans (loaned.go) or in slices
		// (slices.go).
		rq.loaned = len(rq.in) > limit && c.loanedFor(rq.call.op, len(rq.in), spin)
		if rq.loaned && measuresLoans(rq.call.op, c.size) {
			var timed bool
			if rq.loaned, timed = c.small.loans.choose(len(rq.in), inline); timed {
				rq.probeAt = flowtel.Monotonic()
			}
		}
		rq.slices = len(rq.in) > limit && !rq.loaned && slicesFor(rq.call.op, c.size, spin)
		return len(rq.in) > 0 && (len(rq.in) <= limit || rq.slices || rq.loaned)
	case OpBroadcast:
		rq.loaned = len(rq.out) > limit && c.loanedFor(rq.call.op, len(rq.out), spin)
		rq.slices = len(rq.out) > limit && !rq.loaned && slicesFor(rq.call.op, c.size, spin)
		return len(rq.out) > 0 && (len(rq.out) <= limit || rq.slices || rq.loaned) && rq.call.root < 1<<7
	case OpReduceScatter:
		rq.loaned = c.loanedFor(rq.call.op, len(rq.out), spin)
		rq.slices = !rq.loaned && slicesFor(rq.call.op, c.size, spin)
		return len(rq.out) > 0 && (rq.slices || rq.loaned)
	case OpReduce:
		rq.loaned = c.loanedFor(rq.call.op, len(rq.in), spin)
		return len(rq.in) > 0 && rq.loaned && rq.call.root < 1<<7
	case OpBarrier:
		return true
	}
	return false
}

// smallStart runs rq on the mailbox path: at once for a blocking call
// (inline; no handle), else on a goroutine when its turn comes.
func (c *Comm) smallStart(ctx context.Context, inline bool, rq request) (*Handle, error) {
	k, seq, prev, timeout, err := c.smallIssue(ctx)
	if err != nil {
		return nil, err
	}
	c.settle(seq, &rq)
	if !inline {
		return c.smallAsync(ctx, k, seq, prev, timeout, rq), nil
	}
	defer c.pending.Done() // also when a panic unwinds through a deferred Close
	return nil, c.smallExec(ctx, k, seq, prev, &smallDeadline{timeout: timeout}, &rq, nil)
}

// smallAsync runs an async call on a goroutine. Its own function: a blocking
// call's request, which the goroutine would capture, stays on the stack.
func (c *Comm) smallAsync(ctx context.Context, k uint32, seq uint64, prev []*Handle, timeout time.Duration, rq request) *Handle {
	w := &smallWait{done: make(chan struct{})}
	go func() {
		c.smallExec(ctx, k, seq, prev, &smallDeadline{timeout: timeout}, &rq, w)
		c.pending.Done() // finished, waited for or not
	}()
	return &Handle{comm: c, small: w}
}

// smallWait is an async mailbox call.
type smallWait struct {
	done chan struct{}
	err  error
}

// smallIssue numbers a call: its sequence number, its ticket, the async
// engine calls it must not overtake, and the communicator's timeout when
// the context has no deadline.
func (c *Comm) smallIssue(ctx context.Context) (k uint32, seq uint64, prev []*Handle, timeout time.Duration, err error) {
	if _, ok := ctx.Deadline(); !ok {
		timeout = c.opts.timeout
	}
	s := c.small
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, 0, nil, 0, ErrClosed
	}
	if err := c.failed(); err != nil {
		return 0, 0, nil, 0, err
	}
	c.seq++
	c.observeCall(ctx, c.seq)
	s.issued++
	if len(s.async) > 0 {
		s.pruneAsync()
		prev = append(prev, s.async...)
	}
	c.pending.Add(1)
	return s.issued, c.seq, prev, timeout, nil
}

// noteAsync keeps an async engine call for the mailbox calls made after it
// to wait for. The caller holds Comm.mu.
func (s *smallPath) noteAsync(h *Handle) {
	s.pruneAsync()
	s.async = append(s.async, h)
}

// pruneAsync forgets the async calls that finished (and with them the
// caller's buffers). The caller holds Comm.mu.
func (s *smallPath) pruneAsync() {
	kept := s.async[:0]
	for _, h := range s.async {
		if !h.finished() {
			kept = append(kept, h)
		}
	}
	clear(s.async[len(kept):])
	s.async = kept
}

// finished reports whether every task of an engine handle finished.
func (h *Handle) finished() bool {
	for _, t := range h.tasks {
		if !t.finished() {
			return false
		}
	}
	return true
}

// engineTicket gives an engine call its ticket and publishes it ("not a
// mailbox call") to the peers, now if the turn has come, else when it
// does: a peer whose mailbox call meets it at the same ticket falls back to
// the engine too, whose signature check then names the mismatch on every
// rank. The caller holds Comm.mu.
func (s *smallPath) engineTicket() {
	s.issued++
	k := s.issued
	s.turnMu.Lock()
	if s.done.Load() == k-1 {
		s.publishEngine(k)
		if s.waiters > 0 {
			s.turn.Broadcast()
		}
	} else {
		s.deferred = append(s.deferred, k)
	}
	s.turnMu.Unlock()
}

// publishEngine publishes engine ticket k and finishes it. The caller
// holds turnMu, with the mailboxes mapped.
func (s *smallPath) publishEngine(k uint32) {
	for _, b := range s.boxes {
		if b != nil {
			b.Publish(k, 0)
		}
	}
	s.done.Store(k)
}

// await waits until ticket k finished.
func (s *smallPath) await(k uint32) {
	if s.done.Load() == k {
		return
	}
	s.turnMu.Lock()
	s.waiters++
	for s.done.Load() != k {
		s.turn.Wait()
	}
	s.waiters--
	s.turnMu.Unlock()
}

// pass finishes mailbox ticket k, and the engine tickets that waited for
// it (published only while the mailboxes are mapped: publish).
func (s *smallPath) pass(k uint32, publish bool) {
	s.turnMu.Lock()
	s.done.Store(k)
	n := 0
	for _, j := range s.deferred {
		if j != s.done.Load()+1 {
			break
		}
		if publish {
			s.publishEngine(j)
		} else {
			s.done.Store(j)
		}
		n++
	}
	s.deferred = append(s.deferred[:0], s.deferred[n:]...)
	if s.waiters > 0 {
		s.turn.Broadcast()
	}
	s.turnMu.Unlock()
}

// errFallback is smallRun's answer when the ranks did not all make the
// same mailbox call at this ticket.
var errFallback = errors.New("collective: mailbox call falls back to the engine")

// smallExec runs call k when its turn comes and hands the turn on. An
// async call's handle (w) is done before the turn passes, so that a later
// call never returns before an earlier one's handle says it finished.
func (c *Comm) smallExec(ctx context.Context, k uint32, seq uint64, prev []*Handle, deadline *smallDeadline, rq *request, w *smallWait) error {
	s := c.small
	s.await(k - 1)
	err := c.smallPrev(ctx, prev, seq)
	s.live.Lock()
	returned := false
	defer func() {
		if !returned {
			s.unwind(c, k, seq, rq, w)
		}
	}()
	switch {
	case s.dead:
		err = ErrAborted
	case err == nil:
		err = c.smallRun(ctx, k, seq, deadline, rq)
	}
	switch {
	case err == nil && rq.probeAt != 0 && w == nil:
		s.loans.done(len(rq.in), rq.loaned, flowtel.Monotonic()-rq.probeAt)
	case err == errFallback && rq.loaned && measuresLoans(rq.call.op, c.size):
		s.loans.fellBack(len(rq.in))
	}
	var h *Handle
	if err == errFallback {
		// Some rank made another call at this ticket: run this one on the
		// engine under the same sequence number, where the signature
		// check names every rank's call (the mailboxes stay in step: every
		// rank published this ticket).
		again := *rq
		again.seq = seq
		h, err = c.start(ctx, false, again)
	} else if err != nil {
		// This rank's mailboxes are now out of step with its peers':
		// the communicator is done for, as after an engine call that
		// failed with transfers out.
		c.poison(seq, fmt.Errorf("collective: %v seq %d (mailbox path) failed: %w", rq.call.op, seq, err))
	}
	if h == nil {
		err = c.verdict(seq, err)
		if w != nil {
			w.err = err
			close(w.done)
		}
	}
	s.pass(k, !s.dead)
	returned = true
	s.live.Unlock()
	if h != nil {
		err = h.Wait(ctx)
		if w != nil {
			w.err = err
			close(w.done)
		}
	}
	return err
}

// unwind ends call k when it panicked (a bug, here or in a transport),
// as driveHolding does for an engine: the communicator fails, a handle
// waiting on the call gets the failure, the turn passes and live is let go,
// so that the caller's deferred Close returns and the process crashes with
// the panic rather than hanging on live. The caller holds live.
func (s *smallPath) unwind(c *Comm, k uint32, seq uint64, rq *request, w *smallWait) {
	s.dead = true
	err := fmt.Errorf("collective: %v seq %d: %w", rq.call.op, seq, errMailboxPanicked)
	c.poison(seq, err)
	if w != nil {
		select {
		case <-w.done:
		default:
			w.err = err
			close(w.done)
		}
	}
	s.pass(k, false)
	s.live.Unlock()
}

// errMailboxPanicked fails a communicator whose mailbox call panicked.
var errMailboxPanicked = errors.New("collective: a mailbox call panicked; the communicator is unusable")

// smallPrev waits for the async engine calls made before call seq.
func (c *Comm) smallPrev(ctx context.Context, prev []*Handle, seq uint64) error {
	for _, h := range prev {
		for _, t := range h.tasks {
			if t.finished() {
				continue
			}
			select {
			case <-t.doneChan():
			case <-ctx.Done():
				return fmt.Errorf("collective: %v seq %d on rank %d: %w; still waiting for the earlier %v seq %d", OpAllReduce, seq, c.rank, ctx.Err(), t.call.op, t.seq)
			}
		}
	}
	return nil
}

// poison fails the communicator with err and, unless another rank's
// failure caused it, posts it on the abort board.
func (c *Comm) poison(seq uint64, err error) {
	first := false
	for i, e := range c.engines {
		if e.setFailed(err) && i == 0 {
			first = true
		}
		e.notify.Signal()
		e.wake()
	}
	if first && c.engines[0].onFail != nil {
		c.engines[0].onFail(seq, err)
	}
}

// smallTag describes a mailbox call in its publication, so that ranks that
// do not all make it at the same ticket fall back to the engine together
// (an engine call's tag is 0): operation, datatype, reduction or root, and
// bytes per rank.
func smallTag(rq *request) uint32 {
	arg, n := uint32(rq.call.redop), len(rq.in)
	switch rq.call.op {
	case OpBroadcast:
		arg, n = uint32(rq.call.root), len(rq.out)
	case OpBarrier:
		n = 0
	}
	return 1<<31 | uint32(rq.call.op)<<27 | uint32(rq.dt)<<23 | arg<<16 | uint32(n)
}

// smallRun is call k on the mailboxes. The caller holds s.live and the
// turn.
func (c *Comm) smallRun(ctx context.Context, k uint32, seq uint64, deadline *smallDeadline, rq *request) error {
	s := c.small
	if s.testFault != nil {
		s.testFault()
	}
	if err := c.failed(); err != nil {
		return err
	}
	op := rq.call.op
	// Slot k&1 held call k-2, which the peers may read until they publish
	// k-1. After a mailbox call k-1 this rank saw them do so; after an
	// engine call it did not wait.
	if s.lastBox != k-1 {
		for p, b := range s.boxes {
			if b != nil && !b.Arrived(k-1) {
				if err := c.smallWait(ctx, b, k-1, 0, p, seq, deadline, rq); err != nil {
					return err
				}
			}
		}
	}
	// What this rank puts in its slots: its input, but a broadcast's only
	// from the root and a barrier's nothing.
	in := rq.in
	switch {
	case op == OpBarrier, op == OpBroadcast && c.rank != rq.call.root:
		in = nil
	}
	tag, sent := smallTag(rq), len(in)
	switch {
	case rq.slices:
		tag, sent = slicesTag(rq), c.slicesSent(rq)
	case rq.loaned:
		tag, sent = loanTag(rq), c.slicesSent(rq)
	}
	// Telemetry: begin's clock reading and records go after the
	// publication, in the time the peers take to see it, unless this
	// rank's copies are large (see telLateMin); then the reading is taken
	// before them and the records wait for end.
	tel := s.rec.Enabled()
	late := tel && sent*(c.size-1) >= telLateMin
	if late {
		s.hold(seq, sent, s.rec.Now())
	}
	// Slots this rank does not read back (slices', a broadcast's, an
	// all-gather's) may stream, or an all-gather's or a broadcast root's
	// input be lent instead: it is in place or apart from the output
	// (inputApart), so nothing the rank writes while its peers read it
	// overwrites it.
	var timed bool
	var start int64
	s.way = wayPlain
	switch {
	case rq.loaned:
		s.way = wayLend
	case len(in) >= streamSlotMin && (rq.slices || op == OpBroadcast || op == OpAllGather):
		canLend := lends(op, len(in)) && s.peersReadMe()
		s.way, timed = s.writesFor(op, rq.call.inPlace).way(len(in), canLend)
		if timed {
			start = flowtel.Monotonic()
		}
	}
	var addr uintptr // the loan: its address, or 0
	switch {
	case rq.loaned && op == OpBroadcast && c.rank != rq.call.root:
		addr = uintptr(unsafe.Pointer(unsafe.SliceData(rq.out))) // its piece, for the other readers (loanedBroadcast)
	case s.way == wayLend:
		addr = uintptr(unsafe.Pointer(unsafe.SliceData(in)))
	}
	// Single-copy reads, of this rank's buffers by its peers and of
	// theirs into its own, go faster between huge pages (decision 0064).
	// A call that asked for its buffers' collapse is not timed (the
	// first one takes milliseconds): the next one of its size is, in its
	// place.
	if rq.loaned || lends(op, len(rq.in)) || lends(op, len(rq.out)) {
		if inAsked, outAsked := shm.AdviseSingleCopy(rq.in), shm.AdviseSingleCopy(rq.out); inAsked || outAsked {
			timed, rq.probeAt = false, 0
		}
	}
	switch {
	case rq.slices:
		c.slicesStart(k, rq)
	case rq.loaned:
		c.loanStart(k, rq)
	}
	for _, b := range s.boxes {
		if b != nil {
			if !rq.slices && s.way != wayLend {
				s.putSlot(b, k, in)
			}
			if lends(op, len(in)) || rq.loaned {
				b.Lend(k, addr)
			}
			b.Publish(k, tag)
		}
	}
	if tel && !late {
		s.begin(c, k, seq, rq, sent)
	}
	s.lastBox = k
	st := flowtel.StatusOK
	err := c.smallGather(ctx, k, seq, deadline, tag, rq)
	switch {
	case err != nil:
	case !rq.slices && !rq.loaned:
		err = c.smallCombine(ctx, k, seq, deadline, rq, in)
	case !c.slicesSameSize(k, rq):
		err = errFallback
	case rq.loaned:
		err = c.loanedRun(ctx, k, seq, deadline, rq)
	default:
		err = c.slicesRun(ctx, k, seq, deadline, rq)
	}
	if err != nil && addr != 0 {
		// The caller may change the buffer once this returns: a peer's
		// read still under way must fail, not take what comes next.
		for _, b := range s.boxes {
			if b != nil {
				b.Withdraw(k)
			}
		}
	}
	runtime.KeepAlive(in)     // lent, it is read by address until the peers said they read it
	runtime.KeepAlive(rq.out) // by loans, read at its distance from in
	switch {
	case err == errFallback:
		st = flowtel.StatusFlushed // the call runs again on the engine
	case err != nil:
		st = flowtel.StatusError
	case timed:
		s.writesFor(op, rq.call.inPlace).done(len(in), flowtel.Monotonic()-start)
	}
	if tel {
		s.end(c, seq, rq, sent, st)
	}
	return err
}

// putSlot writes src into b's slot of call k, streamed where the running
// call chose to (smallPath.writes).
func (s *smallPath) putSlot(b transport.Mailbox, k uint32, src []byte) {
	if s.way == wayStream {
		b.StreamSlot(k, src)
		return
	}
	copy(b.Slot(k, len(src)), src)
}

// smallCombine makes call k's output from the slots, and from the
// buffers peers lent. A rank that read a loan then says so (part 1 of the
// call), and a rank that lent waits until every peer has: its buffer is
// the caller's again only then.
func (c *Comm) smallCombine(ctx context.Context, k uint32, seq uint64, deadline *smallDeadline, rq *request, in []byte) error {
	s := c.small
	switch rq.call.op {
	case OpBarrier:
		return nil
	case OpAllGather, OpBroadcast:
		lent := c.takeLoans(k, rq)
		if err := c.readWhole(k, rq); err != nil {
			return err
		}
		if lent || s.way == wayLend {
			return c.lentDone(ctx, k, seq, deadline, rq)
		}
		return nil
	}
	// An all-reduce.
	n := len(in)
	slot := func(r int) []byte {
		if r == c.rank {
			return s.own.Slot(k, n) // a copy of the input, which an all-reduce in place overwrites
		}
		return s.boxes[r].PeerSlot(k, n)
	}
	// In rank order, so that every rank computes the same bits.
	dt, redop, acc := rq.dt, rq.call.redop, slot(0)
	for r := 1; r < c.size; r++ {
		reduceInto(dt, redop, rq.out, acc, slot(r))
		acc = rq.out
	}
	if redop == Avg {
		scaleDiv(dt, rq.out, c.size)
	}
	return nil
}

// takeLoans notes, in smallPath.lent, which peers lent their data for
// call k (published), and reports whether any did. Only an all-gather's or
// a broadcast's of lendMin bytes or more may have lent: below, the words a
// loan uses may hold the call's data (Mailbox.Lend).
func (c *Comm) takeLoans(k uint32, rq *request) bool {
	s := c.small
	if !lends(rq.call.op, slicesSize(rq)) {
		clear(s.lent)
		return false
	}
	lent := false
	for p, b := range s.boxes {
		s.lent[p] = b != nil && (rq.call.op == OpAllGather || p == rq.call.root) && b.PeerLent(k)
		lent = lent || s.lent[p]
	}
	return lent
}

// readWhole makes the whole output of an all-gather or a broadcast of
// call k in one pass: the peers' lent data read out of their memory, the
// rest copied from their slots (peer order), this rank's own from its
// input. takeLoans has run.
func (c *Comm) readWhole(k uint32, rq *request) error {
	s := c.small
	from := func(p int, dst []byte) error {
		if s.lent[p] {
			return s.boxes[p].ReadLent(k, dst, 0)
		}
		copy(dst, s.boxes[p].PeerSlot(k, len(dst)))
		return nil
	}
	if rq.call.op == OpBroadcast {
		if root := rq.call.root; root != c.rank {
			return from(root, rq.out)
		}
		if !rq.call.inPlace {
			copy(rq.out, rq.in)
		}
		return nil
	}
	n := len(rq.in)
	for p, b := range s.boxes {
		switch {
		case b != nil:
			if err := from(p, rq.out[p*n:(p+1)*n]); err != nil {
				return err
			}
		case !rq.call.inPlace:
			copy(rq.out[p*n:], rq.in)
		}
	}
	return nil
}

// lentDone ends a call k in which some rank lent: every rank says it has
// read what it needed (part 1), and one that lent waits until every peer
// has said so.
func (c *Comm) lentDone(ctx context.Context, k uint32, seq uint64, deadline *smallDeadline, rq *request) error {
	c.publishPart(k, 1)
	if c.small.way != wayLend {
		return nil
	}
	return c.slicesWait(ctx, k, 1, seq, deadline, rq)
}

// smallGather waits until every peer has published call k, and returns
// errFallback unless each made the same mailbox call (tag).
func (c *Comm) smallGather(ctx context.Context, k uint32, seq uint64, deadline *smallDeadline, tag uint32, rq *request) error {
	fallback := false
	for p, b := range c.small.boxes {
		if b == nil {
			continue
		}
		if !b.Arrived(k) {
			if err := c.smallWait(ctx, b, k, 0, p, seq, deadline, rq); err != nil {
				return err
			}
		}
		// A tag overwritten (the peer went mbTags engine calls further)
		// cannot have been this call: it would still wait for this rank.
		if got, ok := b.PeerTag(k); !ok || got != tag {
			fallback = true
		}
	}
	if fallback {
		return errFallback
	}
	return nil
}

// smallWait waits until the peer p has published part part of call k (of
// request rq; part 0: the call itself): spinning, then yielding, then
// sleeping, and failing on the call's deadline, the abort board, teardown
// or the peer's end. Once it stops spinning it writes the records of a
// begin held for end.
func (c *Comm) smallWait(ctx context.Context, b transport.Mailbox, k, part uint32, p int, seq uint64, deadline *smallDeadline, rq *request) error {
	spin := c.engines[0].spins()
	var start int64 // read at the 64th poll: most waits end before
	for i := 1; ; i++ {
		if b.ArrivedPart(k, part) {
			return nil
		}
		if i&63 != 0 {
			continue
		}
		now := flowtel.Monotonic()
		if start == 0 {
			start = now
		}
		c.small.beat.Beat(c.small.rec, now, c.small.comm, int32(c.rank), 0, 1)
		waited := time.Duration(now - start)
		if spin && waited < smallSpin {
			continue
		}
		if i&1023 == 0 || waited >= smallYield {
			if err := c.smallCheck(ctx, b, k, part, p, seq, deadline, rq, now); err != nil {
				return err
			}
			if b.ArrivedPart(k, part) {
				return nil
			}
		}
		if c.small.held.on {
			// A long wait: a hung call shows live, not only once it
			// fails.
			c.small.writeHeld(c, rq)
		}
		if waited < smallYield {
			osYield()
			continue
		}
		b.SleepPart(k, part, smallNap)
	}
}

// smallDeadline is the communicator's timeout of a call whose context has
// none, counted from the first time its waits read the clock (a wait that
// ends within its first polls reads none; the call did not wait before).
type smallDeadline struct {
	timeout time.Duration // 0: the context's deadline governs
	at      int64         // monotonic ns; 0: not started
}

func (d *smallDeadline) passed(now int64) bool {
	if d.timeout == 0 {
		return false
	}
	if d.at == 0 {
		d.at = now + int64(d.timeout)
	}
	return now > d.at
}

// smallCheck returns why a wait for peer p must end, or nil.
func (c *Comm) smallCheck(ctx context.Context, b transport.Mailbox, k, part uint32, p int, seq uint64, deadline *smallDeadline, rq *request, now int64) error {
	if c.small.stopping.Load() {
		return ErrAborted
	}
	if err := c.failed(); err != nil {
		return err
	}
	err := ctx.Err()
	if err == nil && deadline.passed(now) {
		err = ErrTimeout
	}
	if err == nil {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			err = context.DeadlineExceeded
		}
	}
	if err != nil {
		return blame(fmt.Errorf("collective: %v seq %d on rank %d: %w; still waiting on rank %d", rq.call.op, seq, c.rank, err, p), p)
	}
	if perr := b.Err(); perr != nil && !b.ArrivedPart(k, part) {
		return fmt.Errorf("collective: %v seq %d: %w", rq.call.op, seq, peerError(p, perr))
	}
	return nil
}

// stop ends the path's calls before the QPs unmap the mailboxes.
func (s *smallPath) stop() {
	s.stopping.Store(true)
	s.live.Lock()
	s.dead = true
	s.live.Unlock()
}

// begin writes the records a work request's start writes: coll_begin, and
// a post of the send (this rank's slot: sent bytes) and of the receive (the
// peer's) on each peer's mailbox, all at one clock reading taken once the
// slots are published (the moment the sends are posted, to the peers), in
// place in the ring and published together.
//
// They are Exchange entries that the collector expands into those records,
// one per peer (decision 0035): the first peer's carries coll_begin. With
// one peer the entry is written now only if the peer has not published call
// k yet, so that the wait for it hides the entry's stores. A call that
// does not wait holds them for end, which writes the call's begin and end
// as one whole entry: one entry's stores and ring publication fewer on
// the path of the rank the other waits for.
func (s *smallPath) begin(c *Comm, k uint32, seq uint64, rq *request, sent int) {
	if s.peer >= 0 {
		// Polled before the clock is read: the poll's load (a miss
		// while the peer's line is in its cache) runs under the reading.
		arrived := s.boxes[s.peer].Arrived(k)
		ts := s.rec.Now()
		s.hold(seq, sent, ts)
		if !arrived {
			s.writeHeld(c, rq)
		}
		return
	}
	s.hold(seq, sent, s.rec.Now())
	s.writeHeld(c, rq)
}

// heldBegin is a call's begin whose records are not written yet.
type heldBegin struct {
	ts   int64
	seq  uint64
	sent int
	on   bool
}

// hold notes a call's begin, taken at ts, for writeHeld or end.
func (s *smallPath) hold(seq uint64, sent int, ts int64) {
	s.held = heldBegin{ts: ts, seq: seq, sent: sent, on: true}
}

// writeHeld writes the held begin's records (of call rq).
func (s *smallPath) writeHeld(c *Comm, rq *request) {
	h := &s.held
	h.on = false
	if s.peer >= 0 {
		if x := s.rec.ReserveExchange(flowtel.ExchangeBegin); x != nil {
			s.exchange(x, c, s.peer, h.seq, rq, h.ts, flowtel.StatusOK, h.sent, 0)
		}
		s.rec.Commit()
		return
	}
	part := flowtel.ExchangeBegin // the first peer's carries coll_begin
	for p, b := range s.boxes {
		if b == nil {
			continue
		}
		if x := s.rec.ReserveExchange(part); x != nil {
			s.exchange(x, c, p, h.seq, rq, h.ts, flowtel.StatusOK, h.sent, 0)
		}
		part = flowtel.ExchangePosts
	}
	s.rec.Commit()
}

// end writes the completions of the sends and receives and coll_end, at
// one clock reading taken after the output was made (the receives complete
// reduced or copied, as a fused receive does on the engine's path), after
// the held begin's records if any: an Exchange entry per peer, the last
// peer's carrying coll_end; with one peer and a held begin, one whole
// entry for both.
func (s *smallPath) end(c *Comm, seq uint64, rq *request, sent int, st flowtel.Status) {
	ts := s.rec.Now()
	if s.peer >= 0 {
		part, at, after := flowtel.ExchangeEnd, ts, uint32(0)
		if s.held.on {
			if d := ts - s.held.ts; d >= 0 && d <= math.MaxUint32 {
				part, at, after = flowtel.ExchangeWhole, s.held.ts, uint32(d)
				s.held.on = false
			} else {
				s.writeHeld(c, rq)
			}
		}
		if x := s.rec.ReserveExchange(part); x != nil {
			s.exchange(x, c, s.peer, seq, rq, at, st, sent, after)
		}
		s.wrs++
		s.rec.Commit()
		return
	}
	if s.held.on {
		s.writeHeld(c, rq)
	}
	for p, b := range s.boxes {
		if b == nil {
			continue
		}
		part := flowtel.ExchangeWCs
		if p == s.last {
			part = flowtel.ExchangeEnd // the last peer's carries coll_end
		}
		if x := s.rec.ReserveExchange(part); x != nil {
			s.exchange(x, c, p, seq, rq, ts, st, sent, 0)
		}
	}
	s.wrs++
	s.rec.Commit()
}

// exchange writes every field of an Exchange entry of a call's exchange
// with peer p (its part is the reservation's): about fifteen stores, where
// the records took two or three times seventeen (BenchmarkSmallRecords).
// Its sizes fit: takesSmall keeps calls of 4 GiB or more off the path.
func (s *smallPath) exchange(x *flowtel.Exchange, c *Comm, p int, seq uint64, rq *request, ts int64, st flowtel.Status, sent int, endAfter uint32) {
	x.TsNs, x.CollSeq, x.WRSeq, x.CollBytes, x.EndAfter = ts, seq, s.wrs, uint32(max(len(rq.in), len(rq.out))), endAfter
	x.Rank, x.Peer, x.QP, x.Comm, x.SendBytes, x.RecvBytes = int32(c.rank), int32(p), s.qpids[p], s.comm, uint32(sent), uint32(recvBytes(rq, p, sent))
	x.Channel, x.Status, x.Op, x.Algo, x.Dtype = 0, st, uint8(rq.call.op), uint8(AlgoDirect), uint8(rq.dt)
}

// recvBytes is what a call that sends sent bytes to each peer reads from
// peer p's slots.
func recvBytes(rq *request, p, sent int) int {
	if (rq.slices || rq.loaned) && (rq.call.op == OpAllReduce || rq.call.op == OpReduceScatter || rq.call.op == OpReduce) {
		return sent // as much each way
	}
	switch rq.call.op {
	case OpBroadcast:
		if p == rq.call.root {
			return len(rq.out)
		}
		return 0
	case OpBarrier:
		return 0
	}
	return len(rq.in)
}
