package capi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/ce"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// Comm is one rank's communicator (ncclComm_t).
type Comm struct {
	rank, size, dev int
	addr            string // the store this communicator was made from ("" for Split children)

	host *collective.Comm
	proc *ce.Proc

	// ctx is the context of every operation: cancelled by Abort and when
	// a peer is found gone, so that calls waiting for a peer end.
	ctx    context.Context
	cancel context.CancelFunc

	state   atomic.Int32 // stateInit, …
	ready   chan struct{}
	initErr error
	async   atomic.Pointer[Error] // the first asynchronous failure
	mu      sync.Mutex            // one call at a time

	peers     []peerID
	watchStop chan struct{}
	watchDone chan struct{}

	opsMu  sync.Mutex
	premul map[RedOp]*premulOp
	nextOp RedOp

	timeout time.Duration
}

// Communicator states.
const (
	stateInit int32 = iota
	stateReady
	stateFailed
	stateFinalized
	stateAborted
	stateDestroyed
)

// peerID is where a rank runs: its process, and what tells whether this
// process can see that one (host, boot and PID namespace).
type peerID struct {
	pid   int
	where string
}

// premulOp is a pre-multiplied sum: the scalar in device memory or its
// bytes.
type premulOp struct {
	dt   DataType
	dev  cuda.DevicePtr
	host []byte
}

// Rank returns this communicator's rank (ncclCommUserRank).
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks (ncclCommCount).
func (c *Comm) Size() int { return c.size }

// Device returns the CUDA ordinal of this rank's GPU (ncclCommCuDevice).
func (c *Comm) Device() int { return c.dev }

// newComm is a communicator of rank of nranks on device dev, not yet
// initialised.
func newComm(nranks, rank, dev int) *Comm {
	c := &Comm{rank: rank, size: nranks, dev: dev, ready: make(chan struct{}), premul: map[RedOp]*premulOp{}, nextOp: NumOps, timeout: opTimeout()}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// opTimeout is how long a call waits for its peers to reach it:
// VCCL_TIMEOUT, else defaultOpTimeout.
func opTimeout() time.Duration { return processEnv().timeout }

// CurrentDevice is the device a communicator made now on this OS thread
// uses: the one whose context is current (cudaSetDevice), else 0.
func CurrentDevice() (int, error) {
	if err := cuda.Load(); err != nil {
		return 0, wrap(InvalidUsage, "no usable GPU", err)
	}
	d, ok, err := cuda.CurrentDevice()
	if err != nil {
		return 0, wrap(UnhandledCudaError, "reading the current device", err)
	}
	if !ok {
		return 0, nil
	}
	return int(d), nil
}

// InitRank makes rank's communicator of nranks from id on CUDA device dev
// (ncclCommInitRank): every rank calls it, each in its own thread or
// process, and it returns once all have joined.
func InitRank(nranks int, id UniqueID, rank, dev int) (*Comm, error) {
	c, err := Pending(nranks, id, rank, dev)
	if err != nil {
		return nil, err
	}
	if err := c.Init(id); err != nil {
		return nil, err
	}
	return c, nil
}

// Pending checks the arguments of InitRank and returns the communicator
// uninitialised, for a group to initialise (Init) with others.
func Pending(nranks int, id UniqueID, rank, dev int) (*Comm, error) {
	if nranks < 1 {
		return nil, errorf(InvalidArgument, "%d ranks", nranks)
	}
	if rank < 0 || rank >= nranks {
		return nil, errorf(InvalidArgument, "rank %d of %d", rank, nranks)
	}
	if _, _, err := id.decode(); err != nil {
		return nil, err
	}
	if err := cuda.Load(); err != nil {
		return nil, wrap(InvalidUsage, "no usable GPU (VCCL needs a CUDA driver and a device)", err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, wrap(UnhandledCudaError, "counting devices", err)
	}
	if n == 0 {
		return nil, errorf(InvalidUsage, "no usable GPU: the driver sees no device")
	}
	if dev < 0 || dev >= n {
		return nil, errorf(InvalidArgument, "device %d of %d", dev, n)
	}
	return newComm(nranks, rank, dev), nil
}

// Init joins the job: the host communicator through the store the id
// names, then the GPU engine on it, then the peers' identities for the
// watchdog. On failure the communicator is unusable (Destroy it).
func (c *Comm) Init(id UniqueID) (err error) {
	defer func() {
		c.initErr = err
		if err != nil {
			c.state.Store(stateFailed)
			c.cancel()
		} else {
			c.state.Store(stateReady)
		}
		close(c.ready)
	}()
	addr, token, err := id.decode()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	opts := []collective.Option{collective.WithRank(c.rank, c.size), collective.WithMaster(addr), collective.WithToken(token), collective.WithServedStore()}
	holdServer(addr)
	c.addr = addr
	host, err := collective.New(ctx, opts...)
	if err != nil {
		releaseServer(addr)
		c.addr = ""
		return wrap(SystemError, fmt.Sprintf("rank %d of %d joining the job at %s", c.rank, c.size, addr), err)
	}
	return c.attach(ctx, host)
}

// attach makes the GPU engine on a host communicator and starts the
// watchdog.
func (c *Comm) attach(ctx context.Context, host *collective.Comm) error {
	c.host = host
	p, err := ce.NewProc(ctx, ce.ProcConfig{Comm: host, UseDevice: true, Device: c.dev, Timeout: c.timeout,
		Collector: host.Collector(), CommID: host.ID()})
	if err != nil {
		host.Close()
		c.host = nil
		return wrap(Code(err), fmt.Sprintf("rank %d: starting the GPU engine on device %d", c.rank, c.dev), err)
	}
	c.proc = p
	if err := c.identify(ctx); err != nil {
		p.CloseLocal(ctx)
		host.Close()
		c.host, c.proc = nil, nil
		return wrap(SystemError, "exchanging the ranks' identities", err)
	}
	c.watchStop, c.watchDone = make(chan struct{}), make(chan struct{})
	go c.watch()
	logf(levelInfo, c.dev, "comm %p rank %d nranks %d cudaDev %d: ready (%s)", c, c.rank, c.size, c.dev, p.Paths())
	return nil
}

// identify all-gathers every rank's process and where it runs.
func (c *Comm) identify(ctx context.Context) error {
	const rec = 256
	mine := make([]byte, rec)
	binary.LittleEndian.PutUint64(mine, uint64(os.Getpid()))
	copy(mine[8:], whereAmI())
	all := make([]byte, rec*c.size)
	if err := collective.AllGather(ctx, c.host, mine, all); err != nil {
		return err
	}
	c.peers = make([]peerID, c.size)
	for q := range c.peers {
		b := all[q*rec : (q+1)*rec]
		w := b[8:]
		if i := strings.IndexByte(string(w), 0); i >= 0 {
			w = w[:i]
		}
		c.peers[q] = peerID{pid: int(binary.LittleEndian.Uint64(b)), where: string(w)}
	}
	return nil
}

// whereAmI identifies the process table this process sees: its host, the
// kernel's boot and its PID namespace.
func whereAmI() string {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	ns, _ := os.Readlink("/proc/self/ns/pid")
	s := host + "/" + strings.TrimSpace(string(boot)) + "/" + ns
	if len(s) > 240 {
		s = s[:240]
	}
	return s
}

// watchPeriod is how often the watchdog looks at the peers.
const watchPeriod = 100 * time.Millisecond

// watch fails the communicator asynchronously when a peer process is gone
// (one this process can see) or the host communicator failed.
func (c *Comm) watch() {
	defer close(c.watchDone)
	me := whereAmI()
	t := time.NewTicker(watchPeriod)
	defer t.Stop()
	for {
		select {
		case <-c.watchStop:
			return
		case <-t.C:
		}
		if h := c.host; h != nil {
			if err := h.Err(); err != nil {
				c.fail(wrap(RemoteError, "the host communicator failed", err))
				return
			}
		}
		for q, p := range c.peers {
			if q == c.rank || p.where != me || p.pid == os.Getpid() {
				continue
			}
			if !alive(p.pid) {
				c.fail(errorf(RemoteError, "rank %d (process %d) is gone", q, p.pid))
				return
			}
		}
	}
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return true
	}
	st := s[i+2]
	return st != 'Z' && st != 'X'
}

// fail records the communicator's first asynchronous error and ends the
// calls waiting for peers.
func (c *Comm) fail(e *Error) {
	if c.async.CompareAndSwap(nil, e) {
		logf(levelWarn, c.dev, "comm %p rank %d: %v", c, c.rank, e)
	}
	c.cancel()
}

// AsyncError is ncclCommGetAsyncError: InProgress while a grouped
// initialisation runs, the first asynchronous failure (a peer gone, a link
// down, an operation that broke the communicator), or Success.
func (c *Comm) AsyncError() *Error {
	switch c.state.Load() {
	case stateInit:
		return &Error{Code: InProgress, Msg: "initialising"}
	case stateFailed:
		if e := c.async.Load(); e != nil {
			return e
		}
		return wrap(Code(c.initErr), "initialisation failed", c.initErr)
	}
	return c.async.Load()
}

// usable returns why calls cannot run on c, or nil.
func (c *Comm) usable() error {
	switch c.state.Load() {
	case stateInit:
		<-c.ready
		return c.usable()
	case stateFailed:
		return wrap(InvalidUsage, "communicator failed to initialise", c.initErr)
	case stateFinalized:
		return errorf(InvalidUsage, "communicator was finalized")
	case stateAborted:
		return errorf(InvalidUsage, "communicator was aborted")
	case stateDestroyed:
		return errorf(InvalidUsage, "communicator was destroyed")
	}
	if e := c.async.Load(); e != nil {
		return e
	}
	return nil
}

// Finalize waits until every operation queued on c has completed on the
// GPU (ncclCommFinalize); c then takes no more calls.
func (c *Comm) Finalize() error {
	if err := c.usable(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	if err := c.proc.Synchronize(ctx); err != nil {
		e := wrap(Code(err), "finalize: waiting for the queued operations", err)
		c.fail(e)
		return e
	}
	c.state.Store(stateFinalized)
	return nil
}

// Destroy releases c (ncclCommDestroy): the queued operations are waited
// for (at most VCCL_TIMEOUT), then this rank's resources are freed without
// the peers' help. The host communicator closes last, finishing its
// telemetry (Arrow traces, spans).
func (c *Comm) Destroy() error {
	st := c.state.Load()
	if st == stateInit {
		<-c.ready
		st = c.state.Load()
	}
	if st == stateDestroyed {
		return errorf(InvalidUsage, "communicator destroyed twice")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.Store(stateDestroyed)
	c.stopWatch()
	var err error
	if c.proc != nil {
		d := c.timeout
		if st == stateAborted {
			d = time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		err = c.proc.CloseLocal(ctx)
		cancel()
		c.proc = nil
	}
	if c.host != nil {
		err = errors.Join(err, c.host.Close())
		c.host = nil
	}
	c.cancel()
	if c.addr != "" {
		releaseServer(c.addr)
		c.addr = ""
	}
	if err != nil {
		return wrap(Code(err), "destroy", err)
	}
	logf(levelInfo, c.dev, "comm %p rank %d: destroyed", c, c.rank)
	return nil
}

// Abort ends c at once (ncclCommAbort), from any thread: calls waiting for
// peers fail, what this rank's streams wait for from peers is released
// (results in flight are garbage), the host communicator is torn down so
// that peers see this rank gone (in the background: closing its links may
// take longer), and c's GPU resources are released when the device has
// drained, or left to the process's end if it does not within a second.
// It never waits for the peers, and returns within a few seconds whatever
// they and the GPU do.
func (c *Comm) Abort() error {
	st := c.state.Load()
	if st == stateDestroyed {
		return errorf(InvalidUsage, "abort of a destroyed communicator")
	}
	t0 := time.Now()
	c.cancel()
	if st == stateInit {
		<-c.ready
	}
	c.state.Store(stateAborted)
	c.stopWatch()
	host, addr := c.host, c.addr
	c.host, c.addr = nil, ""
	go func() {
		if host != nil {
			host.Abort()
		}
		if addr != "" {
			releaseServer(addr)
		}
		logf(levelInfo, c.dev, "comm %p rank %d: abort: host communicator torn down %v after the call", c, c.rank, time.Since(t0).Round(time.Millisecond))
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.mu.Lock() // the call in flight ends: its context is cancelled
		defer c.mu.Unlock()
		if c.proc != nil {
			c.proc.Abort()
			c.proc = nil
		}
	}()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		logf(levelWarn, c.dev, "comm %p rank %d: abort left the GPU engine's release running after 5 s", c, c.rank)
	}
	c.state.Store(stateDestroyed)
	logf(levelInfo, c.dev, "comm %p rank %d: aborted in %v", c, c.rank, time.Since(t0).Round(time.Millisecond))
	return nil
}

func (c *Comm) stopWatch() {
	if c.watchStop == nil {
		return
	}
	select {
	case <-c.watchStop:
	default:
		close(c.watchStop)
	}
	<-c.watchDone
}

// Split makes the communicators of the ranks of c that pass the same color
// (ncclCommSplit), ordered by key then rank; every rank of c calls it.
// SplitNoColor joins none and returns nil.
func (c *Comm) Split(color, key int) (*Comm, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if color < 0 && color != SplitNoColor {
		return nil, errorf(InvalidArgument, "split color %d", color)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	hc := collective.NoColor
	if color != SplitNoColor {
		hc = color
	}
	child, err := c.host.Split(ctx, hc, key)
	if err != nil {
		e := wrap(Code(err), "split", err)
		c.fail(e)
		return nil, e
	}
	if child == nil {
		return nil, nil
	}
	nc := newComm(child.Size(), child.Rank(), c.dev)
	nc.timeout = c.timeout
	err = nc.attach(ctx, child)
	nc.initErr = err
	if err != nil {
		nc.state.Store(stateFailed)
		close(nc.ready)
		return nil, err
	}
	nc.state.Store(stateReady)
	close(nc.ready)
	return nc, nil
}

// InitAll makes the communicators of one process that drives every device
// in devs (ncclCommInitAll), rank i on devs[i].
func InitAll(devs []int) ([]*Comm, error) {
	if len(devs) == 0 {
		return nil, errorf(InvalidArgument, "no devices")
	}
	id, err := GetUniqueID()
	if err != nil {
		return nil, err
	}
	comms := make([]*Comm, len(devs))
	for i, d := range devs {
		if comms[i], err = Pending(len(devs), id, i, d); err != nil {
			return nil, err
		}
	}
	if err := InitConcurrently(comms, []UniqueID{id}); err != nil {
		for _, c := range comms {
			c.Destroy()
		}
		return nil, err
	}
	return comms, nil
}

// InitConcurrently initialises pending communicators at once (a group's
// ncclCommInitRank calls, or InitAll), comms[i] from ids[i] (or ids[0]
// for all), and returns the first error.
func InitConcurrently(comms []*Comm, ids []UniqueID) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		id := ids[0]
		if len(ids) == len(comms) {
			id = ids[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Init(id)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// CreatePreMulSum makes a reduction that multiplies each input by scalar
// before summing (ncclRedOpCreatePreMulSum). A device scalar is read when
// an operation runs; a host scalar (the bytes of one element of dt) now.
func (c *Comm) CreatePreMulSum(dt DataType, dev cuda.DevicePtr, host []byte) (RedOp, error) {
	if _, err := dt.elements(true); err != nil {
		return 0, err
	}
	if dev == 0 && len(host) != dt.Size() {
		return 0, errorf(InvalidArgument, "pre-multiplied sum without a scalar")
	}
	c.opsMu.Lock()
	defer c.opsMu.Unlock()
	op := c.nextOp
	c.nextOp++
	c.premul[op] = &premulOp{dt: dt, dev: dev, host: append([]byte(nil), host...)}
	return op, nil
}

// DestroyRedOp forgets a pre-multiplied sum (ncclRedOpDestroy).
func (c *Comm) DestroyRedOp(op RedOp) error {
	c.opsMu.Lock()
	defer c.opsMu.Unlock()
	if _, ok := c.premul[op]; !ok {
		return errorf(InvalidArgument, "reduction %d was not created on this communicator", op)
	}
	delete(c.premul, op)
	return nil
}

func (c *Comm) premulOf(op RedOp) *premulOp {
	c.opsMu.Lock()
	defer c.opsMu.Unlock()
	return c.premul[op]
}
