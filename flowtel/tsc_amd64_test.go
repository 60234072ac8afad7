package flowtel

import (
	"testing"
)

func TestTSCUsable(t *testing.T) {
	for _, tc := range []struct {
		source string
		want   bool
	}{
		{"tsc\n", true},
		{"kvm-clock\n", false},
		{"hpet\n", false},
		{"", false},
	} {
		if got := tscUsable(tc.source); got != tc.want {
			t.Errorf("tscUsable(%q) = %v, want %v", tc.source, got, tc.want)
		}
	}
}

// ClockMonotonic turns the TSC off; ClockAuto turns it back on where the
// kernel keeps time with it. Not parallel: it switches the process's clock.
func TestUseClockSource(t *testing.T) {
	defer UseClockSource(ClockAuto)
	UseClockSource(ClockMonotonic)
	if hostTSC.on.Load() {
		t.Fatal("ClockMonotonic left the TSC on")
	}
	UseClockSource(ClockAuto)
	if got := hostTSC.on.Load(); got != tscOK {
		t.Fatalf("ClockAuto: TSC on %v, want %v (the kernel's clocksource)", got, tscOK)
	}
}

// readTSC reads c between two readings of the monotonic clock and fails the
// test unless it lies between them (give or take tol ns) and is not below
// last.
func readTSC(t *testing.T, c *tscClock, last, tol int64) int64 {
	t.Helper()
	lo := nanotime()
	v := c.now()
	hi := nanotime()
	if v < lo-tol || v > hi+tol {
		t.Fatalf("tsc clock read %d, outside the monotonic clock's [%d, %d] by more than %d ns", v, lo, hi, tol)
	}
	if v < last {
		t.Fatalf("tsc clock went back: %d after %d", v, last)
	}
	return v
}

// The TSC clock calibrates itself, then follows the monotonic clock across
// re-anchors without going back.
func TestTSCClockFollowsMonotonic(t *testing.T) {
	if !tscUsable(readClocksource()) {
		t.Skip("the kernel's clocksource is not the TSC")
	}
	var c tscClock
	const tol = 2000 // ns: one interval's drift and the anchor's reading error, with room
	var last int64
	anchors := map[uint64]bool{}
	deadline := nanotime() + 5*anchorEvery + calibrateAfter
	for nanotime() < deadline {
		last = readTSC(t, &c, last, tol)
		anchors[c.tick.Load()] = true
	}
	if c.mult.Load() == 0 {
		t.Fatal("the clock never calibrated")
	}
	if len(anchors) < 4 { // the zero value, the calibration and at least two re-anchors
		t.Fatalf("saw %d anchors in %d ms, want re-anchoring every %d ms", len(anchors), (5*anchorEvery+calibrateAfter)/1_000_000, anchorEvery/1_000_000)
	}
}

// A clock found ahead of the monotonic clock keeps its reading and slows
// down until it has caught up.
func TestTSCClockAheadSlews(t *testing.T) {
	if !tscUsable(readClocksource()) {
		t.Skip("the kernel's clocksource is not the TSC")
	}
	var c tscClock
	for c.mult.Load() == 0 {
		c.now()
	}
	const ahead = 5000
	tick, ns := pair()
	c.publish(tick, ns+ahead, c.mult.Load())
	mult := c.mult.Load()
	last := c.now()
	if d := last - nanotime(); d < ahead/2 {
		t.Fatalf("the clock is %d ns ahead after publishing %d ahead", d, ahead)
	}
	for c.tick.Load() == tick {
		v := c.now()
		if v < last {
			t.Fatalf("went back: %d after %d", v, last)
		}
		last = v
	}
	if c.mult.Load() >= mult {
		t.Errorf("after re-anchoring ahead, ns per tick %d, want below %d", c.mult.Load(), mult)
	}
	// One interval of slewing brings it back within a microsecond or so.
	second := c.tick.Load()
	for c.tick.Load() == second {
		last = readTSC(t, &c, last, ahead+1000)
	}
	readTSC(t, &c, last, 1500)
}
