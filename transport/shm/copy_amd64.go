package shm

import "unsafe"

//go:noescape
func copyNT(dst, src unsafe.Pointer, n uintptr)

// copyStream copies src into dst (at least as long) like copy, but writes
// past the caches (non-temporal stores, SSE2): a line that is only
// overwritten is then not read from memory first. For destinations that
// nothing reads soon (transport.WR.Stream): filling a destination larger
// than the caches, a plain copy reads each line before overwriting it,
// which a non-temporal store skips (BenchmarkCopy4MiB).
func copyStream(dst, src []byte) {
	dst = dst[:len(src)]
	h := int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst))) & 15)
	if h >= len(src) {
		copy(dst, src)
		return
	}
	copy(dst[:h], src[:h])
	n := (len(src) - h) &^ 63
	if n > 0 {
		copyNT(unsafe.Pointer(&dst[h]), unsafe.Pointer(&src[h]), uintptr(n))
	}
	copy(dst[h+n:], src[h+n:])
}
