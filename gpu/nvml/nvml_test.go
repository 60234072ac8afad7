package nvml

import (
	"errors"
	"testing"
	"time"
)

type fakeSource struct {
	tx, rx, ptx, prx uint64
	util             uint32
	closed           bool
	stamp            time.Time
}

func (f *fakeSource) devices() ([]Device, error) {
	return []Device{{Index: 0, Name: "fake", NVLinks: 18}, {Index: 1, Name: "fake", NVLinks: 0}}, nil
}

func (f *fakeSource) read(i int, g *GPU) {
	if i == 1 {
		g.Err = errors.New("unsupported")
		return
	}
	g.NVLinkTXBytes, g.NVLinkRXBytes, g.NVLinkOK = f.tx, f.rx, true
	g.PCIeTXBytes, g.PCIeRXBytes, g.PCIeCounters = f.ptx, f.prx, true
	g.UtilGPU = f.util
	g.CounterTime = f.stamp
}

func (f *fakeSource) close() error { f.closed = true; return nil }

func TestRates(t *testing.T) {
	f := &fakeSource{tx: 1000, rx: 5000, ptx: 10, prx: 20, util: 7}
	c, err := newCollector(f)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(100, 0)
	c.now = func() time.Time { return now }
	s, err := c.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if s.Interval != 0 || s.GPUs[0].NVLinkTXBps != 0 || s.GPUs[0].UtilGPU != 7 {
		t.Errorf("first sample: %+v", s)
	}
	if s.GPUs[1].Err == nil {
		t.Error("GPU 1's error lost")
	}
	now = now.Add(500 * time.Millisecond)
	f.tx += 200e9
	f.rx += 100e9
	f.ptx += 1e9
	s, _ = c.Sample()
	g := s.GPUs[0]
	if s.Interval != 500*time.Millisecond || g.NVLinkTXBps != 400e9 || g.NVLinkRXBps != 200e9 || g.PCIeTXBps != 2e9 || g.PCIeRXBps != 0 {
		t.Errorf("rates: %+v interval %v", g, s.Interval)
	}
	// A counter that goes back (driver reloaded) gives 0, not a huge rate.
	now = now.Add(time.Second)
	f.tx = 0
	s, _ = c.Sample()
	if s.GPUs[0].NVLinkTXBps != 0 {
		t.Errorf("counter reset: %v", s.GPUs[0].NVLinkTXBps)
	}
	if len(c.Devices()) != 2 || c.Devices()[0].NVLinks != 18 {
		t.Errorf("devices: %+v", c.Devices())
	}
	// The driver's own read times win over the Sample's.
	f.stamp = time.Unix(200, 0)
	c.Sample()
	now = now.Add(time.Second)
	f.stamp = f.stamp.Add(250 * time.Millisecond)
	f.tx += 100e9
	s, _ = c.Sample()
	if got := s.GPUs[0].NVLinkTXBps; got != 400e9 {
		t.Errorf("rate over the counters' own times: %v", got)
	}
	if err := c.Close(); err != nil || !f.closed {
		t.Errorf("close: %v %v", err, f.closed)
	}
	if _, err := c.Sample(); err == nil {
		t.Error("Sample after Close succeeded")
	}
}

// TestOpen reads the real GPUs where there are some, and otherwise checks
// that the error says there is no driver.
func TestOpen(t *testing.T) {
	c, err := Open()
	if err != nil {
		if !errors.Is(err, ErrNoDriver) {
			t.Fatalf("Open: %v, want an error wrapping ErrNoDriver", err)
		}
		t.Skipf("no NVML here (%v); the rest of this test runs on a GPU machine", err)
	}
	defer c.Close()
	for _, d := range c.Devices() {
		t.Logf("GPU %d: %s %s %s, %d active NVLinks", d.Index, d.Name, d.UUID, d.PCIBusID, d.NVLinks)
	}
	if _, err := c.Sample(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	s, err := c.Sample()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range s.GPUs {
		t.Logf("GPU %d: NVLink ok=%v tx=%d rx=%d B (%.0f/%.0f B/s), PCIe counters=%v tx=%d rx=%d (%.0f/%.0f B/s), util gpu=%d%% mem=%d%%, err=%v",
			g.Index, g.NVLinkOK, g.NVLinkTXBytes, g.NVLinkRXBytes, g.NVLinkTXBps, g.NVLinkRXBps,
			g.PCIeCounters, g.PCIeTXBytes, g.PCIeRXBytes, g.PCIeTXBps, g.PCIeRXBps, g.UtilGPU, g.UtilMemory, g.Err)
	}
}
