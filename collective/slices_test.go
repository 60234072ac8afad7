package collective

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// crowded makes the engines of the test behave as where ranks outnumber
// cores, on any machine.
func crowded(t *testing.T) { raiseForTest(t, &crowdedForTests) }

// runByMailbox runs mc on every rank of comms, checks its result, and
// returns the mailbox ticket it took; it fails the test where mc took
// none.
func runByMailbox(ctx context.Context, t *testing.T, comms []*Comm, mc matrixCase) uint32 {
	t.Helper()
	before := mailboxCalls(comms[0])
	if err := runOnAll(comms, func(c *Comm) error { return runCase(ctx, c, mc) }); err != nil {
		t.Fatalf("%v: %v", mc, err)
	}
	k := mailboxCalls(comms[0])
	if k == before {
		t.Fatalf("%v (%d bytes a rank): not by the mailboxes", mc, mc.count*mc.dt.Size())
	}
	return k
}

// raiseForTest sets a test switch for the rest of the test.
func raiseForTest(t *testing.T, f *atomic.Bool) {
	f.Store(true)
	t.Cleanup(func() { f.Store(false) })
}

// An all-reduce above a slot where ranks outnumber cores goes by the
// mailboxes in slices: every datatype (with -short one of each size and
// kind), every reduction of one, in and out of place, in one round, in
// rounds with a ragged last one, and with a count the ranks do not divide;
// each gives the reference result.
func TestSlicesAllReduce(t *testing.T) {
	crowded(t)
	dts := Datatypes()
	if testing.Short() {
		dts = []Datatype{Int8, BFloat16, Float32, Float64}
	}
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ctx := testCtx(t, 2*time.Minute)
			comms := newLocal(t, n, WithTransport("shm"))
			cases := 0
			for _, dt := range dts {
				es := dt.Size()
				counts := []int{slotMax/2/es + 1, slotMax/es + 1, 2*roundElems(n, es) + 7}
				redops := []ReduceOp{Sum}
				if dt == Float32 {
					redops = ReduceOps()
					counts = append(counts, roundElems(n, es)+n-1)
				}
				for _, redop := range redops {
					for _, count := range counts {
						for _, inPlace := range []bool{false, true} {
							runByMailbox(ctx, t, comms, matrixCase{op: OpAllReduce, dt: dt, redop: redop, count: count, inPlace: inPlace})
							cases++
						}
					}
				}
			}
			t.Logf("%d cases", cases)
		})
	}
}

// Ranks that make sliced all-reduces of different sizes (one tag: it has
// no room for the size) all fall back to the engine, whose call check
// fails the call on every rank naming the sizes; the communicator stays
// usable, for sliced calls too.
func TestSlicesSizeMismatch(t *testing.T) {
	crowded(t)
	comms := newLocal(t, 3, WithTransport("shm"))
	ctx := testCtx(t, time.Minute)
	base := slotMax/4 + 100
	errs := make([]error, len(comms))
	runOnAll(comms, func(c *Comm) error {
		buf := make([]float32, base+c.Rank()/2) // ranks 0 and 1 agree, rank 2 does not
		errs[c.Rank()] = AllReduce(ctx, c, buf, buf, Sum)
		return nil
	})
	for r, err := range errs {
		var mm *MismatchError
		if !errors.As(err, &mm) || !strings.Contains(err.Error(), "count") {
			t.Fatalf("rank %d: %v, want a MismatchError naming the count", r, err)
		}
	}
	if err := runOnAll(comms, func(c *Comm) error {
		buf := make([]float32, base)
		for i := range buf {
			buf[i] = float32(c.Rank())
		}
		if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
			return err
		}
		if buf[0] != 3 || buf[base-1] != 3 {
			return fmt.Errorf("sum after the mismatch = %v ... %v, want 3", buf[0], buf[base-1])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// The mailbox timeout names the operation that waited, not always the
// all-reduce.
func TestSmallWaitNamesItsOp(t *testing.T) {
	comms := newLocal(t, 2, WithTransport("shm"))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := Broadcast(ctx, comms[0], []float32{1}, []float32{1}, 0)
	if err == nil || !strings.Contains(err.Error(), "broadcast") {
		t.Fatalf("a lone broadcast: %v, want a deadline error naming the broadcast", err)
	}
}

// An all-gather or a broadcast above the mailbox path's limit goes in
// slices between 2 ranks and where ranks outnumber cores, and so does a
// reduce-scatter of any size there: in one piece and in several with a
// ragged last one, in and out of place, from every root; each gives the
// reference result.
func TestSlicesAllGatherBroadcast(t *testing.T) {
	for _, tc := range []struct {
		n       int
		crowded bool
	}{{2, false}, {2, true}, {3, true}} {
		t.Run(fmt.Sprintf("n=%d/crowded=%v", tc.n, tc.crowded), func(t *testing.T) {
			if tc.crowded {
				crowded(t)
			}
			ctx := testCtx(t, 2*time.Minute)
			comms := newLocal(t, tc.n, WithTransport("shm"))
			if !slicesFor(OpAllGather, tc.n, comms[0].engines[0].spins()) {
				t.Skipf("%d ranks whose engines spin take the engine", tc.n)
			}
			ops := []Op{OpAllGather, OpBroadcast}
			if tc.crowded {
				ops = append(ops, OpReduceScatter)
			}
			for _, op := range ops {
				for _, dt := range []Datatype{Int8, Float32, Float64} {
					es := dt.Size()
					counts := []int{slotMax/es + 1, (2*sliceMax + 100) / es}
					redop := ReduceOp(0)
					if op == OpReduceScatter {
						// Any size: a reduce-scatter has no whole mailbox call.
						counts, redop = append(counts, 1, 1000), Avg
						if dt != Float32 {
							redop = Max
						}
					}
					for _, count := range counts {
						for _, inPlace := range []bool{false, true} {
							mc := matrixCase{op: op, dt: dt, redop: redop, count: count, inPlace: inPlace, root: count % tc.n}
							before := mailboxCalls(comms[0])
							if err := runOnAll(comms, func(c *Comm) error { return runCase(ctx, c, mc) }); err != nil {
								t.Fatalf("%v: %v", mc, err)
							}
							if mailboxCalls(comms[0]) == before {
								t.Fatalf("%v (%d bytes a rank): not by the mailboxes", mc, count*es)
							}
						}
					}
				}
			}
		})
	}
}
