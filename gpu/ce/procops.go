package ce

import (
	"context"
	"fmt"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// Collectives of a Proc job on one host, for any number of ranks. Data
// moves only on copy engines, pushed by the sender into the receiver's
// registered memory (transfer); reductions are the PTX kernels on this
// rank's stream, Config.SMs blocks, operands folded in rank order so every
// rank computes bit-identical results:
//
//   - reduce-scatter: each rank sends block q of its input into rank q's
//     scratch (slot = its own rank); rank q folds the n operands into its
//     output.
//   - all-reduce: the same on n parts of the vector (split on 16-byte
//     boundaries), then each rank sends its reduced part into every peer's
//     output (an all-gather on copy engines).
//   - reduce: every rank sends its input into root's scratch; root folds.
//   - broadcast, gather, scatter, all-to-all, send/recv: copies only, 0 SMs.
//     All-to-all in place copies the input to scratch first.

// runIPC queues op; shapes have been checked.
func (p *Proc) runIPC(ctx context.Context, op collective.DeviceOp, dt collective.Datatype, send, recv *DeviceMem) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if op.Op == collective.OpAllReduce && p.flagsOK() {
		return p.allReduceFlags(ctx, dt, op.Reduce, send, recv)
	}
	n, me, es := p.n, p.me, dt.Size()
	into := func(m *DeviceMem, off, bytes, from int) P2P {
		return RecvInto(from, m.alloc.reg, m.off+off, bytes)
	}
	// Scratch comes first: growing it is a collective registration, made
	// outside the proxy.
	var scr *Mem
	var err error
	switch op.Op {
	case collective.OpReduceScatter:
		scr, err = p.ipcScratch(ctx, send.n)
	case collective.OpAllReduce:
		_, per := splitParts(send.n/es, n, es)
		scr, err = p.ipcScratch(ctx, n*per*es)
	case collective.OpReduce:
		scr, err = p.ipcScratch(ctx, n*send.n)
	case collective.OpAllToAll:
		// Every rank grows the scratch alike (a registration is
		// collective), in place or not; only in place uses it.
		scr, err = p.ipcScratch(ctx, send.n)
		if !(send.alloc == recv.alloc && send.off < recv.off+recv.n && recv.off < send.off+send.n) {
			scr = nil
		}
	}
	if err != nil {
		return err
	}
	return p.g.do(func() error {
		g, r := p.g, p.r
		if err := g.use(r); err != nil {
			return err
		}
		p2p := op.Op == collective.OpSend || op.Op == collective.OpRecv || op.Op == collective.OpGroup
		var t tag
		if p2p {
			g.p2p++
			t = tag{seq: 1<<63 | g.p2p, op: op.Op, dtype: dt}
		} else {
			g.seq++
			t = tag{seq: g.seq, op: op.Op, dtype: dt}
		}
		var ops []P2P
		var loc *local
		switch op.Op {
		case collective.OpSend, collective.OpRecv, collective.OpGroup:
			for _, o := range op.P2P {
				m := o.Buf.Dev.(*DeviceMem)
				if o.Recv {
					ops = append(ops, into(m, 0, m.n, o.Peer))
				} else {
					ops = append(ops, SendTo(o.Peer, m.Ptr(), m.n))
				}
			}
			if err := p.checkOps(ops); err != nil {
				return err
			}
			return p.transfer(ctx, t, ops, nil)

		case collective.OpAllGather:
			b := send.n
			for k := 1; k < n; k++ {
				ops = append(ops, SendTo((me+k)%n, send.Ptr(), b))
				q := (me - k + n) % n
				ops = append(ops, into(recv, q*b, b, q))
			}
			if own := recv.Ptr().Add(me * b); own != send.Ptr() {
				loc = &local{dst: own, src: send.Ptr(), bytes: b}
			}
			return p.transfer(ctx, t, ops, loc)

		case collective.OpBroadcast:
			b := recv.n
			if me == op.Root {
				for q := 0; q < n; q++ {
					if q != me {
						ops = append(ops, SendTo(q, send.Ptr(), b))
					}
				}
				if recv.Ptr() != send.Ptr() {
					loc = &local{dst: recv.Ptr(), src: send.Ptr(), bytes: b}
				}
			} else {
				ops = append(ops, into(recv, 0, b, op.Root))
			}
			return p.transfer(ctx, t, ops, loc)

		case collective.OpGather:
			b := send.n
			if me == op.Root {
				for q := 0; q < n; q++ {
					if q != me {
						ops = append(ops, into(recv, q*b, b, q))
					}
				}
				if own := recv.Ptr().Add(me * b); own != send.Ptr() {
					loc = &local{dst: own, src: send.Ptr(), bytes: b}
				}
			} else {
				ops = append(ops, SendTo(op.Root, send.Ptr(), b))
			}
			return p.transfer(ctx, t, ops, loc)

		case collective.OpScatter:
			b := recv.n
			if me == op.Root {
				for q := 0; q < n; q++ {
					if q != me {
						ops = append(ops, SendTo(q, send.Ptr().Add(q*b), b))
					}
				}
				if own := send.Ptr().Add(me * b); own != recv.Ptr() {
					loc = &local{dst: recv.Ptr(), src: own, bytes: b}
				}
			} else {
				ops = append(ops, into(recv, 0, b, op.Root))
			}
			return p.transfer(ctx, t, ops, loc)

		case collective.OpAllToAll:
			b := send.n / n
			src := send.Ptr()
			if scr != nil { // in place: send from a copy
				if err := cuda.MemcpyDtoDAsync(scr.Ptr, src, send.n, r.user); err != nil {
					return err
				}
				src = scr.Ptr
			}
			for k := 1; k < n; k++ {
				q := (me + k) % n
				ops = append(ops, SendTo(q, src.Add(q*b), b))
				q = (me - k + n) % n
				ops = append(ops, into(recv, q*b, b, q))
			}
			if own := recv.Ptr().Add(me * b); own != src.Add(me*b) {
				loc = &local{dst: own, src: src.Add(me * b), bytes: b}
			}
			return p.transfer(ctx, t, ops, loc)

		case collective.OpReduceScatter:
			b := recv.n
			for k := 1; k < n; k++ {
				q := (me + k) % n
				ops = append(ops, SendTo(q, send.Ptr().Add(q*b), b))
				q = (me - k + n) % n
				ops = append(ops, RecvInto(q, scr, q*b, b))
			}
			if err := p.transfer(ctx, t, ops, nil); err != nil {
				return err
			}
			in := make([]cuda.DevicePtr, n)
			for q := range in {
				in[q] = scr.Ptr.Add(q * b)
			}
			in[me] = send.Ptr().Add(me * b)
			return p.fold(t, recv.Ptr(), in, b/es, dt, op.Reduce)

		case collective.OpReduce:
			b := send.n
			if me != op.Root {
				return p.transfer(ctx, t, []P2P{SendTo(op.Root, send.Ptr(), b)}, nil)
			}
			in := make([]cuda.DevicePtr, n)
			for q := range in {
				if q != me {
					ops = append(ops, RecvInto(q, scr, q*b, b))
				}
				in[q] = scr.Ptr.Add(q * b)
			}
			in[me] = send.Ptr()
			if err := p.transfer(ctx, t, ops, nil); err != nil {
				return err
			}
			return p.fold(t, recv.Ptr(), in, b/es, dt, op.Reduce)

		case collective.OpAllReduce:
			count := send.n / es
			parts, per := splitParts(count, n, es)
			lo, hi := parts[me], parts[me+1]
			for k := 1; k < n; k++ {
				q := (me + k) % n
				ops = append(ops, SendTo(q, send.Ptr().Add(parts[q]*es), (parts[q+1]-parts[q])*es))
				q = (me - k + n) % n
				ops = append(ops, RecvInto(q, scr, q*per*es, (hi-lo)*es))
			}
			if err := p.transfer(ctx, t, ops, nil); err != nil {
				return err
			}
			in := make([]cuda.DevicePtr, n)
			for q := range in {
				in[q] = scr.Ptr.Add(q * per * es)
			}
			in[me] = send.Ptr().Add(lo * es)
			if err := p.fold(t, recv.Ptr().Add(lo*es), in, hi-lo, dt, op.Reduce); err != nil {
				return err
			}
			ops = ops[:0]
			for k := 1; k < n; k++ {
				q := (me + k) % n
				ops = append(ops, SendTo(q, recv.Ptr().Add(lo*es), (hi-lo)*es))
				q = (me - k + n) % n
				ops = append(ops, into(recv, parts[q]*es, (parts[q+1]-parts[q])*es, q))
			}
			t.step = 1
			return p.transfer(ctx, t, ops, nil)
		}
		return fmt.Errorf("ce: %v on device buffers is not supported", op.Op)
	})
}

// splitParts divides count elements of size es among n ranks on 16-byte
// boundaries: rank q owns [bounds[q], bounds[q+1]); per is the largest
// part.
func splitParts(count, n, es int) (bounds []int, per int) {
	lanes := max(1, 16/es)
	per = (count + n - 1) / n
	per = (per + lanes - 1) / lanes * lanes
	bounds = make([]int, n+1)
	for q := 1; q <= n; q++ {
		bounds[q] = min(q*per, count)
	}
	return bounds, per
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
