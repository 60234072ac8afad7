package ce

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/gpu/cuda"
	"github.com/vccl-go/vccl/gpu/kernels"
)

// Config sets up a Group.
type Config struct {
	// Devices are the CUDA ordinals, one rank each, in rank order; nil
	// takes every device.
	Devices []int
	// SMs is the grid of the reduction kernel: at most this many thread
	// blocks of BlockThreads, so at most this many SMs (default 16).
	SMs int
	// Chunk is the pipeline chunk of an all-reduce, in bytes of one rank's
	// half (0: automatic, about 16 MiB).
	Chunk int
	// SmallMax is the largest out-of-place all-reduce that takes the
	// one-kernel path, which reads the peer's input over NVLink with SMs
	// (default DefaultSmallMax; negative: never).
	SmallMax int
	// Collector receives the telemetry records; nil turns telemetry off.
	Collector *flowtel.Collector
	// Comm is the communicator id written into records.
	Comm uint32
	// PollEvery is how often an idle proxy polls the completion events of
	// telemetry (default DefaultPollEvery). PollBusy is how often it polls
	// while requests keep coming (default DefaultPollBusy): each poll
	// queries a CUDA event per stream with work in flight, and those
	// queries compete with the proxy's own driver calls from any thread,
	// so a thread of its own polling would slow the proxy more than the
	// proxy polling between its requests does. So a wc record is late by at most about
	// PollEvery after the proxy goes idle and PollBusy while it queues work
	// back to back. Synchronize polls continuously.
	PollEvery time.Duration
	PollBusy  time.Duration
	// DtoD makes copies between GPUs cuMemcpyDtoDAsync on unified addresses
	// instead of cuMemcpyPeerAsync; both run on the copy engines.
	DtoD bool
}

// BlockThreads is the block size of the reduction kernels.
const BlockThreads = 1024

// Group is a set of GPUs of this process that run collectives together.
type Group struct {
	cfg   Config
	ranks []*rank
	reqs  chan *request
	quit  chan struct{}
	dead  chan struct{}
	cur   cuda.Context // context current on the proxy thread
	seq   uint64       // collective sequence numbers
	p2p   uint64       // point-to-point sequence numbers
	tel   bool
	diag  Diagnostics

	// Telemetry hand-over between mark and the sweeps (both on the proxy
	// thread today; the locks keep a sweep from another thread correct).
	telMu       sync.Mutex   // guards posted and the ranks' evFree and grpFree
	posted      []*wrGroup   // marked, not yet seen by a sweep, in post order
	postedSpare []*wrGroup   // the other buffer of posted
	sweepMu     sync.Mutex   // one sweep at a time (it owns qps, fly, nfly, the recorders)
	inflight    atomic.Int64 // groups marked and not yet completed
	lastPoll    atomic.Int64 // when the last sweep ended (flowtel.Monotonic)
	reqTs       int64        // when the proxy started its last request (flowtel.Monotonic), with telemetry on
	reqEnd      int64        // when it finished it, with telemetry in flight
	noWait      atomic.Bool  // teardown does not wait for the streams (abandon)
}

// DefaultPollEvery is the idle proxy's telemetry polling period.
const DefaultPollEvery = 5 * time.Microsecond

// DefaultPollBusy is the busy proxy's telemetry polling period: the
// longer, the less its event queries slow back-to-back requests and the
// later their wc records; at this period the cost is small against the
// requests' own (1 MiB all-reduces, BENCHMARKS.md).
const DefaultPollBusy = 500 * time.Microsecond

// eventPool is how many completion events each rank makes up front when
// telemetry may be on.
const eventPool = 512

type rank struct {
	idx     int
	global  int // the rank written into records: idx, or the job rank of a Proc
	dev     cuda.Device
	ctx     cuda.Context
	sms     int
	user    cuda.Stream // where the caller's work is ordered
	ce      cuda.Stream // copy engine: sends of the first phase, all-gather and p2p
	gat     cuda.Stream // copy engine: sends of reduced data
	red     cuda.Stream // reduction kernels
	evStart cuda.Event
	evCE    cuda.Event
	evRed   cuda.Event
	evEndCE cuda.Event
	evEndG  cuda.Event
	evEndR  cuda.Event
	evDone  cuda.Event
	scratch cuda.DevicePtr
	scrLen  int
	fns     map[kernels.Spec]cuda.Function
	args    cuda.Args
	rec     *flowtel.Recorder
	qps     map[uint32]*qpState
	callf   flowtel.CallFields // its coll records' fields (flowtel/put.go says why)
	fly     [4][]*wrGroup      // telemetry in flight per stream (user, ce, gat, red), oldest first
	open    [4]*wrGroup        // per stream: requests posted, no event recorded yet (proxy only)
	nfly    int                // groups in fly (owned by the sweeps)
	evFree  []cuda.Event
	grpFree []*wrGroup
	rot     int // PooledEvents diagnostics: next pooled event
}

func (r *rank) streamIndex(s cuda.Stream) int {
	switch s {
	case r.ce:
		return 1
	case r.gat:
		return 2
	case r.red:
		return 3
	}
	return 0
}

type qpState struct {
	sendSeq, recvSeq uint64
	depth            int
	wrf              flowtel.WRFields // its records' fields, the QP's set once (flowtel/put.go says why)
}

type request struct {
	fn   func() error
	err  error
	done atomic.Bool
}

// New starts a Group: it opens the driver, retains each device's primary
// context, creates the streams and events, and enables peer access between
// every pair of GPUs. With no driver it returns an error wrapping
// cuda.ErrNoDriver.
func New(cfg Config) (*Group, error) {
	if _, err := envOf(nil); err != nil {
		return nil, err
	}
	if err := cuda.Load(); err != nil {
		return nil, err
	}
	if cfg.SMs <= 0 {
		cfg.SMs = 16
	}
	if cfg.SmallMax == 0 {
		cfg.SmallMax = DefaultSmallMax
	}
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = DefaultPollEvery
	}
	if cfg.PollBusy <= 0 {
		cfg.PollBusy = DefaultPollBusy
	}
	if cfg.Devices == nil {
		n, err := cuda.DeviceCount()
		if err != nil {
			return nil, err
		}
		for i := 0; i < n; i++ {
			cfg.Devices = append(cfg.Devices, i)
		}
	}
	if len(cfg.Devices) == 0 {
		return nil, fmt.Errorf("ce: no devices: %w", cuda.ErrNoDriver)
	}
	g := &Group{cfg: cfg, reqs: make(chan *request, 1), quit: make(chan struct{}), dead: make(chan struct{}), tel: cfg.Collector != nil}
	started := make(chan error, 1)
	go g.proxy(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return g, nil
}

// proxy is the goroutine that owns the OS thread all driver calls of the
// group are made on.
func (g *Group) proxy(started chan<- error) {
	runtime.LockOSThread()
	defer close(g.dead)
	// Leave the thread with no context and give it back to Go rather than
	// letting it exit locked: in a cgo build a thread's exit runs the
	// driver's thread destructors, which crashed once the contexts had
	// been released.
	defer runtime.UnlockOSThread()
	defer cuda.SetCurrent(0)
	if err := g.setup(); err != nil {
		started <- err
		return
	}
	started <- nil
	idle := 0
	for {
		select {
		case r := <-g.reqs:
			// One clock read per request serves every wr_post of it and
			// the polling schedule (in a VM a clock read can be a system
			// call).
			if g.tel || g.inflight.Load() > 0 {
				g.reqTs = flowtel.Monotonic()
			}
			r.err = r.fn()
			r.done.Store(true)
			idle = 0
			if g.inflight.Load() > 0 {
				// Idle time counts from the end of the request: a
				// caller that queues the next operation within
				// PollEvery of the last one's end finds no sweep in its
				// way: a sweep in every gap between back-to-back
				// requests would slow each of them.
				g.reqEnd = flowtel.Monotonic()
				if g.reqTs-g.lastPoll.Load() >= int64(g.cfg.PollBusy) {
					g.pollTelemetry(g.use)
				}
			}
			continue
		case <-g.quit:
			g.teardown()
			return
		default:
		}
		idle++
		// Telemetry: poll every PollEvery once idle (the clock is read
		// every 64th spin only: back-to-back requests come within fewer),
		// every PollBusy while requests keep coming (above).
		busy := g.inflight.Load() > 0
		if busy && idle&63 == 0 {
			g.maybePoll(flowtel.Monotonic())
		}
		switch {
		case idle < 2000:
			// spin: the next request usually follows at once
		case idle < 4000 || busy:
			runtime.Gosched()
		default:
			select {
			case r := <-g.reqs:
				r.err = r.fn()
				r.done.Store(true)
				idle = 0
			case <-g.quit:
				g.teardown()
				return
			}
		}
	}
}

// do runs fn on the proxy thread and waits for it, spinning briefly first
// since most requests take microseconds.
func (g *Group) do(fn func() error) error {
	r := &request{fn: fn}
	select {
	case <-g.dead:
		return errGroupClosed
	default:
	}
	select {
	case g.reqs <- r:
	case <-g.dead:
		return errGroupClosed
	}
	for spins := 0; !r.done.Load(); spins++ {
		if spins > 1000 {
			runtime.Gosched()
		}
		if spins > 100000 {
			time.Sleep(20 * time.Microsecond)
			// A proxy that stopped (abandon) leaves the request unserved.
			if spins&63 == 0 {
				select {
				case <-g.dead:
					if !r.done.Load() {
						return errGroupClosed
					}
				default:
				}
			}
		}
	}
	return r.err
}

var errGroupClosed = errors.New("ce: group closed")

func (g *Group) use(r *rank) error {
	if g.cur == r.ctx {
		return nil
	}
	if err := cuda.SetCurrent(r.ctx); err != nil {
		return err
	}
	g.cur = r.ctx
	return nil
}

func (g *Group) setup() error {
	for i, ord := range g.cfg.Devices {
		dev, err := cuda.GetDevice(ord)
		if err != nil {
			return err
		}
		ctx, err := dev.PrimaryContext()
		if err != nil {
			return err
		}
		r := &rank{idx: i, global: i, dev: dev, ctx: ctx, fns: map[kernels.Spec]cuda.Function{}, qps: map[uint32]*qpState{}}
		g.ranks = append(g.ranks, r)
		if err := g.use(r); err != nil {
			return err
		}
		if r.sms, err = dev.Attribute(cuda.AttrMultiprocessorCount); err != nil {
			return err
		}
		for _, s := range []*cuda.Stream{&r.user, &r.ce, &r.gat, &r.red} {
			if *s, err = cuda.NewStream(cuda.StreamNonBlocking); err != nil {
				return err
			}
		}
		for _, e := range []*cuda.Event{&r.evStart, &r.evCE, &r.evRed, &r.evEndCE, &r.evEndG, &r.evEndR, &r.evDone} {
			if *e, err = cuda.NewEvent(cuda.EventDisableTiming); err != nil {
				return err
			}
		}
		if g.cfg.Collector != nil {
			r.rec = g.cfg.Collector.NewRecorder()
			// Completion events, made now so that recording them later
			// never waits for cuEventCreate.
			for len(r.evFree) < eventPool {
				e, err := cuda.NewEvent(cuda.EventDisableTiming)
				if err != nil {
					return err
				}
				r.evFree = append(r.evFree, e)
			}
		}
	}
	for _, r := range g.ranks {
		if err := g.use(r); err != nil {
			return err
		}
		for _, p := range g.ranks {
			if p == r {
				continue
			}
			ok, err := r.dev.CanAccessPeer(p.dev)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("ce: GPU %d cannot access GPU %d directly", r.dev, p.dev)
			}
			if err := cuda.EnablePeerAccess(p.ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func (g *Group) teardown() {
	for _, r := range g.ranks {
		if g.use(r) != nil {
			continue
		}
		if !g.noWait.Load() {
			r.user.Synchronize()
		}
		for _, s := range []cuda.Stream{r.user, r.ce, r.gat, r.red} {
			s.Destroy()
		}
		if r.scratch != 0 {
			cuda.MemFree(r.scratch)
		}
		r.dev.ReleasePrimaryContext()
	}
}

// Close waits for queued work and releases the group's streams and scratch
// memory (buffers from Alloc must be freed by the caller first).
func (g *Group) Close() error {
	select {
	case <-g.dead:
		return nil
	default:
	}
	err := g.Synchronize(context.Background())
	close(g.quit)
	<-g.dead
	return err
}

// abandon stops the proxy without waiting for the device: its streams are
// destroyed with work possibly still queued on them (the driver releases
// them once it completes). It waits at most d for the proxy to finish the
// request it may be in.
func (g *Group) abandon(d time.Duration) {
	select {
	case <-g.dead:
		return
	default:
	}
	g.noWait.Store(true)
	close(g.quit)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-g.dead:
	case <-t.C:
	}
}

// Size returns the number of ranks (GPUs).
func (g *Group) Size() int { return len(g.ranks) }

// Device returns rank's CUDA device.
func (g *Group) Device(rank int) cuda.Device { return g.ranks[rank].dev }

// Context returns rank's (primary) context.
func (g *Group) Context(rank int) cuda.Context { return g.ranks[rank].ctx }

// Stream returns the stream rank's operations are ordered on.
func (g *Group) Stream(rank int) cuda.Stream { return g.ranks[rank].user }

// Reconfigure changes the configuration for later operations (SMs, Chunk,
// SmallMax, DtoD, PollEvery; Devices and Collector stay).
func (g *Group) Reconfigure(f func(*Config)) {
	g.do(func() error {
		c := g.cfg
		f(&c)
		g.cfg.SMs, g.cfg.Chunk, g.cfg.SmallMax, g.cfg.DtoD = max(1, c.SMs), c.Chunk, c.SmallMax, c.DtoD
		if c.PollEvery > 0 {
			g.cfg.PollEvery = c.PollEvery
		}
		if c.PollBusy > 0 {
			g.cfg.PollBusy = c.PollBusy
		}
		return nil
	})
}

// Config returns the current configuration.
func (g *Group) Config() Config {
	var c Config
	g.do(func() error { c = g.cfg; return nil })
	return c
}

// SetSMs changes the reduction kernels' grid for later operations.
func (g *Group) SetSMs(n int) {
	g.do(func() error { g.cfg.SMs = max(1, n); return nil })
}

// SetTelemetry turns the records on or off for later operations; it needs
// a Collector in the Config to turn them on.
func (g *Group) SetTelemetry(on bool) {
	g.do(func() error {
		g.tel = on && g.cfg.Collector != nil
		g.reqTs = flowtel.Monotonic()
		return nil
	})
}

// SMs returns the grid (thread blocks, so at most that many SMs) the
// reduction kernels use.
func (g *Group) SMs() int { return g.cfg.SMs }

// DeviceSMs returns how many SMs rank's GPU has.
func (g *Group) DeviceSMs(rank int) int { return g.ranks[rank].sms }

// Do runs f on the proxy thread with rank's context current. Use it for
// driver calls of your own that must not race with the group's (for
// example a library that launches on Stream(rank)).
func (g *Group) Do(rank int, f func() error) error {
	return g.do(func() error {
		if err := g.use(g.ranks[rank]); err != nil {
			return err
		}
		// f may change the thread's current context (NCCL does): forget
		// which one is current.
		defer func() { g.cur = 0 }()
		return f()
	})
}

// Alloc allocates n bytes on rank's GPU.
func (g *Group) Alloc(rank, n int) (cuda.DevicePtr, error) {
	var p cuda.DevicePtr
	err := g.Do(rank, func() (err error) { p, err = cuda.MemAlloc(n); return })
	return p, err
}

// Free frees memory from Alloc.
func (g *Group) Free(rank int, p cuda.DevicePtr) error {
	return g.Do(rank, func() error { return cuda.MemFree(p) })
}

// Upload copies src to p on rank's GPU after the rank's queued work.
func (g *Group) Upload(rank int, p cuda.DevicePtr, src []byte) error {
	return g.Do(rank, func() error {
		if err := g.ranks[rank].user.Synchronize(); err != nil {
			return err
		}
		if err := cuda.MemcpyHtoD(p, src); err != nil {
			return err
		}
		// From pageable memory cuMemcpyHtoD may return once the data is
		// staged, before the DMA to the device finished, and the legacy
		// stream it runs on does not order the group's non-blocking
		// streams: wait for it, or the next operation can read stale data
		// (seen: in-place all-reduces of 1 MiB checked wrong).
		return cuda.Synchronize()
	})
}

// Download copies len(dst) bytes at p on rank's GPU into dst after the
// rank's queued work.
func (g *Group) Download(rank int, dst []byte, p cuda.DevicePtr) error {
	return g.Do(rank, func() error {
		if err := g.ranks[rank].user.Synchronize(); err != nil {
			return err
		}
		return cuda.MemcpyDtoH(dst, p)
	})
}

// Memset fills n bytes at p on rank's GPU with v, in stream order.
func (g *Group) Memset(rank int, p cuda.DevicePtr, v byte, n int) error {
	return g.Do(rank, func() error { return cuda.MemsetD8Async(p, v, n, g.ranks[rank].user) })
}

// Synchronize waits until every rank's stream has drained (and, with
// telemetry, every completion has been recorded) or ctx is done.
func (g *Group) Synchronize(ctx context.Context) error {
	return g.do(func() error {
		for _, r := range g.ranks {
			if err := g.use(r); err != nil {
				return err
			}
			for spins := 0; ; spins++ {
				ok, err := r.user.Query()
				if err != nil {
					return err
				}
				if ok {
					break
				}
				if g.inflight.Load() > 0 && spins&7 == 7 && flowtel.Monotonic()-g.lastPoll.Load() >= int64(g.cfg.PollEvery) {
					g.pollTelemetry(g.use)
					if err := g.use(r); err != nil {
						return err
					}
				}
				if spins&1023 == 1023 {
					if err := ctx.Err(); err != nil {
						return err
					}
				}
			}
		}
		// Every event has fired: a sweep retires them all.
		for spins := 0; g.inflight.Load() > 0; spins++ {
			g.pollTelemetry(g.use)
			if spins > 1000 {
				runtime.Gosched()
			}
		}
		return nil
	})
}

// kernel returns rank's function for spec, JIT-compiling its module on
// first use.
func (g *Group) kernel(r *rank, spec kernels.Spec) (cuda.Function, error) {
	if f, ok := r.fns[spec]; ok {
		return f, nil
	}
	src, err := kernels.Source(spec)
	if err != nil {
		return 0, err
	}
	m, err := cuda.LoadPTX(src)
	if err != nil {
		return 0, err
	}
	f, err := m.Function(spec.Name())
	if err != nil {
		return 0, err
	}
	r.fns[spec] = f
	return f, nil
}

// Prepare compiles the kernels of one datatype and reduction on every
// rank, so the first operation does not pay for the JIT.
func (g *Group) Prepare(dt collective.Datatype, op collective.ReduceOp) error {
	return g.do(func() error {
		for _, r := range g.ranks {
			if err := g.use(r); err != nil {
				return err
			}
			if _, err := g.kernel(r, kernels.Spec{Kind: kernels.KindReduce, Dtype: dt, Op: op}); err != nil {
				return err
			}
		}
		return nil
	})
}

// launchReduce queues dst = a op b over count elements on s, with at most
// blocks thread blocks. div is the divisor of avg.
func (g *Group) launchReduce(r *rank, s cuda.Stream, dt collective.Datatype, op collective.ReduceOp,
	dst, a, b cuda.DevicePtr, count, blocks int, div int) error {
	f, err := g.kernel(r, kernels.Spec{Kind: kernels.KindReduce, Dtype: dt, Op: op})
	if err != nil {
		return err
	}
	n, nvec := kernels.Params(dt, count, uint64(dst), uint64(a), uint64(b))
	work := int(n)
	if nvec > 0 {
		work = int(nvec) + int(n) - int(nvec)*(kernels.VecBytes/dt.Size())
	}
	need := (work + 2*BlockThreads - 1) / (2 * BlockThreads)
	grid := max(1, min(blocks, need))
	return r.args.Launch(f, cuda.D1(grid), cuda.D1(BlockThreads), 0, s,
		uint64(dst), uint64(a), uint64(b), n, nvec, uint64(div))
}
