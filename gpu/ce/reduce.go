package ce

import (
	"context"
	"fmt"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

func (g *Group) checkReduce(what string, send []cuda.DevicePtr, dt collective.Datatype, op collective.ReduceOp, count int) error {
	if len(g.ranks) != 2 {
		return fmt.Errorf("ce: %s runs on 2 GPUs, the group has %d", what, len(g.ranks))
	}
	if len(send) != 2 {
		return fmt.Errorf("ce: %s needs 2 send buffers, got %d", what, len(send))
	}
	if !dt.Valid() || !op.Valid() {
		return fmt.Errorf("ce: invalid datatype %v or reduction %v", dt, op)
	}
	if count < 0 {
		return fmt.Errorf("ce: %s of %d elements", what, count)
	}
	return nil
}

// ReduceScatter queues a reduce-scatter of 2 × recvCount elements of dt:
// rank r's recv gets the reduction of block r (elements [r*recvCount,
// (r+1)*recvCount) of both sends). In place when recv[r] is
// send[r] + r*recvCount elements, as in NCCL. Up to Config.SmallMax bytes of
// input and out of place or in place, each rank runs one kernel that reads
// both inputs (the peer's over NVLink); above, the peer's copy engine sends
// its block into the rank's scratch and the rank's kernel reduces it
// (Config.SMs blocks). Two ranks only.
func (g *Group) ReduceScatter(ctx context.Context, send, recv []cuda.DevicePtr, recvCount int, dt collective.Datatype, op collective.ReduceOp) error {
	if err := g.checkReduce("reduce-scatter", send, dt, op, recvCount); err != nil {
		return err
	}
	if len(recv) != 2 {
		return fmt.Errorf("ce: reduce-scatter needs 2 recv buffers, got %d", len(recv))
	}
	if recvCount == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	parts := [2]part{{lo: 0, hi: recvCount, out: recv[0]}, {lo: recvCount, hi: 2 * recvCount, out: recv[1]}}
	small := 2*recvCount*dt.Size() <= g.cfg.SmallMax
	return g.do(func() error {
		g.seq++
		t := tag{seq: g.seq, op: collective.OpReduceScatter, dtype: dt}
		if small {
			return g.reduceSmall(t, send, parts, dt, op)
		}
		return g.reduceCE(t, send, parts, dt, op)
	})
}

// Reduce queues a reduction of count elements of dt from both ranks' send
// into recv on rank root (in place when recv is send[root]). Up to
// Config.SmallMax bytes root's kernel reads the peer's input over NVLink;
// above, the peer's copy engine sends its input into root's scratch in
// chunks and root's kernel reduces them as they land. Two ranks only.
func (g *Group) Reduce(ctx context.Context, send []cuda.DevicePtr, recv cuda.DevicePtr, count int, dt collective.Datatype, op collective.ReduceOp, root int) error {
	if err := g.checkReduce("reduce", send, dt, op, count); err != nil {
		return err
	}
	if root < 0 || root > 1 {
		return fmt.Errorf("ce: reduce to rank %d of 2", root)
	}
	if count == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var parts [2]part
	parts[root] = part{lo: 0, hi: count, out: recv}
	small := count*dt.Size() <= g.cfg.SmallMax
	return g.do(func() error {
		g.seq++
		t := tag{seq: g.seq, op: collective.OpReduce, dtype: dt}
		if small {
			return g.reduceSmall(t, send, parts, dt, op)
		}
		return g.reduceCE(t, send, parts, dt, op)
	})
}

// Broadcast queues a copy of bytes at send on rank root into recv on every
// rank: the peers' copies on root's copy engine, root's own (unless recv
// is send there) a local device-to-device copy. No SM is used.
func (g *Group) Broadcast(ctx context.Context, send cuda.DevicePtr, recv []cuda.DevicePtr, bytes int, root int) error {
	n := len(g.ranks)
	if len(recv) != n {
		return fmt.Errorf("ce: broadcast needs %d recv buffers, got %d", n, len(recv))
	}
	if err := g.checkRank(root); err != nil {
		return err
	}
	if bytes < 0 {
		return fmt.Errorf("ce: broadcast of %d bytes", bytes)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return g.do(func() error {
		g.seq++
		t := tag{seq: g.seq, op: collective.OpBroadcast, dtype: collective.Uint8}
		rt := g.ranks[root]
		for _, r := range g.ranks {
			if err := g.use(r); err != nil {
				return err
			}
			if err := r.evStart.Record(r.user); err != nil {
				return err
			}
		}
		if err := g.use(rt); err != nil {
			return err
		}
		for _, x := range g.ranks {
			if err := rt.ce.WaitEvent(x.evStart); err != nil {
				return err
			}
		}
		if err := rt.gat.WaitEvent(rt.evStart); err != nil {
			return err
		}
		if bytes > 0 && recv[root] != send {
			if err := cuda.MemcpyDtoDAsync(recv[root], send, bytes, rt.gat); err != nil {
				return err
			}
		}
		step := uint32(0)
		for k := 1; k < n && bytes > 0; k++ {
			j := (root + k) % n
			p := g.ranks[j]
			if err := g.copyPeer(recv[j], p.ctx, send, rt.ctx, bytes, rt.ce); err != nil {
				return err
			}
			t.step = step
			step++
			if err := g.post(rt, rt.ce, t,
				wr{r: rt, peer: p.global, qp: qpCE(j), bytes: bytes},
				wr{r: p, peer: rt.global, qp: qpCE(root), recv: true, bytes: bytes}); err != nil {
				return err
			}
		}
		if err := rt.evEndCE.Record(rt.ce); err != nil {
			return err
		}
		if err := rt.evEndG.Record(rt.gat); err != nil {
			return err
		}
		for _, r := range g.ranks {
			if err := g.use(r); err != nil {
				return err
			}
			if err := r.user.WaitEvent(rt.evEndCE); err != nil {
				return err
			}
			if r == rt {
				if err := r.user.WaitEvent(rt.evEndG); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
