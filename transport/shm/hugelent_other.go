//go:build !linux

package shm

// AdviseSingleCopy does nothing where peers do not read by single copy.
func AdviseSingleCopy([]byte) bool { return false }
