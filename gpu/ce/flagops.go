package ce

import (
	"context"
	"fmt"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/gpu/cuda"
	"github.com/vccl-go/vccl/gpu/kernels"
)

// All-reduce of a Proc job ordered by flags in device memory instead of
// the mailbox: a rank's streams write a sequence number into a flag in the
// peer's memory after their copies (cuStreamWriteValue32, which the peer
// GPU sees over NVLink), and the peer's streams wait on that flag
// (cuStreamWaitValue32). No host waits for another process and no IPC
// event is recorded: an operation is a handful of asynchronous driver
// calls, as in NCCL, and the copies stay on the copy engines.
//
//   - Direct (up to DirectMax bytes): each rank's copy engine pushes its
//     whole input into every peer's scratch and raises a flag; each rank
//     waits for every peer's flag and folds the n inputs with the kernel.
//     Scratch slots alternate between operations: a rank's operation k+2
//     writes a slot only once the peer's stream has passed operation k+1,
//     which waited for this rank's operation k+1 flag, written after its
//     fold of operation k.
//   - Pipelined (above): the vector is split into n parts, rank q owning
//     part q, and each part into chunks. Per chunk, the copy stream pushes
//     the chunk of every peer's part into that peer's scratch and raises
//     flag A; the reduction stream waits for every peer's flag A, folds the
//     chunk of this rank's part into the output, and the second copy
//     stream pushes the folded chunk into every peer's output and raises
//     flag B. The user stream ends the operation waiting for every peer's
//     last flag B. A peer writes this rank's output only after its fold of
//     that chunk, which waited for this rank's copy of it (so in place is
//     safe), and writes its scratch only once its stream has passed the
//     previous operation, whose end waited for this rank's last flag B,
//     written after its last fold.
//
// The two paths use separate scratch memory, and separate from the
// mailbox path's, since each one's argument for reusing scratch holds only
// among its own operations.

// Flag kinds, each an array of one flag per peer.
const (
	flagDirect = iota
	flagA
	flagB
	flagReady // peer read: this rank's input may be read
	flagDone  // peer read: this rank has read the peer's input
	flagKinds
)

// flagStride spaces flags a cache line apart.
const flagStride = 64

// DefaultDirectMax is the largest all-reduce that takes the direct path
// (when the peer-read path does not take it).
const DefaultDirectMax = 4 << 20

// maxChunks bounds the chunks of a pipelined all-reduce (events per chunk).
const maxChunks = 16

// flagsOK reports whether the flag paths can run: stream memory
// operations in the driver, and not turned off (VCCL_GPU_FLAGS=0).
func (p *Proc) flagsOK() bool {
	return p.useFlags && cuda.HasStreamMemOps()
}

// ensureFlagMem registers the flags (zeroed before any peer can see them).
func (p *Proc) ensureFlagMem(ctx context.Context) error {
	if p.flags != nil {
		return nil
	}
	size := flagKinds*p.n*flagStride + kernelFlagBytes
	m, err := p.allocZero(ctx, size)
	if err != nil {
		return err
	}
	p.flags = m
	return p.g.do(func() error {
		if err := p.g.use(p.r); err != nil {
			return err
		}
		var err error
		if p.words, err = cuda.MemAlloc(3 * flagStride); err != nil {
			return err
		}
		for i := range p.evChunk {
			e, err := cuda.NewEvent(cuda.EventDisableTiming)
			if err != nil {
				return err
			}
			p.evChunk[i] = e
		}
		return nil
	})
}

// allocZero is Alloc of zeroed memory: zeroed before registration, so a
// peer never sees it otherwise.
func (p *Proc) allocZero(ctx context.Context, n int) (*DeviceMem, error) {
	ptr, err := p.g.Alloc(0, chunkRound(n))
	if err == nil {
		err = p.g.Do(0, func() error { return cuda.MemsetD8(ptr, 0, n) })
	}
	a := &allocation{ptr: ptr, bytes: n}
	var rerr error
	if a.reg, rerr = p.Register(ctx, ptr, n); rerr != nil || err != nil {
		if ptr != 0 {
			p.g.Free(0, ptr)
		}
		if err != nil {
			return nil, err
		}
		return nil, rerr
	}
	return &DeviceMem{p: p, alloc: a, n: n}, nil
}

// grow makes *m a registered buffer of at least n bytes (every rank calls
// it with the same n).
func (p *Proc) grow(ctx context.Context, m **DeviceMem, n int) error {
	if *m != nil && (*m).alloc.bytes >= n {
		return nil
	}
	if *m != nil {
		if err := p.Free(ctx, *m); err != nil {
			return err
		}
		*m = nil
	}
	nm, err := p.Alloc(ctx, (max(n, 1<<20)+4095)&^4095)
	if err != nil {
		return err
	}
	*m = nm
	return nil
}

// signal queues on s (the stream index si: 0 user, 1 ce, 2 gat) the
// write of v into flag, a peer's, after s's earlier copies. The value goes
// through the copy engine like the data (written into a word of this GPU,
// then copied): cuStreamWriteValue32 straight into peer memory was seen
// to land before the tail of the copy queued ahead of it.
func (p *Proc) signal(s cuda.Stream, si int, flag cuda.DevicePtr, v uint32) error {
	word := p.words.Add(si * flagStride)
	if err := s.WriteValue32(word, v); err != nil {
		return err
	}
	return cuda.MemcpyDtoDAsync(flag, word, 4, s)
}

func (p *Proc) flagAt(q, kind, from int) cuda.DevicePtr {
	return p.flags.alloc.reg.peerPtr(q).Add((kind*p.n + from) * flagStride)
}

// peerPtr returns rank q's address of the registration (this rank's own for
// q == me).
func (m *Mem) peerPtr(q int) cuda.DevicePtr { return m.peer[q] }

// chunksFor splits a part of bytes into chunks of about chunk bytes (fewer
// chunks cost fewer driver calls; more overlap copies with folds).
func chunksFor(bytes, chunk int) int {
	if chunk <= 0 {
		chunk = procChunk
	}
	return max(1, min(maxChunks, (bytes+chunk-1)/chunk))
}

// allReduceFlags runs an all-reduce on the flag paths; shapes are checked.
func (p *Proc) allReduceFlags(ctx context.Context, dt collective.Datatype, op collective.ReduceOp, send, recv *DeviceMem) error {
	if err := p.ensureFlagMem(ctx); err != nil {
		return err
	}
	n, es := p.n, dt.Size()
	bytes := send.n
	// The path follows from the size and the configuration only, never
	// from whether this rank's call is in place: the ranks must agree on
	// it, and in place on one rank and not on another is legal.
	overlap := send.alloc == recv.alloc && send.off < recv.off+recv.n && recv.off < send.off+send.n
	if bytes <= p.oneKernelMax {
		return p.g.do(func() error {
			g, r := p.g, p.r
			if err := g.use(r); err != nil {
				return err
			}
			ins, err := p.exchangeBufs(ctx, send)
			if err != nil {
				return err
			}
			// In place the result may not overwrite the input while a
			// peer reads it: it goes to a buffer of this GPU first, and
			// to the output once the peer is done (in the fused kernel
			// when the output is 16-byte aligned, else by a copy).
			dst, final := recv.Ptr(), cuda.DevicePtr(0)
			if overlap {
				if dst, err = p.stageBuf(bytes); err != nil {
					return err
				}
				final = recv.Ptr()
			}
			g.seq++
			t := tag{seq: g.seq, op: collective.OpAllReduce, dtype: dt}
			copied, err := p.peerRead(t, dt, op, ins, dst, final, bytes)
			if err != nil {
				return err
			}
			if overlap && !copied {
				if err := cuda.MemcpyDtoDAsync(recv.Ptr(), dst, bytes, r.user); err != nil {
					return err
				}
			}
			return g.called(r, t, bytes)
		})
	}
	direct := bytes <= p.directMax
	parts, per := splitParts(bytes/es, n, es)
	if direct {
		slot := (bytes + 255) &^ 255
		if err := p.grow(ctx, &p.fdirect, 2*n*slot); err != nil {
			return err
		}
	} else if err := p.grow(ctx, &p.fpipe, n*per*es); err != nil {
		return err
	}
	return p.g.do(func() error {
		g, r := p.g, p.r
		if err := g.use(r); err != nil {
			return err
		}
		g.seq++
		t := tag{seq: g.seq, op: collective.OpAllReduce, dtype: dt}
		if direct {
			if err := p.direct(t, dt, op, send, recv); err != nil {
				return err
			}
			return g.called(r, t, bytes)
		}
		outs, err := p.exchangeBufs(ctx, recv)
		if err != nil {
			return err
		}
		if err := p.pipelined(t, dt, op, send, recv, outs, parts, per); err != nil {
			return err
		}
		return g.called(r, t, bytes)
	})
}

func (p *Proc) direct(t tag, dt collective.Datatype, op collective.ReduceOp, send, recv *DeviceMem) error {
	g, r := p.g, p.r
	n, me, es := p.n, p.me, dt.Size()
	bytes := send.n
	slotBytes := (bytes + 255) &^ 255
	p.dops++
	slot := int(p.dops % 2)
	scr := p.fdirect.alloc.reg
	at := func(q, from int) cuda.DevicePtr { return scr.peerPtr(q).Add((slot*n + from) * slotBytes) }
	count := bytes / es
	lanes := max(1, 16/es)
	nc := 1
	if bytes > p.chunkOr() {
		half := max(1, p.chunkOr()/2)
		nc = min(2*maxChunks, (bytes+half-1)/half)
	}
	cper := ((count+nc-1)/nc + lanes - 1) / lanes * lanes
	base := p.fseq + 1
	p.fseq += uint32(nc)
	// One chunk: everything on the user stream, the fewest driver calls.
	// Several: copies and signals on the copy stream, waits and folds on
	// the reduction stream, so chunk c+1 moves while chunk c is folded.
	cs, rs, csi := r.user, r.user, 0
	inPlace := send.alloc == recv.alloc && send.off < recv.off+recv.n && recv.off < send.off+send.n
	if nc > 1 {
		cs, rs, csi = r.ce, r.red, 1
		if err := r.evStart.Record(r.user); err != nil {
			return err
		}
		if err := cs.WaitEvent(r.evStart); err != nil {
			return err
		}
		if err := rs.WaitEvent(r.evStart); err != nil {
			return err
		}
	}
	in := make([]cuda.DevicePtr, n)
	for c := 0; c < nc; c++ {
		lo, hi := min(c*cper, count), min((c+1)*cper, count)
		v := base + uint32(c)
		for k := 1; k < n; k++ {
			q := (me + k) % n
			if hi > lo {
				if err := cuda.MemcpyDtoDAsync(at(q, me).Add(lo*es), send.Ptr().Add(lo*es), (hi-lo)*es, cs); err != nil {
					return err
				}
				t.step = uint32(2 * c)
				if err := g.post(r, cs, t, wr{r: r, peer: q, qp: qpCE(q), bytes: (hi - lo) * es}); err != nil {
					return err
				}
			}
			if err := p.signal(cs, csi, p.flagAt(q, flagDirect, me), v); err != nil {
				return err
			}
		}
		if nc > 1 && inPlace {
			// The fold overwrites what the copy stream sends.
			ev := p.evChunk[c%maxChunks]
			if err := ev.Record(cs); err != nil {
				return err
			}
			if err := rs.WaitEvent(ev); err != nil {
				return err
			}
		}
		for q := range in {
			if q == me {
				in[q] = send.Ptr().Add(lo * es)
				continue
			}
			if err := rs.WaitValue32(p.flagAt(me, flagDirect, q), v, cuda.WaitValueGEQ); err != nil {
				return err
			}
			in[q] = at(me, q).Add(lo * es)
		}
		t.step = uint32(2*c + 1)
		if err := p.foldOn(rs, t, recv.Ptr().Add(lo*es), in, hi-lo, dt, op); err != nil {
			return err
		}
	}
	if nc > 1 {
		if err := r.evEndCE.Record(cs); err != nil {
			return err
		}
		if err := r.user.WaitEvent(r.evEndCE); err != nil {
			return err
		}
		if err := r.evEndR.Record(rs); err != nil {
			return err
		}
		return r.user.WaitEvent(r.evEndR)
	}
	return nil
}

// peerRead is the one-kernel path of an out-of-place all-reduce: each
// rank's kernel reads every input, the peers' over NVLink (ins: where they
// lie), and writes the whole result, so the data moves on SMs (the
// kernel's blocks), as NCCL's does, but with one launch and four stream
// memory operations per operation: a rank raises its ready flag in every
// peer (its input is written), waits for theirs, folds, raises its done
// flag (it has read their inputs) and waits for theirs before its stream
// goes on (its input may then change). Those flags follow no data this
// rank wrote into peer memory, so they are written straight
// (cuStreamWriteValue32), not through the copy engine.
func (p *Proc) peerRead(t tag, dt collective.Datatype, op collective.ReduceOp, ins []cuda.DevicePtr, dst, final cuda.DevicePtr, bytes int) (copied bool, err error) {
	r := p.r
	n, me := p.n, p.me
	p.fseq++
	s := p.fseq
	if n == 2 && p.fused {
		// The kernel's own copy saves the copy engine's launch and
		// stream wait, which dominate up to a few MiB; above, the copy
		// engine moves the bytes faster than the kernel's SMs
		// (BENCHMARKS.md).
		if final%kernels.VecBytes != 0 || bytes > kernelCopyMax {
			final = 0
		}
		return final != 0, p.peerReadFused(t, dt, op, ins, dst, final, bytes, s)
	}
	for _, kind := range []int{flagReady, flagDone} {
		for k := 1; k < n; k++ {
			q := (me + k) % n
			if err := r.user.WriteValue32(p.flagAt(q, kind, me), s); err != nil {
				return false, err
			}
		}
		for k := 1; k < n; k++ {
			q := (me + k) % n
			if err := r.user.WaitValue32(p.flagAt(me, kind, q), s, cuda.WaitValueGEQ); err != nil {
				return false, err
			}
		}
		if kind == flagReady {
			if err := p.fold(t, dst, ins, bytes/dt.Size(), dt, op); err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

// kernelFlagBytes is the part of the flag memory the fused kernel
// synchronises through: the ready flag at 0, one done flag per block from
// 256 (at most kernelMaxBlocks blocks).
const (
	kernelFlagBytes = 4096
	kernelMaxBlocks = (kernelFlagBytes - 256) / 4
)

// peerReadFused is peerRead for 2 ranks in one launch and no stream memory
// operation: the kernel (kernels.KindReducePeer) raises and waits for the
// flags itself, spinning on an SM, which costs microseconds less per
// operation than the stream waits. Both ranks launch the same grid (it
// follows from the count and Config.SMs, which must match).
func (p *Proc) peerReadFused(t tag, dt collective.Datatype, op collective.ReduceOp, ins []cuda.DevicePtr, dst, final cuda.DevicePtr, bytes int, s uint32) error {
	g, r := p.g, p.r
	peer := 1 - p.me
	f, err := g.kernel(r, kernels.Spec{Kind: kernels.KindReducePeer, Dtype: dt, Op: op})
	if err != nil {
		return err
	}
	count := bytes / dt.Size()
	nn, nvec := kernels.Params(dt, count, uint64(dst), uint64(ins[0]), uint64(ins[1]))
	lanes := kernels.VecBytes / dt.Size()
	need := (count/lanes + 2*BlockThreads - 1) / (2 * BlockThreads)
	grid := max(1, min(g.cfg.SMs, need, kernelMaxBlocks))
	base := p.flagKinds()
	mine, theirs := p.flags.alloc.reg.peerPtr(p.me).Add(base), p.flags.alloc.reg.peerPtr(peer).Add(base)
	if err := r.args.Launch(f, cuda.D1(grid), cuda.D1(BlockThreads), 0, r.user,
		uint64(dst), uint64(ins[0]), uint64(ins[1]), nn, nvec, 2,
		uint64(theirs), uint64(mine), uint64(theirs.Add(256)), uint64(mine.Add(256)), uint64(s), uint64(final)); err != nil {
		return err
	}
	return g.post(r, r.user, t, wr{r: r, peer: r.global, qp: qpCompute(), bytes: bytes})
}

// stageBuf returns a buffer of this GPU of at least n bytes for in-place
// results (on the proxy thread; growing it waits for the queued work).
func (p *Proc) stageBuf(n int) (cuda.DevicePtr, error) {
	if p.stage != 0 && p.stageLen >= n {
		return p.stage, nil
	}
	if p.stage != 0 {
		if err := p.r.user.Synchronize(); err != nil {
			return 0, err
		}
		if err := cuda.MemFree(p.stage); err != nil {
			return 0, err
		}
		p.stage, p.stageLen = 0, 0
	}
	size := (max(n, 1<<20) + 4095) &^ 4095
	ptr, err := cuda.MemAlloc(size)
	if err != nil {
		return 0, err
	}
	p.stage, p.stageLen = ptr, size
	return ptr, nil
}

// kernelCopyMax is the largest in-place peer-read result the fused kernel
// copies to the output itself.
const kernelCopyMax = 4 << 20

// flagKinds is where the kernel's flags start in the flag memory.
func (p *Proc) flagKinds() int { return flagKinds * p.n * flagStride }

// DefaultOneKernelMax is the largest out-of-place all-reduce on the
// peer-read path.
const DefaultOneKernelMax = 32 << 20

// exchangeBufs tells every peer, through the mailbox, where this rank's
// buffer of an operation lies and learns where theirs do (the pipelined
// path writes into the peers' outputs, the peer-read path reads their
// inputs): a rank's buffers need not sit at the same place of the same
// registration on every rank. The peers make the same call at about the
// same time (the host waits for them here, microseconds). On the proxy
// thread.
func (p *Proc) exchangeBufs(ctx context.Context, recv *DeviceMem) ([]cuda.DevicePtr, error) {
	g, r := p.g, p.r
	w := waiter{ctx: ctx, timeout: p.timeout, idle: func() {
		if g.inflight.Load() > 0 {
			g.pollWhileBusy(flowtel.Monotonic())
			g.use(r)
		}
	}}
	p.oseq++
	s := p.oseq
	reg := recv.alloc.reg
	for q := 0; q < p.n; q++ {
		if q == p.me {
			continue
		}
		b := p.box.pair(q, p.me)
		if s > mailSlots {
			if err := w.until(func() string {
				return fmt.Sprintf("rank %d to read this rank's output of operation %d", q, s-mailSlots)
			},
				func() bool { return atomicLoad(&b.ackOut) >= s-mailSlots }); err != nil {
				return nil, err
			}
		}
		b.postOut(s, reg.id, recv.off, recv.n)
	}
	outs := make([]cuda.DevicePtr, p.n)
	for q := 0; q < p.n; q++ {
		if q == p.me {
			outs[q] = recv.Ptr()
			continue
		}
		b := p.box.pair(p.me, q)
		var id, off, n int
		if err := w.until(func() string { return fmt.Sprintf("rank %d to post its all-reduce output %d", q, s) }, func() bool {
			var ok bool
			id, off, n, ok = b.postedOut(s)
			return ok
		}); err != nil {
			return nil, err
		}
		atomicStore(&b.ackOut, s)
		if n != recv.n {
			return nil, fmt.Errorf("ce: rank %d's all-reduce buffer (%d bytes) does not match this rank's (%d bytes)", q, n, recv.n)
		}
		ptr, err := p.peerBuf(q, id, off, n)
		if err != nil {
			return nil, fmt.Errorf("ce: rank %d's all-reduce buffer: %w", q, err)
		}
		outs[q] = ptr
	}
	return outs, nil
}

func (p *Proc) pipelined(t tag, dt collective.Datatype, op collective.ReduceOp, send, recv *DeviceMem, outs []cuda.DevicePtr, parts []int, per int) error {
	g, r := p.g, p.r
	n, me, es := p.n, p.me, dt.Size()
	scr := p.fpipe.alloc.reg
	lanes := max(1, 16/es)
	myLen := parts[me+1] - parts[me]
	nc := chunksFor(per*es, p.chunk)
	// Chunk boundaries within a part, in elements, on 16-byte boundaries;
	// the same for every part (parts differ only at the end).
	cper := ((per+nc-1)/nc + lanes - 1) / lanes * lanes
	chunk := func(c, length int) (lo, hi int) { return min(c*cper, length), min((c+1)*cper, length) }
	base := p.fseq + 1
	p.fseq += uint32(nc)
	if err := r.evStart.Record(r.user); err != nil {
		return err
	}
	for _, st := range []cuda.Stream{r.ce, r.gat, r.red} {
		if err := st.WaitEvent(r.evStart); err != nil {
			return err
		}
	}
	for c := 0; c < nc; c++ {
		v := base + uint32(c)
		// Phase 1: this rank's copy of each peer's part, chunk c.
		for k := 1; k < n; k++ {
			q := (me + k) % n
			lo, hi := chunk(c, parts[q+1]-parts[q])
			if hi > lo {
				dst := scr.peerPtr(q).Add((me*per + lo) * es)
				if err := cuda.MemcpyDtoDAsync(dst, send.Ptr().Add((parts[q]+lo)*es), (hi-lo)*es, r.ce); err != nil {
					return err
				}
				t.step = uint32(3 * c)
				if err := g.post(r, r.ce, t, wr{r: r, peer: q, qp: qpCE(q), bytes: (hi - lo) * es}); err != nil {
					return err
				}
			}
			if err := p.signal(r.ce, 1, p.flagAt(q, flagA, me), v); err != nil {
				return err
			}
		}
		// Fold chunk c of this rank's part once every peer's copy landed.
		lo, hi := chunk(c, myLen)
		in := make([]cuda.DevicePtr, n)
		for q := range in {
			if q == me {
				in[q] = send.Ptr().Add((parts[me] + lo) * es)
				continue
			}
			if err := r.red.WaitValue32(p.flagAt(me, flagA, q), v, cuda.WaitValueGEQ); err != nil {
				return err
			}
			in[q] = scr.Ptr.Add((q*per + lo) * es)
		}
		if hi > lo {
			t.step = uint32(3*c + 1)
			if err := p.foldOn(r.red, t, recv.Ptr().Add((parts[me]+lo)*es), in, hi-lo, dt, op); err != nil {
				return err
			}
		}
		ev := p.evChunk[c%maxChunks]
		if err := ev.Record(r.red); err != nil {
			return err
		}
		if err := r.gat.WaitEvent(ev); err != nil {
			return err
		}
		// Phase 2: the folded chunk into every peer's output.
		for k := 1; k < n; k++ {
			q := (me + k) % n
			if hi > lo {
				dst := outs[q].Add((parts[me] + lo) * es)
				if err := cuda.MemcpyDtoDAsync(dst, recv.Ptr().Add((parts[me]+lo)*es), (hi-lo)*es, r.gat); err != nil {
					return err
				}
				t.step = uint32(3*c + 2)
				if err := g.post(r, r.gat, t, wr{r: r, peer: q, qp: qpGather(q), bytes: (hi - lo) * es}); err != nil {
					return err
				}
			}
			if err := p.signal(r.gat, 2, p.flagAt(q, flagB, me), v); err != nil {
				return err
			}
		}
	}
	// The operation ends on the user stream once this rank's streams are
	// done and every peer's last folded chunk has landed here.
	if err := r.evEndG.Record(r.gat); err != nil {
		return err
	}
	if err := r.user.WaitEvent(r.evEndG); err != nil {
		return err
	}
	if err := r.evEndCE.Record(r.ce); err != nil {
		return err
	}
	if err := r.user.WaitEvent(r.evEndCE); err != nil {
		return err
	}
	last := base + uint32(nc) - 1
	for q := 0; q < n; q++ {
		if q == me {
			continue
		}
		if err := r.user.WaitValue32(p.flagAt(me, flagB, q), last, cuda.WaitValueGEQ); err != nil {
			return err
		}
	}
	return nil
}

// Paths says which all-reduce path a size takes, for reports.
func (p *Proc) Paths() string {
	if p.staged {
		return "staged through host memory"
	}
	if !p.flagsOK() {
		return "mailbox and IPC events (copy engines; reduction kernel)"
	}
	return fmt.Sprintf("all-reduce: out of place up to %d bytes one kernel per GPU reading the peers' inputs over NVLink (%d blocks, so data on SMs), otherwise direct (whole input into each peer's scratch on copy engines, flags in device memory, then the kernel) up to %d bytes, pipelined reduce-scatter + all-gather on copy engines (chunks of %d bytes) above; reductions on a kernel of %d blocks", p.oneKernelMax, p.g.cfg.SMs, p.directMax, p.chunkOr(), p.g.cfg.SMs)
}

func (p *Proc) chunkOr() int {
	if p.chunk > 0 {
		return p.chunk
	}
	return procChunk
}

// SetAllReducePaths chooses the all-reduce paths for later operations:
// flags false runs every all-reduce on the mailbox path; otherwise
// out-of-place ones up to oneKernelMax bytes take the peer-read path, the
// others up to directMax bytes the direct path (negative: never) and the
// rest the pipelined one in chunks of chunk bytes (0: 16 MiB). Every rank must make
// the same choice between the same operations.
func (p *Proc) SetAllReducePaths(flags bool, oneKernelMax, directMax, chunk int) {
	p.g.do(func() error {
		p.useFlags, p.oneKernelMax, p.directMax, p.chunk = flags, oneKernelMax, directMax, chunk
		return nil
	})
}

// procChunk is the pipelined all-reduce's chunk: every chunk adds stream
// waits and flag copies, so chunks are as large as still lets copies and
// reductions overlap (2 H200s, BENCHMARKS.md).
const procChunk = 16 << 20

// SetFusedPeerRead chooses, for 2 ranks, between the peer-read path in one
// kernel that waits on the flags itself (true, the default unless
// VCCL_GPU_FUSED=0) and the same path ordered by stream memory operations.
// Every rank must make the same choice between the same operations.
func (p *Proc) SetFusedPeerRead(on bool) {
	p.g.do(func() error { p.fused = on; return nil })
}
