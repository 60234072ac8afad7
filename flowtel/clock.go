package flowtel

import (
	_ "unsafe" // for go:linkname
)

// nanotime is the runtime's CLOCK_MONOTONIC reading in nanoseconds. Unlike
// time.Now, it is the raw system-wide value, so two processes on one host
// read the same clock, and it costs one vDSO call with no wall-clock read.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// Monotonic returns the host's monotonic clock in nanoseconds.
func Monotonic() int64 { return monotonic() }

// Clock is a monotonic clock shifted onto a reference time base: the job's
// common clock, which is rank 0's. The offset is measured elsewhere (at
// bootstrap) and set here; the zero Clock reads the host's monotonic clock.
type Clock struct {
	offset int64      // added to the monotonic reading
	errNs  int64      // uncertainty of offset (half the best round trip)
	src    TimeSource // nil: the host's monotonic clock
}

// TimeSource is a monotonic nanosecond time source a Clock can read instead
// of the host's monotonic clock. Tests use it to inject a fake clock
// (flowteltest.FakeClock); production code never needs one.
type TimeSource interface {
	Nanotime() int64
}

// NewClockFrom returns a clock reading src (nil: the host's monotonic clock)
// offset by offsetNs, with errNs the uncertainty of that offset.
func NewClockFrom(src TimeSource, offsetNs, errNs int64) *Clock {
	return &Clock{offset: offsetNs, errNs: errNs, src: src}
}

// NewClock returns a clock offset by offsetNs from the host's monotonic clock,
// with errNs the measured uncertainty of that offset.
func NewClock(offsetNs, errNs int64) *Clock { return &Clock{offset: offsetNs, errNs: errNs} }

// Now returns the time on the common time base, in nanoseconds.
func (c *Clock) Now() int64 {
	if c == nil {
		return monotonic()
	}
	if c.src != nil {
		return c.src.Nanotime() + c.offset
	}
	return monotonic() + c.offset
}

// At returns the time on the common time base of mono, a reading of the
// host's monotonic clock (Monotonic). A clock that reads its own TimeSource
// reads it instead, since mono is not on that source's time base.
func (c *Clock) At(mono int64) int64 {
	if c == nil {
		return mono
	}
	if c.src != nil {
		return c.src.Nanotime() + c.offset
	}
	return mono + c.offset
}

// Offset returns the offset to the reference clock in nanoseconds.
func (c *Clock) Offset() int64 {
	if c == nil {
		return 0
	}
	return c.offset
}

// ErrorNs returns the uncertainty of the offset in nanoseconds.
func (c *Clock) ErrorNs() int64 {
	if c == nil {
		return 0
	}
	return c.errNs
}
