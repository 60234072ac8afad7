package ce

import (
	"context"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// runIPC queues op (entry e, shape s, checked) on the proxy: the scratch
// it needs first (growing it is a collective registration, made outside
// the proxy), then its plan.
func (p *Proc) runIPC(ctx context.Context, e ipcOp, s *opShape, dt collective.Datatype) error {
	var scr *Mem
	if e.scratch != nil {
		var err error
		if scr, err = p.ipcScratch(ctx, e.scratch(s)); err != nil {
			return err
		}
	}
	phases := e.plan(s, scr)
	if e.p2p {
		for _, ph := range phases {
			if err := p.checkOps(ph.ops); err != nil {
				return err
			}
		}
	}
	return p.g.do(func() error {
		g := p.g
		var t tag
		if e.p2p {
			g.p2p++
			t = tag{seq: 1<<63 | g.p2p, op: s.op.Op, dtype: dt}
		} else {
			g.seq++
			t = tag{seq: g.seq, op: s.op.Op, dtype: dt}
		}
		return p.runPlan(ctx, t, phases, s.op.Reduce, e.payload(s))
	})
}

// runPlan runs a plan's phases in order, on the proxy thread, and marks
// the call's end (bytes: its payload) for its records.
func (p *Proc) runPlan(ctx context.Context, t tag, phases []phase, op collective.ReduceOp, bytes int) error {
	if err := p.g.use(p.r); err != nil {
		return err
	}
	for k, ph := range phases {
		t.step = uint32(k)
		if c := ph.pre; c != nil {
			if err := cuda.MemcpyDtoDAsync(c.dst, c.src, c.bytes, p.r.user); err != nil {
				return err
			}
		}
		if err := p.transfer(ctx, t, ph.ops, ph.loc); err != nil {
			return err
		}
		if f := ph.fold; f != nil {
			if err := p.fold(t, f.dst, f.in, f.count, t.dtype, op); err != nil {
				return err
			}
		}
	}
	return p.g.called(p.r, t, bytes)
}

// fold queues dst = in[0] op in[1] op … in[n-1] (left to right, avg
// dividing once at the end) over count elements on this rank's stream,
// with the reduction kernel of Config.SMs blocks. On the proxy thread.
func (p *Proc) fold(t tag, dst cuda.DevicePtr, in []cuda.DevicePtr, count int, dt collective.Datatype, op collective.ReduceOp) error {
	return p.foldOn(p.r.user, t, dst, in, count, dt, op)
}

// foldOn is fold on stream s.
func (p *Proc) foldOn(s cuda.Stream, t tag, dst cuda.DevicePtr, in []cuda.DevicePtr, count int, dt collective.Datatype, op collective.ReduceOp) error {
	g, r := p.g, p.r
	if count == 0 {
		return nil
	}
	if len(in) == 1 {
		if dst == in[0] {
			return nil
		}
		return cuda.MemcpyDtoDAsync(dst, in[0], count*dt.Size(), s)
	}
	acc := in[0]
	for k := 1; k < len(in); k++ {
		o, div := op, 1
		if op == collective.Avg {
			if k < len(in)-1 {
				o = collective.Sum
			} else {
				div = len(in)
			}
		}
		if err := g.launchReduce(r, s, dt, o, dst, acc, in[k], count, g.cfg.SMs, div); err != nil {
			return err
		}
		acc = dst
	}
	return g.post(r, s, t, wr{r: r, peer: r.global, qp: qpCompute(), bytes: count * dt.Size()})
}
