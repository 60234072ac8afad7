//go:build !race

package flowtel

import (
	"sync/atomic"
	"unsafe"
)

// storeTail publishes the producer's tail with a plain store. On amd64 a
// store is a release (x86-TSO keeps it after every earlier load and store),
// and the call into assembly keeps the compiler from moving the records'
// stores past it. sync/atomic's Store is an XCHG, a full barrier that
// waits until it owns the line: with a collector reading tail from another
// core, every commit stalled on taking the line back. (The race detector
// cannot see this store, so race builds keep the atomic: tail_other.go.)
func (r *Ring) storeTail(t uint64) {
	storeRelease((*uint64)(unsafe.Pointer(&r.tail)), t)
}

// atomic.Uint64 is its one uint64 field; storeTail relies on it.
const _ = -(unsafe.Sizeof(atomic.Uint64{}) - 8)

//go:noescape
func storeRelease(p *uint64, v uint64)
