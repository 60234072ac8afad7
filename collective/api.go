package collective

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vccl-go/vccl/transport"
)

// Buffer is memory with its element type: the byte-buffer form of the API,
// for memory that is not a typed Go slice (foreign memory, mmap'd regions).
//
// A Buffer holds either host memory (Data) or device memory (Dev, see
// DeviceBuf): operations on device buffers run on the Comm's DeviceEngine.
type Buffer struct {
	Data []byte
	Type Datatype
	Dev  DeviceMemory
}

// Buf wraps a typed slice as a Buffer without copying.
func Buf[T Element](s []T) Buffer { return Buffer{Data: AsBytes(s), Type: DatatypeOf[T]()} }

// Bytes wraps raw memory holding elements of dt.
func Bytes(b []byte, dt Datatype) Buffer { return Buffer{Data: b, Type: dt} }

// Len returns the number of elements.
func (b Buffer) Len() int {
	if s := b.Type.Size(); s > 0 {
		return b.Size() / s
	}
	return 0
}

// Handle is an operation in flight.
type Handle struct {
	tasks   []*task
	comm    *Comm
	err     error
	waited  bool
	dev     *deviceWait  // a device operation: the engine waits
	small   *smallWait   // a call on the mailbox path (small.go)
	inline  bool         // a blocking call's, never seen by the caller: reused once waited
	probeAt int64        // a blocking call loanChoice times: when it started, else 0
	probeN  int          // and its bytes a rank
	left    atomic.Int32 // not inline: tasks not finished; the last to finish ends the call (Comm.pending)
}

// Wait blocks until the operation finished or ctx ended, and returns its
// error. If ctx ends first the operation goes on, bounded by the context it
// was started with; Wait may be called again.
func (h *Handle) Wait(ctx context.Context) error {
	if h.dev != nil {
		return h.dev.Wait(ctx)
	}
	if h.waited {
		return h.err
	}
	if w := h.small; w != nil {
		select {
		case <-w.done:
		case <-ctx.Done():
			return fmt.Errorf("collective: waiting for %v: %w", OpAllReduce, ctx.Err())
		}
		h.waited, h.err = true, w.err
		return h.err
	}
	for _, t := range h.tasks {
		if err := t.eng.await(ctx, t); err != nil {
			// When the call's own deadline is the one that passed, the
			// engine fails the task within a poll interval, with an error
			// naming what it waited for: prefer that one.
			grace := time.NewTimer(100 * time.Millisecond)
			select {
			case <-t.doneChan():
				grace.Stop()
				continue
			case <-grace.C:
			}
			return fmt.Errorf("collective: waiting for %v seq %d: %w", t.call.op, t.seq, err)
		}
	}
	h.waited = true
	for _, t := range h.tasks {
		if t.err != nil {
			h.err = t.err
			break
		}
	}
	if len(h.tasks) > 0 {
		h.err = h.comm.verdict(h.tasks[0].seq, h.err)
	}
	return h.err
}

// Done is closed when the operation finished.
func (h *Handle) Done() <-chan struct{} {
	if h.dev != nil {
		return h.dev.Done()
	}
	if h.small != nil {
		return h.small.done
	}
	return h.tasks[len(h.tasks)-1].doneChan()
}

// recycle keeps a blocking call's handle and tasks, all finished, for the
// next blocking call: a call then allocates nothing.
func (c *Comm) recycle(h *Handle) {
	for _, t := range h.tasks {
		t.release()
	}
	h.err, h.waited = nil, false
	c.spare.Store(h)
}

// request is a call before it is split across channels.
type request struct {
	call    call
	dt      Datatype
	in, out []byte
	extra   [][]byte // grouped point-to-point buffers, bufID numBufs on
	seq     uint64   // set: the sequence number of a mailbox call run again on the engine (small.go)
	slices  bool     // a mailbox call above a slot, in slices (slices.go)
	loaned  bool     // a mailbox call by loans (loaned.go)
	probeAt int64    // a call loanChoice times: when it started (flowtel.Monotonic), else 0
}

func (c *Comm) check(b Buffer, what string) error {
	if !b.Type.Valid() {
		return fmt.Errorf("collective: %s buffer has invalid datatype %v", what, b.Type)
	}
	if len(b.Data)%b.Type.Size() != 0 {
		return fmt.Errorf("collective: %s buffer of %d bytes is not a whole number of %v elements", what, len(b.Data), b.Type)
	}
	return nil
}

// start submits a request and returns its handle.
//
// A blocking call passes inline: its caller waits at once and drives a
// single-channel call itself, so the background driver is not woken to race
// it for the engine, and its handle is reused (the caller never sees it).
func (c *Comm) start(ctx context.Context, inline bool, rq request) (*Handle, error) {
	if !rq.call.redop.Valid() && rq.call.op.Reduces() {
		return nil, fmt.Errorf("collective: %v with invalid reduction %v", rq.call.op, rq.call.redop)
	}
	if rq.call.op.Rooted() && (rq.call.root < 0 || rq.call.root >= c.size) {
		return nil, fmt.Errorf("collective: %v root %d out of range for %d ranks", rq.call.op, rq.call.root, c.size)
	}
	if c.takesSmall(&rq, inline) {
		return c.smallStart(ctx, inline, rq)
	}
	// A call whose context has no deadline gets the communicator's timeout,
	// kept in the task rather than in a derived context (one allocation and
	// timer fewer per call); the engine starts it when it admits the task.
	var timeout time.Duration
	if _, ok := ctx.Deadline(); !ok {
		timeout = c.opts.timeout
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if err := c.failed(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	seq := rq.seq
	p2p := rq.call.op == OpSend || rq.call.op == OpRecv || rq.call.op == OpGroup
	switch {
	case p2p:
		c.p2pSeq++
		seq = 1<<63 | c.p2pSeq
	case seq == 0:
		c.seq++
		seq = c.seq
	}
	if rq.seq == 0 { // a mailbox call run again was observed when it was numbered
		c.observeCall(ctx, seq)
	}
	rq.call.rank, rq.call.n = c.rank, c.size
	rq.call.esize = rq.dt.Size()
	algo := c.pickAlgo(rq.call.op, rq.call.count*rq.call.esize)
	parts := c.splitChannels(&rq)
	var h *Handle
	if inline {
		h = c.spare.Swap(nil)
	}
	if h == nil {
		h = &Handle{comm: c, inline: inline}
	}
	if inline {
		h.probeAt, h.probeN = rq.probeAt, len(rq.in)
	}
	old := h.tasks[:cap(h.tasks)]
	h.tasks = h.tasks[:0]
	for ch, part := range parts {
		var reuse *task
		if ch < len(old) {
			reuse = old[ch]
		}
		t, err := c.newTask(ctx, part, algo, seq, !p2p, reuse)
		if t != nil {
			t.timeout, t.parts = timeout, len(parts)
		}
		if err != nil {
			c.mu.Unlock()
			// Tasks already queued on other channels run to completion
			// harmlessly only if none was queued: splitting is uniform, so
			// a build error happens on channel 0 first.
			return nil, err
		}
		_ = ch
		h.tasks = append(h.tasks, t)
	}
	// The call is pending until it finishes: a blocking one until its
	// caller's Wait, which comes at once, an async one until its last
	// task finishes, whether or not anyone waits for it (Close waits for
	// calls in flight, not for handles).
	c.pending.Add(1)
	var owner *Handle
	if !h.inline {
		owner = h
		h.left.Store(int32(len(h.tasks)))
	}
	if c.small != nil {
		if !p2p && rq.seq == 0 {
			c.small.engineTicket()
		}
		if !inline {
			c.small.noteAsync(h)
		}
	}
	inline = inline && len(h.tasks) == 1
	for ch, t := range h.tasks {
		t.owner, t.eng = owner, c.engines[ch]
		t.eng.enqueue(t, inline)
	}
	c.mu.Unlock()
	if !p2p && rq.seq == 0 {
		c.settle(seq, &rq)
	}
	return h, nil
}

// settleEvery is how often, in calls of a size, a rank lends its processor
// to its telemetry's consumers (settle): every few milliseconds at 16 ranks
// (64 calls of 16 KiB, about 5000 records, every 2-4 ms on the 16-core
// host), well within the 10 ms after which the runtime would preempt the
// rank for them at a moment of its own, and seldom enough that a settle's
// round trip stays small beside 2 ranks' calls of a microsecond or two.
// The size is the call's count, the same on every rank.
func settleEvery(bytes int) uint64 {
	switch {
	case bytes <= 4<<10:
		return 256
	case bytes <= 64<<10:
		return 64
	case bytes <= 256<<10:
		return 16
	}
	return 4
}

// settle lends this rank's processor to its telemetry's collector and sinks
// at call seq of rq when it is a settleEvery-th, the same call on every
// rank, where the rank has a single one (flowtel's Recorder.Settle): their
// pauses then overlap, where each rank's used to stall the others at a
// moment of its own.
func (c *Comm) settle(seq uint64, rq *request) {
	if seq%settleEvery(rq.call.count*rq.dt.Size()) == 0 {
		c.engines[0].rec.Settle()
	}
}

// failed returns the first channel failure, which ends the communicator.
func (c *Comm) failed() error {
	for _, e := range c.engines {
		if err := e.failure(); err != nil {
			return err
		}
	}
	return nil
}

// Err reports whether the communicator failed; after a failure every call
// returns an error and the communicator should be aborted and recreated.
func (c *Comm) Err() error { return c.failed() }

// newTask returns the task of rq on one channel, in t (a finished task to
// reuse) when t is not nil.
func (c *Comm) newTask(ctx context.Context, rq request, algo Algorithm, seq uint64, check bool, t *task) (*task, error) {
	cl := rq.call
	cl.chunk = c.chunkFor(&cl, algo)
	cl.fuse = c.fuseRecv
	cl.tee = c.teeSend
	cl.prefix = c.overStream
	check = check && c.opts.check && c.size > 1
	s, fresh, err := c.schedule(&cl, algo, check)
	if err != nil {
		return nil, err
	}
	if t == nil {
		t = &task{}
	}
	t.call, t.dt, t.sched, t.ctx, t.seq = cl, rq.dt, s, ctx, seq
	t.tag = transport.Tag{CollSeq: seq, Op: cl.op, Algo: algo, Dtype: rq.dt}
	if need := int(numBufs) + len(rq.extra); cap(t.bufs) < need {
		t.bufs = make([][]byte, numBufs, need)
	} else {
		t.bufs = t.bufs[:numBufs]
	}
	t.bufs = append(t.bufs, rq.extra...)
	t.bufs[bufIn], t.bufs[bufOut] = rq.in, rq.out
	// Scratch comes from the engine's pool when the task is admitted.
	if check {
		t.sig = cl.signature(rq.dt, algo, seq)
	}
	if fresh { // a cached schedule was validated against this shape already
		if err := s.validate(t.bufs); err != nil {
			return nil, fmt.Errorf("%w (internal error: please report)", err)
		}
	}
	return t, nil
}

// schedKey is the shape of a call: calls of one shape share one schedule.
type schedKey struct {
	op                        Op
	algo                      Algorithm
	redop                     ReduceOp
	count, esize, chunk, root int
	inPlace, check            bool
}

// maxCachedSchedules bounds the schedule cache; a training loop calls few
// shapes over and over.
const maxCachedSchedules = 256

// schedule returns the compiled schedule of cl, from the cache when a call
// of the same shape was made before. The caller holds c.mu.
func (c *Comm) schedule(cl *call, algo Algorithm, check bool) (s *schedule, fresh bool, err error) {
	cacheable := cl.op != OpAllToAllv && cl.p2p == nil
	key := schedKey{cl.op, algo, cl.redop, cl.count, cl.esize, cl.chunk, cl.root, cl.inPlace, check}
	if cacheable {
		// A loop repeats one call: compare with the last before hashing.
		if c.lastSched != nil && key == c.lastKey {
			return c.lastSched, false, nil
		}
		if s, ok := c.schedCache[key]; ok {
			c.lastKey, c.lastSched = key, s
			return s, false, nil
		}
	}
	if s, err = build(cl, algo); err != nil {
		return nil, false, err
	}
	if check {
		if s, err = withSignature(s, cl, algo); err != nil {
			return nil, false, err
		}
	}
	s.compile(c.size)
	if cacheable {
		if c.schedCache == nil || len(c.schedCache) >= maxCachedSchedules {
			c.schedCache = map[schedKey]*schedule{}
		}
		c.schedCache[key] = s
		c.lastKey, c.lastSched = key, s
	}
	return s, true, nil
}

// splitChannels divides a request among channels. The caller holds c.mu;
// the result is valid until the next call. Operations over one
// contiguous vector split by element ranges; the others use channel 0.
func (c *Comm) splitChannels(rq *request) []request {
	nch := len(c.engines)
	op := rq.call.op
	if nch == 1 || (op != OpAllReduce && op != OpBroadcast && op != OpReduce) || rq.call.count < nch*1024 {
		c.parts = append(c.parts[:0], *rq)
		return c.parts
	}
	parts := make([]request, nch)
	es := rq.dt.Size()
	base, rem := rq.call.count/nch, rq.call.count%nch
	start := 0
	for ch := range parts {
		n := base
		if ch < rem {
			n++
		}
		p := *rq
		p.call.count = n
		lo, hi := start*es, (start+n)*es
		if len(rq.in) > 0 {
			p.in = rq.in[lo:hi]
		}
		if len(rq.out) > 0 {
			p.out = rq.out[lo:hi]
		}
		parts[ch] = p
		start += n
	}
	return parts
}

// overlap reports whether a and b share any byte.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

func sameData(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// window reports whether small is exactly big[off:off+len(small)].
func window(big, small []byte, off int) bool {
	return len(small) > 0 && off+len(small) <= len(big) && unsafe.SliceData(small) == unsafe.SliceData(big[off:])
}

func sameType(a, b Buffer, op Op) error {
	if a.Type != b.Type {
		return fmt.Errorf("collective: %v send buffer is %v but receive buffer is %v", op, a.Type, b.Type)
	}
	return nil
}

// lenRule says how the lengths of a call's send and receive buffers relate.
type lenRule uint8

const (
	anyLen     lenRule = iota // the caller checks them
	sameLen                   // equal
	recvBlocks                // recv holds Size() blocks of len(send)
	sendBlocks                // send holds Size() blocks of len(recv)
)

// checkBufs checks a call's buffers each on its own, their element types
// against each other and, where sized, their lengths by rule.
func (c *Comm) checkBufs(op Op, send, recv Buffer, rule lenRule, sized bool) error {
	if err := errors.Join(c.check(send, "send"), c.check(recv, "receive"), sameType(send, recv, op)); err != nil || !sized {
		return err
	}
	big, what, small := recv, "receive", send
	switch rule {
	case sameLen:
		if len(send.Data) != len(recv.Data) {
			return fmt.Errorf("collective: %s send has %d elements but receive has %d", op, send.Len(), recv.Len())
		}
		return nil
	case sendBlocks:
		big, what, small = send, "send", recv
	case recvBlocks:
	default:
		return nil
	}
	if len(big.Data) != c.size*len(small.Data) {
		return fmt.Errorf("collective: %s %s has %d elements, want %d ranks × %d", op, what, big.Len(), c.size, small.Len())
	}
	return nil
}

// startBufs checks send and recv by rule and starts cl on them, with the
// count and the in-place test that the rule implies.
func (c *Comm) startBufs(ctx context.Context, inline bool, cl call, send, recv Buffer, rule lenRule, sized bool) (*Handle, error) {
	if err := c.checkBufs(cl.op, send, recv, rule, sized); err != nil {
		return nil, err
	}
	switch rule {
	case recvBlocks:
		cl.count, cl.inPlace = send.Len(), sized && window(recv.Data, send.Data, c.rank*len(send.Data))
	case sendBlocks:
		cl.count, cl.inPlace = recv.Len(), sized && window(send.Data, recv.Data, c.rank*len(recv.Data))
	default:
		cl.count, cl.inPlace = send.Len(), sameData(send.Data, recv.Data)
	}
	in := send.Data
	if cl.op != OpBroadcast || cl.root == c.rank { // a broadcast's root alone reads its send buffer
		in = inputApart(in, recv.Data, cl.inPlace)
	}
	return c.start(ctx, inline, request{call: cl, dt: send.Type, in: in, out: recv.Data})
}

// inputApart returns a call's input as the algorithms take it: in its
// output's own place (inPlace) or apart from the output. An input that
// overlaps the output elsewhere would be overwritten while it is still
// sent, so such a call gets a copy of it (only such a call pays for one).
func inputApart(in, out []byte, inPlace bool) []byte {
	if inPlace || !overlap(in, out) {
		return in
	}
	return slices.Clone(in)
}

// AllReduceAsync starts an all-reduce of send into recv (the same buffer for
// in place).
func (c *Comm) AllReduceAsync(ctx context.Context, send, recv Buffer, op ReduceOp) (*Handle, error) {
	return c.allReduce(ctx, false, send, recv, op)
}

func (c *Comm) allReduce(ctx context.Context, inline bool, send, recv Buffer, op ReduceOp) (*Handle, error) {
	if anyDevice(send, recv) {
		return c.startDevice(ctx, DeviceOp{Op: OpAllReduce, Send: send, Recv: recv, Reduce: op})
	}
	return c.startBufs(ctx, inline, call{op: OpAllReduce, redop: op}, send, recv, sameLen, true)
}

// AllGatherAsync starts an all-gather: recv holds Size() blocks of len(send).
// In place when send is recv's block for this rank.
func (c *Comm) AllGatherAsync(ctx context.Context, send, recv Buffer) (*Handle, error) {
	return c.allGather(ctx, false, send, recv)
}

func (c *Comm) allGather(ctx context.Context, inline bool, send, recv Buffer) (*Handle, error) {
	if anyDevice(send, recv) {
		return c.startDevice(ctx, DeviceOp{Op: OpAllGather, Send: send, Recv: recv})
	}
	return c.startBufs(ctx, inline, call{op: OpAllGather}, send, recv, recvBlocks, true)
}

// ReduceScatterAsync starts a reduce-scatter: send holds Size() blocks of
// len(recv); rank r receives the reduction of block r. In place when recv is
// send's block for this rank.
func (c *Comm) ReduceScatterAsync(ctx context.Context, send, recv Buffer, op ReduceOp) (*Handle, error) {
	return c.reduceScatter(ctx, false, send, recv, op)
}

func (c *Comm) reduceScatter(ctx context.Context, inline bool, send, recv Buffer, op ReduceOp) (*Handle, error) {
	if anyDevice(send, recv) {
		return c.startDevice(ctx, DeviceOp{Op: OpReduceScatter, Send: send, Recv: recv, Reduce: op})
	}
	return c.startBufs(ctx, inline, call{op: OpReduceScatter, redop: op}, send, recv, sendBlocks, true)
}

// BroadcastAsync starts a broadcast of root's send into every rank's recv.
// Pass the same buffer for in place; send is ignored on other ranks.
func (c *Comm) BroadcastAsync(ctx context.Context, send, recv Buffer, root int) (*Handle, error) {
	return c.broadcast(ctx, false, send, recv, root)
}

func (c *Comm) broadcast(ctx context.Context, inline bool, send, recv Buffer, root int) (*Handle, error) {
	if anyDevice(send, recv) {
		if c.rank != root {
			send = Buffer{}
		}
		return c.startDevice(ctx, DeviceOp{Op: OpBroadcast, Send: send, Recv: recv, Root: root})
	}
	if c.rank != root || send.Data == nil {
		send = Buffer{Data: recv.Data, Type: recv.Type}
	}
	return c.startBufs(ctx, inline, call{op: OpBroadcast, root: root}, send, recv, sameLen, true)
}

// ReduceAsync starts a reduction of every rank's send into root's recv
// (recv is ignored elsewhere; the same buffer on root for in place).
func (c *Comm) ReduceAsync(ctx context.Context, send, recv Buffer, op ReduceOp, root int) (*Handle, error) {
	return c.reduce(ctx, false, send, recv, op, root)
}

func (c *Comm) reduce(ctx context.Context, inline bool, send, recv Buffer, op ReduceOp, root int) (*Handle, error) {
	if anyDevice(send, recv) {
		if c.rank != root {
			recv = Buffer{}
		}
		return c.startDevice(ctx, DeviceOp{Op: OpReduce, Send: send, Recv: recv, Reduce: op, Root: root})
	}
	if c.rank != root {
		recv = Buffer{Type: send.Type}
	}
	return c.startBufs(ctx, inline, call{op: OpReduce, redop: op, root: root}, send, recv, sameLen, c.rank == root)
}

// AllToAllAsync starts an all-to-all: block p of send goes to rank p, and
// block p of recv comes from rank p. The same buffer for in place.
func (c *Comm) AllToAllAsync(ctx context.Context, send, recv Buffer) (*Handle, error) {
	return c.allToAll(ctx, false, send, recv)
}

func (c *Comm) allToAll(ctx context.Context, inline bool, send, recv Buffer) (*Handle, error) {
	if anyDevice(send, recv) {
		return c.startDevice(ctx, DeviceOp{Op: OpAllToAll, Send: send, Recv: recv})
	}
	if err := c.checkBufs(OpAllToAll, send, recv, anyLen, true); err != nil {
		return nil, err
	}
	if len(send.Data) != len(recv.Data) || send.Len()%c.size != 0 {
		return nil, fmt.Errorf("collective: alltoall buffers of %d and %d elements must be equal and divisible by %d ranks", send.Len(), recv.Len(), c.size)
	}
	inPlace := sameData(send.Data, recv.Data)
	return c.start(ctx, inline, request{call: call{op: OpAllToAll, count: send.Len() / c.size, inPlace: inPlace},
		dt: send.Type, in: inputApart(send.Data, recv.Data, inPlace), out: recv.Data})
}

// AllToAllvAsync starts an all-to-all with per-peer counts and offsets, in
// elements.
func (c *Comm) AllToAllvAsync(ctx context.Context, send Buffer, sendCounts, sendDispls []int, recv Buffer, recvCounts, recvDispls []int) (*Handle, error) {
	return c.allToAllv(ctx, false, send, sendCounts, sendDispls, recv, recvCounts, recvDispls)
}

func (c *Comm) allToAllv(ctx context.Context, inline bool, send Buffer, sendCounts, sendDispls []int, recv Buffer, recvCounts, recvDispls []int) (*Handle, error) {
	if anyDevice(send, recv) {
		return nil, fmt.Errorf("collective: alltoallv on device buffers is not supported")
	}
	if err := c.checkBufs(OpAllToAllv, send, recv, anyLen, true); err != nil {
		return nil, err
	}
	if sameData(send.Data, recv.Data) && len(send.Data) > 0 {
		return nil, errors.New("collective: alltoallv cannot run in place")
	}
	for _, v := range []struct {
		name          string
		counts, displ []int
		buf           Buffer
	}{{"send", sendCounts, sendDispls, send}, {"receive", recvCounts, recvDispls, recv}} {
		if len(v.counts) != c.size || len(v.displ) != c.size {
			return nil, fmt.Errorf("collective: alltoallv %s counts and displacements need %d entries, have %d and %d", v.name, c.size, len(v.counts), len(v.displ))
		}
		for p := range c.size {
			if v.counts[p] < 0 || v.displ[p] < 0 || v.displ[p]+v.counts[p] > v.buf.Len() {
				return nil, fmt.Errorf("collective: alltoallv %s block for rank %d [%d, %d) is outside the %d-element buffer", v.name, p, v.displ[p], v.displ[p]+v.counts[p], v.buf.Len())
			}
		}
	}
	if sendCounts[c.rank] != recvCounts[c.rank] {
		return nil, fmt.Errorf("collective: alltoallv sends %d elements to itself but receives %d", sendCounts[c.rank], recvCounts[c.rank])
	}
	return c.start(ctx, inline, request{call: call{op: OpAllToAllv, sendCounts: sendCounts, sendDispls: sendDispls, recvCounts: recvCounts, recvDispls: recvDispls},
		dt: send.Type, in: inputApart(send.Data, recv.Data, false), out: recv.Data})
}

// GatherAsync starts a gather of every rank's send into root's recv (Size()
// blocks; ignored elsewhere).
func (c *Comm) GatherAsync(ctx context.Context, send, recv Buffer, root int) (*Handle, error) {
	return c.gatherScatter(ctx, false, OpGather, send, recv, root)
}

// ScatterAsync starts a scatter of root's send (Size() blocks; ignored
// elsewhere) into every rank's recv.
func (c *Comm) ScatterAsync(ctx context.Context, send, recv Buffer, root int) (*Handle, error) {
	return c.gatherScatter(ctx, false, OpScatter, send, recv, root)
}

// gatherScatter starts a gather or a scatter, mirror images of each other:
// the root's buffer of Size() blocks is recv for a gather and send for a
// scatter, and other ranks' is ignored.
func (c *Comm) gatherScatter(ctx context.Context, inline bool, op Op, send, recv Buffer, root int) (*Handle, error) {
	if anyDevice(send, recv) {
		return c.startDevice(ctx, DeviceOp{Op: op, Send: send, Recv: recv, Root: root})
	}
	rule := recvBlocks
	switch {
	case op == OpScatter:
		rule = sendBlocks
		if c.rank != root {
			send = Buffer{Type: recv.Type}
		}
	case c.rank != root:
		recv = Buffer{Type: send.Type}
	}
	return c.startBufs(ctx, inline, call{op: op, root: root}, send, recv, rule, c.rank == root)
}

// P2P is one send or receive of a grouped point-to-point call.
type P2P struct {
	Peer int
	Buf  Buffer
	Recv bool
}

// SendTo describes a send of buf to peer for SendRecv.
func SendTo(peer int, buf Buffer) P2P { return P2P{Peer: peer, Buf: buf} }

// RecvFrom describes a receive from peer into buf for SendRecv.
func RecvFrom(peer int, buf Buffer) P2P { return P2P{Peer: peer, Buf: buf, Recv: true} }

// SendRecvAsync starts many sends and receives as one operation, so that
// exchanges which would deadlock as separate blocking calls (each rank
// sending first) make progress: what pipeline parallelism needs. Sends and
// receives to one peer match in the order given.
func (c *Comm) SendRecvAsync(ctx context.Context, ops ...P2P) (*Handle, error) {
	return c.sendRecv(ctx, false, ops...)
}

func (c *Comm) sendRecv(ctx context.Context, inline bool, ops ...P2P) (*Handle, error) {
	if len(ops) == 0 {
		return nil, errors.New("collective: SendRecv with no operations")
	}
	for _, o := range ops {
		if o.Buf.Dev != nil {
			return c.startDevice(ctx, DeviceOp{Op: groupOp(ops), P2P: ops})
		}
	}
	// Each buffer of the group is a buffer of its own to the schedule.
	bufs := make([][]byte, numBufs, int(numBufs)+len(ops))
	var p2p []p2pOp
	var dt Datatype
	for i, o := range ops {
		if err := c.check(o.Buf, fmt.Sprintf("operation %d's", i)); err != nil {
			return nil, err
		}
		if o.Peer < 0 || o.Peer >= c.size {
			return nil, fmt.Errorf("collective: operation %d's peer %d out of range for %d ranks", i, o.Peer, c.size)
		}
		if o.Peer == c.rank {
			return nil, fmt.Errorf("collective: operation %d sends to or receives from this rank itself (%d)", i, c.rank)
		}
		dt = o.Buf.Type
		p2p = append(p2p, p2pOp{recv: o.Recv, peer: o.Peer, buf: bufID(len(bufs)), n: len(o.Buf.Data)})
		bufs = append(bufs, o.Buf.Data)
	}
	// A receive may not land where another operation of the group reads or
	// writes: transfers run concurrently, in no fixed order.
	for i, a := range ops {
		for j, b := range ops[:i] {
			if (a.Recv || b.Recv) && overlap(a.Buf.Data, b.Buf.Data) {
				return nil, fmt.Errorf("collective: SendRecv operations %d and %d use overlapping memory and one of them receives", j, i)
			}
		}
	}
	op := OpGroup
	if len(ops) == 1 {
		op = OpSend
		if ops[0].Recv {
			op = OpRecv
		}
	}
	return c.start(ctx, inline, request{call: call{op: op, p2p: p2p}, dt: dt, extra: bufs[numBufs:]})
}
