//go:build !linux

package collective

// launcherBound reports whether a launcher bound this process to CPUs of
// its own; elsewhere than Linux it cannot tell, and says no.
func launcherBound() bool { return false }
