package collective

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/vccl-go/vccl/flowtel"
)

// wait finishes a blocking call. A handle whose tasks all finished is
// reused; one whose caller gave up waiting stays with the engine. A call
// on the mailbox path has no handle: it is over.
//
// A blocking call is pending (Close waits for it) until wait returns, by
// any way: an error, or a panic unwinding through a deferred Close.
// An async call ends when its last task finishes (markDone).
func (c *Comm) wait(ctx context.Context, h *Handle, err error) error {
	if err != nil || h == nil {
		return err
	}
	if h.inline {
		defer c.pending.Done()
	}
	err = h.Wait(ctx)
	if err == nil && h.probeAt != 0 {
		c.small.loans.done(h.probeN, false, flowtel.Monotonic()-h.probeAt)
	}
	if h.waited && h.inline {
		c.recycle(h)
	}
	return err
}

// AllReduce reduces send across ranks into recv (the same buffer for in place).
func (c *Comm) AllReduce(ctx context.Context, send, recv Buffer, op ReduceOp) error {
	h, err := c.allReduce(ctx, true, send, recv, op)
	return c.wait(ctx, h, err)
}

// AllGather gathers every rank's send into recv on every rank.
func (c *Comm) AllGather(ctx context.Context, send, recv Buffer) error {
	h, err := c.allGather(ctx, true, send, recv)
	return c.wait(ctx, h, err)
}

// ReduceScatter reduces send across ranks and leaves block r in rank r's recv.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv Buffer, op ReduceOp) error {
	h, err := c.reduceScatter(ctx, true, send, recv, op)
	return c.wait(ctx, h, err)
}

// Broadcast copies root's send into every rank's recv.
func (c *Comm) Broadcast(ctx context.Context, send, recv Buffer, root int) error {
	h, err := c.broadcast(ctx, true, send, recv, root)
	return c.wait(ctx, h, err)
}

// Reduce reduces send across ranks into root's recv.
func (c *Comm) Reduce(ctx context.Context, send, recv Buffer, op ReduceOp, root int) error {
	h, err := c.reduce(ctx, true, send, recv, op, root)
	return c.wait(ctx, h, err)
}

// AllToAll exchanges block p of send with rank p.
func (c *Comm) AllToAll(ctx context.Context, send, recv Buffer) error {
	h, err := c.allToAll(ctx, true, send, recv)
	return c.wait(ctx, h, err)
}

// AllToAllv exchanges variable blocks with every rank.
func (c *Comm) AllToAllv(ctx context.Context, send Buffer, sendCounts, sendDispls []int, recv Buffer, recvCounts, recvDispls []int) error {
	h, err := c.allToAllv(ctx, true, send, sendCounts, sendDispls, recv, recvCounts, recvDispls)
	return c.wait(ctx, h, err)
}

// Gather collects every rank's send into root's recv.
func (c *Comm) Gather(ctx context.Context, send, recv Buffer, root int) error {
	h, err := c.gatherScatter(ctx, true, OpGather, send, recv, root)
	return c.wait(ctx, h, err)
}

// Scatter hands block r of root's send to rank r.
func (c *Comm) Scatter(ctx context.Context, send, recv Buffer, root int) error {
	h, err := c.gatherScatter(ctx, true, OpScatter, send, recv, root)
	return c.wait(ctx, h, err)
}

// SendRecv runs sends and receives to many peers as one operation.
func (c *Comm) SendRecv(ctx context.Context, ops ...P2P) error {
	h, err := c.sendRecv(ctx, true, ops...)
	return c.wait(ctx, h, err)
}

// Send sends buf to peer; it returns once peer received it.
func (c *Comm) Send(ctx context.Context, buf Buffer, peer int) error {
	return c.SendRecv(ctx, SendTo(peer, buf))
}

// Recv receives from peer into buf.
func (c *Comm) Recv(ctx context.Context, buf Buffer, peer int) error {
	return c.SendRecv(ctx, RecvFrom(peer, buf))
}

// BarrierAsync starts a barrier.
func (c *Comm) BarrierAsync(ctx context.Context) (*Handle, error) {
	return c.barrier(ctx, false)
}

func (c *Comm) barrier(ctx context.Context, inline bool) (*Handle, error) {
	return c.start(ctx, inline, request{call: call{op: OpBarrier}, dt: Uint8})
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	h, err := c.barrier(ctx, true)
	return c.wait(ctx, h, err)
}

// The typed API: generic functions over Go slices.

// AllReduce reduces send across ranks into recv (pass one slice twice for
// in place).
func AllReduce[T Element](ctx context.Context, c *Comm, send, recv []T, op ReduceOp) error {
	return c.AllReduce(ctx, Buf(send), Buf(recv), op)
}

// AllGather gathers every rank's send into recv (Size()×len(send) elements).
func AllGather[T Element](ctx context.Context, c *Comm, send, recv []T) error {
	return c.AllGather(ctx, Buf(send), Buf(recv))
}

// ReduceScatter reduces send (Size()×len(recv) elements) across ranks; rank r
// receives block r.
func ReduceScatter[T Element](ctx context.Context, c *Comm, send, recv []T, op ReduceOp) error {
	return c.ReduceScatter(ctx, Buf(send), Buf(recv), op)
}

// Broadcast copies root's send into every rank's recv (pass one slice
// twice for in place; send is read on root only).
func Broadcast[T Element](ctx context.Context, c *Comm, send, recv []T, root int) error {
	return c.Broadcast(ctx, Buf(send), Buf(recv), root)
}

// Reduce reduces send across ranks into root's recv.
func Reduce[T Element](ctx context.Context, c *Comm, send, recv []T, op ReduceOp, root int) error {
	return c.Reduce(ctx, Buf(send), Buf(recv), op, root)
}

// AllToAll exchanges block p of send with rank p.
func AllToAll[T Element](ctx context.Context, c *Comm, send, recv []T) error {
	return c.AllToAll(ctx, Buf(send), Buf(recv))
}

// AllToAllv exchanges variable blocks (counts and offsets in elements).
func AllToAllv[T Element](ctx context.Context, c *Comm, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int) error {
	return c.AllToAllv(ctx, Buf(send), sendCounts, sendDispls, Buf(recv), recvCounts, recvDispls)
}

// Gather collects every rank's send into root's recv.
func Gather[T Element](ctx context.Context, c *Comm, send, recv []T, root int) error {
	return c.Gather(ctx, Buf(send), Buf(recv), root)
}

// Scatter hands block r of root's send to rank r's recv.
func Scatter[T Element](ctx context.Context, c *Comm, send, recv []T, root int) error {
	return c.Scatter(ctx, Buf(send), Buf(recv), root)
}

// Send sends buf to peer.
func Send[T Element](ctx context.Context, c *Comm, buf []T, peer int) error {
	return c.Send(ctx, Buf(buf), peer)
}

// Recv receives from peer into buf.
func Recv[T Element](ctx context.Context, c *Comm, buf []T, peer int) error {
	return c.Recv(ctx, Buf(buf), peer)
}

// The typed API's async forms: each starts the call and returns its
// Handle, as the Comm method of the same name does. The slices belong to
// the call until its Handle's Wait returns.

// AllReduceAsync starts AllReduce.
func AllReduceAsync[T Element](ctx context.Context, c *Comm, send, recv []T, op ReduceOp) (*Handle, error) {
	return c.AllReduceAsync(ctx, Buf(send), Buf(recv), op)
}

// AllGatherAsync starts AllGather.
func AllGatherAsync[T Element](ctx context.Context, c *Comm, send, recv []T) (*Handle, error) {
	return c.AllGatherAsync(ctx, Buf(send), Buf(recv))
}

// ReduceScatterAsync starts ReduceScatter.
func ReduceScatterAsync[T Element](ctx context.Context, c *Comm, send, recv []T, op ReduceOp) (*Handle, error) {
	return c.ReduceScatterAsync(ctx, Buf(send), Buf(recv), op)
}

// BroadcastAsync starts Broadcast.
func BroadcastAsync[T Element](ctx context.Context, c *Comm, send, recv []T, root int) (*Handle, error) {
	return c.BroadcastAsync(ctx, Buf(send), Buf(recv), root)
}

// ReduceAsync starts Reduce.
func ReduceAsync[T Element](ctx context.Context, c *Comm, send, recv []T, op ReduceOp, root int) (*Handle, error) {
	return c.ReduceAsync(ctx, Buf(send), Buf(recv), op, root)
}

// AllToAllAsync starts AllToAll.
func AllToAllAsync[T Element](ctx context.Context, c *Comm, send, recv []T) (*Handle, error) {
	return c.AllToAllAsync(ctx, Buf(send), Buf(recv))
}

// AllToAllvAsync starts AllToAllv.
func AllToAllvAsync[T Element](ctx context.Context, c *Comm, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int) (*Handle, error) {
	return c.AllToAllvAsync(ctx, Buf(send), sendCounts, sendDispls, Buf(recv), recvCounts, recvDispls)
}

// GatherAsync starts Gather.
func GatherAsync[T Element](ctx context.Context, c *Comm, send, recv []T, root int) (*Handle, error) {
	return c.GatherAsync(ctx, Buf(send), Buf(recv), root)
}

// ScatterAsync starts Scatter.
func ScatterAsync[T Element](ctx context.Context, c *Comm, send, recv []T, root int) (*Handle, error) {
	return c.ScatterAsync(ctx, Buf(send), Buf(recv), root)
}

// NoColor is the Split color of ranks that join no sub-communicator.
const NoColor = -1

// Split creates sub-communicators: ranks passing the same color form one,
// ordered by key (ties by rank). Every rank must call it; ranks passing
// NoColor get nil. The sub-communicator has its own connections and shares
// this one's telemetry collector, and so its exporters (RegisterTelemetry).
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	c.mu.Lock()
	c.splits++
	nth := c.splits
	c.mu.Unlock()
	// Round 1: who goes where.
	mine := make([]int64, 2)
	mine[0], mine[1] = int64(color), int64(key)
	all := make([]int64, 2*c.size)
	if err := AllGather(ctx, c, mine, all); err != nil {
		return nil, fmt.Errorf("collective: split: %w", err)
	}
	type member struct{ rank, key int }
	var members []member
	for r := range c.size {
		if int(all[2*r]) == color {
			members = append(members, member{r, int(all[2*r+1])})
		}
	}
	slices.SortStableFunc(members, func(a, b member) int {
		if a.key != b.key {
			return a.key - b.key
		}
		return a.rank - b.rank
	})
	newRank := -1
	for i, m := range members {
		if m.rank == c.rank {
			newRank = i
		}
	}
	child := &Comm{clock: c.clock, opts: c.opts, uid: fmt.Sprintf("%s/split%d/%d", c.uid, nth, color)}
	// The child records into this communicator's collector, so the
	// exporters attached here (RegisterTelemetry) see its records too; it
	// runs no attachers of its own, which would export them twice.
	child.opts.collector, child.opts.telemetry = c.collector, c.collector != nil
	child.splitFrom = c
	child.rank, child.size = newRank, len(members)
	child.opts.rank, child.opts.size = newRank, len(members)
	// Round 2: addresses. Every rank takes part, with a fixed-size slot.
	const slot = 2048
	infos := make([]byte, slot*c.size)
	exchange := func(ctx context.Context, me peerInfo) ([]peerInfo, error) {
		b, _ := json.Marshal(me)
		if len(b) > slot-4 {
			return nil, fmt.Errorf("bootstrap record of %d bytes exceeds %d", len(b), slot-4)
		}
		own := make([]byte, slot)
		binary.LittleEndian.PutUint32(own, uint32(len(b)))
		copy(own[4:], b)
		if color == NoColor {
			binary.LittleEndian.PutUint32(own, 0)
		}
		if err := AllGather(ctx, c, own, infos); err != nil {
			return nil, err
		}
		if color == NoColor {
			return nil, nil
		}
		out := make([]peerInfo, len(members))
		for i, m := range members {
			s := infos[m.rank*slot:]
			n := binary.LittleEndian.Uint32(s)
			if err := json.Unmarshal(s[4:4+n], &out[i]); err != nil {
				return nil, fmt.Errorf("rank %d's split record: %w", m.rank, err)
			}
			out[i].Rank = i
		}
		return out, nil
	}
	if color == NoColor {
		if _, err := exchange(ctx, peerInfo{}); err != nil {
			return nil, fmt.Errorf("collective: split: %w", err)
		}
		return nil, nil
	}
	if err := child.setup(ctx, exchange); err != nil {
		return nil, fmt.Errorf("collective: split: %w", err)
	}
	if c.boards != nil {
		child.watchAborts(c.boards)
	}
	return child, nil
}
