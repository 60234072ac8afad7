package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// DeviceMemory is accelerator memory that a Buffer holds instead of Data.
// This package never reads or writes it: a Comm hands every operation on
// device buffers to the DeviceEngine attached with SetDeviceEngine
// (gpu/ce.Attach attaches one), so collective links no GPU code.
type DeviceMemory interface {
	// DeviceBytes is the size of the memory in bytes.
	DeviceBytes() int
}

// DeviceBuf wraps device memory holding elements of dt as a Buffer.
func DeviceBuf(m DeviceMemory, dt Datatype) Buffer { return Buffer{Dev: m, Type: dt} }

// IsDevice reports whether b is device memory.
func (b Buffer) IsDevice() bool { return b.Dev != nil }

// Size returns the buffer's size in bytes, host or device.
func (b Buffer) Size() int {
	if b.Dev != nil {
		return b.Dev.DeviceBytes()
	}
	return len(b.Data)
}

// DeviceOp is one operation on device buffers, as the API call described
// it: buffers the call ignores on this rank (broadcast's send off the root,
// reduce's receive off the root) are zero Buffers.
type DeviceOp struct {
	Op         Op
	Send, Recv Buffer
	Reduce     ReduceOp
	Root       int
	P2P        []P2P // OpSend, OpRecv and OpGroup
}

// DeviceEngine runs the operations of a Comm on device buffers. Start
// queues op (device work is ordered on the engine's streams, as NCCL's is)
// and returns a function that waits until op has completed on the device,
// or ctx ends.
type DeviceEngine interface {
	Start(ctx context.Context, op DeviceOp) (wait func(context.Context) error, err error)
}

// ErrNoDeviceEngine is returned for a device buffer on a Comm that has no
// DeviceEngine attached.
var ErrNoDeviceEngine = errors.New("collective: device buffer on a communicator with no GPU engine attached (gpu/ce.Attach)")

// SetDeviceEngine attaches the engine that runs operations on device
// buffers (nil detaches it).
func (c *Comm) SetDeviceEngine(e DeviceEngine) {
	c.mu.Lock()
	c.devEngine = e
	c.mu.Unlock()
}

// DeviceEngine returns the attached engine, or nil.
func (c *Comm) DeviceEngine() DeviceEngine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.devEngine
}

// anyDevice reports whether a call has device buffers (a cheap test on the
// host path).
func anyDevice(a, b Buffer) bool { return a.Dev != nil || b.Dev != nil }

// startDevice validates what this package can (an engine, no host and
// device memory mixed, datatypes) and hands op to the engine; the engine
// checks sizes.
func (c *Comm) startDevice(ctx context.Context, op DeviceOp) (*Handle, error) {
	bufs := []Buffer{op.Send, op.Recv}
	for _, p := range op.P2P {
		bufs = append(bufs, p.Buf)
	}
	for i, b := range bufs {
		if b.Dev != nil && b.Data != nil {
			return nil, fmt.Errorf("collective: %v buffer %d has both host Data and device memory", op.Op, i)
		}
		if b.Dev == nil && b.Data != nil {
			return nil, fmt.Errorf("collective: %v mixes host and device buffers", op.Op)
		}
		if b.Dev == nil {
			continue
		}
		if !b.Type.Valid() {
			return nil, fmt.Errorf("collective: %v device buffer has invalid datatype %v", op.Op, b.Type)
		}
		if b.Dev.DeviceBytes()%b.Type.Size() != 0 {
			return nil, fmt.Errorf("collective: %v device buffer of %d bytes is not a whole number of %v elements", op.Op, b.Dev.DeviceBytes(), b.Type)
		}
	}
	if op.Send.Dev != nil && op.Recv.Dev != nil && op.Send.Type != op.Recv.Type {
		return nil, fmt.Errorf("collective: %v send buffer is %v but receive buffer is %v", op.Op, op.Send.Type, op.Recv.Type)
	}
	if op.Op.Reduces() && !op.Reduce.Valid() {
		return nil, fmt.Errorf("collective: %v with invalid reduction %v", op.Op, op.Reduce)
	}
	if op.Op.Rooted() && (op.Root < 0 || op.Root >= c.size) {
		return nil, fmt.Errorf("collective: %v root %d out of range for %d ranks", op.Op, op.Root, c.size)
	}
	e := c.DeviceEngine()
	if e == nil {
		return nil, ErrNoDeviceEngine
	}
	w, err := e.Start(ctx, op)
	if err != nil {
		return nil, err
	}
	return &Handle{comm: c, dev: &deviceWait{wait: w, done: make(chan struct{})}}, nil
}

// deviceWait is the state of a Handle of a device operation. The engine's
// wait function may be called from several goroutines at once (Wait and the
// watcher behind Done) and bounds its own wait when ctx has no deadline.
type deviceWait struct {
	wait        func(context.Context) error
	done        chan struct{}
	once, watch sync.Once
	err         error
}

func (d *deviceWait) Wait(ctx context.Context) error {
	select {
	case <-d.done:
		return d.err
	default:
	}
	err := d.wait(ctx)
	if err != nil && ctx.Err() != nil {
		return err // not finished: Wait may be called again
	}
	d.finish(err)
	<-d.done
	return d.err
}

func (d *deviceWait) finish(err error) {
	d.once.Do(func() { d.err = err; close(d.done) })
}

// Done returns a channel closed when the operation finished; the first
// call starts a goroutine that waits for it.
func (d *deviceWait) Done() <-chan struct{} {
	d.watch.Do(func() { go func() { d.finish(d.wait(context.Background())) }() })
	return d.done
}

// groupOp is the Op of a SendRecv call: OpSend or OpRecv for one
// operation, OpGroup for several.
func groupOp(ops []P2P) Op {
	switch {
	case len(ops) > 1:
		return OpGroup
	case ops[0].Recv:
		return OpRecv
	}
	return OpSend
}
