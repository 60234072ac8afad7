package ce

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
)

// fakeDev is "device memory" in host memory, for the staging logic: a
// window [off, off+len(b)) of the allocation all.
type fakeDev struct {
	all *[]byte
	off int
	b   []byte
}

func newFake(b []byte) *fakeDev { return &fakeDev{all: &b, b: b} }

func (f *fakeDev) slice(off, n int) *fakeDev {
	return &fakeDev{all: f.all, off: f.off + off, b: f.b[off : off+n]}
}
func (f *fakeDev) DeviceBytes() int   { return len(f.b) }
func (f *fakeDev) window() (any, int) { return f.all, f.off }

type fakeMover struct{ scratch []byte }

func (m *fakeMover) hostScratch(n int) ([]byte, error) {
	if len(m.scratch) < n {
		m.scratch = make([]byte, n)
	}
	// Poison it: staging must not read what it did not write.
	for i := range m.scratch[:n] {
		m.scratch[i] = 0xa5
	}
	return m.scratch[:n:n], nil
}
func (m *fakeMover) toHost(dst []byte, src collective.DeviceMemory) error {
	copy(dst, src.(*fakeDev).b)
	return nil
}
func (m *fakeMover) toDevice(dst collective.DeviceMemory, src []byte) error {
	copy(dst.(*fakeDev).b, src)
	return nil
}

// TestStageMatchesHost runs every operation staged on fake device memory
// and the same operation on host memory, on 3 ranks, and compares.
func TestStageMatchesHost(t *testing.T) {
	const n = 3
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms, err := collective.NewLocal(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	const blk = 40 // bytes: 10 float32
	dt := collective.Float32
	type tc struct {
		name       string
		op         collective.DeviceOp
		sendB, rcv int
		inPlace    string
	}
	cases := []tc{
		{"allreduce", collective.DeviceOp{Op: collective.OpAllReduce, Reduce: collective.Sum}, blk, blk, ""},
		{"allgather", collective.DeviceOp{Op: collective.OpAllGather}, blk, n * blk, ""},
		{"reducescatter", collective.DeviceOp{Op: collective.OpReduceScatter, Reduce: collective.Max}, n * blk, blk, ""},
		{"broadcast", collective.DeviceOp{Op: collective.OpBroadcast, Root: 1}, blk, blk, ""},
		{"reduce", collective.DeviceOp{Op: collective.OpReduce, Reduce: collective.Prod, Root: 2}, blk, blk, ""},
		{"alltoall", collective.DeviceOp{Op: collective.OpAllToAll}, n * blk, n * blk, ""},
		{"gather", collective.DeviceOp{Op: collective.OpGather, Root: 0}, blk, n * blk, ""},
		{"scatter", collective.DeviceOp{Op: collective.OpScatter, Root: 0}, n * blk, blk, ""},
		{"sendrecv", collective.DeviceOp{Op: collective.OpGroup}, blk, blk, ""},
		{"allreduce in place", collective.DeviceOp{Op: collective.OpAllReduce, Reduce: collective.Sum}, blk, blk, "same"},
		{"allgather in place", collective.DeviceOp{Op: collective.OpAllGather}, blk, n * blk, "send in recv"},
		{"reducescatter in place", collective.DeviceOp{Op: collective.OpReduceScatter, Reduce: collective.Sum}, n * blk, blk, "recv in send"},
		{"alltoall in place", collective.DeviceOp{Op: collective.OpAllToAll}, n * blk, n * blk, "same"},
	}
	for _, c := range cases {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = func() error {
					rng := rand.New(rand.NewPCG(uint64(r), 7))
					in := make([]float32, c.sendB/4)
					for i := range in {
						in[i] = float32(rng.IntN(9) - 4)
					}
					hin := collective.Buf(in)
					hout := collective.Buf(make([]float32, c.rcv/4))
					dev := newFake(bytes.Clone(hin.Data))
					out := newFake(make([]byte, c.rcv))
					switch c.inPlace {
					case "recv in send": // the receive is this rank's block of the send
						out = dev.slice(r*c.rcv, c.rcv)
					case "send in recv":
						out = newFake(make([]byte, c.rcv))
						copy(out.b[r*c.sendB:], hin.Data)
						dev = out.slice(r*c.sendB, c.sendB)
					case "same":
						out = dev
					}
					op := c.op
					op.Send, op.Recv = collective.DeviceBuf(dev, dt), collective.DeviceBuf(out, dt)
					cm := comms[r]
					var err error
					switch op.Op {
					case collective.OpAllReduce:
						err = cm.AllReduce(ctx, hin, hout, op.Reduce)
					case collective.OpAllGather:
						err = cm.AllGather(ctx, hin, hout)
					case collective.OpReduceScatter:
						err = cm.ReduceScatter(ctx, hin, hout, op.Reduce)
					case collective.OpBroadcast:
						err = cm.Broadcast(ctx, hin, hout, op.Root)
						if r != op.Root {
							op.Send = collective.Buffer{}
						}
					case collective.OpReduce:
						err = cm.Reduce(ctx, hin, hout, op.Reduce, op.Root)
						if r != op.Root {
							op.Recv = collective.Buffer{}
						}
					case collective.OpAllToAll:
						err = cm.AllToAll(ctx, hin, hout)
					case collective.OpGather:
						err = cm.Gather(ctx, hin, hout, op.Root)
						if r != op.Root {
							op.Recv = collective.Buffer{}
						}
					case collective.OpScatter:
						err = cm.Scatter(ctx, hin, hout, op.Root)
						if r != op.Root {
							op.Send = collective.Buffer{}
						}
					case collective.OpGroup:
						next, prev := (r+1)%n, (r+n-1)%n
						err = cm.SendRecv(ctx, collective.SendTo(next, hin), collective.RecvFrom(prev, hout))
						op.P2P = []collective.P2P{collective.SendTo(next, op.Send), collective.RecvFrom(prev, op.Recv)}
						op.Send, op.Recv = collective.Buffer{}, collective.Buffer{}
					}
					if err != nil {
						return fmt.Errorf("host: %w", err)
					}
					if err := stage(ctx, cm, &fakeMover{}, op); err != nil {
						return fmt.Errorf("staged: %w", err)
					}
					if (op.Recv.Dev != nil || op.Op == collective.OpGroup) && !bytes.Equal(out.b, hout.Data) {
						return fmt.Errorf("staged result % x, host % x", out.b, hout.Data)
					}
					return nil
				}()
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Errorf("%s rank %d: %v", c.name, r, err)
			}
		}
	}
}

func TestSplitParts(t *testing.T) {
	for _, c := range []struct{ count, n, es int }{{0, 2, 4}, {1, 2, 4}, {7, 2, 4}, {1000, 3, 2}, {65537, 4, 8}, {5, 4, 1}} {
		b, per := splitParts(c.count, c.n, c.es)
		if b[0] != 0 || b[c.n] != c.count {
			t.Errorf("%+v: bounds %v do not cover the vector", c, b)
		}
		for q := 0; q < c.n; q++ {
			if b[q+1] < b[q] || b[q+1]-b[q] > per || (b[q]*c.es)%16 != 0 && b[q] != c.count {
				t.Errorf("%+v: part %d [%d, %d) with per %d", c, q, b[q], b[q+1], per)
			}
		}
	}
}
