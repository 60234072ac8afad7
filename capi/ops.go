package capi

import (
	"fmt"
	"math"
	"sync"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/ce"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// Call is one collective or point-to-point call, as the C API takes it.
// Count is NCCL's: elements per rank for all-reduce, broadcast, reduce,
// send and receive; the send count of all-gather and gather; the receive
// count of reduce-scatter and scatter; the count per peer of all-to-all.
type Call struct {
	Op         collective.Op // OpAllReduce, …, OpSend or OpRecv
	Send, Recv uintptr       // device addresses (Send for OpSend, Recv for OpRecv)
	Count      int
	Type       DataType
	Red        RedOp
	Root       int     // root of rooted operations; the peer of a send or receive
	Stream     uintptr // the caller's cudaStream_t
}

// Thread is the NCCL state of one calling OS thread: its group depth, the
// calls and initialisations its group holds, and its last error.
type Thread struct {
	depth int
	calls []queued
	inits []*Comm
	ids   []UniqueID
	last  string
}

type queued struct {
	c *Comm
	k Call
}

var threads sync.Map // OS thread id → *Thread

// ThreadOf returns the state of the OS thread tid.
func ThreadOf(tid int) *Thread {
	if t, ok := threads.Load(tid); ok {
		return t.(*Thread)
	}
	t, _ := threads.LoadOrStore(tid, &Thread{})
	return t.(*Thread)
}

// SetLast records err as the thread's last error (ncclGetLastError); nil
// leaves the last one.
func (t *Thread) SetLast(err error) {
	if err != nil {
		t.last = err.Error()
	}
}

// Last returns the thread's last error ("" when none).
func (t *Thread) Last() string { return t.last }

// InGroup reports whether a group is open (ncclGroupStart without its
// ncclGroupEnd).
func (t *Thread) InGroup() bool { return t.depth > 0 }

// GroupStart opens a group, or nests one.
func (t *Thread) GroupStart() { t.depth++ }

// DeferInit holds an initialisation until the group ends.
func (t *Thread) DeferInit(c *Comm, id UniqueID) {
	t.inits = append(t.inits, c)
	t.ids = append(t.ids, id)
}

// GroupEnd closes a group; closing the outermost one runs what it holds:
// the initialisations, at once, then the calls, each communicator's in
// the order they were made, the communicators at once (a thread that
// drives several GPUs issues a collective on each, which meet only when
// all run).
func (t *Thread) GroupEnd() error {
	if t.depth == 0 {
		return errorf(InvalidUsage, "ncclGroupEnd without ncclGroupStart")
	}
	t.depth--
	if t.depth > 0 {
		return nil
	}
	inits, ids, calls := t.inits, t.ids, t.calls
	t.inits, t.ids, t.calls = nil, nil, nil
	if len(inits) > 0 {
		if err := InitConcurrently(inits, ids); err != nil {
			return err
		}
	}
	var order []*Comm
	per := map[*Comm][]Call{}
	for _, q := range calls {
		if _, ok := per[q.c]; !ok {
			order = append(order, q.c)
		}
		per[q.c] = append(per[q.c], q.k)
	}
	if len(order) == 1 {
		return order[0].issue(per[order[0]])
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, c := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.issue(per[c])
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

// Enqueue checks a call and runs it, or holds it until the group ends.
func (t *Thread) Enqueue(c *Comm, k Call) error {
	if c == nil {
		return errorf(InvalidArgument, "null communicator")
	}
	if err := c.check(&k); err != nil {
		return err
	}
	if t != nil && t.depth > 0 {
		t.calls = append(t.calls, queued{c, k})
		return nil
	}
	return c.issue([]Call{k})
}

// check validates a call's arguments as NCCL does when it is made.
func (c *Comm) check(k *Call) error {
	switch c.state.Load() {
	case stateFailed, stateFinalized, stateAborted, stateDestroyed:
		return c.usable()
	}
	if k.Count < 0 || k.Count > math.MaxInt/16/max(1, c.size) {
		return errorf(InvalidArgument, "%v: count %d", k.Op, k.Count)
	}
	if !k.Type.Valid() {
		return errorf(InvalidArgument, "%v: invalid datatype %d", k.Op, k.Type)
	}
	if _, err := k.Type.elements(k.Op.Reduces()); err != nil {
		return err
	}
	if k.Op.Reduces() {
		if _, ok := redops[k.Red]; !ok {
			pm := c.premulOf(k.Red)
			if pm == nil {
				return errorf(InvalidArgument, "%v: invalid reduction %d", k.Op, k.Red)
			}
			if pm.dt != k.Type {
				return errorf(InvalidArgument, "%v: reduction %d was made for datatype %d, not %d", k.Op, k.Red, pm.dt, k.Type)
			}
		}
	}
	switch k.Op {
	case collective.OpBroadcast, collective.OpReduce, collective.OpGather, collective.OpScatter, collective.OpSend, collective.OpRecv:
		if k.Root < 0 || k.Root >= c.size {
			return errorf(InvalidArgument, "%v: rank %d of %d", k.Op, k.Root, c.size)
		}
	case collective.OpAllReduce, collective.OpAllGather, collective.OpReduceScatter, collective.OpAllToAll:
	default:
		return errorf(InvalidUsage, "%v is not supported", k.Op)
	}
	if k.Count == 0 {
		return nil
	}
	sb, rb := c.shape(k)
	if sb > 0 && k.Send == 0 || rb > 0 && k.Recv == 0 {
		return errorf(InvalidArgument, "%v: null buffer", k.Op)
	}
	return nil
}

// shape returns the bytes of the send and receive buffers a call uses on
// this rank (0: none).
func (c *Comm) shape(k *Call) (send, recv int) {
	b := k.Count * k.Type.Size()
	n, root := c.size, c.rank == k.Root
	switch k.Op {
	case collective.OpAllReduce:
		return b, b
	case collective.OpAllGather:
		return b, n * b
	case collective.OpReduceScatter:
		return n * b, b
	case collective.OpAllToAll:
		return n * b, n * b
	case collective.OpBroadcast:
		if root {
			return b, b
		}
		return 0, b
	case collective.OpReduce:
		if root {
			return b, b
		}
		return b, 0
	case collective.OpGather:
		if root {
			return b, n * b
		}
		return b, 0
	case collective.OpScatter:
		if root {
			return n * b, b
		}
		return 0, b
	case collective.OpSend:
		return b, 0
	case collective.OpRecv:
		return 0, b
	}
	return 0, 0
}

// issue runs one communicator's calls in order: each collective alone,
// consecutive sends and receives together (as many as one transfer call
// of the engine takes per peer and direction).
func (c *Comm) issue(calls []Call) error {
	if err := c.usable(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 0; i < len(calls); {
		var err error
		if calls[i].Op.IsP2P() {
			j := i
			per := map[[2]int]int{}
			for ; j < len(calls) && calls[j].Op.IsP2P(); j++ {
				key := [2]int{calls[j].Root, int(calls[j].Op)}
				if per[key]++; per[key] > ce.MaxTransfers {
					break
				}
			}
			err = c.p2p(calls[i:j])
			i = j
		} else {
			err = c.collective(calls[i])
			i++
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// broken marks c failed by an error of the engine after work may have
// been queued (its peers may be left waiting) and returns the error.
func (c *Comm) broken(what string, err error) error {
	e := wrap(Code(err), what, err)
	if e.Code != InvalidArgument && e.Code != InvalidUsage {
		c.fail(e)
	}
	return e
}

// enterErr is an error of Enter: nothing was queued.
func enterErr(what string, err error) error {
	code := Code(err)
	if code == InternalError {
		code = InvalidArgument // a buffer the engine refused
	}
	return wrap(code, what, err)
}

func (c *Comm) collective(k Call) error {
	if k.Count == 0 {
		return nil
	}
	sb, rb := c.shape(&k)
	dt, _ := k.Type.elements(k.Op.Reduces())
	var ext []ce.Extent
	if sb > 0 {
		ext = append(ext, ce.Extent{Ptr: cuda.DevicePtr(k.Send), Bytes: sb, In: true})
	}
	if rb > 0 {
		ext = append(ext, ce.Extent{Ptr: cuda.DevicePtr(k.Recv), Bytes: rb, Out: true})
	}
	s := cuda.Stream(k.Stream)
	mems, err := c.proc.Enter(s, ext...)
	if err != nil {
		return enterErr(k.Op.String(), err)
	}
	var send, recv *ce.DeviceMem
	if sb > 0 {
		send, mems = mems[0], mems[1:]
	}
	if rb > 0 {
		recv = mems[0]
	}
	op := collective.DeviceOp{Op: k.Op, Root: k.Root}
	err = func() error {
		if k.Op.Reduces() {
			if r, ok := redops[k.Red]; ok {
				op.Reduce = r
			} else {
				pm := c.premulOf(k.Red)
				if pm == nil {
					return errorf(InvalidArgument, "%v: reduction %d was destroyed", k.Op, k.Red)
				}
				op.Reduce = collective.Sum
				if send, err = c.proc.PreMultiply(send, sb/k.Type.Size(), dt, pm.dev, pm.host); err != nil {
					return err
				}
			}
		}
		if send != nil {
			op.Send = collective.DeviceBuf(send, dt)
		}
		if recv != nil {
			op.Recv = collective.DeviceBuf(recv, dt)
		}
		_, err := c.proc.Start(c.ctx, op)
		return err
	}()
	if lerr := c.proc.Leave(s); err == nil {
		err = lerr
	}
	if err != nil {
		return c.broken(k.Op.String(), err)
	}
	return nil
}

// p2p runs sends and receives together; a rank's sends to itself are
// copies into its receives from itself, matched in order.
func (c *Comm) p2p(batch []Call) error {
	var self [2][]int // indices of sends and receives to and from this rank
	var streams []cuda.Stream
	var ext []ce.Extent
	for i, k := range batch {
		s := cuda.Stream(k.Stream)
		if len(streams) == 0 || !containsStream(streams, s) {
			streams = append(streams, s)
		}
		if k.Count == 0 {
			continue
		}
		sb, rb := c.shape(&k)
		if k.Root == c.rank {
			if k.Op == collective.OpSend {
				self[0] = append(self[0], i)
			} else {
				self[1] = append(self[1], i)
			}
		}
		if k.Op == collective.OpSend {
			ext = append(ext, ce.Extent{Ptr: cuda.DevicePtr(k.Send), Bytes: sb, In: true})
		} else {
			ext = append(ext, ce.Extent{Ptr: cuda.DevicePtr(k.Recv), Bytes: rb, Out: true})
		}
	}
	if len(self[0]) != len(self[1]) {
		return errorf(InvalidUsage, "%d sends to this rank (%d) but %d receives from it in one group", len(self[0]), c.rank, len(self[1]))
	}
	for j := range self[0] {
		if a, b := batch[self[0][j]], batch[self[1][j]]; a.Count*a.Type.Size() != b.Count*b.Type.Size() {
			return errorf(InvalidUsage, "a send of %d bytes to this rank meets a receive of %d", a.Count*a.Type.Size(), b.Count*b.Type.Size())
		}
	}
	if len(ext) == 0 {
		return nil
	}
	mems, err := c.proc.Enter(streams[0], ext...)
	if err != nil {
		return enterErr("send/receive", err)
	}
	for _, s := range streams[1:] {
		if _, err := c.proc.Enter(s); err != nil {
			c.proc.Leave(streams[0])
			return enterErr("send/receive", err)
		}
	}
	err = func() error {
		byCall := map[int]*ce.DeviceMem{}
		var ops []collective.P2P
		m := 0
		for i, k := range batch {
			if k.Count == 0 {
				continue
			}
			byCall[i] = mems[m]
			m++
			if k.Root == c.rank {
				continue
			}
			dt, _ := k.Type.elements(false)
			ops = append(ops, collective.P2P{Peer: k.Root, Recv: k.Op == collective.OpRecv, Buf: collective.DeviceBuf(byCall[i], dt)})
		}
		for j := range self[0] {
			if err := c.proc.CopyLocal(byCall[self[1][j]], byCall[self[0][j]]); err != nil {
				return err
			}
		}
		if len(ops) == 0 {
			return nil
		}
		op := collective.DeviceOp{Op: collective.OpGroup, P2P: ops}
		if len(ops) == 1 {
			op.Op = collective.OpSend
			if ops[0].Recv {
				op.Op = collective.OpRecv
			}
		}
		_, err := c.proc.Start(c.ctx, op)
		return err
	}()
	for _, s := range streams {
		if lerr := c.proc.Leave(s); err == nil {
			err = lerr
		}
	}
	if err != nil {
		return c.broken("send/receive", err)
	}
	return nil
}

func containsStream(ss []cuda.Stream, s cuda.Stream) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// String names a call for logs.
func (k Call) String() string {
	return fmt.Sprintf("%v count %d datatype %d op %d root %d stream %#x", k.Op, k.Count, k.Type, k.Red, k.Root, k.Stream)
}
