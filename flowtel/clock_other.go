//go:build !amd64

package flowtel

// monotonic returns CLOCK_MONOTONIC in ns (the TSC path is amd64 only).
func monotonic() int64 { return nanotime() }

// useClock has no choice to make here.
func useClock(ClockSource) {}
