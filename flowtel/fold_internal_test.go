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
	if n != len(want) || s.n != n {
		t.Errorf("%d slots used, %d counted, want %d", n, s.n, len(want))
	}
}

// TestFoldRemembersEndedCalls checks that a late part of an ended call is
// counted, not opened again, whether the call ended in its rank's order
// (its run) or out of it (the set, until the run reaches it), and that a
// call never seen below the run still opens.
func TestFoldRemembersEndedCalls(t *testing.T) {
	f := NewFold(NopHandler{}, FoldConfig{GapNs: -1})
	call := func(kind Kind, seq uint64) {
		f.AddRecord(&Record{TsNs: int64(seq), Kind: kind, Rank: 0, Peer: -1, CollSeq: seq, Op: OpAllReduce, Step: 1})
	}
	for _, seq := range []uint64{10, 11, 12, 14} {
		call(KindCollBegin, seq)
		call(KindCollEnd, seq)
	}
	if f.recent.n != 1 {
		t.Fatalf("seq 14 ended out of order: %d calls in the set, want 1", f.recent.n)
	}
	call(KindCollBegin, 13) // below the highest opened, never seen: a call
	if f.OpenCalls() != 1 {
		t.Fatalf("seq 13 did not open: %d open", f.OpenCalls())
	}
	call(KindCollEnd, 13)
	if run := f.lastRk.ended[0]; f.recent.n != 0 || run.from != 10 || run.to != 14 {
		t.Errorf("after seq 13: run %+v, %d in the set; want 10..14 and none", run, f.recent.n)
	}
	for _, seq := range []uint64{10, 12, 13, 14} {
		call(KindCollEnd, seq)
	}
	call(KindCollBegin, 9) // below the run, never seen: a call
	if st := f.Stats(); st.LateCalls != 4 || f.OpenCalls() != 1 {
		t.Errorf("late %d, open %d; want 4 late and seq 9 open", st.LateCalls, f.OpenCalls())
	}
}
