package nvml_test

import (
	"context"
	"testing"

	"github.com/vccl-go/vccl/gpu/ce"
	"github.com/vccl-go/vccl/gpu/cuda"
	"github.com/vccl-go/vccl/gpu/nvml"
)

// TestNVLinkCountersMove sends 4 GiB from GPU 0 to GPU 1 on the copy
// engine and checks that NVML's NVLink counters saw them.
func TestNVLinkCountersMove(t *testing.T) {
	c, err := nvml.Open()
	if err != nil {
		t.Skipf("no NVML here: %v", err)
	}
	defer c.Close()
	devs := c.Devices()
	if len(devs) < 2 || devs[0].NVLinks == 0 || !cuda.Available() {
		t.Skipf("needs 2 GPUs joined by NVLink (%d GPUs)", len(devs))
	}
	g, err := ce.New(ce.Config{Devices: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const n, reps = 256 << 20, 16
	src, err := g.Alloc(0, n)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free(0, src)
	dst, err := g.Alloc(1, n)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free(1, dst)
	ctx := context.Background()
	before, err := c.Sample()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < reps; i++ {
		if err := g.SendRecv(ctx, ce.Transfer{From: 0, To: 1, Src: src, Dst: dst, Bytes: n}); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := c.Sample()
	if err != nil {
		t.Fatal(err)
	}
	b0, a0, b1, a1 := before.GPUs[0], after.GPUs[0], before.GPUs[1], after.GPUs[1]
	if !a0.NVLinkOK || !a1.NVLinkOK {
		t.Skipf("the driver does not count NVLink data here (%v, %v)", a0.Err, a1.Err)
	}
	tx, rx := a0.NVLinkTXBytes-b0.NVLinkTXBytes, a1.NVLinkRXBytes-b1.NVLinkRXBytes
	sent := uint64(n * reps)
	t.Logf("sent %d bytes GPU 0 -> 1 in %v: NVLink TX on GPU 0 %d (%.3f×), RX on GPU 1 %d (%.3f×); GPU 0 tx rate over the interval %.1f GB/s",
		sent, after.Interval, tx, float64(tx)/float64(sent), rx, float64(rx)/float64(sent), a0.NVLinkTXBps/1e9)
	if tx < sent*9/10 || rx < sent*9/10 {
		t.Errorf("NVLink counters moved by tx %d rx %d for %d bytes sent", tx, rx, sent)
	}
}
