package collective

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/affinity"
	"github.com/vccl-go/vccl/transport"
)

// engine is the progress engine of one channel: the CPU proxy that posts the
// work requests of every running task, polls the channel's queue pairs, runs
// local reductions and copies, and finishes tasks.
//
// Progress is driven by whoever holds the engine's token: a goroutine
// blocked in a call drives its own task (no hand-off to another goroutine
// on the latency path), and a background goroutine drives async calls and
// anything a caller left unfinished. The driver busy-polls while work is in
// flight and backs off (spin, yield, then sleep on the transports' notifier)
// when nothing moves, so an idle communicator costs no CPU. Host engines do
// not lock their OS thread: a locked goroutine turns every hand-off into a
// thread wake-up, which costs more than a small collective.
type engine struct {
	channel int
	rank    int
	ranks   int
	comm    uint32
	qps     []transport.QP // by peer rank; nil for this rank
	rec     *flowtel.Recorder
	callf   flowtel.CallFields // coll's, kept here (flowtel/put.go says why)
	beat    flowtel.Heartbeat  // the driver's, while it waits with tasks in flight
	notify  *transport.Notifier
	spin    bool // every peer's Poll makes progress itself (transport.Capabilities.PollProgresses)
	procs   int  // processes of the communicator on this host
	// batch: a link is a stream socket (TCP), where sends to one peer that may go together
	// are posted back to back and flagged transport.WR.More, so they leave
	// in one write: a 2-rank 1 MiB broadcast's root, whose four chunks'
	// credits came with the receiver's signature header, wrote them in four
	// writevs of 256 KiB otherwise, one of them behind its 1 MiB copy.
	batch bool
	// streamed: every link is a stream socket, so what a peer sends waits
	// in the kernel's socket buffers, as much as they hold, not for this
	// rank to run (yieldsWaiting).
	streamed bool

	qmu     sync.Mutex
	queue   []*task      // submitted, not yet admitted
	nQueued atomic.Int32 // len(queue), readable without qmu
	// sleeping is set while the driver sleeps on the notifier: only then
	// does a submission need to signal it.
	sleeping atomic.Bool
	closed   bool // no task is accepted any more
	token    chan struct{}
	kick     chan struct{}
	stop     chan struct{}
	bgDone   chan struct{}
	stopped  chan struct{} // closed once shutdown finished every task

	mu        sync.Mutex
	failed    error                       // set once a transfer failed: the channel's QPs are no longer in step
	hasFailed atomic.Bool                 // failed is set
	onFail    func(seq uint64, err error) // told once when a call of this rank poisons the channel (abort board)

	nActive  atomic.Int32 // len(active), readable without the token
	stopping atomic.Bool  // stop is closed

	// Token holder only.
	lastProgress int64 // monotonic ns of the last progress
	active       []*task
	admitting    []*task // the queue's other buffer
	nextID       uint32
	wcs          []transport.WC
	timer        *time.Timer
	scratch      [][]byte // free scratch buffers
	spinning     bool     // the spinners were told the driver spins
	lend         bool     // yields lend the processor to other goroutines (lendsProcessor)
	passTs       int64    // telemetry time the next step's posts may share (0: none)

	testFault func() // tests only: called as drive starts, to make it panic
}

// task is one collective call's work on one channel.
type task struct {
	id       uint32
	call     call
	dt       Datatype
	sched    *schedule
	m        machine
	bufs     [][]byte // indexed by bufID
	tag      transport.Tag
	sig      [sigSize]byte // the call's signature, when checked
	seq      uint64
	ctx      context.Context
	timeout  time.Duration // the communicator's, when the context has no deadline
	deadline int64         // monotonic ns, from timeout at admission; 0: the context's deadline governs
	parts    int           // channels the call was split across (coll_begin/end Step)
	eng      *engine

	ready    []int32 // primitives that may start
	deferred []int32 // sends/receives waiting for an earlier task's on the same queue
	posted   int
	begin    int64
	err      error
	// The signature check's speculative receives (prim.spec): how many
	// have not completed, how many a peer filled with an empty message
	// (it failed its verify), whether this rank's verify passed, and,
	// after a mismatch, the error the task fails with once they are all
	// filled and its own empty messages are sent.
	specLeft int
	drained  int
	verified bool
	mismatch error
	// reduce is the fused receives' reduction, made on first use for
	// reduceKey's datatype and operation (tasks are reused).
	reduce    transport.ReduceFunc
	reduceKey [2]uint8

	// done is nil while the task runs, closedChan once it finished, or a
	// channel someone waits on (made on demand: most callers drive their
	// own task and never block on it), closed when it finishes.
	done atomic.Pointer[chan struct{}]
	// owner is an async call's handle, whose count of unfinished tasks
	// markDone brings down; nil for a blocking call's.
	owner *Handle
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// finished reports whether the task is over; its err is then final.
func (t *task) finished() bool { return t.done.Load() == &closedChan }

// doneChan returns a channel closed when the task finished.
func (t *task) doneChan() <-chan struct{} {
	for {
		if p := t.done.Load(); p != nil {
			return *p
		}
		ch := make(chan struct{})
		if t.done.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// markDone finishes the task. It is the engine's last touch of t: a
// blocking caller may reuse t as soon as it sees it finished (an async
// call's tasks are never reused: its owner is read before, and holds).
func (t *task) markDone() {
	owner := t.owner
	p := t.done.Swap(&closedChan)
	if p == &closedChan {
		return
	}
	if p != nil {
		close(*p)
	}
	if owner != nil && owner.left.Add(-1) == 0 {
		owner.comm.pending.Done()
	}
}

// release clears a finished task for reuse, holding on to no caller memory.
func (t *task) release() {
	clear(t.bufs)
	t.bufs = t.bufs[:0]
	t.call, t.ctx, t.sched, t.err, t.eng = call{}, nil, nil, nil, nil
	t.posted, t.ready, t.deferred = 0, t.ready[:0], t.deferred[:0]
	t.specLeft, t.drained, t.verified, t.mismatch = 0, 0, false, nil
	t.m.s = nil
	t.done.Store(nil)
}

func newEngine(channel, rank, ranks, procs int, comm uint32, qps []transport.QP, rec *flowtel.Recorder, notify *transport.Notifier, spin, batch, streamed bool) *engine {
	e := &engine{channel: channel, rank: rank, ranks: ranks, procs: max(procs, 1), comm: comm, qps: qps, rec: rec, notify: notify, batch: batch, streamed: streamed,
		token: make(chan struct{}, 1), kick: make(chan struct{}, 1), stop: make(chan struct{}),
		bgDone: make(chan struct{}), stopped: make(chan struct{}), wcs: make([]transport.WC, 64), spin: spin, lend: lendsProcessor(qps)}
	liveEngines.Add(1)
	go e.background()
	return e
}

// liveEngines counts the progress engines of this process. Spinning pays
// only while each engine has a core to itself; with more engines than cores
// (many ranks in one process, or, counting this process's engines once for
// every process of the communicator on the host, more ranks than cores) a
// spinning engine takes the core its peer needs to make the progress it
// waits for, so engines then sleep, or in small calls first poll and give
// their core away between polls (sched_yield) for a while (yieldsWaiting):
// a peer queued behind this thread runs at once.
var liveEngines atomic.Int32

// spinFor is how long the driver keeps polling after the last progress
// before it yields, and then how long it yields before it sleeps on the
// notifier. Spinning pays where a poll itself makes progress: shared memory,
// and TCP, whose Poll reads the socket (a sleeping peer's wake-up through
// the scheduler costs more than a whole small collective). While
// the driver spins, TCP's reader goroutines stay off Go's network poller
// (spinner), so an arriving message wakes no thread; before it sleeps they
// go back on it and wake the driver through the notifier. With more engines
// than cores (on the host) nothing spins: a spinning engine would take its
// peer's core.
const spinFor = 200 * time.Microsecond

// yieldAfter is how long the driver polls without pause before it starts
// yielding its core between polls.
const yieldAfter = 20 * time.Microsecond

// yieldMax is the largest call, in bytes per rank, during which an engine
// that may not spin yields its core between polls before it sleeps, unless
// every link is a stream socket (yieldsWaiting). The
// waits of larger calls are for chunks that take the peer a while to move,
// and a waiter polling through them keeps taking turns on the core that
// peer needs (CFS keeps picking a thread that yields at once), so the peer
// moves the chunk later than if the waiter slept. Where the engines may
// not spin, all-reduce, all-gather and broadcast go by mailbox up to 256
// KiB a rank (smallLimit); larger ones, and the other operations above
// 64 KiB, sleep at once: 4 ranks on 2 cores ran a 128-256 KiB all-reduce
// on the engine 3-4 times faster sleeping than yielding (decision 0047).
const yieldMax = smallMax

// yieldsWaiting reports whether a driver that may not spin (more engines
// than cores), having waited w since its last progress, polls on and
// yields its core at every poll rather than sleep: for 2*spinFor, in calls
// of at most yieldMax bytes a rank, and only over QPs whose Poll moves the
// data itself (e.spin). Over ft, goroutines on Go's network poller move it,
// and a driver polling on would hold them off its P.
//
// Where every link is a stream socket (TCP) calls of any size yield first:
// a peer's send lands in the kernel's socket buffers (as much as they hold)
// whether or not this rank runs, so a waiter polling between yields holds
// back little of its peers' work, while a sleeping one hands every step to
// its QPs' goroutines and is woken through poll(2), the notifier and the
// scheduler. 4 ranks on 2
// cores ran TCP's all-reduce, all-gather, reduce-scatter and broadcast of
// 1-4 MiB 1.2-2.4x faster so (decision 0057).
func (e *engine) yieldsWaiting(w time.Duration) bool {
	if !e.spin || w >= 2*spinFor {
		return false
	}
	if e.streamed {
		return true
	}
	for _, t := range e.active {
		if t.call.count*t.call.esize > yieldMax {
			return false
		}
	}
	return true
}

// giveWay lets run what a waiting driver may be waiting for: first, where
// a transport's goroutines carry part of its traffic (lendsProcessor), the
// goroutines runnable on its processor (runtime.Gosched), then the threads
// queued on its core (osYield). A rank bound to one CPU has one processor
// (GOMAXPROCS=1), and a polling driver holds it: a transport's goroutine
// that comes back from poll(2) to write the rest of a send (TCP's writer,
// handed the batch while the driver slept), or that a mutex woke, finds no
// processor, and the driver polled for the transfer it was itself holding
// up until it slept (a 2-rank TCP broadcast of 256 KiB: whole launches at
// 500-990 µs a call instead of 60; decision 0049).
func (e *engine) giveWay() {
	if e.lend {
		runtime.Gosched()
	}
	osYield()
}

// inlineProgress is a QP whose Poll moves all of its traffic itself: the
// goroutines it runs only stand in for an owner that stops polling
// (transport/shm's napping pollers and watchers). A waiting driver lends
// them no processor: at 16 ranks each shm engine has 15 such pollers, and
// letting their timers' turns run at every yield cut the host's all-reduce
// to a third (decision 0052).
type inlineProgress interface{ ProgressesInline() }

// lendsProcessor reports whether a driver of qps (nil for this rank) gives
// its processor to other goroutines when it yields: where any QP's traffic
// goes partly through goroutines of its own.
func lendsProcessor(qps []transport.QP) bool {
	for _, qp := range qps {
		if _, ok := qp.(inlineProgress); qp != nil && !ok {
			return true
		}
	}
	return false
}

// spinner is a QP whose Poll reads the network itself and which must know
// whether its owner polls without pause (transport/tcp).
type spinner interface{ SetSpinning(on bool) }

// setSpinning tells the channel's spinners whether the driver spins.
func (e *engine) setSpinning(on bool) {
	if e.spinning == on {
		return
	}
	e.spinning = on
	for _, qp := range e.qps {
		if s, ok := qp.(spinner); ok {
			s.SetSpinning(on)
		}
	}
}

func (e *engine) spins() bool {
	return e.spin && !crowdedForTests.Load() && spinFits(int(liveEngines.Load()), e.procs, runtime.NumCPU(), affinity.LauncherBound())
}

// crowdedForTests makes every engine behave as where ranks outnumber
// cores, whatever the machine: tests of those paths set it.
var crowdedForTests atomic.Bool

// spinFits reports whether live engines in each of procs processes on the
// host may spin, when this process may run on cpus CPUs (runtime.NumCPU:
// its affinity mask). A process a launcher bound to CPUs of its own (bound)
// has them to itself: its engines spin when they fit there, whatever the
// other processes do on theirs. An unbound one shares its CPUs with the
// host's other ranks: the engines of all of them must fit. Counting the
// processes against a bound rank's own share (one CPU each for 2 ranks on
// 2 cores) would make nothing spin under vcclrun's and mpirun's binding,
// and every wait would pay a wake-up.
func spinFits(live, procs, cpus int, bound bool) bool {
	if bound {
		return live <= cpus
	}
	return live*procs <= cpus
}

// enqueue hands t to the engine; t finishes (markDone) when done. With
// inline, the caller will drive the task itself (await); otherwise the
// background goroutine is woken to drive it.
func (e *engine) enqueue(t *task, inline bool) {
	e.qmu.Lock()
	if e.closed {
		e.qmu.Unlock()
		t.err = ErrClosed
		t.markDone()
		return
	}
	e.queue = append(e.queue, t)
	e.nQueued.Add(1)
	e.qmu.Unlock()
	if e.sleeping.Load() {
		e.notify.Signal() // a driver asleep on the notifier admits it at once
	}
	if !inline {
		e.wake()
	}
}

func (e *engine) wake() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// await drives the engine until t is done, or waits while another goroutine
// drives, or gives up when ctx ends (the task goes on in the background).
func (e *engine) await(ctx context.Context, t *task) error {
	for first := true; ; first = false {
		if t.finished() {
			return nil
		}
		if first && !e.stopping.Load() {
			// The usual case: nobody else drives. Take the token without
			// the full select below (and without making t's channel).
			select {
			case e.token <- struct{}{}:
				e.driveHolding(ctx, t)
				if e.pending() {
					e.wake()
				}
				continue
			default:
			}
		}
		select {
		case <-t.doneChan():
			return nil
		case <-e.stop:
			<-t.doneChan() // shutdown finishes every task
			return nil
		case e.token <- struct{}{}:
			e.driveHolding(ctx, t)
			if e.pending() {
				e.wake()
			}
		case <-ctx.Done():
			e.wake()
			return ctx.Err()
		}
	}
}

// pending reports whether tasks are queued or running.
func (e *engine) pending() bool {
	return e.nQueued.Load() > 0 || e.nActive.Load() > 0
}

// background drives what no caller drives: async calls, and tasks whose
// caller stopped waiting.
func (e *engine) background() {
	defer close(e.bgDone)
	for {
		select {
		case <-e.kick:
		case <-e.stop:
			return
		}
		for e.pending() {
			select {
			case e.token <- struct{}{}:
				e.driveHolding(context.Background(), nil)
			case <-e.stop:
				return
			}
		}
	}
}

// shutdown stops the engine; running and queued tasks fail with err.
func (e *engine) shutdown(err error) {
	e.setFailed(err)
	e.qmu.Lock()
	if e.closed {
		e.qmu.Unlock()
		<-e.stopped
		return
	}
	e.closed = true
	e.qmu.Unlock()
	e.stopping.Store(true)
	close(e.stop)
	<-e.bgDone
	e.token <- struct{}{} // the driver, if any, leaves at its next check
	e.admitQueued()
	e.failAll(e.failure())
	e.finish()
	<-e.token
	liveEngines.Add(-1)
	close(e.stopped)
}

// abort fails the channel with err from outside the driver (another rank's
// failure, from the abort board): the driver fails the running tasks at its
// next pass and admits no more.
func (e *engine) abort(err error) {
	e.setFailed(err)
	e.notify.Signal()
	e.wake()
}

// setFailed records err as the channel's failure unless one is recorded
// already, and reports whether it was the first.
func (e *engine) setFailed(err error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed != nil {
		return false
	}
	e.failed = err
	e.hasFailed.Store(true)
	return true
}

// failAborted fails the running tasks of a channel failed from outside. A
// task whose own deadline has passed too reports that: another rank's
// timeout a moment earlier says less about this rank's call than its own.
func (e *engine) failAborted() {
	now := flowtel.Monotonic()
	for _, t := range e.active {
		if t.err == nil {
			t.err = e.expired(t, now)
		}
	}
	e.failAll(e.failure())
	e.finish()
}

func (e *engine) failure() error {
	if !e.hasFailed.Load() { // every call asks: no lock while all is well
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failed
}

// admitQueued admits the submitted tasks. The queue's two buffers swap, so
// submitting allocates nothing once they have grown.
func (e *engine) admitQueued() {
	if e.nQueued.Load() == 0 {
		return
	}
	e.qmu.Lock()
	q := e.queue
	e.queue = e.admitting[:0]
	e.nQueued.Store(0)
	e.qmu.Unlock()
	for _, t := range q {
		e.admit(t)
	}
	clear(q)
	e.admitting = q[:0]
}

// driveHolding drives (see drive) with the token taken, and gives the token
// back even when drive panics (a bug, here or in a transport). The engine is
// then failed: the panic unwinds through the caller's deferred Close, which
// finishes the other tasks with the failure and returns, so the process
// crashes with the panic rather than hanging on the token.
func (e *engine) driveHolding(ctx context.Context, until *task) {
	returned := false
	defer func() {
		if !returned {
			e.setFailed(errDriverPanicked)
		}
		<-e.token
	}()
	e.drive(ctx, until)
	returned = true
}

// errDriverPanicked fails an engine whose driver panicked.
var errDriverPanicked = errors.New("collective: the engine's driver panicked; the communicator is unusable")

// drive progresses every task until `until` is done (nil: until no task is
// left), ctx ends, or the engine stops. The caller holds the token.
func (e *engine) drive(ctx context.Context, until *task) {
	if e.testFault != nil {
		e.testFault()
	}
	idle := 0
	var idleSince int64
	for iter := 0; ; iter++ {
		e.admitQueued()
		if !e.beat.Started() && len(e.active) > 0 {
			// The first heartbeat with the first call: a rank that
			// stops before it ever waited is then still seen not to run.
			e.beat.Beat(e.rec, flowtel.Monotonic(), e.comm, int32(e.rank), uint16(e.channel), len(e.active))
		}
		if e.hasFailed.Load() && len(e.active) > 0 {
			e.failAborted()
		}
		if until != nil && until.finished() || until == nil && len(e.active) == 0 {
			return
		}
		if e.stopping.Load() || iter&63 == 63 && ctx.Err() != nil {
			return
		}
		if iter&1023 == 1023 {
			if idle == 0 {
				e.lastProgress = flowtel.Monotonic()
			}
			e.checkDeadlines()
		}
		progress := e.step()
		if e.finish() {
			progress = true
		}
		if progress {
			idle = 0
			continue
		}
		idle++
		if idle == 1 {
			// The clock is read when progress stops, not at every step.
			idleSince = flowtel.Monotonic()
			e.lastProgress = idleSince
		}
		if e.spins() {
			e.setSpinning(true)
			// Poll, reading the clock every 16 polls: spin for
			// yieldAfter, then give the core away every 16 polls (the
			// peer may be queued behind this thread: a spinner that does
			// not yield holds its core for a whole time slice) until
			// 2*spinFor, then sleep.
			if idle&15 != 0 {
				continue
			}
			now := flowtel.Monotonic()
			e.beat.Beat(e.rec, now, e.comm, int32(e.rank), uint16(e.channel), len(e.active))
			waited := time.Duration(now - idleSince)
			if waited < yieldAfter {
				continue
			}
			if waited < 2*spinFor {
				e.giveWay()
				continue
			}
		} else if now := flowtel.Monotonic(); e.yieldsWaiting(time.Duration(now - idleSince)) {
			e.beat.Beat(e.rec, now, e.comm, int32(e.rank), uint16(e.channel), len(e.active))
			// More engines than cores: give the core away at every poll
			// (the peer this one waits for may be queued behind it), as
			// Open MPI does when oversubscribed. Sleeping at once made
			// every step of a small call wait for a wake-up through the
			// notifier and the scheduler, which costs more than a small
			// call's transfers (BENCHMARKS.md compares with Open MPI).
			e.setSpinning(true)
			e.giveWay()
			continue
		}
		if e.checkDeadlines() {
			continue
		}
		e.setSpinning(false)
		e.sleeping.Store(true)
		if e.nQueued.Load() > 0 { // submitted before the flag went up
			e.sleeping.Store(false)
			continue
		}
		if e.timer == nil {
			e.timer = time.NewTimer(time.Millisecond)
		} else {
			e.timer.Reset(time.Millisecond)
		}
		select {
		case <-e.notify.C():
		case <-e.timer.C:
		case <-e.stop:
		case <-ctx.Done():
		}
		e.sleeping.Store(false)
		if !e.timer.Stop() {
			select {
			case <-e.timer.C:
			default:
			}
		}
		// A wait in naps: the heartbeat says the rank still runs.
		e.beat.Beat(e.rec, flowtel.Monotonic(), e.comm, int32(e.rank), uint16(e.channel), len(e.active))
		idle = 0
	}
}

// admit starts a task: validates it and records coll_begin.
func (e *engine) admit(t *task) {
	if err := e.failure(); err != nil {
		t.err = err
		t.markDone()
		return
	}
	now := flowtel.Monotonic()
	if t.timeout > 0 {
		t.deadline = now + int64(t.timeout)
	} else {
		t.deadline = 0
	}
	e.nextID++
	t.id = e.nextID
	if need := t.sched.scratch; need > 0 {
		t.bufs[bufScratch] = e.takeScratch(need)
	}
	t.specLeft, t.drained, t.verified, t.mismatch = 0, 0, false, nil
	if h := t.sched.hdr; h != nil {
		t.bufs[bufHdr] = e.takeScratch(h.bytes)
		h.fill(t.bufs[bufHdr], &t.sig)
		for _, k := range h.spec {
			t.specLeft += k
		}
	}
	t.m.reset(t.sched, e.ranks)
	t.ready = t.m.initial(t.ready[:0])
	if e.rec.Enabled() {
		t.begin = e.rec.At(now)
		e.passTs = t.begin // the posts that follow in this step share it
		if r := e.rec.Reserve(); r != nil {
			e.coll(r, t, t.begin, flowtel.KindCollBegin, flowtel.StatusOK)
			e.rec.Commit()
		}
	}
	e.active = append(e.active, t)
	e.nActive.Add(1)
	e.lastProgress = now
}

// takeScratch returns a scratch buffer of n bytes, reusing the smallest
// free one that fits.
func (e *engine) takeScratch(n int) []byte {
	best := -1
	for i, b := range e.scratch {
		if cap(b) >= n && (best < 0 || cap(b) < cap(e.scratch[best])) {
			best = i
		}
	}
	if best < 0 {
		return make([]byte, n)
	}
	b := e.scratch[best]
	e.scratch = append(e.scratch[:best], e.scratch[best+1:]...)
	return b[:n]
}

// maxFreeScratch is how many buffers the engine keeps: a call takes up to
// two (scratch and headers), and a few calls may be in flight.
const maxFreeScratch = 8

// putScratch keeps a few scratch buffers for the next calls.
func (e *engine) putScratch(b []byte) {
	if b == nil {
		return
	}
	if len(e.scratch) == maxFreeScratch {
		e.scratch = e.scratch[1:]
	}
	e.scratch = append(e.scratch, b)
}

// payload is the collective's size in bytes as nccl-tests counts it.
func (t *task) payload() int {
	c := &t.call
	switch c.op {
	case OpAllGather, OpReduceScatter, OpAllToAll, OpGather, OpScatter:
		return c.n * c.count * c.esize
	case OpAllToAllv:
		total := 0
		for _, k := range c.sendCounts {
			total += k
		}
		return total * c.esize
	case OpSend, OpRecv, OpGroup:
		total := 0
		for _, p := range c.p2p {
			total += p.n
		}
		return total
	}
	return c.count * c.esize
}

// step starts whatever may start and polls every queue pair once. It
// reports whether anything happened.
func (e *engine) step() bool {
	progress := false
	// The posts of a step share one clock read (flowtel.Recorder.BeginPass):
	// the time admit read, or one taken at the first post. Completions are
	// stamped by the transports when they see them, outside the pass. The
	// pass opens at the first start: most steps of a spinning driver start
	// nothing.
	inPass := false
	for ti, t := range e.active {
		if t.err != nil {
			continue
		}
		if len(t.deferred) > 0 {
			pending := t.deferred
			t.deferred = nil
			t.ready = append(t.ready, pending...)
		}
		// In the order they became ready, which starts with program order:
		// the header receives go before the header sends, so this rank's
		// credits are out before its data waits for the peer's.
		for k := 0; k < len(t.ready) && t.err == nil; k++ {
			i := t.ready[k]
			if q := t.m.s.qid[i]; q >= 0 && e.earlierPending(ti, q) {
				t.deferred = append(t.deferred, i)
				continue
			}
			progress = true
			if !inPass {
				e.rec.BeginPass(e.passTs)
				inPass = true
			}
			before := len(t.ready)
			t.ready = t.m.start(i, t.ready)
			if e.batch && len(t.ready) > before && k+1 < before && t.m.s.prims[i].kind == primSend {
				// The send queued behind i may go too: post it next.
				nx := t.ready[before]
				copy(t.ready[k+2:before+1], t.ready[k+1:before])
				t.ready[k+1] = nx
			}
			e.startPrim(t, i)
		}
		t.ready = t.ready[:0]
	}
	if inPass {
		e.rec.EndPass()
	}
	e.passTs = 0
	for peer, qp := range e.qps {
		// A QP with nothing posted has nothing to complete: over TCP each
		// Poll is a system call or two, and a call of many ranks talks to
		// one peer at a time in each step, so most QPs are idle.
		if qp == nil || qp.Outstanding() == 0 {
			continue
		}
		for {
			k := qp.Poll(e.wcs)
			if k == 0 {
				break
			}
			progress = true
			for _, wc := range e.wcs[:k] {
				e.completion(peer, wc)
			}
		}
	}
	return progress
}

// earlierPending reports whether a task started before task ti still has
// sends or receives to post on queue q: those must go first.
func (e *engine) earlierPending(ti int, q int32) bool {
	for _, t := range e.active[:ti] {
		if t.err == nil && t.m.pendingOn(q) {
			return true
		}
	}
	return false
}

func (e *engine) startPrim(t *task, i int32) {
	p := &t.sched.prims[i]
	switch p.kind {
	case primSend, primRecv:
		qp := e.qps[p.peer]
		wr := transport.WR{ID: uint64(t.id)<<32 | uint64(i), Tag: t.tag}
		wr.Tag.Step = p.step
		var err error
		if p.kind == primSend {
			wr.Buf = p.a.slice(t.bufs, p.n)
			if p.tee {
				wr.Tee = p.b.slice(t.bufs, p.n)
			}
			wr.More = e.batch && t.m.nextReady(t.m.s.qid[i])
			err = qp.PostSend(wr)
		} else {
			wr.Buf = p.dst.slice(t.bufs, p.n)
			wr.Stream = p.stream
			wr.Pull = p.pull
			if p.fuse {
				wr.Reduce, wr.Src = t.reducer(), p.a.slice(t.bufs, p.n)
			}
			err = qp.PostRecv(wr)
		}
		if err != nil {
			e.fail(t, fmt.Errorf("%v seq %d: posting %s of %d bytes at step %d: %w", t.call.op, t.seq, p.kind, p.n, p.step, peerError(p.peer, err)), true)
			return
		}
		t.posted++
	case primVerify:
		err, poisons := t.sched.hdr.verify(t.bufs[bufHdr], &t.call)
		if err == nil && t.drained > 0 {
			err, poisons = fmt.Errorf("collective: %v seq %d: a peer emptied %d of rank %d's receives although the signatures match (internal error: please report)", t.call.op, t.seq, t.drained, e.rank), true
		}
		switch {
		case err == nil:
			t.verified = true
			t.ready = t.m.complete(i, t.ready)
		case poisons:
			e.fail(t, err, true)
		default:
			e.drain(t, err)
		}
	case primNop:
		t.ready = t.m.complete(i, t.ready)
	default:
		runLocal(p, t.bufs, t.dt, t.call.redop, e.ranks)
		if p.n >= restampAfter {
			e.rec.BeginPass(0) // later posts of the step read the clock again
		}
		t.ready = t.m.complete(i, t.ready)
	}
}

// drainWR is the primitive index of the empty messages a mismatch sends.
const drainWR = ^uint32(0)

// drain starts the end of a call that failed its verify: it sends every
// peer one empty message for each receive the peer's header says it
// posted ahead of its verify, and lets settle fail the task once those are
// sent and this rank's own speculative receives were filled the same way.
// The queue pairs are then in step, and the communicator usable.
func (e *engine) drain(t *task, mismatch error) {
	owed, err := t.sched.hdr.owed(t.bufs[bufHdr])
	if err != nil {
		e.fail(t, err, true)
		return
	}
	t.mismatch = mismatch
	for peer, k := range owed {
		for range k {
			wr := transport.WR{ID: uint64(t.id)<<32 | uint64(drainWR), Tag: t.tag}
			if err := e.qps[peer].PostSend(wr); err != nil {
				e.fail(t, fmt.Errorf("%v seq %d: posting an empty message after a mismatch: %w", t.call.op, t.seq, peerError(peer, err)), true)
				return
			}
			t.posted++
		}
	}
	e.settle(t)
}

// settle fails a mismatched task once nothing of it is left in flight.
func (e *engine) settle(t *task) {
	if t.mismatch != nil && t.posted == 0 && t.specLeft == 0 {
		e.fail(t, t.mismatch, false)
	}
}

// restampAfter is the size of a local reduction or copy after which the
// posts of the same step take a new clock reading rather than share the
// step's: it bounds how early a shared stamp can be to the time of that much
// local work (a few microseconds) plus the posts before it.
const restampAfter = 64 << 10

// reducer returns the function fused receives reduce with.
func (t *task) reducer() transport.ReduceFunc {
	if key := [2]uint8{uint8(t.dt), uint8(t.call.redop)}; t.reduce == nil || t.reduceKey != key {
		dt, op := t.dt, t.call.redop
		t.reduce, t.reduceKey = func(dst, msg, src []byte) { reduceInto(dt, op, dst, msg, src) }, key
	}
	return t.reduce
}

func (e *engine) completion(peer int, wc transport.WC) {
	id, i := uint32(wc.ID>>32), int32(uint32(wc.ID))
	var t *task
	for _, a := range e.active {
		if a.id == id {
			t = a
			break
		}
	}
	if t == nil || t.err != nil {
		return // a task that already failed; its WRs drain here
	}
	t.posted--
	if uint32(i) == drainWR {
		if wc.Status != flowtel.StatusOK {
			e.fail(t, fmt.Errorf("%v seq %d: empty message after a mismatch: %w", t.call.op, t.seq, peerError(peer, wc.Err)), true)
			return
		}
		e.settle(t)
		return
	}
	p := &t.sched.prims[i]
	if wc.Status != flowtel.StatusOK {
		e.fail(t, fmt.Errorf("%v seq %d: %s of %d bytes at step %d: %w", t.call.op, t.seq, p.kind, p.n, p.step, peerError(peer, wc.Err)), true)
		return
	}
	if p.spec {
		t.specLeft--
		// An empty message where data was due, before the verify passed,
		// is a peer's drain; after a mismatch nothing else may come.
		if t.mismatch != nil || wc.Bytes == 0 && p.n > 0 && !t.verified {
			if wc.Bytes != 0 {
				e.fail(t, fmt.Errorf("collective: %v seq %d: rank %d sent %d bytes to a call whose signatures differ (internal error: please report)", t.call.op, t.seq, peer, wc.Bytes), true)
				return
			}
			t.drained++
			e.settle(t)
			return
		}
	}
	if p.kind == primRecv && (wc.Bytes != p.n && !p.upTo || p.upTo && wc.Bytes < hdrSize) {
		e.fail(t, fmt.Errorf("%w: %v seq %d: rank %d sent %d bytes at step %d where rank %d expected %d (do the ranks agree on counts and datatypes?)",
			ErrMismatch, t.call.op, t.seq, peer, wc.Bytes, p.step, e.rank, p.n), true)
		return
	}
	t.ready = t.m.complete(i, t.ready)
}

// peerError names the peer in a transfer error.
func peerError(peer int, err error) error {
	if errors.Is(err, transport.ErrPeerDead) {
		return fmt.Errorf("collective: rank %d is unreachable (dead or disconnected): %w", peer, err)
	}
	return fmt.Errorf("collective: transfer with rank %d failed: %w", peer, err)
}

// fail ends task t with err. A failure after work requests went out leaves
// the queue pairs out of step with the peers, so it fails the channel too.
func (e *engine) fail(t *task, err error, poisons bool) {
	if t.err != nil {
		return
	}
	t.err = fmt.Errorf("%w", err)
	if poisons || t.posted > 0 {
		if e.setFailed(fmt.Errorf("collective: channel %d failed at %v seq %d: %w", e.channel, t.call.op, t.seq, err)) && e.onFail != nil {
			e.onFail(t.seq, e.failure())
		}
		e.failAll(e.failure())
	}
}

func (e *engine) failAll(err error) {
	for _, t := range e.active {
		if t.err == nil {
			t.err = err
		}
	}
}

// finish retires completed and failed tasks, in any order.
func (e *engine) finish() bool {
	any := false
	kept := e.active[:0]
	for _, t := range e.active {
		switch {
		case t.err != nil:
			e.end(t, flowtel.StatusError)
			any = true
		case t.m.done():
			e.end(t, flowtel.StatusOK)
			any = true
		default:
			kept = append(kept, t)
		}
	}
	clear(e.active[len(kept):])
	e.active = kept
	if any {
		e.nActive.Store(int32(len(kept)))
	}
	return any
}

func (e *engine) end(t *task, st flowtel.Status) {
	if r := e.rec.Reserve(); r != nil {
		e.coll(r, t, e.rec.Stamp(), flowtel.KindCollEnd, st)
		e.rec.Commit()
	}
	// A task that failed with transfers posted may still have its scratch
	// written by a peer: only a clean one gives its buffer back.
	if st == flowtel.StatusOK || t.posted == 0 {
		e.putScratch(t.bufs[bufScratch])
		e.putScratch(t.bufs[bufHdr])
	}
	t.markDone()
}

// coll writes t's coll_begin or coll_end into a ring slot.
func (e *engine) coll(r *flowtel.Record, t *task, ts int64, kind flowtel.Kind, st flowtel.Status) {
	f := &e.callf
	f.Seq, f.Bytes, f.Rank, f.Comm, f.Parts = t.seq, uint64(t.payload()), int32(e.rank), e.comm, uint32(t.parts)
	f.Channel, f.Op, f.Algo, f.Dtype = uint16(e.channel), t.call.op, t.sched.algo, t.dt
	f.Put(r, ts, kind, st)
}

// deadPeerGrace is how long a channel may make no progress, with a peer's
// connection gone, before that peer is blamed. Transfers with a dead peer
// fail on their own (the transport completes them with errors); this catches
// the rank left waiting on ranks that stopped because of the death, which
// would otherwise wait until its deadline without naming the culprit. A peer
// that merely finished and closed is gone too, which is why its absence
// alone is no error.
const deadPeerGrace = time.Second

// checkDeadlines fails tasks whose context ended, naming what they wait for,
// and fails the channel when it has stalled with a peer's connection gone.
func (e *engine) checkDeadlines() bool {
	any := false
	if len(e.active) > 0 && flowtel.Monotonic()-e.lastProgress > int64(deadPeerGrace) {
		for peer, qp := range e.qps {
			h, ok := qp.(interface{ Err() error })
			if !ok || qp == nil {
				continue
			}
			if err := h.Err(); err != nil {
				e.fail(e.active[0], fmt.Errorf("no progress for %v: %w", deadPeerGrace, peerError(peer, err)), true)
				e.finish()
				return true
			}
		}
	}
	now := flowtel.Monotonic()
	for _, t := range e.active {
		if t.err != nil {
			continue
		}
		if err := e.expired(t, now); err != nil {
			e.fail(t, err, true)
			any = true
		}
	}
	if any {
		e.finish()
	}
	return any
}

// expired returns t's deadline error once its context ended or its
// deadline passed.
func (e *engine) expired(t *task, now int64) error {
	err := t.ctx.Err()
	if dl, ok := t.ctx.Deadline(); ok && err == nil && !time.Now().Before(dl) {
		err = context.DeadlineExceeded // its timer has not fired yet
	}
	if err == nil && t.deadline != 0 && now > t.deadline {
		err = ErrTimeout
	}
	if err == nil {
		return nil
	}
	peers := t.waitingOn()
	waiting := "no transfer pending"
	if len(peers) > 0 {
		waiting = fmt.Sprintf("still waiting on transfers with ranks %v", peers)
	}
	return blame(fmt.Errorf("collective: %v seq %d on rank %d: %w; %s", t.call.op, t.seq, e.rank, err, waiting), peers...)
}

// waitingOn lists the peers of the transfers a stuck task waits on.
func (t *task) waitingOn() []int {
	var peers []int
	seen := map[int]bool{}
	for i, p := range t.sched.prims {
		if (p.kind == primRecv || p.kind == primSend) && t.m.unmet[i] >= 0 && !t.m.completed[i] && !seen[p.peer] {
			seen[p.peer] = true
			peers = append(peers, p.peer)
		}
	}
	return peers
}
