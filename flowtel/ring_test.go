package flowtel

import (
	"fmt"
	"testing"
	"time"
)

func rec(seq uint64) Record {
	return Record{TsNs: int64(seq) + 1, CollSeq: seq, Kind: KindWRPost, Rank: 3}
}

func TestNewRingCapacity(t *testing.T) {
	for _, tc := range []struct {
		cap int
		ok  bool
	}{{0, false}, {1, false}, {2, true}, {3, false}, {4, true}, {1000, false}, {1024, true}, {-8, false}} {
		r, err := NewRing(tc.cap)
		if (err == nil) != tc.ok {
			t.Errorf("NewRing(%d): err = %v, want ok=%v", tc.cap, err, tc.ok)
		}
		if err == nil && r.Cap() != tc.cap {
			t.Errorf("NewRing(%d).Cap() = %d", tc.cap, r.Cap())
		}
	}
}

// TestRingWraparound pushes and drains in uneven steps so the read and write
// positions wrap many times and Drain's copy splits at the end of the buffer.
func TestRingWraparound(t *testing.T) {
	for _, tc := range []struct {
		name             string
		cap, push, drain int
	}{
		{"cap2", 2, 1, 1},
		{"cap4-push3-drain2", 4, 3, 2},
		{"cap8-push5-drain8", 8, 5, 8},
		{"cap8-push7-drain3", 8, 7, 3},
		{"cap16-push16-drain5", 16, 16, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := NewRing(tc.cap)
			dst := make([]Record, tc.drain)
			var next, want uint64
			for round := 0; round < 100; round++ {
				for i := 0; i < tc.push && r.Len() < tc.cap; i++ {
					x := rec(next)
					if !r.Push(&x) {
						t.Fatalf("round %d: push %d failed with Len %d", round, next, r.Len())
					}
					next++
				}
				n := r.Drain(dst)
				for _, got := range dst[:n] {
					if got.CollSeq != want || got.Kind != KindWRPost {
						t.Fatalf("round %d: got %v, want seq %d", round, got, want)
					}
					want++
				}
			}
			for n := r.Drain(dst); n > 0; n = r.Drain(dst) {
				for _, got := range dst[:n] {
					if got.CollSeq != want {
						t.Fatalf("final: got seq %d, want %d", got.CollSeq, want)
					}
					want++
				}
			}
			if want != next || r.Dropped() != 0 {
				t.Fatalf("drained %d of %d, dropped %d", want, next, r.Dropped())
			}
			if next < uint64(3*tc.cap) {
				t.Fatalf("only %d records pushed; the ring did not wrap", next)
			}
		})
	}
}

// TestRingFullDropsAndLost checks that a full ring drops and counts, and that
// the loss shows up in order as one KindLost record before the next record
// that fits.
func TestRingFullDropsAndLost(t *testing.T) {
	type step struct {
		push  int // records to push (seqs continue)
		drain int // then drain this many
	}
	for _, tc := range []struct {
		name    string
		cap     int
		steps   []step
		want    []any // uint64: a record's seq; lost(n): a KindLost record
		dropped uint64
	}{
		{
			name:  "no loss",
			cap:   4,
			steps: []step{{push: 4, drain: 4}},
			want:  []any{uint64(0), uint64(1), uint64(2), uint64(3)},
		},
		{
			name:    "overflow then one more",
			cap:     4,
			steps:   []step{{push: 6, drain: 4}, {push: 1, drain: 4}},
			want:    []any{uint64(0), uint64(1), uint64(2), uint64(3), lost(2), uint64(6)},
			dropped: 2,
		},
		{
			name: "lost record needs two slots",
			cap:  4,
			// After 0..3 fill the ring and 4 drops, draining one leaves one
			// slot: the lost record and 5 need two, so 5 drops too.
			steps:   []step{{push: 5, drain: 1}, {push: 1, drain: 0}, {push: 0, drain: 4}, {push: 1, drain: 4}},
			want:    []any{uint64(0), uint64(1), uint64(2), uint64(3), lost(2), uint64(6)},
			dropped: 2,
		},
		{
			name:  "two separate losses",
			cap:   2,
			steps: []step{{push: 3, drain: 2}, {push: 3, drain: 2}, {push: 1, drain: 2}},
			// seq 2 drops; lost(1)+3 then fill the ring, so 4 and 5 drop.
			want:    []any{uint64(0), uint64(1), lost(1), uint64(3), lost(2), uint64(6)},
			dropped: 3,
		},
		{
			name:    "loss not yet reported",
			cap:     2,
			steps:   []step{{push: 5, drain: 2}},
			want:    []any{uint64(0), uint64(1)},
			dropped: 3,
		},
	} {
		// Every case twice: records pushed one by one, and written in place
		// (Reserve) and published once per step (Commit).
		for _, inPlace := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/in-place=%v", tc.name, inPlace), func(t *testing.T) {
				r, _ := NewRing(tc.cap)
				var got []Record
				var seq uint64
				for _, s := range tc.steps {
					for range s.push {
						x := rec(seq)
						if !inPlace {
							r.Push(&x)
						} else if p := r.Reserve(); p != nil {
							*p = x
						}
						seq++
					}
					if inPlace {
						r.Commit()
					}
					dst := make([]Record, s.drain)
					n := r.Drain(dst)
					got = append(got, dst[:n]...)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("got %d records %v, want %d", len(got), got, len(tc.want))
				}
				var lostSum uint64
				for i, w := range tc.want {
					switch w := w.(type) {
					case uint64:
						if got[i].Kind != KindWRPost || got[i].CollSeq != w {
							t.Errorf("record %d: got %v, want seq %d", i, got[i], w)
						}
					case lost:
						if got[i].Kind != KindLost || got[i].Bytes != uint64(w) {
							t.Errorf("record %d: got %v, want lost(%d)", i, got[i], w)
						}
						if got[i].Rank != 3 || got[i].Peer != -1 {
							t.Errorf("lost record %d: rank %d peer %d, want 3 and -1", i, got[i].Rank, got[i].Peer)
						}
						if got[i].TsNs != got[i+1].TsNs {
							t.Errorf("lost record %d: ts %d, want the next record's %d", i, got[i].TsNs, got[i+1].TsNs)
						}
						lostSum += uint64(w)
					}
				}
				if r.Dropped() != tc.dropped {
					t.Errorf("Dropped() = %d, want %d", r.Dropped(), tc.dropped)
				}
				if lostSum > r.Dropped() {
					t.Errorf("in-band loss %d exceeds Dropped() %d", lostSum, r.Dropped())
				}
			})
		}
	}
}

type lost uint64

// filled is record seq with every field its own, so that a record the
// consumer sees before all its stores landed does not pass for it.
func filled(seq uint64) Record {
	return Record{TsNs: int64(seq) + 1, CollSeq: seq, WrID: seq * 3, Bytes: seq * 5, Rank: 3, Peer: int32(seq % 7),
		QP: uint32(seq), Comm: uint32(seq >> 3), Depth: uint32(seq % 11), Step: uint32(seq % 13), Channel: uint16(seq),
		Kind: KindWRPost, Status: StatusOK, Op: Op(seq), Algo: Algorithm(seq >> 8), Dtype: Datatype(seq >> 16), Path: Path(seq >> 24)}
}

// TestRingConcurrent runs a producer and a consumer on a small ring (under
// the race detector in make test's race pass, and without it, where amd64
// publishes with a plain store: tail_amd64.go) and checks the sequence:
// every record arrives once, whole, in order, and every gap is exactly
// covered by a KindLost record, except the tail the producer never got to
// report, which Dropped() accounts for. The producer pushes, or fills
// reserved slots in place field by field and commits them in twos, as the
// collective's mailbox path does.
func TestRingConcurrent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cap     int
		n       uint64
		drain   int
		reserve bool
	}{
		{"tiny", 2, 20000, 1, false},
		{"small", 64, 100000, 7, false},
		{"large", 4096, 200000, 1024, false},
		{"small-reserved", 64, 100000, 7, true},
		{"large-reserved", 4096, 200000, 1024, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := NewRing(tc.cap)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := range tc.n {
					x := filled(i)
					if !tc.reserve {
						r.Push(&x)
						continue
					}
					if s := r.Reserve(); s != nil {
						s.TsNs, s.CollSeq, s.WrID, s.Bytes, s.Rank, s.Peer = x.TsNs, x.CollSeq, x.WrID, x.Bytes, x.Rank, x.Peer
						s.QP, s.Comm, s.Depth, s.Step, s.Channel = x.QP, x.Comm, x.Depth, x.Step, x.Channel
						s.Kind, s.Status, s.Op, s.Algo, s.Dtype, s.Path = x.Kind, x.Status, x.Op, x.Algo, x.Dtype, x.Path
					}
					if i%2 == 1 || i == tc.n-1 {
						r.Commit()
					}
				}
			}()
			dst := make([]Record, tc.drain)
			var want, got, lostSum uint64
			deadline := time.Now().Add(30 * time.Second)
			finished := false
			for {
				n := r.Drain(dst)
				for _, x := range dst[:n] {
					if x.Kind == KindLost {
						if x.Bytes == 0 {
							t.Fatalf("KindLost with zero count")
						}
						lostSum += x.Bytes
						want += x.Bytes
						continue
					}
					if x.CollSeq != want {
						t.Fatalf("got seq %d, want %d (lost so far %d)", x.CollSeq, want, lostSum)
					}
					if x != filled(want) {
						t.Fatalf("record %d arrived as %+v, want %+v", want, x, filled(want))
					}
					want++
					got++
				}
				if n == 0 {
					if finished {
						break
					}
					select {
					case <-done:
						finished = true // one more pass drains what is left
					default:
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("consumer did not finish: got %d of %d", got, tc.n)
				}
			}
			if got+r.Dropped() != tc.n {
				t.Fatalf("received %d + dropped %d != pushed %d", got, r.Dropped(), tc.n)
			}
			if lostSum > r.Dropped() {
				t.Fatalf("in-band loss %d > Dropped() %d", lostSum, r.Dropped())
			}
		})
	}
}

func TestRingWakeAtHalf(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cap       int
		push      int
		drainAt   int // drain everything after this many pushes (0: never)
		wantWakes int
	}{
		{"below half", 8, 3, 0, 0},
		{"at half", 8, 4, 0, 1},
		{"full", 8, 8, 0, 1},
		{"overflowing", 8, 20, 0, 1},
		{"drained below half", 8, 8, 5, 1},
		{"twice with drain", 8, 16, 5, 2},
		{"cap2", 2, 1, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := NewRing(tc.cap)
			wakes := 0
			r.wake = func() { wakes++ }
			dst := make([]Record, tc.cap)
			for i := range tc.push {
				if tc.drainAt > 0 && i == tc.drainAt {
					r.Drain(dst)
				}
				x := rec(uint64(i))
				r.Push(&x)
			}
			if wakes != tc.wantWakes {
				t.Fatalf("wakes = %d, want %d", wakes, tc.wantWakes)
			}
		})
	}
}

// TestRingWakeWithLost checks the wake still fires when a KindLost record and
// a record are written together across the half-full mark.
func TestRingWakeWithLost(t *testing.T) {
	r, _ := NewRing(8)
	wakes := 0
	r.wake = func() { wakes++ }
	for i := range 9 { // 8 fit, 1 dropped
		x := rec(uint64(i))
		r.Push(&x)
	}
	dst := make([]Record, 5)
	r.Drain(dst) // 3 left: lost + record make 5 >= 4, crossing half at once
	wakes = 0
	x := rec(9)
	r.Push(&x)
	if wakes != 1 {
		t.Fatalf("wakes = %d, want 1", wakes)
	}
}

// Reserved records reach the consumer at Commit, not before.
func TestRingReserveCommit(t *testing.T) {
	r, _ := NewRing(8)
	for i := range 3 {
		p := r.Reserve()
		if p == nil {
			t.Fatalf("Reserve %d on an empty ring returned nil", i)
		}
		*p = rec(uint64(i))
	}
	dst := make([]Record, 8)
	if n := r.Drain(dst); n != 0 {
		t.Fatalf("drained %d records before Commit, want 0", n)
	}
	r.Commit()
	if n := r.Drain(dst); n != 3 || dst[2].CollSeq != 2 {
		t.Fatalf("drained %d records after Commit (last seq %d), want 3 ending with seq 2", n, dst[max(n-1, 0)].CollSeq)
	}
	x := rec(3)
	r.Push(&x) // Push and Reserve share the producer's position
	if n := r.Drain(dst); n != 1 || dst[0].CollSeq != 3 {
		t.Fatalf("after a Push: drained %d (seq %d), want 1 with seq 3", n, dst[0].CollSeq)
	}
}
