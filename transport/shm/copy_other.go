//go:build !amd64

package shm

// copyStream is copy where no non-temporal copy is written (see
// copy_amd64.go).
func copyStream(dst, src []byte) { copy(dst, src) }
