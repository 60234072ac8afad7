//go:build !amd64 || race

package flowtel

// storeTail publishes the producer's tail (tail_amd64.go says why amd64
// differs).
func (r *Ring) storeTail(t uint64) { r.tail.Store(t) }
