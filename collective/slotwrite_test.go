package collective

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// slotWrites keeps the way that won most rounds of its measurement, ties
// going in slotWay's order, per size class, and measures again after
// reprobeEvery calls; it measures lending only where the table's calls
// may lend and this call could; a way that lost each of its first rounds
// clearly is measured no more; a large class measures in shorter blocks.
func TestSlotWritesChoose(t *testing.T) {
	for _, n := range []int{64 << 10, 4 << 20} { // blocks of 4 calls, of 2
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) { slotWritesChoose(t, n) })
	}
}

func slotWritesChoose(t *testing.T, n int) {
	flat := func(ns int64) func(int) int64 { return func(int) int64 { return ns } }
	five, two, eight := probeRounds-3, dropAfter, probeRounds
	for _, tc := range []struct {
		name     string
		lends    bool                // the table's calls may lend
		canLend  func(call int) bool // nil: every call can
		ns       [nWays]func(round int) int64
		want     slotWay
		rounds   [nWays]int // rounds each way was measured: a leader no one can catch ends it
		failEach int        // every failEach-th call fails (not reported); 0: none
	}{
		{name: "plain faster", ns: [nWays]func(int) int64{flat(100), flat(1), flat(80)}, want: wayPlain, rounds: [nWays]int{five, 0, five}},
		{name: "stream faster", ns: [nWays]func(int) int64{flat(100), flat(1), flat(120)}, want: wayStream, rounds: [nWays]int{five, 0, five}},
		{name: "plain clearly faster", ns: [nWays]func(int) int64{flat(100), flat(1), flat(50)}, want: wayPlain, rounds: [nWays]int{two, 0, two}},
		{name: "tie", ns: [nWays]func(int) int64{flat(100), flat(1), func(r int) int64 { return 80 + int64(r%2)*40 }}, want: wayStream, rounds: [nWays]int{eight, 0, eight}},
		{name: "plain faster, calls failing", ns: [nWays]func(int) int64{flat(100), flat(1), flat(80)}, want: wayPlain, failEach: 3, rounds: [nWays]int{five, 0, five}},
		{name: "lend clearly faster", lends: true, ns: [nWays]func(int) int64{flat(100), flat(60), flat(80)}, want: wayLend, rounds: [nWays]int{two, two, two}},
		{name: "lend faster, one block preempted", lends: true, ns: [nWays]func(int) int64{flat(100), func(r int) int64 { return 60 + int64(max(1-r, 0))*140 }, flat(100)}, want: wayLend, rounds: [nWays]int{6, 6, 6}},
		{name: "plain faster than lending", lends: true, ns: [nWays]func(int) int64{flat(100), flat(90), flat(80)}, want: wayPlain, rounds: [nWays]int{five, five, five}},
		// Streaming lost both first rounds clearly and is dropped; lending
		// and plain go on, each winning every other round.
		{name: "lend and plain tie", lends: true, ns: [nWays]func(int) int64{flat(100), flat(70), func(r int) int64 { return 50 + int64(r%2)*40 }}, want: wayLend, rounds: [nWays]int{two, eight, eight}},
		{name: "peers cannot read", lends: true, canLend: func(int) bool { return false }, ns: [nWays]func(int) int64{flat(100), flat(1), flat(80)}, want: wayPlain, rounds: [nWays]int{five, 0, five}},
		{name: "a call that cannot lend", lends: true, canLend: func(call int) bool { return call%5 != 0 }, ns: [nWays]func(int) int64{flat(100), flat(60), flat(80)}, want: wayLend, rounds: [nWays]int{two, two, two}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := slotWrites{lends: tc.lends}
			can := tc.canLend
			if can == nil {
				can = func(int) bool { return true }
			}
			calls := 0
			var counted [nWays]int
			for !w.class[slotClassOf(n)].chosen {
				if calls > 10*measureCalls(3, n) {
					t.Fatalf("no choice after %d calls", calls)
				}
				calls++
				lend := can(calls)
				way, timed := w.way(n, lend)
				if way == wayLend && !lend {
					t.Fatalf("call %d lends where it cannot", calls)
				}
				if !timed {
					if lend || !tc.lends {
						t.Fatalf("call %d of the measurement not timed", calls)
					}
					continue
				}
				if tc.failEach > 0 && calls%tc.failEach == 0 {
					continue
				}
				w.done(n, tc.ns[way](counted[way]/int(probeBlockFor(n))))
				counted[way]++
			}
			for way, got := range counted {
				if want := int(probeBlockFor(n)) * tc.rounds[way]; got != want {
					t.Errorf("measured %d calls of way %d, want %d", got, way, want)
				}
			}
			for i := range reprobeEvery {
				way, timed := w.way(n, true)
				if timed || way != tc.want {
					t.Fatalf("call %d after the choice: way %d timed %v, want way %d untimed", i, way, timed, tc.want)
				}
			}
			if _, timed := w.way(n, true); !timed {
				t.Fatalf("no new measurement after %d calls", reprobeEvery)
			}
			// The other classes are still measuring.
			if _, timed := w.way(streamSlotMin, true); !timed {
				t.Fatal("another size class shares the choice")
			}
		})
	}
}

// A class's first call adopts the nearest smaller class's choice, and the
// class measures itself after inheritCheck calls.
func TestSlotWritesInherit(t *testing.T) {
	w := slotWrites{lends: true}
	w.class[1] = slotClass{way: wayLend, chosen: true}
	big := streamSlotMin << 5
	for i := range inheritCheck {
		if way, timed := w.way(big, true); way != wayLend || timed {
			t.Fatalf("call %d: way %d timed %v, want lending untimed (class 1's choice)", i, way, timed)
		}
	}
	if _, timed := w.way(big, true); !timed {
		t.Fatalf("no measurement of its own after %d calls", inheritCheck)
	}
	// Nothing smaller chose: the class measures at once.
	if _, timed := w.way(streamSlotMin, true); !timed {
		t.Fatal("the smallest class did not measure")
	}
}

// A class that chose to lend streams its slots in a call that cannot lend.
func TestSlotWritesLendChosenCannot(t *testing.T) {
	w := slotWrites{lends: true}
	w.class[0] = slotClass{way: wayLend, chosen: true}
	if way, timed := w.way(streamSlotMin, false); way != wayStream || timed {
		t.Fatalf("way %d timed %v, want streaming untimed", way, timed)
	}
	if way, _ := w.way(streamSlotMin, true); way != wayLend {
		t.Fatalf("way %d, want lending", way)
	}
}

// Measurements of calls from 2 MiB run blocks of 2 calls, below of 4.
func TestProbeBlockFor(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want uint8
	}{{streamSlotMin, 4}, {2<<20 - 1, 4}, {2 << 20, 2}, {64 << 20, 2}} {
		if got := probeBlockFor(tc.n); got != tc.want {
			t.Errorf("probeBlockFor(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

func TestSlotClassOf(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{streamSlotMin, 0}, {2*streamSlotMin - 1, 0}, {2 * streamSlotMin, 1},
		{64 << 10, 2}, {256 << 10, 4}, {1 << 30, slotClasses - 1}, {0, 0},
	} {
		if got := slotClassOf(tc.n); got != tc.want {
			t.Errorf("slotClassOf(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// 2 ranks over shm measure every way of handing over their data
// (all-gather, broadcast, and both sliced beyond a slot) with every result
// whole, and reach a choice, the sliced classes one of their own after
// adopting the smaller class's.
func TestSlotWritesBothWaysOverShm(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	comms := newLocal(t, 2, WithTransport("shm"))
	if comms[0].small == nil {
		t.Fatal("a communicator joined over shm has no mailbox path")
	}
	for _, tc := range []struct {
		op    Op
		bytes int
	}{
		{OpAllGather, 64 << 10},
		{OpBroadcast, 64 << 10},
		{OpAllGather, slotMax + 4096}, // sliced
		{OpBroadcast, slotMax + 4096},
	} {
		n := tc.bytes / 4
		// A larger class first adopts a smaller one's choice, then
		// measures its own.
		for call := range inheritCheck + measureCalls(3, tc.bytes) {
			err := runOnAll(comms, func(c *Comm) error {
				fill := func(b []float32, rank int) {
					for i := range b {
						b[i] = float32(rank*1000003 + call*7919 + i)
					}
				}
				switch tc.op {
				case OpAllGather:
					in, out := make([]float32, n), make([]float32, 2*n)
					fill(in, c.Rank())
					if err := c.AllGather(ctx, Buf(in), Buf(out)); err != nil {
						return err
					}
					for r := range 2 {
						want := make([]float32, n)
						fill(want, r)
						if !slices.Equal(out[r*n:(r+1)*n], want) {
							return fmt.Errorf("call %d: rank %d's block wrong", call, r)
						}
					}
				case OpBroadcast:
					buf, want := make([]float32, n), make([]float32, n)
					fill(want, 1)
					if c.Rank() == 1 {
						copy(buf, want)
					}
					if err := c.Broadcast(ctx, Buf(buf), Buf(buf), 1); err != nil {
						return err
					}
					if !slices.Equal(buf, want) {
						return fmt.Errorf("call %d: broadcast wrong", call)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%v of %d bytes a rank: %v", tc.op, tc.bytes, err)
			}
		}
		// The root alone writes a broadcast's slots (this one in place).
		writer := comms[0]
		if tc.op == OpBroadcast {
			writer = comms[1]
		}
		if cl := writer.small.writesFor(tc.op, tc.op == OpBroadcast).class[slotClassOf(tc.bytes)]; !cl.chosen || cl.calls >= reprobeEvery-inheritCheck {
			t.Errorf("%v of %d bytes a rank: rank %d measured no choice of its own in %d calls", tc.op, tc.bytes, writer.Rank(), inheritCheck+measureCalls(3, tc.bytes))
		}
	}
}

// Ranks that lend their data (Mailbox.Lend), beside ranks that write their
// slots, give every result whole: all-gathers and broadcasts, whole and
// sliced, in place and apart, on 2 and 3 ranks; and the readers did read
// the loans. TestLendMultiProcess runs the same across processes.
func TestSlotWritesLentOverShm(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	for _, tc := range lendCases {
		t.Run(tc.name, func(t *testing.T) {
			comms := newLocal(t, len(tc.ways), WithTransport("shm"))
			if err := runOnAll(comms, func(c *Comm) error { return lendCalls(ctx, c, tc.bytes, tc.ways) }); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// lendCases are the ways each rank hands its data over (by rank) in
// lendCalls.
var lendCases = []struct {
	name  string
	bytes int // a rank's block, or the broadcast's buffer
	ways  []slotWay
}{
	{"2 ranks both lend", 64 << 10, []slotWay{wayLend, wayLend}},
	{"2 ranks one lends", 64 << 10, []slotWay{wayLend, wayStream}},
	{"2 ranks the other lends", 64 << 10, []slotWay{wayPlain, wayLend}},
	{"2 ranks sliced both lend", 3*slotMax + 4096, []slotWay{wayLend, wayLend}},
	{"2 ranks sliced one lends", 3*slotMax + 4096, []slotWay{wayStream, wayLend}},
	{"3 ranks", 24 << 10, []slotWay{wayLend, wayPlain, wayLend}},
}

// lendCalls makes c's rank hand its data over ways[rank] in every
// all-gather and broadcast, runs them in place and apart with bytes a
// rank (the broadcast's buffer), checks every result, and that this rank
// read the loans of the ranks that lent.
func lendCalls(ctx context.Context, c *Comm, bytes int, ways []slotWay) error {
	ranks := c.Size()
	if c.small == nil {
		return errors.New("a communicator joined over shm has no mailbox path")
	}
	if !c.small.peersReadMe() {
		return fmt.Errorf("rank %d: its peers cannot read it", c.Rank())
	}
	for _, op := range []Op{OpAllGather, OpBroadcast} {
		for _, inPlace := range []bool{false, true} {
			for i := range slotClasses {
				c.small.writesFor(op, inPlace).class[i] = slotClass{way: ways[c.Rank()], chosen: true}
			}
		}
	}
	n := bytes / 4
	for call := range 6 {
		inPlace := call%2 == 1
		op := OpAllGather
		if call >= 4 {
			op = OpBroadcast
		}
		root := call % ranks
		fill := func(b []float32, rank int) {
			for i := range b {
				b[i] = float32(rank*1000003 + call*7919 + i)
			}
		}
		if op == OpBroadcast {
			buf, want := make([]float32, n), make([]float32, n)
			fill(want, root)
			in := buf
			if c.Rank() == root {
				copy(buf, want)
				if !inPlace {
					in = slices.Clone(want)
				}
			}
			if err := c.Broadcast(ctx, Buf(in), Buf(buf), root); err != nil {
				return err
			}
			if !slices.Equal(buf, want) {
				return fmt.Errorf("rank %d, call %d: broadcast from %d wrong", c.Rank(), call, root)
			}
		} else {
			out := make([]float32, ranks*n)
			in := make([]float32, n)
			if inPlace {
				in = out[c.Rank()*n : (c.Rank()+1)*n]
			}
			fill(in, c.Rank())
			if err := c.AllGather(ctx, Buf(in), Buf(out)); err != nil {
				return err
			}
			for r := range ranks {
				want := make([]float32, n)
				fill(want, r)
				if !slices.Equal(out[r*n:(r+1)*n], want) {
					return fmt.Errorf("rank %d, call %d (in place %v): rank %d's block wrong", c.Rank(), call, inPlace, r)
				}
			}
		}
		for p := range ranks {
			writes := op == OpAllGather || p == root
			if want := writes && p != c.Rank() && ways[p] == wayLend; c.small.lent[p] != want {
				return fmt.Errorf("%v call %d: rank %d read rank %d's loan: %v, want %v", op, call, c.Rank(), p, c.small.lent[p], want)
			}
		}
	}
	return nil
}
