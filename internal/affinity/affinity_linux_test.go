package affinity

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestStrictSubset(t *testing.T) {
	set := func(cpus ...int) unix.CPUSet {
		var s unix.CPUSet
		for _, c := range cpus {
			s.Set(c)
		}
		return s
	}
	for _, c := range []struct {
		a, b unix.CPUSet
		want bool
	}{
		{set(0), set(0, 1), true},
		{set(1), set(0, 1), true},
		{set(0, 1), set(0, 1), false}, // inherited: not bound
		{set(2), set(0, 1), false},    // not within the parent's
		{set(0, 2), set(0, 1, 3), false},
		{set(70), set(0, 70, 100), true}, // beyond the first word
	} {
		if got := strictSubset(c.a, c.b); got != c.want {
			t.Errorf("strictSubset(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
