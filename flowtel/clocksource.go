package flowtel

import (
	"fmt"
	"strings"
)

// EnvClock names the clock records are stamped with: "tsc" (the default)
// reads the time-stamp counter on amd64 where the kernel keeps time with
// it, "monotonic" the vDSO clock. The program's configuration step passes
// its value to ParseClockSource and the result to UseClockSource.
const EnvClock = "VCCL_CLOCK"

// ClockSource is how this process reads CLOCK_MONOTONIC for records.
type ClockSource uint8

const (
	// ClockAuto reads the time-stamp counter where the kernel keeps time
	// with it (amd64), else the vDSO clock.
	ClockAuto ClockSource = iota
	// ClockMonotonic always reads the vDSO clock.
	ClockMonotonic
)

// ParseClockSource parses a VCCL_CLOCK value: "" or "tsc" is ClockAuto,
// "monotonic" ClockMonotonic; anything else is an error naming the variable.
func ParseClockSource(v string) (ClockSource, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "tsc":
		return ClockAuto, nil
	case "monotonic":
		return ClockMonotonic, nil
	}
	return ClockAuto, fmt.Errorf("flowtel: %s=%q: want tsc or monotonic", EnvClock, v)
}

// UseClockSource sets how the process stamps records from now on. The
// choice is process-wide; make it before the first record, since the two
// clocks may differ by tens of nanoseconds and a switch between records
// could stamp a later one earlier.
func UseClockSource(s ClockSource) { useClock(s) }
