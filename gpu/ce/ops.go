package ce

import (
	"context"
	"fmt"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// Transfer is one point-to-point copy: Bytes at Src on rank From into Dst on
// rank To.
type Transfer struct {
	From, To int
	Src, Dst cuda.DevicePtr
	Bytes    int
}

func (g *Group) checkRank(r int) error {
	if r < 0 || r >= len(g.ranks) {
		return fmt.Errorf("ce: rank %d outside a group of %d", r, len(g.ranks))
	}
	return nil
}

// SendRecv queues the transfers, each on its source rank's copy engine (no
// SM is used), in stream order on every rank involved: a transfer starts
// after the work already queued on both ends' streams, and both streams'
// later work waits for it. Transfers from one rank run one after another;
// transfers from different ranks run at the same time.
func (g *Group) SendRecv(ctx context.Context, ts ...Transfer) error {
	for _, t := range ts {
		if err := g.checkRank(t.From); err != nil {
			return err
		}
		if err := g.checkRank(t.To); err != nil {
			return err
		}
		if t.Bytes < 0 {
			return fmt.Errorf("ce: transfer of %d bytes", t.Bytes)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return g.do(func() error {
		g.p2p++
		seq := 1<<63 | g.p2p
		involved := make([]bool, len(g.ranks))
		sends := make([]bool, len(g.ranks))
		moved := make([]int, len(g.ranks)) // each rank's payload: what it sends and receives
		for _, t := range ts {
			involved[t.From], involved[t.To], sends[t.From] = true, true, true
			moved[t.From] += t.Bytes
			if t.To != t.From {
				moved[t.To] += t.Bytes
			}
		}
		for i, r := range g.ranks {
			if involved[i] {
				if err := g.use(r); err != nil {
					return err
				}
				if err := r.evStart.Record(r.user); err != nil {
					return err
				}
			}
		}
		waited := make([]bool, len(g.ranks)*len(g.ranks))
		for step, t := range ts {
			from, to := g.ranks[t.From], g.ranks[t.To]
			if err := g.use(from); err != nil {
				return err
			}
			for _, x := range []*rank{from, to} {
				if k := t.From*len(g.ranks) + x.idx; !waited[k] {
					waited[k] = true
					if err := from.ce.WaitEvent(x.evStart); err != nil {
						return err
					}
				}
			}
			if t.Bytes == 0 {
				continue
			}
			if err := g.copyPeer(t.Dst, to.ctx, t.Src, from.ctx, t.Bytes, from.ce); err != nil {
				return err
			}
			if err := g.post(from, from.ce, tag{seq: seq, step: uint32(step), op: collective.OpSend},
				wr{r: from, peer: t.To, qp: qpCE(t.To), bytes: t.Bytes},
				wr{r: to, peer: t.From, qp: qpCE(t.From), recv: true, bytes: t.Bytes}); err != nil {
				return err
			}
		}
		for i, r := range g.ranks {
			if sends[i] {
				if err := g.use(r); err != nil {
					return err
				}
				if err := r.evEndCE.Record(r.ce); err != nil {
					return err
				}
			}
		}
		for i, r := range g.ranks {
			if !involved[i] {
				continue
			}
			if err := g.use(r); err != nil {
				return err
			}
			for j, s := range g.ranks {
				touches := false
				for _, t := range ts {
					if t.From == j && (t.To == i || t.From == i) {
						touches = true
					}
				}
				if touches {
					if err := r.user.WaitEvent(s.evEndCE); err != nil {
						return err
					}
				}
			}
			if err := g.called(r, tag{seq: seq, op: collective.OpSend}, moved[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// AllGather queues an all-gather of bytes per rank: rank r's send lands at
// offset r*bytes of every rank's recv (recv holds Size()*bytes). Copies
// between GPUs go on the copy engines; the local piece is a device-to-device
// copy. No SM is used.
func (g *Group) AllGather(ctx context.Context, send, recv []cuda.DevicePtr, bytes int) error {
	n := len(g.ranks)
	if len(send) != n || len(recv) != n {
		return fmt.Errorf("ce: all-gather needs %d send and recv buffers, got %d and %d", n, len(send), len(recv))
	}
	if bytes < 0 {
		return fmt.Errorf("ce: all-gather of %d bytes", bytes)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return g.do(func() error {
		g.seq++
		t := tag{seq: g.seq, op: collective.OpAllGather, dtype: collective.Uint8}
		for _, r := range g.ranks {
			if err := g.use(r); err != nil {
				return err
			}
			if err := r.evStart.Record(r.user); err != nil {
				return err
			}
		}
		for i, r := range g.ranks {
			if err := g.use(r); err != nil {
				return err
			}
			for _, x := range g.ranks {
				if err := r.ce.WaitEvent(x.evStart); err != nil {
					return err
				}
			}
			if err := r.gat.WaitEvent(r.evStart); err != nil {
				return err
			}
			if bytes == 0 {
				continue
			}
			off := i * bytes
			if send[i] != recv[i].Add(off) {
				if err := cuda.MemcpyDtoDAsync(recv[i].Add(off), send[i], bytes, r.gat); err != nil {
					return err
				}
			}
			for step := 1; step < n; step++ {
				j := (i + step) % n
				p := g.ranks[j]
				if err := g.copyPeer(recv[j].Add(off), p.ctx, send[i], r.ctx, bytes, r.ce); err != nil {
					return err
				}
				t.step = uint32(step)
				if err := g.post(r, r.ce, t,
					wr{r: r, peer: j, qp: qpCE(j), bytes: bytes},
					wr{r: p, peer: i, qp: qpCE(i), recv: true, bytes: bytes}); err != nil {
					return err
				}
			}
			if err := r.evEndCE.Record(r.ce); err != nil {
				return err
			}
			if err := r.evEndG.Record(r.gat); err != nil {
				return err
			}
		}
		for _, r := range g.ranks {
			if err := g.use(r); err != nil {
				return err
			}
			if err := r.user.WaitEvent(r.evEndG); err != nil {
				return err
			}
			for _, x := range g.ranks {
				if err := r.user.WaitEvent(x.evEndCE); err != nil {
					return err
				}
			}
			t.step = 0
			if err := g.called(r, t, n*bytes); err != nil {
				return err
			}
		}
		return nil
	})
}

// DefaultSmallMax is the largest out-of-place all-reduce that takes the
// one-kernel path by default: below it the copy-engine path's dozens of
// driver calls per operation cost more than its copies save, and around
// twice it the two paths meet (2 H200s, BENCHMARKS.md).
const DefaultSmallMax = 16 << 20

// defaultChunk is the automatic all-reduce pipeline chunk (bytes of one
// half): large enough that a chunk's driver calls stay far below the time
// its copy takes over NVLink.
const defaultChunk = 16 << 20

// AllReduce queues an all-reduce of count elements of dt from send[r] into
// recv[r] on every rank (in place when they are equal). Two ranks only for
// now.
func (g *Group) AllReduce(ctx context.Context, send, recv []cuda.DevicePtr, count int, dt collective.Datatype, op collective.ReduceOp) error {
	if len(g.ranks) != 2 {
		return fmt.Errorf("ce: all-reduce runs on 2 GPUs, the group has %d", len(g.ranks))
	}
	if len(send) != 2 || len(recv) != 2 {
		return fmt.Errorf("ce: all-reduce needs 2 send and recv buffers, got %d and %d", len(send), len(recv))
	}
	if !dt.Valid() || !op.Valid() {
		return fmt.Errorf("ce: invalid datatype %v or reduction %v", dt, op)
	}
	if count < 0 {
		return fmt.Errorf("ce: all-reduce of %d elements", count)
	}
	if count == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	bytes := count * dt.Size()
	small := bytes <= g.cfg.SmallMax && send[0] != recv[0] && send[1] != recv[1]
	return g.do(func() error {
		g.seq++
		t := tag{seq: g.seq, op: collective.OpAllReduce, dtype: dt}
		var err error
		if small {
			// Both ranks reduce the whole range into their own output.
			err = g.reduceSmall(t, send, [2]part{{hi: count, out: recv[0]}, {hi: count, out: recv[1]}}, dt, op)
		} else {
			err = g.reduceCE(t, send, allReduceParts(recv, count, dt), dt, op)
		}
		if err != nil {
			return err
		}
		for _, r := range g.ranks {
			if err := g.use(r); err != nil {
				return err
			}
			if err := g.called(r, t, bytes); err != nil {
				return err
			}
		}
		return nil
	})
}

// part is what one owner rank reduces: elements [lo, hi) of both ranks'
// inputs into out (out is where element lo goes); with back set, the
// reduced elements are also sent to the other rank at back (likewise for
// element lo). An empty range: the rank reduces nothing.
type part struct {
	lo, hi    int
	out, back cuda.DevicePtr
}

// allReduceParts splits an all-reduce of count elements between the two
// ranks on a 16-byte boundary: rank 0 owns the first half, rank 1 the
// second, and each sends its reduced half back.
func allReduceParts(recv []cuda.DevicePtr, count int, dt collective.Datatype) [2]part {
	sz := dt.Size()
	c0 := count / 2 / (16 / sz) * (16 / sz)
	return [2]part{
		{lo: 0, hi: c0, out: recv[0], back: recv[1]},
		{lo: c0, hi: count, out: recv[1].Add(c0 * sz), back: recv[0].Add(c0 * sz)},
	}
}

// reduceSmall: the owner of each part runs one kernel that reads both
// inputs (the peer's over NVLink) and writes its part (and, for a part with
// back, the peer's copy too, from a second kernel on the peer: all-reduce
// runs the whole range on both ranks); events order the kernels after
// both ranks' queued work, and each rank's stream waits until the peer has
// finished reading its input.
func (g *Group) reduceSmall(t tag, send []cuda.DevicePtr, parts [2]part, dt collective.Datatype, op collective.ReduceOp) error {
	sz := dt.Size()
	var done [2]cuda.Event
	launch := func(j int) error {
		r, p := g.ranks[j], g.ranks[1-j]
		pt := parts[j]
		if pt.hi <= pt.lo {
			return nil
		}
		if err := r.user.WaitEvent(p.evStart); err != nil {
			return err
		}
		n := pt.hi - pt.lo
		if err := g.launchReduce(r, r.user, dt, op, pt.out, send[0].Add(pt.lo*sz), send[1].Add(pt.lo*sz), n, g.cfg.SMs, 2); err != nil {
			return err
		}
		var err error
		done[j], err = g.mark(r, r.user, r.evDone, t, wr{r: r, peer: r.global, qp: qpCompute(), bytes: n * sz})
		return err
	}
	r0, r1 := g.ranks[0], g.ranks[1]
	if err := g.use(r0); err != nil {
		return err
	}
	if err := r0.evStart.Record(r0.user); err != nil {
		return err
	}
	if err := g.use(r1); err != nil {
		return err
	}
	if err := r1.evStart.Record(r1.user); err != nil {
		return err
	}
	if err := launch(1); err != nil {
		return err
	}
	if err := g.use(r0); err != nil {
		return err
	}
	if err := launch(0); err != nil {
		return err
	}
	// Each input stays untouched until the other rank's kernel has read it.
	if done[1] != 0 {
		if err := r0.user.WaitEvent(done[1]); err != nil {
			return err
		}
	}
	if done[0] != 0 {
		if err := g.use(r1); err != nil {
			return err
		}
		if err := r1.user.WaitEvent(done[0]); err != nil {
			return err
		}
	}
	return nil
}

// ensureScratch gives every rank a scratch buffer of at least n bytes.
func (g *Group) ensureScratch(n int) error {
	grow := false
	for _, r := range g.ranks {
		if r.scrLen < n {
			grow = true
		}
	}
	if !grow {
		return nil
	}
	// The peers' copy engines write into the scratch buffers: drain every
	// rank before any is replaced.
	for _, r := range g.ranks {
		if err := g.use(r); err != nil {
			return err
		}
		if err := cuda.Synchronize(); err != nil {
			return err
		}
	}
	size := max(n, 1<<20)
	size = (size + 4095) &^ 4095
	for _, r := range g.ranks {
		if r.scrLen >= n {
			continue
		}
		if err := g.use(r); err != nil {
			return err
		}
		if r.scratch != 0 {
			if err := cuda.MemFree(r.scratch); err != nil {
				return err
			}
			r.scratch, r.scrLen = 0, 0
		}
		p, err := cuda.MemAlloc(size)
		if err != nil {
			return err
		}
		r.scratch, r.scrLen = p, size
	}
	return nil
}

// reduceCE: for each part, the other rank's copy engine sends its operand
// into the owner's scratch, the owner's kernel reduces (rank 0's operand
// first) into the part's output, and for a part with back the owner's
// second copy engine sends the result to the other rank; pipelined in
// chunks so copies and reductions overlap.
func (g *Group) reduceCE(t tag, send []cuda.DevicePtr, parts [2]part, dt collective.Datatype, op collective.ReduceOp) error {
	sz := dt.Size()
	lanes := 16 / sz
	longest := max(parts[0].hi-parts[0].lo, parts[1].hi-parts[1].lo, 0)
	if err := g.ensureScratch(longest * sz); err != nil {
		return err
	}
	chunk := g.cfg.Chunk
	if chunk <= 0 {
		// A quarter of a part, so copies and reductions overlap, within
		// [1 MiB, 16 MiB].
		// Not smaller: each chunk's cross-GPU event wait costs
		// microseconds on the GPU, which smaller chunks multiply
		// (BENCHMARKS.md).
		chunk = min(max(longest*sz/4, 1<<20), defaultChunk)
	}
	ce := max(lanes, chunk/sz/lanes*lanes) // elements per chunk
	nk := (longest + ce - 1) / ce

	// Start: every stream waits for the work queued before the call on its
	// own rank's stream, and the copy streams also for the peer's, whose
	// buffers they write.
	for _, r := range g.ranks {
		if err := g.use(r); err != nil {
			return err
		}
		if err := r.evStart.Record(r.user); err != nil {
			return err
		}
	}
	for i, r := range g.ranks {
		p := g.ranks[1-i]
		if err := g.use(r); err != nil {
			return err
		}
		for _, w := range []struct {
			s cuda.Stream
			e cuda.Event
		}{{r.ce, r.evStart}, {r.ce, p.evStart}, {r.gat, r.evStart}, {r.gat, p.evStart}, {r.red, r.evStart}} {
			if err := w.s.WaitEvent(w.e); err != nil {
				return err
			}
		}
	}
	for k := 0; k < nk; k++ {
		for i := 0; i < 2; i++ {
			r, p := g.ranks[i], g.ranks[1-i] // r sends the chunk p owns; p reduces it (and sends it back)
			j := 1 - i
			pt := parts[j]
			off := pt.lo + k*ce
			n := min(ce, pt.hi-off)
			if n <= 0 {
				continue
			}
			b := n * sz
			out := pt.out.Add((off - pt.lo) * sz)
			t.step = uint32(3 * k)
			if err := g.use(r); err != nil {
				return err
			}
			scr := p.scratch.Add(k * ce * sz)
			if err := g.copyPeer(scr, p.ctx, send[i].Add(off*sz), r.ctx, b, r.ce); err != nil {
				return err
			}
			evc, err := g.mark(r, r.ce, r.evCE, t,
				wr{r: r, peer: p.global, qp: qpCE(j), bytes: b},
				wr{r: p, peer: r.global, qp: qpCE(i), recv: true, bytes: b})
			if err != nil {
				return err
			}
			if err := g.use(p); err != nil {
				return err
			}
			if err := p.red.WaitEvent(evc); err != nil {
				return err
			}
			a, bb := send[0].Add(off*sz), scr // operands in rank order
			if j == 1 {
				a, bb = scr, send[1].Add(off*sz)
			}
			if err := g.launchReduce(p, p.red, dt, op, out, a, bb, n, g.cfg.SMs, 2); err != nil {
				return err
			}
			t.step = uint32(3*k + 1)
			evr, err := g.mark(p, p.red, p.evRed, t, wr{r: p, peer: p.global, qp: qpCompute(), bytes: b})
			if err != nil {
				return err
			}
			if pt.back == 0 {
				continue
			}
			if err := p.gat.WaitEvent(evr); err != nil {
				return err
			}
			if err := g.copyPeer(pt.back.Add((off-pt.lo)*sz), r.ctx, out, p.ctx, b, p.gat); err != nil {
				return err
			}
			t.step = uint32(3*k + 2)
			if err := g.post(p, p.gat, t,
				wr{r: p, peer: r.global, qp: qpGather(i), bytes: b},
				wr{r: r, peer: p.global, qp: qpGather(j), recv: true, bytes: b}); err != nil {
				return err
			}
		}
	}
	// End: each rank's stream waits for its own three streams and for the
	// peer's gather stream, which wrote into its output.
	for _, r := range g.ranks {
		if err := g.use(r); err != nil {
			return err
		}
		for _, x := range []struct {
			e cuda.Event
			s cuda.Stream
		}{{r.evEndCE, r.ce}, {r.evEndG, r.gat}, {r.evEndR, r.red}} {
			if err := x.e.Record(x.s); err != nil {
				return err
			}
		}
	}
	for i, r := range g.ranks {
		p := g.ranks[1-i]
		if err := g.use(r); err != nil {
			return err
		}
		for _, e := range []cuda.Event{r.evEndCE, r.evEndG, r.evEndR, p.evEndG} {
			if err := r.user.WaitEvent(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyPeer queues a copy between GPUs on s with the configured API.
func (g *Group) copyPeer(dst cuda.DevicePtr, dstCtx cuda.Context, src cuda.DevicePtr, srcCtx cuda.Context, n int, s cuda.Stream) error {
	if g.cfg.DtoD {
		return cuda.MemcpyDtoDAsync(dst, src, n, s)
	}
	return cuda.MemcpyPeerAsync(dst, dstCtx, src, srcCtx, n, s)
}
