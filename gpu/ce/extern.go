package ce

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/vccl-go/vccl/gpu/cuda"
)

// Memory and streams a caller brings. A C API (cmd/libnccl) hands the
// engine buffers the application allocated with cudaMalloc and the
// application's own stream: Enter wraps the buffers as DeviceMem (Wrap)
// and orders this rank's stream after the work already on the caller's
// stream, the operations are queued as usual (Start), and Leave orders the
// caller's later work after them, so that to the caller an operation is
// stream-ordered on its stream as NCCL's are, without the host waiting for
// the device. Wrapped memory is not registered with every rank ahead of
// time: a peer maps it through CUDA IPC the first time an operation posts
// it (the export table in the mailbox, exports.go).

// Extent is Bytes bytes at Ptr: device memory of this rank's GPU that the
// caller allocated (cuMemAlloc, cudaMalloc). In and Out say whether the
// operations between Enter and Leave read it and write it.
type Extent struct {
	Ptr     cuda.DevicePtr
	Bytes   int
	In, Out bool
}

// imported is a peer's exported allocation as mapped in this process.
type imported struct {
	base cuda.DevicePtr
	size int
}

// Wrap returns n bytes at ptr, memory of this rank's GPU that the caller
// allocated, as a DeviceMem for the collective API. It is not collective.
// The allocation must stay allocated while operations that use it are
// queued, and is never freed here. Memory that CUDA IPC cannot share
// (cudaMallocAsync pools, cuMemCreate) is refused in a job of several
// ranks on one host.
func (p *Proc) Wrap(ptr cuda.DevicePtr, n int) (*DeviceMem, error) {
	var m *DeviceMem
	err := p.g.do(func() error {
		if err := p.g.use(p.r); err != nil {
			return err
		}
		var err error
		m, err = p.wrapLocked(Extent{Ptr: ptr, Bytes: n})
		return err
	})
	return m, err
}

// Enter wraps bufs (as Wrap) and orders this rank's stream after the work
// queued so far on s, a stream of this rank's device in its primary
// context (a CUDA runtime cudaStream_t; 0 is the legacy default stream).
// Operations started after it run behind that work; call Leave(s) after
// them. One request to the proxy thread does all of it.
func (p *Proc) Enter(s cuda.Stream, bufs ...Extent) ([]*DeviceMem, error) {
	out := make([]*DeviceMem, len(bufs))
	err := p.g.do(func() error {
		if err := p.g.use(p.r); err != nil {
			return err
		}
		for i, b := range bufs {
			m, err := p.wrapLocked(b)
			if err != nil {
				return err
			}
			out[i] = m
		}
		if err := p.streamEvents(); err != nil {
			return err
		}
		if err := p.evIn.Record(s); err != nil {
			return fmt.Errorf("ce: the caller's stream %#x (a stream of another device or context?): %w", uintptr(s), err)
		}
		if err := p.r.user.WaitEvent(p.evIn); err != nil {
			return err
		}
		if err := p.bounceIn(bufs, out); err != nil {
			p.bounceOut = p.bounceOut[:0] // the caller will not Leave
			p.bounceBack()
			return err
		}
		return nil
	})
	return out, err
}

// Small allocations. The driver packs allocations under 2 MiB into shared
// chunks and CUDA IPC maps a chunk once per process, so a peer cannot map
// two of them (nor a new one where an old one it mapped lay). Buffers in
// such allocations never reach the peers: Enter gives the operations a
// bounce buffer of this Proc instead (whole pages, exported once, one per
// allocation of the call, at the same offsets, so in place stays in
// place), copies the extents the operations read into it, and Leave copies
// back those they write. Both copies are on this rank's stream, so a
// bounce buffer is free again for the next call once Leave has queued
// them. Allocators hand out 2 MiB and more (PyTorch's, nccl-tests'), so
// this costs nothing there.

// bounceIn maps the small allocations of an Enter to bounce buffers and
// queues the copies in. On the proxy thread.
func (p *Proc) bounceIn(bufs []Extent, out []*DeviceMem) error {
	if p.n == 1 || p.staged {
		return nil
	}
	for i, m := range out {
		if m.alloc.bytes >= chunkPage {
			continue
		}
		b := p.bounceFor[m.alloc]
		if b == nil {
			if len(p.bounceFree) > 0 {
				b = p.bounceFree[len(p.bounceFree)-1]
				p.bounceFree = p.bounceFree[:len(p.bounceFree)-1]
			} else {
				ptr, err := cuda.MemAlloc(chunkPage)
				if err != nil {
					return err
				}
				p.bounceAll = append(p.bounceAll, ptr)
				w, err := p.wrapLocked(Extent{Ptr: ptr, Bytes: chunkPage})
				if err != nil {
					return err
				}
				b = w.alloc
			}
			if p.bounceFor == nil {
				p.bounceFor = map[*allocation]*allocation{}
			}
			p.bounceFor[m.alloc] = b
		}
		bm := &DeviceMem{p: p, alloc: b, off: m.off, n: m.n}
		if bufs[i].In && m.n > 0 {
			if err := cuda.MemcpyDtoDAsync(bm.Ptr(), m.Ptr(), m.n, p.r.user); err != nil {
				return err
			}
		}
		if bufs[i].Out && m.n > 0 {
			p.bounceOut = append(p.bounceOut, [2]*DeviceMem{m, bm})
		}
		out[i] = bm
	}
	return nil
}

// bounceBack queues the copies out of the bounce buffers and frees them
// for the next call. On the proxy thread.
func (p *Proc) bounceBack() error {
	for _, c := range p.bounceOut {
		if err := cuda.MemcpyDtoDAsync(c[0].Ptr(), c[1].Ptr(), c[0].n, p.r.user); err != nil {
			return err
		}
	}
	p.bounceOut = p.bounceOut[:0]
	for _, b := range p.bounceFor {
		p.bounceFree = append(p.bounceFree, b)
	}
	clear(p.bounceFor)
	return nil
}

// Leave orders the work queued on s from now on after this rank's stream,
// so after every operation started since Enter(s). It does not wait.
func (p *Proc) Leave(s cuda.Stream) error {
	return p.g.do(func() error {
		if err := p.g.use(p.r); err != nil {
			return err
		}
		if err := p.streamEvents(); err != nil {
			return err
		}
		if err := p.bounceBack(); err != nil {
			return err
		}
		if err := p.evOut.Record(p.r.user); err != nil {
			return err
		}
		return s.WaitEvent(p.evOut)
	})
}

// streamEvents makes Enter's and Leave's events on first use. Reusing
// them is safe: a stream waits for the record that precedes its wait.
func (p *Proc) streamEvents() error {
	for _, e := range []*cuda.Event{&p.evIn, &p.evOut} {
		if *e != 0 {
			continue
		}
		ev, err := cuda.NewEvent(cuda.EventDisableTiming)
		if err != nil {
			return err
		}
		*e = ev
	}
	return nil
}

// wrapLocked is Wrap on the proxy thread. An allocation is looked up by
// its base and told apart from an earlier one at the same address by the
// driver's buffer id; a new one gets an export id and, in a job of several
// ranks sharing memory, its IPC handle in the export table.
func (p *Proc) wrapLocked(e Extent) (*DeviceMem, error) {
	if e.Bytes < 0 {
		return nil, fmt.Errorf("ce: buffer of %d bytes", e.Bytes)
	}
	if e.Ptr == 0 {
		return nil, errors.New("ce: null device pointer")
	}
	base, size, err := cuda.MemAddressRange(e.Ptr)
	if err != nil {
		return nil, fmt.Errorf("ce: %#x is not device memory of this process: %w", uintptr(e.Ptr), err)
	}
	id, err := cuda.BufferID(base)
	if err != nil {
		return nil, err
	}
	a := p.foreign[base]
	if a == nil || a.bufID != id || a.bytes != size {
		info, err := cuda.PointerAllocation(base)
		if err != nil {
			return nil, err
		}
		if info.Ordinal != int(p.r.dev) {
			return nil, fmt.Errorf("ce: buffer %#x is on GPU %d, this rank's is GPU %d", uintptr(e.Ptr), info.Ordinal, p.r.dev)
		}
		p.exportSeq++
		a = &allocation{ptr: base, bytes: size, foreign: true, bufID: id}
		a.reg = &Mem{owner: p, id: exportBase + int(p.exportSeq), Ptr: base, Bytes: size}
		if !p.staged && p.box != nil && p.n > 1 {
			if !info.IPCCapable {
				return nil, fmt.Errorf("ce: buffer %#x cannot be shared through CUDA IPC (cudaMallocAsync pools, cuMemCreate and expandable segments cannot): allocate it with cudaMalloc", uintptr(e.Ptr))
			}
			h, err := cuda.IpcGetMemHandle(base)
			if err != nil {
				return nil, fmt.Errorf("ce: sharing buffer %#x: %w", uintptr(e.Ptr), err)
			}
			p.box.export(p.me, uint64(a.reg.id), uint64(size), uint64(base), uint64(os.Getpid()), h)
		}
		p.foreign[base] = a
	}
	off := int(e.Ptr - base)
	if off+e.Bytes > size {
		return nil, fmt.Errorf("ce: %d bytes at %#x overrun their allocation (%d bytes at %#x)", e.Bytes, uintptr(e.Ptr), size, uintptr(base))
	}
	return &DeviceMem{p: p, alloc: a, off: off, n: e.Bytes}, nil
}

// owns reports whether m is a registration or an export of this Proc.
func (p *Proc) owns(m *Mem) bool {
	if m == nil || m.owner != p {
		return false
	}
	return m.id >= exportBase || m.id < len(p.regs) && p.regs[m.id] == m
}

// peerBuf returns where n bytes at offset off of rank q's buffer id (a
// registration or an export) lie in this process, mapping an export on
// first sight. On the proxy thread.
func (p *Proc) peerBuf(q, id, off, n int) (cuda.DevicePtr, error) {
	if off < 0 || n < 0 {
		return 0, fmt.Errorf("%d bytes at offset %d", n, off)
	}
	if id < exportBase {
		var m *Mem
		if id >= 0 && id < len(p.regs) {
			m = p.regs[id]
		}
		if m == nil || off+n > m.size[q] {
			return 0, fmt.Errorf("%d bytes at offset %d are outside registration %d", n, off, id)
		}
		return m.peer[q].Add(off), nil
	}
	im, ok := p.imports[q][id]
	if !ok {
		size, base, pid, h, found := p.box.exported(q, uint64(id))
		if !found {
			return 0, fmt.Errorf("its buffer %d is not in its export table (more than %d allocations exported since?)", id, exportSlots)
		}
		b, err := p.mapPeer(h, int(pid), cuda.DevicePtr(base), int(size))
		if err != nil {
			return 0, fmt.Errorf("mapping its buffer: %w", err)
		}
		im = imported{base: b, size: int(size)}
		p.imports[q][id] = im
	}
	if off+n > im.size {
		return 0, fmt.Errorf("%d bytes at offset %d are outside its %d-byte buffer", n, off, im.size)
	}
	return im.base.Add(off), nil
}

// Abort ends this rank's part at once, from any goroutine, without
// waiting for the device or the peers. What this rank's streams may wait
// on forever once a peer is gone is released first, from a thread of its
// own (the proxy may be inside a request): the flags of the all-reduce
// paths and of the fused kernel are set far ahead of any value an
// operation waits for, so those waits end and the streams drain (the
// results of the operations in flight are garbage). Then the proxy stops.
// Calls that wait for a peer on the host end when the context they were
// given ends: cancel it first. Nothing else is released: the memory, the
// events and the mailbox are left to the process's end.
func (p *Proc) Abort() {
	p.releaseMu.Lock()
	if p.released {
		p.releaseMu.Unlock()
		return
	}
	p.released = true
	p.releaseMu.Unlock()
	if f := p.flags; f != nil {
		// fseq is the proxy's; a stale read is covered by the margin.
		v := p.fseq + 1<<30
		done := make(chan struct{})
		go func() {
			defer close(done)
			cuda.WithContext(p.r.ctx, func() error {
				s, err := cuda.NewStream(cuda.StreamNonBlocking)
				if err != nil {
					return err
				}
				defer s.Destroy()
				if err := cuda.MemsetD32Async(f.Ptr(), v, f.n/4, s); err != nil {
					return err
				}
				deadline := time.Now().Add(time.Second)
				for time.Now().Before(deadline) {
					if ok, err := s.Query(); ok || err != nil {
						return err
					}
					time.Sleep(100 * time.Microsecond)
				}
				return nil
			})
		}()
		t := time.NewTimer(2 * time.Second)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	p.g.abandon(time.Second)
}

// CloseLocal releases this rank's part without the peers (Close is
// collective; NCCL's ncclCommDestroy is not). It waits, until ctx ends,
// for the queued work; unmaps the peers' memory and events; frees this
// rank's own shared memory and destroys its interprocess events only once
// every peer has unmapped them (each says so in the mailbox; it waits for
// that at most a second), and otherwise leaves them to the process's end;
// and releases the GPU. If the work does not drain before ctx ends, it
// aborts instead (Abort) and unmaps nothing. The host communicator is
// closed if NewProc made it.
func (p *Proc) CloseLocal(ctx context.Context) error {
	if p.attached {
		p.comm.SetDeviceEngine(nil)
	}
	syncErr := p.g.Synchronize(ctx)
	if syncErr != nil {
		// The streams may still use the peers' memory: unmap nothing.
		p.Abort()
		p.closeComm()
		return syncErr
	}
	p.g.do(func() error {
		if p.g.use(p.r) != nil {
			return nil
		}
		for _, o := range p.opened {
			cuda.CloseIpcMemHandle(o.base)
		}
		p.opened = map[cuda.IpcMemHandle]*openMem{}
		p.destroyPeerEvents()
		return nil
	})
	clean := true
	if p.box != nil {
		atomicStore(p.box.state(p.me), stateClosed)
		deadline := time.Now().Add(time.Second)
		for q := 0; q < p.n && clean; q++ {
			for atomicLoad(p.box.state(q)) != stateClosed {
				if time.Now().After(deadline) {
					clean = false
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	var err error
	if clean {
		p.g.do(func() error {
			if p.g.use(p.r) != nil {
				return nil
			}
			for _, m := range []**DeviceMem{&p.scratch, &p.flags, &p.fdirect, &p.fpipe} {
				if *m != nil {
					err = errors.Join(err, cuda.MemFree((*m).alloc.ptr))
					(*m).alloc.ptr = 0
					*m = nil
				}
			}
			for _, b := range p.bounceAll {
				cuda.MemFree(b)
			}
			p.bounceAll = nil
			for _, d := range []*cuda.DevicePtr{&p.words, &p.stage, &p.premulOut, &p.premulCon} {
				if *d != 0 {
					cuda.MemFree(*d)
					*d = 0
				}
			}
			for i, e := range p.evChunk {
				if e != 0 {
					e.Destroy()
					p.evChunk[i] = 0
				}
			}
			for _, e := range []*cuda.Event{&p.evIn, &p.evOut} {
				if *e != 0 {
					e.Destroy()
					*e = 0
				}
			}
			p.destroyOwnEvents()
			return nil
		})
		if p.pinned != nil {
			err = errors.Join(err, p.g.Do(0, p.pinned.Free))
			p.pinned = nil
		}
		err = errors.Join(err, p.g.Close())
	} else {
		p.g.abandon(time.Second)
	}
	err = errors.Join(err, p.box.close())
	p.closeComm()
	return err
}

// MaxTransfers is how many transfers one call may make with one peer in
// one direction (SendRecv; a rank's group of sends and receives).
const MaxTransfers = mailSlots

// CopyLocal queues a copy of src into dst (the same size, memory of this
// rank's GPU) on this rank's stream: a rank's send to itself.
func (p *Proc) CopyLocal(dst, src *DeviceMem) error {
	if dst.n != src.n {
		return fmt.Errorf("ce: copy of %d bytes into %d", src.n, dst.n)
	}
	if dst.n == 0 || dst.Ptr() == src.Ptr() {
		return nil
	}
	return p.g.do(func() error {
		if err := p.g.use(p.r); err != nil {
			return err
		}
		return cuda.MemcpyDtoDAsync(dst.Ptr(), src.Ptr(), dst.n, p.r.user)
	})
}
