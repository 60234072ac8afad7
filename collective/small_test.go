package collective

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// mailboxCalls returns the ticket of the last call c made on the mailbox
// path; it changes when a call took it.
func mailboxCalls(c *Comm) uint32 { return c.small.lastBox }

// Every datatype and reduction, in and out of place, on both sides of the
// size threshold, for every operation the path takes: up to smallLimit
// bytes per rank the call takes the mailbox path, one element more takes the
// engine, and both give the reference result.
func TestSmallMatrix(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ctx := testCtx(t, 2*time.Minute)
			comms := newLocal(t, n, WithTransport("shm"))
			if comms[0].small == nil {
				t.Fatal("a communicator joined over shm has no mailbox path")
			}
			cases := 0
			for _, op := range []Op{OpAllReduce, OpBroadcast, OpAllGather, OpBarrier} {
				for _, dt := range Datatypes() {
					limit := smallLimit(n, comms[0].engines[0].spins(), op)
					edge := limit / dt.Size()
					counts := []int{1, 13, edge, edge + 1}
					if n > 2 {
						counts = []int{13, edge, edge + 1}
					}
					redops := []ReduceOp{0}
					if op == OpAllReduce {
						redops = ReduceOps()
					}
					if op == OpBarrier {
						counts = counts[:1]
					}
					for _, redop := range redops {
						for _, count := range counts {
							for _, inPlace := range []bool{false, true} {
								mc := matrixCase{op: op, dt: dt, redop: redop, count: count, inPlace: inPlace, root: (count + 1) % n}
								before := mailboxCalls(comms[0])
								if err := runOnAll(comms, func(c *Comm) error { return runCase(ctx, c, mc) }); err != nil {
									t.Fatalf("%v: %v", mc, err)
								}
								took := mailboxCalls(comms[0]) != before
								// Above the limit, some go in slices (slices_test.go)
								// or by loans (loaned_test.go).
								spin := comms[0].engines[0].spins()
								if want := op == OpBarrier || count*dt.Size() <= limit || slicesFor(op, n, spin) || comms[0].loanedFor(op, count*dt.Size(), spin); took != want {
									t.Fatalf("%v (%d bytes a rank): mailbox path taken %v, want %v (threshold %d bytes)", mc, count*dt.Size(), took, want, limit)
								}
								cases++
							}
						}
					}
				}
			}
			t.Logf("%d cases", cases)
		})
	}
}

// Mailbox calls mixed with engine calls, blocking and async, on a parent
// communicator and its Split children at once: each call gets the right
// answer, so tickets, slot reuse and the deferred publication of engine
// calls keep every rank in step.
func TestSmallAllReduceInterleaved(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	const n = 4
	comms := newLocal(t, n, WithTransport("shm"))
	err := runOnAll(comms, func(c *Comm) error {
		sub, err := c.Split(ctx, c.Rank()%2, c.Rank())
		if err != nil {
			return err
		}
		if sub.small == nil {
			sub.Abort()
			return errors.New("the Split child has no mailbox path")
		}
		subErr := make(chan error, 1)
		go func() { subErr <- smallRounds(ctx, sub, 200) }()
		err = errors.Join(smallRounds(ctx, c, 200), <-subErr)
		if err != nil {
			sub.Abort() // Close would wait out the failed round's calls still in flight
			return err
		}
		return sub.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// smallRounds runs rounds of a fixed mix of calls on c and checks them.
func smallRounds(ctx context.Context, c *Comm, rounds int) error {
	r, n := c.Rank(), c.Size()
	sum := float32(n * (n - 1) / 2)
	// Over the mailbox path's limit for any number of ranks: an engine
	// call, or one in slices where engines may not spin (slices.go).
	big := make([]float32, slotMax/4+1)
	all := make([]float32, n*len(big))
	for i := range rounds {
		// A large async call, then mailbox calls that must not overtake it.
		for j := range big {
			big[j] = float32(r)
		}
		h, err := c.AllGatherAsync(ctx, Buf(big), Buf(all))
		if err != nil {
			return err
		}
		small := []float32{float32(r), float32(i)}
		if err := AllReduce(ctx, c, small, small, Sum); err != nil {
			return fmt.Errorf("round %d: %w", i, err)
		}
		select {
		case <-h.Done():
		default:
			return fmt.Errorf("round %d: the mailbox call returned before the async all-gather made before it", i)
		}
		if err := h.Wait(ctx); err != nil {
			return err
		}
		if all[0] != 0 || all[len(all)-1] != float32(n-1) || small[0] != sum || small[1] != float32(n*i) {
			return fmt.Errorf("round %d: all-gather %v…%v, small %v; want 0…%v and [%v %v]", i, all[0], all[len(all)-1], small, n-1, sum, n*i)
		}
		// Async mailbox calls in a row (more than the two slots), waited
		// together, then a blocking engine call between mailbox calls.
		var hs []*Handle
		outs := make([][]int64, 3)
		for j := range outs {
			outs[j] = make([]int64, 3)
			h, err := c.AllReduceAsync(ctx, Buf([]int64{int64(r), int64(j), 1}), Buf(outs[j]), Max)
			if err != nil {
				return err
			}
			hs = append(hs, h)
		}
		root := []int32{int32(i)}
		if err := Broadcast(ctx, c, root, root, i%n); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		// A blocking engine call between mailbox calls.
		a2a := make([]int32, n)
		if err := AllToAll(ctx, c, a2a, make([]int32, n)); err != nil {
			return err
		}
		for j, h := range hs {
			if err := h.Wait(ctx); err != nil {
				return err
			}
			if want := []int64{int64(n - 1), int64(j), 1}; fmt.Sprint(outs[j]) != fmt.Sprint(want) {
				return fmt.Errorf("round %d: async call %d gave %v, want %v", i, j, outs[j], want)
			}
		}
		if root[0] != int32(i) {
			return fmt.Errorf("round %d: broadcast gave %d", i, root[0])
		}
	}
	return nil
}

// A rank whose peer is gone fails its mailbox call, whole or in slices,
// with an error naming the peer and the operation, soon, not at its
// deadline, and the communicator with it.
func TestSmallAllReduceDeadPeer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		crowded bool
		count   int
	}{{"whole", false, 1}, {"slices", true, 2 * roundElems(2, 4)}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.crowded {
				crowded(t)
			}
			comms := newLocal(t, 2, WithTransport("shm"))
			ctx := testCtx(t, 20*time.Second)
			if err := runOnAll(comms, func(c *Comm) error {
				return AllReduce(ctx, c, make([]float32, tc.count), make([]float32, tc.count), Sum)
			}); err != nil {
				t.Fatal(err)
			}
			buf := make([]float32, tc.count)
			comms[1].Abort()
			start := time.Now()
			err := AllReduce(ctx, comms[0], buf, buf, Sum)
			if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "allreduce") {
				t.Fatalf("all-reduce with rank 1 gone: %v, want an error naming rank 1 and the all-reduce", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("the dead peer surfaced after %v", d)
			}
			if comms[0].Err() == nil {
				t.Error("the communicator is still usable after a failed mailbox call")
			}
		})
	}
}

// A mailbox call honours its deadline, fails the communicator, and the
// peer that makes the call later learns why from the abort board.
func TestSmallAllReduceDeadline(t *testing.T) {
	comms := newLocal(t, 2, WithTransport("shm"))
	ctx := testCtx(t, 200*time.Millisecond)
	buf := []float32{1}
	start := time.Now()
	err := AllReduce(ctx, comms[0], buf, buf, Sum)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("lone all-reduce: %v, want a deadline error naming rank 1", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("deadline of 200ms honoured after %v", d)
	}
	late, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	var pf *PeerFailedError
	for err = nil; err == nil || !errors.As(err, &pf); {
		if late.Err() != nil {
			t.Fatalf("rank 1's call: %v, want a PeerFailedError", err)
		}
		// Until the abort board reaches rank 1, its call waits for a
		// rank that gave up; with the board it fails at once.
		c, cancel := context.WithTimeout(late, time.Second)
		err = AllReduce(c, comms[1], buf, buf, Sum)
		cancel()
	}
	if pf.Rank != 0 {
		t.Fatalf("PeerFailedError names rank %d, want 0", pf.Rank)
	}
}

// A mailbox call writes what an engine call writes: coll_begin, a post and
// a completion of each send and receive (matched by WR id on the
// mailbox's own queue pair id), coll_end; whether its begin's records
// were written after the publication or with end's (copies of telLateMin
// bytes or more), and whether as Exchange entries (2 ranks) or records.
func TestSmallAllReduceRecords(t *testing.T) {
	for _, tc := range []struct{ n, floats int }{
		{2, 64}, {2, telLateMin / 4}, {2, smallLimit(2, true, OpAllReduce) / 4},
		{3, 64}, {3, telLateMin / 8}, {3, smallLimit(3, true, OpAllReduce) / 4},
	} {
		t.Run(fmt.Sprintf("%d ranks %d B", tc.n, 4*tc.floats), func(t *testing.T) { testSmallAllReduceRecords(t, tc.n, tc.floats) })
	}
}

func testSmallAllReduceRecords(t *testing.T, n, floats int) {
	ctx := testCtx(t, 30*time.Second)
	col, sink := memoryCollector()
	comms := newLocal(t, n, WithCollector(col), WithTransport("shm"))
	if err := runOnAll(comms, func(c *Comm) error {
		if c.small == nil {
			return errors.New("no mailbox path")
		}
		buf := make([]float32, floats)
		return AllReduce(ctx, c, buf, buf, Sum)
	}); err != nil {
		t.Fatal(err)
	}
	if err := col.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	kinds := map[int32]map[flowtel.Kind]int{}
	posts := map[[3]uint64]int64{}
	for _, r := range sink.Records() {
		if r.Comm != comms[0].ID() || r.CollSeq != 1 {
			continue
		}
		if kinds[r.Rank] == nil {
			kinds[r.Rank] = map[flowtel.Kind]int{}
		}
		kinds[r.Rank][r.Kind]++
		if r.Algo != AlgoDirect || r.Op != OpAllReduce || r.Dtype != Float32 || r.Bytes != uint64(4*floats) {
			t.Errorf("record %+v: want a %d-byte float32 direct all-reduce", r, 4*floats)
		}
		key := [3]uint64{uint64(r.Rank), uint64(r.QP), r.WrID}
		switch r.Kind {
		case flowtel.KindWRPost:
			posts[key] = r.TsNs
		case flowtel.KindWC:
			ts, ok := posts[key]
			if !ok || r.TsNs < ts || r.Status != flowtel.StatusOK {
				t.Errorf("completion %+v: post at %d (found %v)", r, ts, ok)
			}
			if r.QP == 0 || r.Peer < 0 || r.Peer == r.Rank {
				t.Errorf("completion %+v: want a peer and the mailbox's QP id", r)
			}
		}
	}
	for rank := range int32(n) {
		want := map[flowtel.Kind]int{flowtel.KindCollBegin: 1, flowtel.KindWRPost: 2 * (n - 1), flowtel.KindWC: 2 * (n - 1), flowtel.KindCollEnd: 1}
		if fmt.Sprint(kinds[rank]) != fmt.Sprint(want) {
			t.Errorf("rank %d wrote %v, want %v", rank, kinds[rank], want)
		}
	}
}

// A mailbox call that waits for a peer has written its coll_begin and
// posts already, whether begin wrote them after the publication or held
// them for end (a large call): a hung call shows live, not only once it
// fails.
func TestSmallAllReduceBeginWhileWaiting(t *testing.T) {
	for _, floats := range []int{1, telLateMin / 4} {
		t.Run(fmt.Sprintf("%d B", 4*floats), func(t *testing.T) { testSmallAllReduceBeginWhileWaiting(t, floats) })
	}
}

func testSmallAllReduceBeginWhileWaiting(t *testing.T, floats int) {
	col, sink := memoryCollector()
	comms := newLocal(t, 2, WithCollector(col), WithTransport("shm"))
	if comms[0].small == nil {
		t.Fatal("no mailbox path")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		buf := make([]float32, floats)
		done <- AllReduce(ctx, comms[0], buf, buf, Sum) // rank 1 never calls
	}()
	wait, cancelWait := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelWait()
	for {
		if err := col.Flush(wait); err != nil {
			t.Fatalf("no coll_begin and posts from the waiting call: %v", err)
		}
		kinds := map[flowtel.Kind]int{}
		for _, r := range sink.Records() {
			if r.Comm == comms[0].ID() && r.Rank == 0 {
				kinds[r.Kind]++
			}
		}
		// Heartbeats say the waiting rank runs; they count apart.
		beats := kinds[flowtel.KindHeartbeat]
		delete(kinds, flowtel.KindHeartbeat)
		if kinds[flowtel.KindCollBegin] == 1 && kinds[flowtel.KindWRPost] == 2 && beats > 0 {
			if len(kinds) != 2 {
				t.Fatalf("the waiting call wrote %v, want only coll_begin and two posts (and heartbeats)", kinds)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the lone call returned (%v) before its records were seen", err)
		default:
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled lone call: %v", err)
	}
}

// Without a context deadline the communicator's timeout bounds a mailbox
// call's wait.
func TestSmallAllReduceTimeout(t *testing.T) {
	comms := newLocal(t, 2, WithTransport("shm"), WithTimeout(300*time.Millisecond))
	start := time.Now()
	buf := []float32{1}
	err := AllReduce(context.Background(), comms[0], buf, buf, Sum) // rank 1 never calls
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "VCCL_TIMEOUT") {
		t.Fatalf("call without a deadline: %v, want the communicator timeout", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("a 300ms communicator timeout fired after %v", d)
	}
}

// A blocking mailbox call allocates nothing (a request moved to the heap
// once doubled the latency of a 1 KiB call).
func TestSmallAllReduceAllocatesNothing(t *testing.T) {
	comms := newLocal(t, 2, WithTransport("shm"))
	ctx := testCtx(t, 30*time.Second)
	const runs = 100
	peer := make(chan error, 1)
	go func() {
		buf := make([]float32, 256)
		for range runs + 1 { // AllocsPerRun calls once more to warm up
			if err := AllReduce(ctx, comms[1], buf, buf, Sum); err != nil {
				peer <- err
				return
			}
		}
		peer <- nil
	}()
	buf := make([]float32, 256)
	var err error
	allocs := testing.AllocsPerRun(runs, func() {
		if e := AllReduce(ctx, comms[0], buf, buf, Sum); e != nil {
			err = e
		}
	})
	if err := errors.Join(err, <-peer); err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Fatalf("%v allocations per 1 KiB mailbox all-reduce, want 0", allocs)
	}
}

// The mailbox path's limit shrinks with the peers while engines spin, and
// is a whole slot when they may not (their waits cost more than the
// mailbox's extra copies), but half of one for an all-reduce, which goes
// in slices above.
func TestSmallLimit(t *testing.T) {
	for _, tc := range []struct {
		n    int
		spin bool
		op   Op
		want int
	}{
		{2, true, OpAllReduce, 64 << 10}, {3, true, OpAllReduce, 32 << 10}, {9, true, OpAllReduce, 8 << 10},
		{2, true, OpBroadcast, 256 << 10}, {2, true, OpAllGather, 128 << 10},
		{3, true, OpBroadcast, 32 << 10}, {3, true, OpAllGather, 32 << 10},
		{2, false, OpAllReduce, 128 << 10}, {3, false, OpAllGather, 256 << 10}, {9, false, OpBroadcast, 256 << 10},
	} {
		if got := smallLimit(tc.n, tc.spin, tc.op); got != tc.want {
			t.Errorf("%v on %d ranks, spinning %v: limit %d bytes a rank, want %d", tc.op, tc.n, tc.spin, got, tc.want)
		}
	}
}

// A mailbox all-gather whose input lies inside its output but not at its
// own block (the API copies it aside first: inputApart) gets the right
// answer, in place and apart as well, on 2 and 3 ranks, below and
// above the size from which the slots are streamed (streamSlotMin).
func TestSmallAllGatherOverlap(t *testing.T) {
	for _, n := range []int{2, 3} {
		comms := newLocal(t, n, WithTransport("shm"))
		ctx := testCtx(t, time.Minute)
		for _, count := range []int{16, streamSlotMin / 4, smallLimit(n, comms[0].engines[0].spins(), OpAllGather) / 4} {
			for _, where := range []string{"apart", "in place", "overlapping"} {
				err := runOnAll(comms, func(c *Comm) error {
					r := c.Rank()
					out := make([]float32, n*count)
					in := make([]float32, count)
					switch where {
					case "in place":
						in = out[r*count : (r+1)*count]
					case "overlapping":
						// Another rank's block of the output: it is
						// overwritten while this rank's block is made.
						o := (r + 1) % n
						in = out[o*count : (o+1)*count]
					}
					for i := range in {
						in[i] = float32(r*count + i)
					}
					before := mailboxCalls(c)
					if err := AllGather(ctx, c, in, out); err != nil {
						return err
					}
					if mailboxCalls(c) == before {
						return fmt.Errorf("rank %d: %d elements did not take the mailbox path", r, count)
					}
					for i, v := range out {
						if v != float32(i) {
							return fmt.Errorf("rank %d, %s, %d elements: out[%d] = %v, want %d", r, where, count, i, v, i)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
		}
	}
}
