package collective

import "testing"

func TestSpinFits(t *testing.T) {
	for _, c := range []struct {
		live, procs, cpus int
		bound, want       bool
	}{
		{1, 2, 2, false, true},  // 2 unbound ranks on 2 cores
		{1, 4, 2, false, false}, // 4 unbound ranks on 2 cores
		{1, 2, 1, true, true},   // 2 ranks bound to a core each
		{2, 1, 1, true, false},  // 2 engines in a process bound to one core
		{1, 2, 1, false, false}, // 2 ranks sharing one core, nobody bound them
	} {
		if got := spinFits(c.live, c.procs, c.cpus, c.bound); got != c.want {
			t.Errorf("spinFits(live %d, procs %d, cpus %d, bound %v) = %v, want %v", c.live, c.procs, c.cpus, c.bound, got, c.want)
		}
	}
}
