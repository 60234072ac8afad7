package flowtel

import (
	"context"
	"testing"
)

// TestCollectorRingWakes checks the rings a collector creates wake it, with a
// non-blocking send, when they cross half full.
func TestCollectorRingWakes(t *testing.T) {
	c := NewCollector(WithRingCapacity(16))
	r := c.NewRecorder()
	for i := range 7 {
		r.Record(&Record{TsNs: int64(i + 1)})
	}
	if len(c.wake) != 0 {
		t.Fatalf("woken below half full")
	}
	for i := range 20 { // crosses half, fills, overflows: never blocks
		r.Record(&Record{TsNs: int64(i + 1)})
	}
	if len(c.wake) != 1 {
		t.Fatalf("not woken at half full")
	}
}

// TestCollectorPassNoAlloc checks a drain pass reuses its batches.
func TestCollectorPassNoAlloc(t *testing.T) {
	c := NewCollector(WithRingCapacity(256), WithBatchSize(64))
	recs := []*Recorder{c.NewRecorder(), c.NewRecorder()}
	fill := func() {
		for _, r := range recs {
			for i := range 100 {
				r.Record(&Record{TsNs: int64(i + 1), Kind: KindWRPost})
			}
		}
	}
	fill()
	c.pass(noWait) // warm the pool
	allocs := testing.AllocsPerRun(100, func() {
		fill()
		if n := c.pass(noWait); n != 200 {
			t.Fatalf("pass drained %d, want 200", n)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per pass, want 0", allocs)
	}
	_ = c.Shutdown(context.Background())
}
