package ce

import (
	"context"
	"errors"
	"fmt"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// Device buffers in the collective API: Attach makes a Proc the
// collective.DeviceEngine of a host communicator, so that the Comm's
// operations accept device memory from Proc.Alloc (collective.DeviceBuf)
// as they accept host memory. On one host the data moves over NVLink
// (copy engines, and the reduction kernel for reductions); across hosts,
// or with VCCL_GPU_STAGE=1, through pinned host memory and the host
// transports (stage.go).

// allocation is one cuMemAlloc of a Proc, registered with every rank
// (except when staging, where nothing is mapped).
type allocation struct {
	ptr     cuda.DevicePtr
	bytes   int
	reg     *Mem
	foreign bool   // the caller's memory (Wrap): never freed here
	bufID   uint64 // the driver's allocation id (foreign)
}

// DeviceMem is device memory of a Proc's GPU: an allocation from
// Proc.Alloc or a window of one (Slice). It implements
// collective.DeviceMemory; wrap it with collective.DeviceBuf.
type DeviceMem struct {
	p      *Proc
	alloc  *allocation
	off, n int
}

// DeviceBytes returns the size in bytes.
func (m *DeviceMem) DeviceBytes() int { return m.n }

// Ptr returns the device address.
func (m *DeviceMem) Ptr() cuda.DevicePtr { return m.alloc.ptr.Add(m.off) }

// Slice returns the window [off, off+n) of m.
func (m *DeviceMem) Slice(off, n int) *DeviceMem {
	if off < 0 || n < 0 || off+n > m.n {
		panic(fmt.Sprintf("ce: Slice [%d, %d) of a %d-byte buffer", off, off+n, m.n))
	}
	return &DeviceMem{p: m.p, alloc: m.alloc, off: m.off + off, n: n}
}

// Attach makes a Proc on c (see NewProc; cfg.Comm is set to c) and
// attaches it to c as its device engine. Close the Proc before c.
func Attach(ctx context.Context, c *collective.Comm, cfg ProcConfig) (*Proc, error) {
	cfg.Comm = c
	p, err := NewProc(ctx, cfg)
	if err != nil {
		return nil, err
	}
	p.attached = true
	c.SetDeviceEngine(p)
	return p, nil
}

// Staged reports whether this job moves device data through host memory
// (ranks on several hosts, or VCCL_GPU_STAGE=1).
func (p *Proc) Staged() bool { return p.staged }

// Alloc allocates n bytes on this rank's GPU and registers them with every
// rank: all ranks call it together (the sizes may differ). Free it with
// Free, also together.
func (p *Proc) Alloc(ctx context.Context, n int) (*DeviceMem, error) {
	if n <= 0 {
		return nil, fmt.Errorf("ce: Alloc of %d bytes", n)
	}
	ptr, err := p.g.Alloc(0, chunkRound(n))
	a := &allocation{ptr: ptr, bytes: n}
	if !p.staged {
		// Register even after a failed allocation: the other ranks are
		// registering, and learn from it that this rank failed.
		var rerr error
		if a.reg, rerr = p.Register(ctx, ptr, n); rerr != nil || err != nil {
			if err == nil {
				p.g.Free(0, ptr)
			}
			return nil, errors.Join(err, rerr)
		}
	}
	if err != nil {
		return nil, err
	}
	return &DeviceMem{p: p, alloc: a, n: n}, nil
}

// Free deregisters and frees memory from Alloc; all ranks call it together.
func (p *Proc) Free(ctx context.Context, m *DeviceMem) error {
	if m == nil || m.alloc.ptr == 0 {
		return nil
	}
	if m.alloc.foreign {
		return errors.New("ce: Free of memory the caller brought (Wrap): free it where it was allocated")
	}
	if m.alloc.reg != nil {
		if err := p.Deregister(ctx, m.alloc.reg); err != nil {
			return err
		}
	} else if err := p.g.Synchronize(ctx); err != nil {
		return err
	}
	err := p.g.Free(0, m.alloc.ptr)
	m.alloc.ptr = 0
	return err
}

// Upload copies src into m after the queued work.
func (p *Proc) Upload(m *DeviceMem, src []byte) error {
	if len(src) > m.n {
		return fmt.Errorf("ce: upload of %d bytes into %d", len(src), m.n)
	}
	return p.g.Upload(0, m.Ptr(), src)
}

// Download copies m into dst after the queued work.
func (p *Proc) Download(dst []byte, m *DeviceMem) error {
	if len(dst) > m.n {
		return fmt.Errorf("ce: download of %d bytes from %d", len(dst), m.n)
	}
	return p.g.Download(0, dst, m.Ptr())
}

// mover for staging.

func (p *Proc) hostScratch(n int) ([]byte, error) {
	if p.pinned == nil || p.pinned.Len() < n {
		if p.pinned != nil {
			p.pinned.Free()
			p.pinned = nil
		}
		size := max(n, 1<<20)
		var h *cuda.HostBuffer
		err := p.g.Do(0, func() (err error) {
			h, err = cuda.MemHostAlloc(size, cuda.HostAllocPortable)
			return
		})
		if err != nil {
			return nil, err
		}
		p.pinned = h
	}
	return p.pinned.Bytes()[:n:n], nil
}

func (p *Proc) toHost(dst []byte, src collective.DeviceMemory) error {
	return p.Download(dst, src.(*DeviceMem))
}

func (p *Proc) toDevice(dst collective.DeviceMemory, src []byte) error {
	return p.Upload(dst.(*DeviceMem), src)
}

// mem returns b's memory as this Proc's, or an error naming what it is.
func (p *Proc) mem(b collective.Buffer, what string) (*DeviceMem, error) {
	if b.Dev == nil {
		return nil, nil
	}
	m, ok := b.Dev.(*DeviceMem)
	if !ok {
		return nil, fmt.Errorf("ce: %s buffer is %T, not memory from Proc.Alloc", what, b.Dev)
	}
	if m.p != p {
		return nil, fmt.Errorf("ce: %s buffer belongs to another Proc", what)
	}
	if m.alloc.ptr == 0 {
		return nil, fmt.Errorf("ce: %s buffer was freed", what)
	}
	return m, nil
}

// Start implements collective.DeviceEngine: it queues op on this rank's
// stream and returns a wait for the stream to drain. It needs the peers
// to reach the same operation (the host waits for them).
func (p *Proc) Start(ctx context.Context, op collective.DeviceOp) (func(context.Context) error, error) {
	if err := p.runOp(ctx, op); err != nil {
		return nil, err
	}
	return p.wait, nil
}

func (p *Proc) wait(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	return p.g.Synchronize(ctx)
}

func (p *Proc) runOp(ctx context.Context, op collective.DeviceOp) error {
	e, ok := ipcOps[op.Op]
	if !ok {
		return fmt.Errorf("ce: %v on device buffers is not supported", op.Op)
	}
	send, err := p.mem(op.Send, "send")
	if err != nil {
		return err
	}
	recv, err := p.mem(op.Recv, "receive")
	if err != nil {
		return err
	}
	dt := op.Send.Type
	if send == nil {
		dt = op.Recv.Type
	}
	s := &opShape{op: op, n: p.n, me: p.me, es: dt.Size(), send: memSpan(send), recv: memSpan(recv), hasSend: send != nil, hasRecv: recv != nil}
	for i, o := range op.P2P {
		m, err := p.mem(o.Buf, fmt.Sprintf("operation %d's", i))
		if err != nil {
			return err
		}
		s.p2p = append(s.p2p, m)
	}
	if err := e.check(s); err != nil {
		return err
	}
	if p.staged {
		return stage(ctx, p.comm, p, op)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if op.Op == collective.OpAllReduce && p.flagsOK() {
		return p.allReduceFlags(ctx, dt, op.Reduce, send, recv)
	}
	return p.runIPC(ctx, e, s, dt)
}

// ipcScratch makes sure every rank has a registered scratch buffer of at
// least n bytes; all ranks call it with the same n (it follows from the
// operation's shape), since growing it is a registration.
func (p *Proc) ipcScratch(ctx context.Context, n int) (*Mem, error) {
	if p.scratch != nil && p.scratch.alloc.bytes >= n {
		return p.scratch.alloc.reg, nil
	}
	if p.scratch != nil {
		if err := p.Free(ctx, p.scratch); err != nil {
			return nil, err
		}
		p.scratch = nil
	}
	m, err := p.Alloc(ctx, (max(n, 1<<20)+4095)&^4095)
	if err != nil {
		return nil, err
	}
	p.scratch = m
	return m.alloc.reg, nil
}
