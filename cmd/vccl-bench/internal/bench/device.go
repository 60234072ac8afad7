package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unsafe"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/gpu/ce"
	"github.com/vccl-go/vccl/gpu/cuda"
	"github.com/vccl-go/vccl/gpu/nccl"
)

// --device gpu: the sweep on device memory through the collective API
// (gpu/ce attached to the communicator, one GPU per rank), timed as
// nccl-tests times (the iterations queued back to back, one wait at the
// end); with --vs-nccl, NCCL (ncclCommInitRank over an id that rank 0 makes
// and the host communicator broadcasts) runs on the same buffers and
// stream in the same process after each VCCL measurement. The host buffers
// of the setup mirror the device ones: inputs are written there and
// uploaded, outputs downloaded there and checked by the same code.

type deviceRun struct {
	p          *ce.Proc
	send, recv *ce.DeviceMem
	nccl       nccl.Comm // 0 without --vs-nccl
	ncclVer    int
	col        *flowtel.Collector // the GPU's telemetry, with --telemetry on
}

// openDevice attaches a GPU engine to comm. Without a GPU it fails with an
// error saying so (every rank fails the same way before any exchange).
func openDevice(ctx context.Context, comm *collective.Comm, cfg Config, telemetry bool) (*deviceRun, error) {
	pc := ce.ProcConfig{SMs: cfg.SMs}
	var col *flowtel.Collector
	if telemetry {
		// The GPU's records: a wr_post and a wc for every copy and kernel.
		col = flowtel.NewCollector()
		col.Start()
		pc.Collector = col
	}
	p, err := ce.Attach(ctx, comm, pc)
	if err != nil && col != nil {
		col.Shutdown(ctx)
	}
	if err != nil {
		if errors.Is(err, cuda.ErrNoDriver) {
			return nil, fmt.Errorf("--device gpu: no usable GPU on this machine: %w", err)
		}
		return nil, fmt.Errorf("--device gpu: %w", err)
	}
	d := &deviceRun{p: p, col: col}
	if cfg.VsNCCL {
		if err := d.openNCCL(ctx, comm); err != nil {
			p.Close()
			return nil, fmt.Errorf("--vs-nccl: %w", err)
		}
	}
	return d, nil
}

func (d *deviceRun) openNCCL(ctx context.Context, comm *collective.Comm) error {
	// Rank 0 makes the id; a status byte says whether it could.
	blob := make([]byte, 1+len(nccl.UniqueID{}))
	if comm.Rank() == 0 {
		if id, err := nccl.GetUniqueID(); err != nil {
			blob[0] = 1
			copy(blob[1:], err.Error())
		} else {
			copy(blob[1:], id[:])
		}
	}
	if err := collective.Broadcast(ctx, comm, blob, blob, 0); err != nil {
		return err
	}
	if blob[0] != 0 {
		return fmt.Errorf("rank 0: %s", cString(blob[1:]))
	}
	var id nccl.UniqueID
	copy(id[:], blob[1:])
	var err error
	if d.ncclVer, err = nccl.Version(); err != nil {
		return err
	}
	return d.p.Group().Do(0, func() (err error) {
		d.nccl, err = nccl.InitRank(comm.Size(), comm.Rank(), id)
		return err
	})
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// describe writes what the run uses, for the table's header.
func (d *deviceRun) describe(w io.Writer) {
	bus, _ := d.p.Device().PCIBusID()
	fmt.Fprintf(w, "# device gpu: rank 0 on GPU %d (%s); data on copy engines (0 SMs), reductions on a kernel of at most %d thread blocks (so at most %d SMs)\n", d.p.Device(), bus, d.p.Group().SMs(), d.p.Group().SMs())
	fmt.Fprintf(w, "# paths: %s\n", d.p.Paths())
	if d.nccl != 0 {
		fmt.Fprintf(w, "# NCCL %d on the same buffers and stream (ncclCommInitRank); the NCCL line under each row, busbw ratio VCCL/NCCL\n", d.ncclVer)
	}
}

// info is the GPU's ordinal, PCI address as nccl-tests prints it
// (0000:18:00) and name.
func (d *deviceRun) info() (int, string, string) {
	dev := d.p.Device()
	bus, _ := dev.PCIBusID()
	if i := strings.LastIndexByte(bus, '.'); i >= 0 {
		bus = bus[:i]
	}
	name, _ := dev.Name()
	return int(dev), strings.ToLower(bus), name
}

func (d *deviceRun) close(ctx context.Context) error {
	var errs []error
	if d.nccl != 0 {
		errs = append(errs, d.p.Group().Do(0, d.nccl.Destroy))
	}
	errs = append(errs, d.p.Free(ctx, d.send), d.p.Free(ctx, d.recv), d.p.Close())
	if d.col != nil {
		errs = append(errs, d.col.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// alloc makes the device mirrors of s's host buffers (every rank together).
func (d *deviceRun) alloc(ctx context.Context, s *setup) error {
	var err error
	if d.send, err = d.p.Alloc(ctx, max(len(s.sendBuf), 16)); err != nil {
		return err
	}
	d.recv, err = d.p.Alloc(ctx, max(len(s.recvBuf), 16))
	return err
}

// mirror returns the device memory that mirrors host memory b (a window of
// the setup's send or receive buffer).
func (d *deviceRun) mirror(s *setup, b collective.Buffer) collective.Buffer {
	if b.Data == nil {
		return collective.Buffer{Type: b.Type}
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b.Data)))
	for _, m := range []struct {
		host []byte
		dev  *ce.DeviceMem
	}{{s.sendBuf, d.send}, {s.recvBuf, d.recv}} {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(m.host)))
		if len(m.host) > 0 && p >= base && p+uintptr(len(b.Data)) <= base+uintptr(len(m.host)) {
			return collective.DeviceBuf(m.dev.Slice(int(p-base), len(b.Data)), b.Type)
		}
	}
	panic("vccl-bench: a buffer outside the setup's")
}

// devCall is a call's device buffers and, for the check, where its host
// output lives on the device.
type devCall struct {
	send, recv collective.Buffer
	out        collective.Buffer
}

func (d *deviceRun) call(s *setup, cl call) devCall {
	dc := devCall{send: d.mirror(s, cl.send), recv: d.mirror(s, cl.recv)}
	if cl.out != nil {
		dc.out = d.mirror(s, collective.Bytes(cl.out, collective.Uint8))
	}
	return dc
}

// run queues k calls back to back and waits for the last.
func (d *deviceRun) run(ctx context.Context, comm *collective.Comm, s *setup, dc devCall, k int) error {
	var h *collective.Handle
	for range k {
		var err error
		if h, err = s.startAsync(ctx, comm, call{send: dc.send, recv: dc.recv}); err != nil {
			return err
		}
	}
	if h == nil {
		return nil
	}
	return h.Wait(ctx)
}

// upload copies the host inputs (and sentinels) of l to the device.
func (d *deviceRun) upload(s *setup, l Layout) error {
	if err := d.p.Upload(d.send, s.sendBuf[:l.SendN*s.es]); err != nil {
		return err
	}
	return d.p.Upload(d.recv, s.recvBuf[:l.RecvN*s.es])
}

func (d *deviceRun) download(dst []byte, b collective.Buffer) error {
	return d.p.Download(dst, b.Dev.(*ce.DeviceMem))
}

// startAsync issues the collective once without waiting.
func (s *setup) startAsync(ctx context.Context, comm *collective.Comm, cl call) (*collective.Handle, error) {
	switch s.cfg.Coll {
	case AllReduce:
		return comm.AllReduceAsync(ctx, cl.send, cl.recv, s.cfg.Op)
	case AllGather:
		return comm.AllGatherAsync(ctx, cl.send, cl.recv)
	case ReduceScatter:
		return comm.ReduceScatterAsync(ctx, cl.send, cl.recv, s.cfg.Op)
	case Broadcast:
		return comm.BroadcastAsync(ctx, cl.send, cl.recv, s.cfg.Root)
	case Reduce:
		return comm.ReduceAsync(ctx, cl.send, cl.recv, s.cfg.Op, s.cfg.Root)
	case AllToAll:
		return comm.AllToAllAsync(ctx, cl.send, cl.recv)
	case SendRecv:
		next, prev := (s.rank+1)%s.n, (s.rank+s.n-1)%s.n
		return comm.SendRecvAsync(ctx, collective.SendTo(next, cl.send), collective.RecvFrom(prev, cl.recv))
	}
	return nil, fmt.Errorf("unknown collective %v", s.cfg.Coll)
}

func ptrOf(b collective.Buffer) cuda.DevicePtr {
	if b.Dev == nil {
		return 0
	}
	return b.Dev.(*ce.DeviceMem).Ptr()
}

// ncclCall queues NCCL's version of the call on the rank's stream; on the
// proxy thread (Group.Do).
func (d *deviceRun) ncclCall(s *setup, l Layout, dc devCall) error {
	c, st, dt := d.nccl, d.p.Stream(), s.dt
	send, recv := ptrOf(dc.send), ptrOf(dc.recv)
	switch s.cfg.Coll {
	case AllReduce:
		return c.AllReduce(send, recv, l.Count, dt, s.cfg.Op, st)
	case AllGather:
		return c.AllGather(send, recv, l.Count, dt, st)
	case ReduceScatter:
		return c.ReduceScatter(send, recv, l.Count, dt, s.cfg.Op, st)
	case Broadcast:
		if send == 0 {
			send = recv
		}
		return c.Broadcast(send, recv, l.Count, dt, s.cfg.Root, st)
	case Reduce:
		return c.Reduce(send, recv, l.Count, dt, s.cfg.Op, s.cfg.Root, st)
	case AllToAll, SendRecv:
		if err := nccl.GroupStart(); err != nil {
			return err
		}
		var errs []error
		if s.cfg.Coll == SendRecv {
			next, prev := (s.rank+1)%s.n, (s.rank+s.n-1)%s.n
			errs = append(errs, c.Send(send, l.Count, dt, next, st), c.Recv(recv, l.Count, dt, prev, st))
		} else {
			blk := l.Count * s.es
			for q := range s.n {
				errs = append(errs, c.Send(send.Add(q*blk), l.Count, dt, q, st), c.Recv(recv.Add(q*blk), l.Count, dt, q, st))
			}
		}
		return errors.Join(append(errs, nccl.GroupEnd())...)
	}
	return fmt.Errorf("unknown collective %v", s.cfg.Coll)
}

// ncclMeasure times NCCL on the same buffers as measure timed VCCL.
func (d *deviceRun) ncclMeasure(ctx context.Context, comm *collective.Comm, s *setup, l Layout, dc devCall) (Measure, error) {
	m := Measure{Wrong: -1}
	enqueue := func(k int) error {
		return d.p.Group().Do(0, func() error {
			for range k {
				if err := d.ncclCall(s, l, dc); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := enqueue(s.cfg.Warmup); err != nil {
		return m, err
	}
	if err := d.p.Synchronize(ctx); err != nil {
		return m, err
	}
	if err := comm.Barrier(ctx); err != nil {
		return m, err
	}
	t0 := time.Now()
	if err := enqueue(s.cfg.Iters); err != nil {
		return m, err
	}
	if err := d.p.Synchronize(ctx); err != nil {
		return m, err
	}
	err := s.timed(ctx, comm, time.Since(t0), l, &m)
	return m, err
}
