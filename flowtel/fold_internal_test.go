package flowtel

import (
	"math/rand/v2"
	"testing"
)

// TestCallSet checks the fold's set of recently ended calls against a map,
// through adds and removes that wrap around its slots and collide.
func TestCallSet(t *testing.T) {
	var s callSet
	want := map[foldCallKey]bool{}
	var fifo []foldCallKey
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() foldCallKey {
		// Few comms and ranks, seqs close together: the keys of a job.
		return foldCallKey{comm: uint32(rng.IntN(3)), rank: int32(rng.IntN(8)), seq: uint64(rng.IntN(3 * recentCalls))}
	}
	for i := range 200_000 {
		if k := key(); !want[k] && len(fifo) < recentCalls && rng.IntN(3) > 0 {
			s.add(k)
			want[k] = true
			fifo = append(fifo, k)
		} else if len(fifo) > 0 {
			j := rng.IntN(len(fifo))
			k := fifo[j]
			fifo[j] = fifo[len(fifo)-1]
			fifo = fifo[:len(fifo)-1]
			s.remove(k)
			delete(want, k)
		}
		if k := key(); s.has(k) != want[k] {
			t.Fatalf("op %d: has(%v) = %v, want %v", i, k, s.has(k), want[k])
		}
	}
	for k := range want {
		if !s.has(k) {
			t.Fatalf("%v lost", k)
		}
	}
	n := 0
	for _, sl := range s.slots {
		if sl.used {
			n++
		}
	}
	if n != len(want) {
		t.Errorf("%d slots used, want %d", n, len(want))
	}
}
