//go:build !race

// The race detector maps shadow memory as the ring is written, which
// faults pages of its own.

package flowtel

import (
	"syscall"
	"testing"
)

func minorFaults(t *testing.T) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return int64(ru.Minflt) // int32 on 32-bit targets
}

// The ring's first lap takes no page faults: NewRing maps its pages, so a
// producer does not fault every 64 records on the data path.
func TestRingFirstLapNoFaults(t *testing.T) {
	const capacity = 1 << 15 // 2 MiB: 512 pages of 4 KiB
	r, err := NewRing(capacity)
	if err != nil {
		t.Fatal(err)
	}
	rec := Record{Kind: KindWRPost, TsNs: 1}
	before := minorFaults(t)
	for range capacity {
		r.Push(&rec)
	}
	// Other goroutines (the runtime's, the test framework's) may fault a
	// few pages meanwhile; an untouched ring would add about 512.
	if got := minorFaults(t) - before; got > 64 {
		t.Errorf("%d page faults while filling the ring once", got)
	}
	if r.Len() != capacity {
		t.Fatalf("ring holds %d records, want %d", r.Len(), capacity)
	}
}
