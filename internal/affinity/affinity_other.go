//go:build !linux

package affinity

// LauncherBound reports whether a launcher bound this process to CPUs of
// its own; elsewhere than Linux it cannot tell, and says no.
func LauncherBound() bool { return false }
