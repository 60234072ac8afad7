package flowtel

import (
	"math/bits"
	"os"
	"strings"
	"sync/atomic"
)

// tscOK is whether the kernel keeps time with the TSC, read once.
var tscOK = tscUsable(readClocksource())

// rdtsc reads the time-stamp counter. It is not serialising: an event is
// stamped within a few dozen cycles of where it happened, which is far below
// what a record resolves.
func rdtsc() uint64

func init() { useClock(ClockAuto) }

// useClock reads the clock through the TSC for ClockAuto, only where the
// kernel itself keeps time with it: it has then checked that the counter is
// invariant and in step across CPUs.
func useClock(s ClockSource) { hostTSC.on.Store(s == ClockAuto && tscOK) }

// tscClock reads the host's monotonic clock through the CPU's time-stamp
// counter. A vDSO clock_gettime fences the counter read and walks the
// kernel's seqlock, which makes it a few times dearer than a bare RDTSC
// (BenchmarkClockNow), and a data-path event takes one or two readings,
// which is most of what telemetry adds to a small collective.
//
// The counter is converted with a (tick, ns, mult) anchor taken from a
// paired reading of both clocks and re-taken every anchorEvery, by whichever
// reader first notices it is due: the conversion follows CLOCK_MONOTONIC
// (NTP slew included) to within the error of one anchor interval, tens of
// nanoseconds, so records of processes reading their own counters, and code
// mixing Monotonic with the runtime's clock, still agree. A new anchor never
// moves the clock back: a clock found ahead keeps its reading and runs
// slower until it has caught up over the next interval.
//
// Readers never wait: while an anchor is rewritten, or before the first
// frequency estimate (the first calibrateAfter of the process), they read
// the monotonic clock instead.
type tscClock struct {
	on atomic.Bool

	seq   atomic.Uint64 // odd while the anchor below is written
	tick  atomic.Uint64 // counter at the anchor
	ns    atomic.Int64  // clock at the anchor
	mult  atomic.Uint64 // ns per tick, 32.32 fixed point; 0: not calibrated yet
	due   atomic.Uint64 // ticks after tick when the next anchor is due
	busy  atomic.Bool   // a reader is taking a new anchor
	start atomic.Int64  // monotonic clock at the first reading (0: none yet)
	t0    atomic.Uint64 // counter at the first reading
	prevT atomic.Uint64 // the last anchor's true pair, for the next
	prevN atomic.Int64  // frequency estimate
}

const (
	// calibrateAfter is the first baseline the frequency is measured over:
	// long enough that the paired readings' error, tens of nanoseconds,
	// is a few parts per million of it.
	calibrateAfter = 2_000_000 // ns
	// anchorEvery bounds how long the conversion runs on one estimate.
	anchorEvery = 10_000_000 // ns
	// maxSlewPPM is the largest rate correction, in parts per million, a
	// clock found ahead applies to catch up: 0.1%.
	maxSlewPPM = 1000
)

var hostTSC tscClock

// monotonic returns CLOCK_MONOTONIC in ns, through the TSC where usable.
func monotonic() int64 {
	if hostTSC.on.Load() {
		return hostTSC.now()
	}
	return nanotime()
}

func (c *tscClock) now() int64 {
	s := c.seq.Load()
	if s&1 == 1 {
		return nanotime()
	}
	tick, ns, mult, due := c.tick.Load(), c.ns.Load(), c.mult.Load(), c.due.Load()
	if c.seq.Load() != s || mult == 0 {
		return c.calibrate()
	}
	t := rdtsc()
	d := t - tick
	if t < tick {
		d = 0 // a CPU whose counter trails the anchor's by a few ticks
	}
	if d >= due {
		if v, ok := c.reanchor(t, tick, ns, mult); ok {
			return v
		}
	}
	return ns + ticksToNs(d, mult)
}

func ticksToNs(d, mult uint64) int64 {
	hi, lo := bits.Mul64(d, mult)
	return int64(hi<<32 | lo>>32)
}

// pair reads both clocks, returning the counter at the clock reading's
// midpoint: the narrowest of three tries, since a reading the thread was
// preempted in the middle of would put the midpoint anywhere.
func pair() (uint64, int64) {
	var t, w uint64
	var n int64
	for i := range 3 {
		a := rdtsc()
		m := nanotime()
		b := rdtsc()
		if i == 0 || b-a < w {
			t, n, w = a+(b-a)/2, m, b-a
		}
	}
	return t, n
}

// calibrate serves readers until the first frequency estimate, and makes it
// once calibrateAfter has passed since the first reading.
func (c *tscClock) calibrate() int64 {
	if c.mult.Load() != 0 || !c.busy.CompareAndSwap(false, true) {
		return nanotime()
	}
	defer c.busy.Store(false)
	t, n := pair()
	if c.start.Load() == 0 {
		c.t0.Store(t)
		c.start.Store(n)
		return n
	}
	t0, n0 := c.t0.Load(), c.start.Load()
	if n-n0 < calibrateAfter || t <= t0 {
		return n
	}
	mult := rate(t-t0, n-n0)
	c.publish(t, n, mult)
	return n
}

// rate returns ns per tick in 32.32 fixed point.
func rate(ticks uint64, ns int64) uint64 {
	hi, lo := bits.Mul64(uint64(ns), 1<<32)
	q, _ := bits.Div64(hi, lo, ticks)
	return q
}

// reanchor takes a new anchor at counter t (due since the one at tick),
// unless another reader is already at it.
func (c *tscClock) reanchor(t, tick uint64, ns int64, mult uint64) (int64, bool) {
	if !c.busy.CompareAndSwap(false, true) {
		return 0, false
	}
	defer c.busy.Store(false)
	if c.tick.Load() != tick {
		return 0, false // someone else re-anchored since this reader looked
	}
	tNow, nNow := pair()
	est := ns + ticksToNs(tNow-tick, mult)
	newMult := rate(tNow-c.prevT.Load(), nNow-c.prevN.Load())
	c.prevT.Store(tNow)
	c.prevN.Store(nNow)
	start := nNow
	// A stale anchor (nobody read the clock for two intervals) can have
	// drifted further, but no reading since is left to stay above.
	if ahead := est - nNow; ahead > 0 && tNow-tick < 2*c.due.Load() {
		// Keep the reading (never back) and slow down to meet the
		// monotonic clock at the next anchor.
		start = est
		slow := min(uint64(ahead)*1_000_000/anchorEvery, maxSlewPPM)
		newMult -= newMult / 1_000_000 * slow
	}
	c.publish(tNow, start, newMult)
	return start, true
}

func (c *tscClock) publish(t uint64, n int64, mult uint64) {
	c.seq.Add(1)
	if c.prevT.Load() == 0 {
		c.prevT.Store(t)
		c.prevN.Store(n)
	}
	c.tick.Store(t)
	c.ns.Store(n)
	c.mult.Store(mult)
	c.due.Store(uint64(anchorEvery) << 32 / max(mult, 1))
	c.seq.Add(1)
}

// tscUsable reports whether the TSC can be read for the clock, given the
// kernel's current clocksource.
func tscUsable(clocksource string) bool { return strings.TrimSpace(clocksource) == "tsc" }

func readClocksource() string {
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	if err != nil {
		return ""
	}
	return string(b)
}
