package ce

import (
	"context"
	"fmt"

	"github.com/vccl-go/vccl/collective"
)

// Staging runs an operation on device buffers through host memory: the
// inputs are copied to (pinned) host memory, the host communicator runs the
// same operation over its transports (TCP between hosts), and the results
// are copied back. It is how ranks on different hosts meet (no CUDA IPC,
// no RDMA here), and VCCL_GPU_STAGE=1 forces it on one host so that it is
// testable there. The copies and the host operation are synchronous: the
// call returns with the result in place.

// mover moves bytes between device buffers and host memory, after the work
// already queued on the device; Proc implements it with the driver, tests
// with host memory.
type mover interface {
	// hostScratch returns n bytes of host memory the copies may use (pinned
	// for Proc), valid until the next call.
	hostScratch(n int) ([]byte, error)
	toHost(dst []byte, src collective.DeviceMemory) error
	toDevice(dst collective.DeviceMemory, src []byte) error
}

// stage runs op over c through host memory.
func stage(ctx context.Context, c *collective.Comm, mv mover, op collective.DeviceOp) error {
	size := func(b collective.Buffer) int {
		if b.Dev == nil {
			return 0
		}
		return b.Dev.DeviceBytes()
	}
	if op.Op == collective.OpSend || op.Op == collective.OpRecv || op.Op == collective.OpGroup {
		total := 0
		for _, o := range op.P2P {
			total += size(o.Buf)
		}
		host, err := mv.hostScratch(total)
		if err != nil {
			return err
		}
		ops := make([]collective.P2P, len(op.P2P))
		off := 0
		for i, o := range op.P2P {
			n := size(o.Buf)
			h := host[off : off+n : off+n]
			off += n
			if !o.Recv {
				if err := mv.toHost(h, o.Buf.Dev); err != nil {
					return err
				}
			}
			ops[i] = collective.P2P{Peer: o.Peer, Recv: o.Recv, Buf: collective.Bytes(h, o.Buf.Type)}
		}
		if err := c.SendRecv(ctx, ops...); err != nil {
			return err
		}
		for i, o := range op.P2P {
			if o.Recv {
				if err := mv.toDevice(o.Buf.Dev, ops[i].Buf.Data); err != nil {
					return err
				}
			}
		}
		return nil
	}
	ns, nr := size(op.Send), size(op.Recv)
	host, err := mv.hostScratch(ns + nr)
	if err != nil {
		return err
	}
	// In place on the device (the same memory, or a window of it as
	// all-gather and reduce-scatter allow) stays in place on the host: the
	// host library tells the cases apart by address.
	hs, hr := host[:ns:ns], host[ns:ns+nr:ns+nr]
	if off, ok := within(op.Send.Dev, op.Recv.Dev); ok {
		hr = hs[off : off+nr : off+nr] // receive inside send (reduce-scatter)
	} else if off, ok := within(op.Recv.Dev, op.Send.Dev); ok {
		hs = hr[off : off+ns : off+ns] // send inside receive (all-gather)
	}
	if op.Send.Dev != nil {
		if err := mv.toHost(hs, op.Send.Dev); err != nil {
			return err
		}
	}
	send, recv := collective.Bytes(hs, op.Send.Type), collective.Bytes(hr, op.Recv.Type)
	if op.Send.Dev == nil {
		send = collective.Buffer{Type: op.Recv.Type}
	}
	if op.Recv.Dev == nil {
		recv = collective.Buffer{Type: op.Send.Type}
	}
	switch op.Op {
	case collective.OpAllReduce:
		err = c.AllReduce(ctx, send, recv, op.Reduce)
	case collective.OpAllGather:
		err = c.AllGather(ctx, send, recv)
	case collective.OpReduceScatter:
		err = c.ReduceScatter(ctx, send, recv, op.Reduce)
	case collective.OpBroadcast:
		err = c.Broadcast(ctx, send, recv, op.Root)
	case collective.OpReduce:
		err = c.Reduce(ctx, send, recv, op.Reduce, op.Root)
	case collective.OpAllToAll:
		err = c.AllToAll(ctx, send, recv)
	case collective.OpGather:
		err = c.Gather(ctx, send, recv, op.Root)
	case collective.OpScatter:
		err = c.Scatter(ctx, send, recv, op.Root)
	default:
		return fmt.Errorf("ce: %v on device buffers is not supported", op.Op)
	}
	if err != nil {
		return err
	}
	if op.Recv.Dev != nil {
		return mv.toDevice(op.Recv.Dev, hr)
	}
	return nil
}

// windowed is device memory that is a window of an allocation.
type windowed interface {
	collective.DeviceMemory
	// window returns the allocation (comparable) and the window's offset.
	window() (alloc any, off int)
}

// within reports whether small lies inside big (the same memory or a
// window of it), and at which offset.
func within(big, small collective.DeviceMemory) (int, bool) {
	b, ok1 := big.(windowed)
	s, ok2 := small.(windowed)
	if !ok1 || !ok2 {
		return 0, false
	}
	ba, bo := b.window()
	sa, so := s.window()
	if ba != sa || so < bo || so+s.DeviceBytes() > bo+b.DeviceBytes() {
		return 0, false
	}
	return so - bo, true
}

func (m *DeviceMem) window() (any, int) { return m.alloc, m.off }
