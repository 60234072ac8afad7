package affinity

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// LauncherBound reports whether a launcher bound this process to CPUs of
// its own: its affinity mask is a strict subset of its parent's. vcclrun
// (when the ranks fit), mpirun (by default for up to 2 ranks a node) and
// srun --cpu-bind narrow each rank to a share of what they may use
// themselves; a rank started without binding inherits its parent's mask.
// The answer is read once: a job's mask does not change while it runs, and
// the engines ask it whenever they decide whether to spin.
func LauncherBound() bool { return launcherBound() }

var launcherBound = sync.OnceValue(func() bool {
	var own, parent unix.CPUSet
	if unix.SchedGetaffinity(0, &own) != nil || unix.SchedGetaffinity(os.Getppid(), &parent) != nil {
		return false
	}
	return strictSubset(own, parent)
})

// strictSubset reports whether every CPU of a is in b and b has more.
func strictSubset(a, b unix.CPUSet) bool {
	for i := range a {
		if a[i]&^b[i] != 0 {
			return false
		}
	}
	return a.Count() < b.Count()
}
