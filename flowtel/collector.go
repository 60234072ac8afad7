package flowtel

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Sink consumes the records a Collector drains: an exporter, a Window, a
// test's memory sink.
//
// Consume is called from one goroutine per sink, never concurrently with
// itself, with batches in the order the collector drained them. recs is only
// valid during the call: the collector reuses the memory, and shares it with
// the other sinks, as soon as Consume returns, so a sink that keeps records
// must copy them, and must never write to recs. Consume should not block for
// long: while it runs, batches for this sink queue up in a bounded queue, and
// once that is full further batches are dropped for this sink (counted, and
// reported to the sink in band as a KindLost record before the next batch it
// gets). An error from Consume is counted in CollectorStats and the records
// are considered delivered; the collector does not retry.
//
// Shutdown is called once, after the last Consume, when the collector shuts
// down; it should flush and release what the sink holds and return when done
// or when ctx expires. ctx carries the deadline given to Collector.Shutdown.
type Sink interface {
	Consume(ctx context.Context, recs []Record) error
	Shutdown(ctx context.Context) error
}

// Collector defaults.
const (
	DefaultRingCapacity = 1 << 15
	DefaultBatchSize    = 4096
	DefaultMaxIdle      = 10 * time.Millisecond
	DefaultSinkQueue    = 64

	// minIdle is the shortest sleep of an idle collector; the sleep doubles
	// while passes drain less than a batch, up to the maximum idle time.
	minIdle = 100 * time.Microsecond
)

// CollectorOption configures a Collector.
type CollectorOption func(*collectorConfig)

type collectorConfig struct {
	ringCap   int
	clock     *Clock
	batchSize int
	maxIdle   time.Duration
	sinkQueue int
}

// WithRingCapacity sets the capacity, in records, of the ring behind each
// Recorder the collector creates. It is rounded up to a power of two (at least
// 2). Default DefaultRingCapacity.
func WithRingCapacity(n int) CollectorOption { return func(c *collectorConfig) { c.ringCap = n } }

// WithClock sets the clock the collector's Recorders stamp records with, and
// that the collector stamps the records it synthesises with. Default: the
// host's monotonic clock (nil).
func WithClock(clk *Clock) CollectorOption { return func(c *collectorConfig) { c.clock = clk } }

// WithBatchSize sets the most records handed to a sink in one Consume call.
// Default DefaultBatchSize.
func WithBatchSize(n int) CollectorOption { return func(c *collectorConfig) { c.batchSize = n } }

// WithMaxIdle sets the longest the collector sleeps between two drain passes
// when the rings are quiet. The sleep starts at 100µs and doubles while
// passes find less than a batch, up to d; a ring crossing half full wakes the
// collector at once. It bounds how stale a quiet ring's records can get.
// Default DefaultMaxIdle.
func WithMaxIdle(d time.Duration) CollectorOption { return func(c *collectorConfig) { c.maxIdle = d } }

// WithSinkQueue sets how many batches may wait for each sink before further
// batches are dropped for that sink. Default DefaultSinkQueue.
func WithSinkQueue(batches int) CollectorOption {
	return func(c *collectorConfig) { c.sinkQueue = batches }
}

// Collector drains the rings of the Recorders it created, in batches, and
// hands every batch to every Sink.
//
// One goroutine drains all rings. It sleeps when the rings are quiet (on a
// timer that grows from 100µs to the maximum idle time, or until a ring
// crossing half full wakes it); it never busy-polls. Each sink has its own
// goroutine fed through a bounded queue: a sink that falls behind loses
// batches (counted, and reported to it in band as KindLost records) but never
// slows the drain or the producers. Batches are pooled and shared by the sinks
// with a reference count, so a running collector does not allocate.
type Collector struct {
	cfg collectorConfig

	rings atomic.Pointer[[]*ringState] // copy on write, under mu
	sinks atomic.Pointer[[]*sinkRunner]

	mu          sync.Mutex
	started     bool
	sinksClosed bool // no sink may be added: the final drain has begun
	stopping    bool // Shutdown was called: no ring may be added

	wake    chan struct{} // a ring crossed half full (capacity 1)
	stop    chan struct{} // closed by Shutdown
	flushes chan flushReq // Flush calls, served by the drain goroutine

	shutdownOnce sync.Once
	shutdownCtx  context.Context // set before stop is closed
	drainDone    chan struct{}   // closed when the drain goroutine has closed every sink queue
	allDone      chan struct{}   // closed when every sink goroutine has returned
	sinkWG       sync.WaitGroup
	shutdownErr  error // valid once allDone is closed

	runCtx    context.Context // passed to Consume; cancelled when Shutdown's ctx expires
	cancelRun context.CancelFunc

	poolMu sync.Mutex
	pool   []*batch

	drained    atomic.Uint64
	passes     atomic.Uint64 // drain passes made; a yielding producer waits for the next
	batches    atomic.Uint64
	sinkErrors atomic.Uint64
	errMu      sync.Mutex
	lastErr    error
}

type ringState struct {
	ring  *Ring
	clock *Clock // the ring's recorder's clock
	// Drain goroutine only.
	seenLost uint64 // sum of the Bytes of the KindLost records drained from ring
	lastRank int32  // Rank of the last record drained (-1 before any)
	lastTs   int64  // TsNs of the last record drained (0 before any)
}

type batch struct {
	recs []Record // len: the batch size
	n    int      // records in use
	refs atomic.Int32
}

// flushReq asks the drain goroutine to drain now and mark every sink queue.
type flushReq struct {
	ctx  context.Context
	done chan struct{}
}

type queued struct {
	b      *batch          // nil for a flush marker
	marker *sync.WaitGroup // a flush marker: Done once the sink got here
	lost   uint64          // records dropped for this sink just before b
	last   Record          // the last record dropped (valid when lost > 0)
}

type sinkRunner struct {
	sink Sink
	q    chan queued

	// Drain goroutine only: records dropped for this sink and not yet
	// reported to it, and the last of them.
	pendingLost uint64
	lastLost    Record

	lostBuf [1]Record // sink goroutine only

	unfinished     atomic.Int64 // batches queued and not yet consumed
	records        atomic.Uint64
	batches        atomic.Uint64
	droppedRecords atomic.Uint64
	droppedBatches atomic.Uint64
	errors         atomic.Uint64
}

// NewCollector returns a collector; call AddSink, then Start, and create one
// Recorder per producer goroutine with NewRecorder.
func NewCollector(opts ...CollectorOption) *Collector {
	cfg := collectorConfig{
		ringCap:   DefaultRingCapacity,
		batchSize: DefaultBatchSize,
		maxIdle:   DefaultMaxIdle,
		sinkQueue: DefaultSinkQueue,
	}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.ringCap = ceilPow2(cfg.ringCap)
	if cfg.batchSize < 1 {
		cfg.batchSize = DefaultBatchSize
	}
	if cfg.maxIdle < minIdle {
		cfg.maxIdle = minIdle
	}
	if cfg.sinkQueue < 1 {
		cfg.sinkQueue = 1
	}
	c := &Collector{
		cfg:       cfg,
		wake:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		flushes:   make(chan flushReq),
		drainDone: make(chan struct{}),
		allDone:   make(chan struct{}),
	}
	c.runCtx, c.cancelRun = context.WithCancel(context.Background())
	c.rings.Store(&[]*ringState{})
	c.sinks.Store(&[]*sinkRunner{})
	return c
}

func ceilPow2(n int) int {
	p := 2
	for p < n && p < 1<<30 {
		p <<= 1
	}
	return p
}

// Clock returns the clock the collector's recorders use (nil: the host's
// monotonic clock; a nil *Clock is valid).
func (c *Collector) Clock() *Clock { return c.cfg.clock }

// NewRecorder creates a ring, registers it with the collector and returns a
// Recorder writing into it with the collector's clock. The recorder belongs
// to one producer goroutine. It may be called before or after Start; after
// Shutdown it returns nil, the disabled recorder.
func (c *Collector) NewRecorder() *Recorder { return c.NewRecorderClock(c.cfg.clock) }

// NewRecorderClock is NewRecorder with the recorder's own clock: a
// communicator stamps with the offset to rank 0 it measured at bootstrap,
// whatever collector it shares.
func (c *Collector) NewRecorderClock(clk *Clock) *Recorder {
	ring, err := NewRing(c.cfg.ringCap)
	if err != nil {
		panic(err) // unreachable: the capacity is a power of two
	}
	ring.wake = c.wakeup
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return nil
	}
	old := *c.rings.Load()
	rings := make([]*ringState, len(old), len(old)+1)
	copy(rings, old)
	rings = append(rings, &ringState{ring: ring, clock: clk, lastRank: -1})
	c.rings.Store(&rings)
	r := NewRecorder(ring, clk)
	r.settle = c.settle
	return r
}

// settleYields bounds a settle's yields: one usually runs the collector's
// pass and the sinks it fed, a slice of a batch at a time.
const settleYields = 256

// settle is the recorders' Settle. With a single P, a producer that spins
// (an engine polling for its peers) keeps the collector and its sinks off it
// until the runtime preempts the producer, 10 ms later at most; they then
// work through everything recorded meanwhile, at a moment of this rank's
// own, which every other rank of the job waits through, each rank pausing
// at other moments (at 16 ranks on the 16-core host a 16 KiB all-reduce
// took 124 us where it took 34 with telemetry off). Settled by every rank
// at the same call, the pauses are short and overlap. With more Ps the
// collector has its own, and settle returns at once.
func (c *Collector) settle() {
	if runtime.GOMAXPROCS(0) != 1 || !c.hasWork() {
		return
	}
	c.nudge()
	for range settleYields {
		runtime.Gosched()
		if !c.hasWork() {
			return
		}
	}
}

// hasWork reports whether a ring holds records or a sink has a batch to
// consume.
func (c *Collector) hasWork() bool {
	for _, rs := range *c.rings.Load() {
		if rs.ring.Len() > 0 {
			return true
		}
	}
	for _, s := range *c.sinks.Load() {
		if s.unfinished.Load() > 0 {
			return true
		}
	}
	return false
}

// wakeup is the rings' half-full hook: a non-blocking send, and, when the
// runtime has a single P, a yield of it. A producer that never blocks (a
// rank spinning through small collectives) otherwise keeps the collector
// off the only P until the runtime preempts it 10 ms later, and the ring
// overflows meanwhile: a rank bound to one CPU (mpirun's default binding,
// taskset) has GOMAXPROCS=1 and lost 41% of a 1 KiB all-reduce loop's
// records. The yield costs the producer the drain it makes room for, work
// that this CPU must do anyway; with more Ps the collector has its own.
func (c *Collector) wakeup() {
	c.nudge()
	if runtime.GOMAXPROCS(0) == 1 {
		// One Gosched may hand the P to another goroutine first (the
		// scheduler serves its global queue now and then): yield until
		// the collector made a pass, a few times at most.
		seen := c.passes.Load()
		for range 8 {
			runtime.Gosched()
			if c.passes.Load() != seen {
				break
			}
		}
	}
}

// nudge wakes the drain goroutine if it sleeps; a wake-up already pending
// covers this one.
func (c *Collector) nudge() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// AddSink adds a sink. Sinks added before Start see every record; a sink
// added while the collector runs sees the batches drained after it was added.
// AddSink after Shutdown has begun its final drain does nothing.
func (c *Collector) AddSink(s Sink) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sinksClosed {
		return
	}
	r := &sinkRunner{sink: s, q: make(chan queued, c.cfg.sinkQueue)}
	old := *c.sinks.Load()
	sinks := make([]*sinkRunner, len(old), len(old)+1)
	copy(sinks, old)
	sinks = append(sinks, r)
	c.sinks.Store(&sinks)
	if c.started {
		c.startSink(r)
	}
}

// Start starts the drain goroutine and one goroutine per sink. Calling it
// again does nothing.
func (c *Collector) Start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startLocked()
}

func (c *Collector) startLocked() {
	if c.started {
		return
	}
	c.started = true
	for _, r := range *c.sinks.Load() {
		c.startSink(r)
	}
	go c.run()
}

func (c *Collector) startSink(r *sinkRunner) {
	c.sinkWG.Add(1)
	go c.runSink(r)
}

// Shutdown stops the collector: it drains every ring a last time, emits a
// KindLost record for any drop a ring has not yet reported in band, delivers
// everything still queued to the sinks, then calls every sink's Shutdown. It
// returns when that is done or when ctx expires (with ctx's error; batches
// not yet delivered then are dropped and counted), joined with the errors of
// the sinks' Shutdown. Later calls wait for the first one to finish (within
// their own ctx) and return its result. Producers may keep calling their
// Recorders: records written after the final drain are never delivered.
func (c *Collector) Shutdown(ctx context.Context) error {
	select {
	case <-c.allDone: // an earlier Shutdown finished
		return c.shutdownErr
	default:
	}
	c.shutdownOnce.Do(func() {
		c.mu.Lock()
		c.stopping = true
		c.shutdownCtx = ctx
		c.startLocked()
		c.mu.Unlock()
		// Once ctx expires, Consume calls see a cancelled context and queued
		// batches are dropped instead of delivered.
		context.AfterFunc(ctx, c.cancelRun)
		close(c.stop)
		go func() {
			<-c.drainDone
			c.sinkWG.Wait()
			c.cancelRun()
			close(c.allDone)
		}()
	})
	// A context done on entry wins even if the (then hurried) final drain
	// has finished meanwhile: the caller did not wait for delivery.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("flowtel: collector shutdown: %w", err)
	}
	select {
	case <-c.allDone:
		return c.shutdownErr
	case <-ctx.Done():
		return fmt.Errorf("flowtel: collector shutdown: %w", ctx.Err())
	}
}

// run is the drain goroutine.
func (c *Collector) run() {
	idle := minIdle
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		n := c.pass(noWait)
		if n >= c.cfg.batchSize {
			// Busy: pass again at once, and sleep less next time.
			idle = max(idle/2, minIdle)
			select {
			case <-c.stop:
				c.final()
				return
			case f := <-c.flushes:
				c.flush(f)
				continue
			default:
				continue
			}
		}
		idle = min(idle*2, c.cfg.maxIdle)
		timer.Reset(idle)
		select {
		case <-timer.C:
		case f := <-c.flushes:
			timer.Stop()
			c.flush(f)
		case <-c.wake:
			timer.Stop()
		case <-c.stop:
			timer.Stop()
			c.final()
			return
		}
	}
}

// Flush delivers every record written before the call to every sink: it
// drains the rings now and returns once each sink has consumed what was
// queued for it, or when ctx ends. Use it before reading a sink's state (a
// Window's snapshot, say) that must include everything recorded so far.
func (c *Collector) Flush(ctx context.Context) error {
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if !started {
		return errors.New("flowtel: Flush before Start")
	}
	f := flushReq{ctx: ctx, done: make(chan struct{})}
	select {
	case c.flushes <- f:
	case <-c.stop:
		return errors.New("flowtel: Flush after Shutdown")
	case <-ctx.Done():
		return fmt.Errorf("flowtel: flush: %w", ctx.Err())
	}
	select {
	case <-f.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flowtel: flush: %w", ctx.Err())
	}
}

// flush serves a Flush on the drain goroutine: a pass that waits for room in
// the sink queues (within the caller's ctx), then a marker down every queue.
func (c *Collector) flush(f flushReq) {
	for c.pass(f.ctx) > 0 {
	}
	var wg sync.WaitGroup
	for _, s := range *c.sinks.Load() {
		wg.Add(1)
		select {
		case s.q <- queued{marker: &wg}:
		case <-f.ctx.Done():
			wg.Done()
		}
	}
	go func() {
		wg.Wait()
		close(f.done)
	}()
}

// final is the drain goroutine's last act: drain everything, report unreported
// drops, and close the sink queues.
func (c *Collector) final() {
	defer close(c.drainDone)
	ctx := c.shutdownCtx
	c.mu.Lock()
	c.sinksClosed = true
	c.mu.Unlock()

	// Drain each ring of what it holds now; a producer still writing cannot
	// keep us here for more than a ring's worth.
	c.pass(ctx)

	// Drops the rings counted but never reported in band (the producer had
	// no later successful push to carry the KindLost record).
	var b *batch
	for _, rs := range *c.rings.Load() {
		d := rs.ring.Dropped()
		if d <= rs.seenLost {
			continue
		}
		if b == nil {
			b = c.getBatch()
		}
		ts := rs.lastTs // keeps the ring's stream in time order
		if ts == 0 {
			ts = rs.clock.Now()
		}
		b.recs[b.n] = Record{TsNs: ts, Kind: KindLost, Rank: rs.lastRank, Peer: -1, Bytes: d - rs.seenLost}
		rs.seenLost = d
		b.n++
		if b.n == len(b.recs) {
			c.dispatch(b, ctx)
			b = nil
		}
	}
	if b != nil {
		c.dispatch(b, ctx)
	}

	// A sink whose last batches were dropped gets the KindLost record on
	// its own, so that its loss too is reported in band.
	for _, s := range *c.sinks.Load() {
		if s.pendingLost > 0 {
			b := c.getBatch()
			b.refs.Store(1)
			item := queued{b: b, lost: s.pendingLost, last: s.lastLost}
			s.unfinished.Add(1)
			select {
			case s.q <- item:
				s.pendingLost = 0
			default:
				select {
				case s.q <- item:
					s.pendingLost = 0
				case <-ctx.Done():
					s.unfinished.Add(-1)
					c.release(b)
				}
			}
		}
		close(s.q)
	}
}

// noWait is pass's context in normal operation: done already, so that full
// sink queues drop at once.
var noWait = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// pass drains every ring once and dispatches the batches, waiting for room
// in full sink queues until ctx is done: noWait in normal operation, the
// shutdown context in the final pass.
func (c *Collector) pass(ctx context.Context) int {
	total := 0
	var b *batch
	// On one P the drain gives way after each batch it hands on, as the
	// sinks do between slices (sinkItem).
	oneP := runtime.GOMAXPROCS(0) == 1
	for _, rs := range *c.rings.Load() {
		limit := rs.ring.Cap() // one ring's worth per pass: no ring starves the others
		got := 0
		for got < limit {
			if b == nil {
				b = c.getBatch()
			}
			space := b.recs[b.n:]
			if len(space) > limit-got {
				space = space[:limit-got]
			}
			k := rs.ring.Drain(space)
			if k == 0 {
				break
			}
			seg := space[:k]
			for i := range seg {
				if seg[i].Kind == KindLost {
					rs.seenLost += seg[i].Bytes
				}
			}
			rs.lastRank, rs.lastTs = seg[k-1].Rank, seg[k-1].TsNs
			b.n += k
			got += k
			if b.n == len(b.recs) {
				c.dispatch(b, ctx)
				b = nil
				if oneP {
					runtime.Gosched()
				}
			}
			if k < len(space) {
				break // the ring is empty
			}
		}
		total += got
	}
	if b != nil {
		if b.n > 0 {
			c.dispatch(b, ctx)
		} else {
			c.putBatch(b)
		}
	}
	if total > 0 {
		c.drained.Add(uint64(total))
	}
	c.passes.Add(1)
	return total
}

// dispatch hands b to every sink and releases the drain goroutine's
// reference to it.
func (c *Collector) dispatch(b *batch, ctx context.Context) {
	c.batches.Add(1)
	b.refs.Store(1) // ours, until every sink has it
	for _, s := range *c.sinks.Load() {
		b.refs.Add(1)
		item := queued{b: b, lost: s.pendingLost, last: s.lastLost}
		s.unfinished.Add(1)
		sent := false
		select {
		case s.q <- item:
			sent = true
		default:
			select {
			case s.q <- item:
				sent = true
			case <-ctx.Done():
			}
		}
		if sent {
			s.pendingLost = 0
			continue
		}
		// Full queue: the batch is lost for this sink.
		s.unfinished.Add(-1)
		b.refs.Add(-1)
		s.pendingLost += uint64(b.n)
		s.lastLost = b.recs[b.n-1]
		s.droppedRecords.Add(uint64(b.n))
		s.droppedBatches.Add(1)
	}
	c.release(b)
}

// runSink is a sink's goroutine.
func (c *Collector) runSink(s *sinkRunner) {
	defer c.sinkWG.Done()
	for item := range s.q {
		if item.marker != nil {
			item.marker.Done()
			continue
		}
		c.sinkItem(s, item)
		s.unfinished.Add(-1)
	}
	ctx := c.shutdownCtx
	if ctx == nil {
		ctx = context.Background() // unreachable: queues close only in Shutdown
	}
	if err := s.sink.Shutdown(ctx); err != nil {
		c.mu.Lock()
		c.shutdownErr = errors.Join(c.shutdownErr, fmt.Errorf("flowtel: sink %T shutdown: %w", s.sink, err))
		c.mu.Unlock()
	}
}

// sinkItem hands one queued batch, and the loss before it, to s.
func (c *Collector) sinkItem(s *sinkRunner, item queued) {
	b := item.b
	if c.runCtx.Err() != nil {
		// Shutdown's deadline passed: drop what is left, counted.
		if b.n > 0 {
			s.droppedRecords.Add(uint64(b.n))
			s.droppedBatches.Add(1)
		}
		c.release(b)
		return
	}
	if item.lost > 0 {
		// In band, stamped like the last record dropped.
		l := &item.last
		s.lostBuf[0] = Record{TsNs: l.TsNs, Kind: KindLost, Rank: l.Rank, Peer: -1, Comm: l.Comm, Bytes: item.lost}
		c.consume(s, s.lostBuf[:])
	}
	if b.n > 0 {
		// On one P a sink gives way between slices of its batch: a
		// rank's driver woken from a sleep then waits for one slice, not
		// for the batch (a sink's work is not preempted for 10 ms).
		recs, oneP := b.recs[:b.n], runtime.GOMAXPROCS(0) == 1
		for len(recs) > 0 {
			n := len(recs)
			if oneP {
				n = min(n, onePSlice)
			}
			c.consume(s, recs[:n])
			if recs = recs[n:]; oneP && len(recs) > 0 {
				runtime.Gosched()
			}
		}
		s.records.Add(uint64(b.n))
		s.batches.Add(1)
	}
	c.release(b)
}

// onePSlice is how many records a sink consumes at a time where the
// runtime has one P: tens of microseconds of a fold's or a trace's work.
const onePSlice = 512

func (c *Collector) consume(s *sinkRunner, recs []Record) {
	if err := s.sink.Consume(c.runCtx, recs); err != nil {
		s.errors.Add(1)
		c.sinkErrors.Add(1)
		c.errMu.Lock()
		c.lastErr = fmt.Errorf("flowtel: sink %T: %w", s.sink, err)
		c.errMu.Unlock()
	}
}

func (c *Collector) getBatch() *batch {
	c.poolMu.Lock()
	if n := len(c.pool); n > 0 {
		b := c.pool[n-1]
		c.pool[n-1] = nil
		c.pool = c.pool[:n-1]
		c.poolMu.Unlock()
		return b
	}
	c.poolMu.Unlock()
	return &batch{recs: make([]Record, c.cfg.batchSize)}
}

func (c *Collector) putBatch(b *batch) {
	b.n = 0
	c.poolMu.Lock()
	c.pool = append(c.pool, b)
	c.poolMu.Unlock()
}

func (c *Collector) release(b *batch) {
	if b.refs.Add(-1) == 0 {
		c.putBatch(b)
	}
}

// CollectorStats are a Collector's counters.
type CollectorStats struct {
	Rings       int    // rings registered (one per Recorder)
	Drained     uint64 // records drained from the rings (in-band KindLost records included)
	Batches     uint64 // batches dispatched to the sinks
	RingDropped uint64 // records producers dropped because their ring was full
	SinkErrors  uint64 // Consume calls that returned an error
	LastError   error  // the last such error (nil if none)
	Sinks       []SinkStats
}

// SinkStats are the counters of one sink, in the order sinks were added.
type SinkStats struct {
	Sink           string // the sink's type
	Records        uint64 // records delivered (in-band KindLost records for this sink's own drops not included)
	Batches        uint64 // batches delivered
	DroppedRecords uint64 // records dropped for this sink (its queue was full, or Shutdown's deadline passed)
	DroppedBatches uint64 // batches dropped for this sink
	Errors         uint64 // Consume calls that returned an error
}

// Stats returns the collector's counters. It may be called at any time, from
// any goroutine.
func (c *Collector) Stats() CollectorStats {
	rings := *c.rings.Load()
	st := CollectorStats{
		Rings:      len(rings),
		Drained:    c.drained.Load(),
		Batches:    c.batches.Load(),
		SinkErrors: c.sinkErrors.Load(),
	}
	for _, rs := range rings {
		st.RingDropped += rs.ring.Dropped()
	}
	c.errMu.Lock()
	st.LastError = c.lastErr
	c.errMu.Unlock()
	sinks := *c.sinks.Load()
	st.Sinks = make([]SinkStats, len(sinks))
	for i, s := range sinks {
		st.Sinks[i] = SinkStats{
			Sink:           fmt.Sprintf("%T", s.sink),
			Records:        s.records.Load(),
			Batches:        s.batches.Load(),
			DroppedRecords: s.droppedRecords.Load(),
			DroppedBatches: s.droppedBatches.Load(),
			Errors:         s.errors.Load(),
		}
	}
	return st
}
