package collective

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeMem int

func (m fakeMem) DeviceBytes() int { return int(m) }

// fakeEngine records what reaches it; wait returns when release is closed.
type fakeEngine struct {
	mu      sync.Mutex
	ops     []DeviceOp
	release chan struct{}
	err     error
}

func (f *fakeEngine) Start(ctx context.Context, op DeviceOp) (func(context.Context) error, error) {
	f.mu.Lock()
	f.ops = append(f.ops, op)
	f.mu.Unlock()
	return func(ctx context.Context) error {
		select {
		case <-f.release:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil
}

func TestDeviceBuffersGoToTheEngine(t *testing.T) {
	comms := newLocal(t, 2)
	c := comms[1]
	ctx := testCtx(t, 10*time.Second)
	d := DeviceBuf(fakeMem(64), Float32)
	if d.Len() != 16 || !d.IsDevice() || d.Size() != 64 {
		t.Fatalf("device buffer: len %d size %d", d.Len(), d.Size())
	}
	if err := c.AllReduce(ctx, d, d, Sum); !errors.Is(err, ErrNoDeviceEngine) {
		t.Fatalf("no engine: got %v", err)
	}
	f := &fakeEngine{release: make(chan struct{})}
	close(f.release)
	c.SetDeviceEngine(f)
	calls := []struct {
		op  Op
		run func() error
	}{
		{OpAllReduce, func() error { return c.AllReduce(ctx, d, d, Max) }},
		{OpAllGather, func() error { return c.AllGather(ctx, d, d) }},
		{OpReduceScatter, func() error { return c.ReduceScatter(ctx, d, d, Sum) }},
		{OpBroadcast, func() error { return c.Broadcast(ctx, d, d, 0) }},
		{OpReduce, func() error { return c.Reduce(ctx, d, d, Sum, 0) }},
		{OpAllToAll, func() error { return c.AllToAll(ctx, d, d) }},
		{OpSend, func() error { return c.Send(ctx, d, 0) }},
		{OpRecv, func() error { return c.Recv(ctx, d, 0) }},
		{OpGroup, func() error { return c.SendRecv(ctx, SendTo(0, d), RecvFrom(0, d)) }},
	}
	for _, k := range calls {
		if err := k.run(); err != nil {
			t.Fatalf("%v: %v", k.op, err)
		}
	}
	if len(f.ops) != len(calls) {
		t.Fatalf("engine saw %d operations, want %d", len(f.ops), len(calls))
	}
	for i, k := range calls {
		if f.ops[i].Op != k.op {
			t.Errorf("operation %d reached the engine as %v, want %v", i, f.ops[i].Op, k.op)
		}
	}
	if f.ops[0].Reduce != Max {
		t.Errorf("all-reduce reached the engine with %v", f.ops[0].Reduce)
	}
	// Rank 1 is not the root: broadcast's send and reduce's receive are
	// ignored there and reach the engine as zero buffers.
	if f.ops[3].Send.Dev != nil || f.ops[4].Recv.Dev != nil {
		t.Errorf("ignored buffers reached the engine: %+v %+v", f.ops[3], f.ops[4])
	}
}

func TestDeviceBufferErrors(t *testing.T) {
	c := newLocal(t, 2)[0]
	f := &fakeEngine{release: make(chan struct{})}
	c.SetDeviceEngine(f)
	ctx := testCtx(t, 10*time.Second)
	d := DeviceBuf(fakeMem(64), Float32)
	host := Buf(make([]float32, 16))
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"mixed":    {c.AllReduce(ctx, d, host, Sum), "mixes host and device"},
		"mixedp2p": {c.SendRecv(ctx, SendTo(1, d), RecvFrom(1, host)), "mixes host and device"},
		"both":     {c.AllReduce(ctx, Buffer{Dev: fakeMem(64), Data: make([]byte, 64), Type: Float32}, d, Sum), "both host Data and device"},
		"partial":  {c.AllReduce(ctx, DeviceBuf(fakeMem(6), Float32), DeviceBuf(fakeMem(6), Float32), Sum), "not a whole number"},
		"types":    {c.AllReduce(ctx, d, DeviceBuf(fakeMem(64), Int32), Sum), "send buffer is float32 but receive buffer is int32"},
		"root":     {c.Broadcast(ctx, d, d, 5), "root 5 out of range"},
		"redop":    {c.AllReduce(ctx, d, d, ReduceOp(99)), "invalid reduction"},
		"v":        {c.AllToAllv(ctx, d, nil, nil, d, nil, nil), "not supported"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, tc.err, tc.want)
		}
	}
	if len(f.ops) != 0 {
		t.Errorf("bad calls reached the engine: %v", f.ops)
	}
	// A handle waits for the engine; Done closes when it finished; a Wait
	// whose context ends first may be repeated.
	h, err := c.AllReduceAsync(ctx, d, d, Sum)
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancelShort()
	if err := h.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait before the device finished: %v", err)
	}
	select {
	case <-h.Done():
		t.Fatal("Done closed before the device finished")
	default:
	}
	f.err = errors.New("device failed")
	close(f.release)
	select {
	case <-h.Done():
	case <-ctx.Done():
		t.Fatal("Done never closed")
	}
	if err := h.Wait(ctx); err == nil || err.Error() != "device failed" {
		t.Fatalf("wait: %v", err)
	}
}
