package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// loanedLeast is the fewest bytes a rank of a call of op that goes by
// loans on n ranks in the tests (byLoans), whether their engines spin or
// not: above the mailbox path's whole calls.
func loanedLeast(op Op, n int) int {
	if op == OpReduceScatter || op == OpReduce {
		return loanedMin(op, n) // they have no whole mailbox call
	}
	return max(loanedMin(op, n), smallLimit(n, false, op)+64, smallLimit(n, true, op)+64)
}

// byLoans sends the test's large all-reduces by loans (loaned.go) whatever
// the machine's cores.
func byLoans(t *testing.T) { raiseForTest(t, &loansForTests) }

// wentByLoans reports whether every peer of c published its call k as an
// all-reduce by loans.
func wentByLoans(c *Comm, k uint32, rq *request) bool {
	for _, b := range c.small.boxes {
		if b == nil {
			continue
		}
		if tag, ok := b.PeerTag(k); !ok || tag != loanTag(rq) {
			return false
		}
	}
	return true
}

// loanComms returns n ranks over shm whose calls by loans split their
// work n ways, whatever the machine's CPUs (up to four ways at the tests'
// sizes) and whose all-reduces that may go by loans do (loanedLocal), and
// a context for the test.
func loanComms(t *testing.T, n int) (context.Context, []*Comm) {
	loanWorkersForTests.Store(int32(n))
	t.Cleanup(func() { loanWorkersForTests.Store(0) })
	return testCtx(t, 2*time.Minute), loanedLocal(t, n)
}

// loanedLocal returns n ranks over shm whose all-reduces that may go by
// loans do without a measurement (loanChoice's tests measure).
func loanedLocal(t *testing.T, n int) []*Comm {
	comms := newLocal(t, n, WithTransport("shm"))
	for _, c := range comms {
		chooseWay(&c.small.loans, wayLoans)
	}
	return comms
}

// chooseWay has every class of lc keep way, as if it had measured it.
func chooseWay(lc *loanChoice, way slotWay) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for i := range lc.class {
		lc.class[i] = slotClass{way: way, chosen: true}
	}
}

// loanedRequest is what wentByLoans needs of mc's request: only reductions
// carry a reduction.
func loanedRequest(mc matrixCase) *request {
	rq := &request{call: call{op: mc.op, redop: mc.redop, root: mc.root}, dt: mc.dt}
	if mc.op != OpAllReduce && mc.op != OpReduceScatter && mc.op != OpReduce {
		rq.call.redop = 0
	}
	return rq
}

// An all-reduce by loans gives the reference result for every reduction
// (with -short two), datatypes of each size (with -short two), in and out
// of place, with a count the ranks do not divide, blocks that end inside a
// chunk, and in several rounds; its calls are published as such.
func TestLoanedAllReduce(t *testing.T) {
	byLoans(t)
	ns, dts := []int{2, 3, 4}, []Datatype{Int8, BFloat16, Float32, Float64}
	if testing.Short() {
		ns, dts = []int{2, 3}, []Datatype{BFloat16, Float32}
	}
	for _, n := range ns {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ctx, comms := loanComms(t, n)
			cases := 0
			for _, dt := range dts {
				es := dt.Size()
				counts := []int{loanedLeast(OpAllReduce, n) / es, loanedLeast(OpAllReduce, n)/es + 3*loanChunk/es + n + 1}
				redops := []ReduceOp{Sum}
				if dt == Float32 {
					redops = ReduceOps()
					if testing.Short() {
						redops = []ReduceOp{Sum, Avg}
					}
					counts = append(counts, n*loanRound/es+3*loanChunk/es+1) // rounds, the last one ragged
				}
				for _, redop := range redops {
					for _, count := range counts {
						for _, inPlace := range []bool{false, true} {
							mc := matrixCase{op: OpAllReduce, dt: dt, redop: redop, count: count, inPlace: inPlace}
							k := runByMailbox(ctx, t, comms, mc)
							if !wentByLoans(comms[0], k, &request{call: call{op: OpAllReduce, redop: redop}, dt: dt}) {
								t.Fatalf("%v (%d bytes a rank): not by loans", mc, count*es)
							}
							cases++
						}
					}
				}
			}
			// One element less goes another way.
			mc := matrixCase{op: OpAllReduce, dt: Float32, redop: Sum, count: loanedMin(OpAllReduce, n)/4 - 1}
			before := mailboxCalls(comms[0])
			if err := runOnAll(comms, func(c *Comm) error { return runCase(ctx, c, mc) }); err != nil {
				t.Fatalf("%v: %v", mc, err)
			}
			if k := mailboxCalls(comms[0]); k != before && wentByLoans(comms[0], k, &request{call: call{op: OpAllReduce, redop: Sum}, dt: Float32}) {
				t.Fatalf("%v (%d bytes a rank, below loanedMin): by loans", mc, mc.count*4)
			}
			t.Logf("%d cases", cases)
		})
	}
}

// An all-gather, a reduce-scatter, a broadcast and a reduce (these two
// from either end's root) by loans give the reference result for
// datatypes of each size (with -short two), every reduction (with -short
// two), in and out of place, with blocks that end inside a chunk and
// ranges a worker does not divide; between 2 ranks they go another way.
func TestLoanedMoves(t *testing.T) {
	byLoans(t)
	dts := []Datatype{Int8, BFloat16, Float32, Float64}
	if testing.Short() {
		dts = []Datatype{BFloat16, Float32}
	}
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ctx, comms := loanComms(t, n)
			cases := 0
			for _, op := range []Op{OpAllGather, OpReduceScatter, OpBroadcast, OpReduce} {
				for _, dt := range dts {
					es := dt.Size()
					redops, roots := []ReduceOp{Sum}, []int{0}
					reduces := op == OpReduceScatter || op == OpReduce
					switch {
					case reduces && dt == Float32 && testing.Short():
						redops = []ReduceOp{Sum, Avg}
					case reduces && dt == Float32:
						redops = ReduceOps()
					}
					if op == OpBroadcast || op == OpReduce {
						roots = []int{0, n - 1}
					}
					for _, redop := range redops {
						for _, root := range roots {
							for _, count := range []int{loanedLeast(op, n) / es, loanedLeast(op, n)/es + 3*loanChunk/es + n + 1} {
								for _, inPlace := range []bool{false, true} {
									mc := matrixCase{op: op, dt: dt, redop: redop, count: count, inPlace: inPlace, root: root}
									k := runByMailbox(ctx, t, comms, mc)
									if !wentByLoans(comms[0], k, loanedRequest(mc)) {
										t.Fatalf("%v (%d bytes a rank): not by loans", mc, count*es)
									}
									cases++
								}
							}
						}
					}
				}
			}
			t.Logf("%d cases", cases)
		})
	}
	t.Run("n=2", func(t *testing.T) {
		ctx := testCtx(t, time.Minute)
		comms := newLocal(t, 2, WithTransport("shm"))
		for _, op := range []Op{OpAllGather, OpReduceScatter, OpBroadcast, OpReduce} {
			mc := matrixCase{op: op, dt: Float32, redop: Sum, count: 2 * loanedLeast(op, 3) / 4}
			before := mailboxCalls(comms[0])
			if err := runOnAll(comms, func(c *Comm) error { return runCase(ctx, c, mc) }); err != nil {
				t.Fatalf("%v: %v", mc, err)
			}
			if k := mailboxCalls(comms[0]); k != before && wentByLoans(comms[0], k, loanedRequest(mc)) {
				t.Fatalf("%v between 2 ranks: by loans", mc)
			}
		}
	})
}

// Each element of an all-reduce by loans is reduced by one rank, so every
// rank gets the same bits, in place and out of place, from inputs whose
// sums depend on the order they are added in.
func TestLoanedSameBits(t *testing.T) {
	byLoans(t)
	const n = 3
	count := loanedLeast(OpAllReduce, n)/4 + 5
	in := orderSensitive(n, count, 3)
	comms := newLocal(t, n, WithTransport("shm"))
	for _, inPlace := range []bool{false, true} {
		outs := allReduceOuts(t, comms, in, inPlace)
		if !wentByLoans(comms[0], mailboxCalls(comms[0]), &request{call: call{op: OpAllReduce, redop: Sum}, dt: Float32}) {
			t.Fatalf("in place %v: not by loans", inPlace)
		}
		for i := range count {
			sum, mag := 0.0, 0.0
			for r := range n {
				sum, mag = sum+float64(in[r][i]), mag+math.Abs(float64(in[r][i]))
			}
			if d := math.Abs(float64(outs[0][i]) - sum); d > 1e-6*mag*n {
				t.Fatalf("in place %v, element %d: %v, want about %v", inPlace, i, outs[0][i], sum)
			}
			for r := 1; r < n; r++ {
				if math.Float32bits(outs[r][i]) != math.Float32bits(outs[0][i]) {
					t.Fatalf("in place %v, element %d: rank %d has %v (%#x), rank 0 %v (%#x)",
						inPlace, i, r, outs[r][i], math.Float32bits(outs[r][i]), outs[0][i], math.Float32bits(outs[0][i]))
				}
			}
		}
	}
}

// loanedOps are the operations that go by loans.
var loanedOps = []Op{OpAllReduce, OpAllGather, OpReduceScatter, OpBroadcast, OpReduce}

// loanedCall makes a call of op of count float32 elements a rank (a
// broadcast's buffer, from root; a reduce to root) and returns its input
// and the buffer it wrote into (nil on a reduce's other ranks); fill, if
// not nil, gives the input's elements.
func loanedCall(ctx context.Context, c *Comm, op Op, count, root int, fill func(i int) float32) (in, out []float32, err error) {
	n := c.Size()
	in = make([]float32, count)
	if op == OpReduceScatter {
		in = make([]float32, n*count)
	}
	if fill != nil {
		for i := range in {
			in[i] = fill(i)
		}
	}
	switch op {
	case OpAllGather:
		out = make([]float32, n*count)
		err = AllGather(ctx, c, in, out)
	case OpReduceScatter:
		out = make([]float32, count)
		err = ReduceScatter(ctx, c, in, out, Sum)
	case OpBroadcast:
		out = in
		err = Broadcast(ctx, c, in, out, root)
	case OpReduce:
		if c.Rank() == root {
			out = make([]float32, count)
		}
		err = Reduce(ctx, c, in, out, Sum, root)
	default:
		out = in
		err = AllReduce(ctx, c, in, out, Sum)
	}
	return in, out, err
}

// Ranks whose calls by loans differ in size fall back to the engine
// together, whose call check fails the call on every rank naming the
// sizes; the next call by loans works.
func TestLoanedSizeMismatch(t *testing.T) {
	byLoans(t)
	comms := newLocal(t, 3, WithTransport("shm"))
	for _, op := range loanedOps {
		t.Run(op.String(), func(t *testing.T) {
			ctx := testCtx(t, time.Minute)
			base := loanedLeast(op, 3) / 4
			errs := onRanks(comms, func(c *Comm) error {
				_, _, err := loanedCall(ctx, c, op, base+c.Rank()/2, 0, nil) // ranks 0 and 1 agree, rank 2 does not
				return err
			})
			for r, err := range errs {
				var mm *MismatchError
				if !errors.As(err, &mm) || !strings.Contains(err.Error(), "count") {
					t.Fatalf("rank %d: %v, want a count mismatch", r, err)
				}
			}
			mc := matrixCase{op: op, dt: Float32, redop: Sum, count: base}
			if err := runOnAll(comms, func(c *Comm) error { return runCase(ctx, c, mc) }); err != nil {
				t.Fatalf("after the mismatch: %v", err)
			}
			if !wentByLoans(comms[0], mailboxCalls(comms[0]), loanedRequest(mc)) {
				t.Fatal("after the mismatch: not by loans")
			}
		})
	}
}

// A rank whose peers never make its call by loans fails the call by its
// deadline, naming a peer it waited for, and withdraws its loan.
func TestLoanedDeadline(t *testing.T) {
	byLoans(t)
	for _, op := range loanedOps {
		t.Run(op.String(), func(t *testing.T) {
			n := 2
			if op != OpAllReduce {
				n = 3
			}
			comms := loanedLocal(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, _, err := loanedCall(ctx, comms[0], op, loanedLeast(op, n)/4, 0, nil)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rank 1") {
				t.Fatalf("%v, want the deadline, naming rank 1", err)
			}
			if comms[1].small.boxes[0].PeerLent(mailboxCalls(comms[0])) {
				t.Fatal("rank 0's loan is still up after its call failed")
			}
		})
	}
}

// A rank's call by loans returns only once every peer has read what it
// lent: rank 1 holds back its reads of rank 0's loan until rank 0's call
// returns (or a while passes, as it must where the call is right), and
// rank 0 then overwrites its buffers at once; rank 1 must still get the
// right result. A broadcast's rank 0 is its root, or a reader whose piece
// the others read from its output; a reduce's its root, or a rank whose
// input and reduced block the root (rank 1) reads.
func TestLoanedHeldUntilRead(t *testing.T) {
	byLoans(t)
	for _, tc := range []struct {
		op   Op
		root int
	}{{OpAllReduce, 0}, {OpAllGather, 0}, {OpReduceScatter, 0}, {OpBroadcast, 0}, {OpBroadcast, 2}, {OpReduce, 0}, {OpReduce, 1}} {
		t.Run(fmt.Sprintf("%v/root=%d", tc.op, tc.root), func(t *testing.T) {
			op, n := tc.op, 2
			if op != OpAllReduce {
				n = 3
			}
			comms := loanedLocal(t, n)
			ctx := testCtx(t, time.Minute)
			count := loanedLeast(op, n) / 4
			returned := make(chan struct{})
			comms[1].small.testRead = func(q int) {
				if q != 0 {
					return
				}
				select {
				case <-returned:
				case <-time.After(200 * time.Millisecond):
				}
			}
			t.Cleanup(func() { comms[1].small.testRead = nil })
			errs := onRanks(comms, func(c *Comm) error {
				// Rank r's input holds r+1: a sum gives n(n+1)/2, a
				// broadcast root+1, an all-gather block q q+1.
				in, out, err := loanedCall(ctx, c, op, count, tc.root, func(int) float32 { return float32(c.Rank() + 1) })
				if c.Rank() == 0 {
					for i := range in {
						in[i] = -1
					}
					for i := range out {
						out[i] = -1
					}
					close(returned)
					return err
				}
				for i, v := range out {
					want := float32(n * (n + 1) / 2)
					switch op {
					case OpBroadcast:
						want = float32(tc.root + 1)
					case OpAllGather:
						want = float32(i/count + 1)
					}
					if err == nil && v != want {
						return fmt.Errorf("element %d = %v, want %v", i, v, want)
					}
				}
				return err
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// A rank's workers are its share of the CPUs: the CPUs it was bound to, or
// the host's divided among its ranks' engines.
func TestCPUShare(t *testing.T) {
	for _, tc := range []struct {
		live, procs, cpus int
		bound             bool
		want              int
	}{
		{1, 8, 2, true, 2},    // 8 ranks bound on 16 cores
		{1, 2, 8, true, 8},    // 2 ranks bound on 16 cores
		{1, 16, 1, true, 1},   // 16 ranks bound on 16 cores
		{2, 8, 2, true, 1},    // two engines of a bound rank
		{1, 16, 16, false, 1}, // 16 unbound ranks on 16 cores
		{1, 4, 16, false, 4},  // 4 unbound ranks on 16 cores
		{1, 4, 2, false, 1},   // more ranks than cores
		{0, 1, 4, false, 4},   // no engine live yet
	} {
		if got := cpuShare(tc.live, tc.procs, tc.cpus, tc.bound); got != tc.want {
			t.Errorf("cpuShare(%d, %d, %d, %v) = %d, want %d", tc.live, tc.procs, tc.cpus, tc.bound, got, tc.want)
		}
	}
}

const envLoanedRank = "VCCL_TEST_LOANED_RANK"

// Ranks in processes of their own make calls by loans of every operation
// that has them, each rank reading its peers' memory by process_vm_readv:
// in and out of place (an all-reduce's output read at its distance from
// the input), an all-reduce in one round and in several, split among two
// workers, every result checked.
func TestLoanedMultiProcess(t *testing.T) {
	launcher := buildVcclrun(t)
	ctx := testCtx(t, 2*time.Minute)
	env := append(os.Environ(), envLoanedRank+"=1", EnvTransport+"=shm")
	out, err := rankJob(ctx, launcher, []string{"-n", "3", "--"}, "TestLoanedRank", env).CombinedOutput()
	if err != nil {
		t.Fatalf("job: %v\n%s", err, out)
	}
	wantRanksOK(t, string(out), "loaned rank ok", 3)
}

// TestLoanedRank is one rank of TestLoanedMultiProcess's job.
func TestLoanedRank(t *testing.T) {
	if os.Getenv(envLoanedRank) == "" {
		t.Skip("runs as a rank of TestLoanedMultiProcess")
	}
	byLoans(t)
	loanWorkersForTests.Store(2)
	t.Cleanup(func() { loanWorkersForTests.Store(0) })
	ctx := testCtx(t, time.Minute)
	c, err := NewFromEnv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := c.Size()
	for _, op := range loanedOps {
		counts := []int{loanedLeast(op, n) / 4, loanedLeast(op, n)/4 + 3*loanChunk/4 + 1}
		if op == OpAllReduce {
			counts[1] = n*loanRound/4 + 3*loanChunk/4 + 1
		}
		for _, count := range counts {
			for _, inPlace := range []bool{false, true} {
				mc := matrixCase{op: op, dt: Float32, redop: Sum, count: count, inPlace: inPlace, root: 1}
				if err := runCase(ctx, c, mc); err != nil {
					t.Fatalf("%v: %v", mc, err)
				}
				if !wentByLoans(c, mailboxCalls(c), loanedRequest(mc)) {
					t.Fatalf("%v: not by loans", mc)
				}
			}
		}
	}
	fmt.Printf("loaned rank ok: rank %d\n", c.Rank())
}

// A call by loans writes the call's size in its coll records as the
// engine's path does for the same call (its payload: an all-gather's and a
// reduce-scatter's n blocks, the others' buffer), on every rank.
func TestLoanedRecordsCallSize(t *testing.T) {
	byLoans(t)
	const n = 3
	ctx := testCtx(t, time.Minute)
	for _, op := range loanedOps {
		t.Run(op.String(), func(t *testing.T) {
			count := loanedLeast(op, n) / 4
			sizes := func(opts ...Option) []uint64 {
				comms, sink := recordRun(t, ctx, n, func(c *Comm) error {
					_, _, err := loanedCall(ctx, c, op, count, 1, nil)
					return err
				}, append([]Option{WithTransport("shm")}, opts...)...)
				got := make([]uint64, n)
				for _, r := range sink.Records() {
					if r.Comm == comms[0].ID() && r.Kind == flowtel.KindCollBegin && r.CollSeq == 1 {
						got[r.Rank] = r.Bytes
					}
				}
				return got
			}
			loaned, engine := sizes(), sizes(WithAlgorithm(AlgoRing))
			for r := range n {
				if loaned[r] == 0 || loaned[r] != engine[r] {
					t.Errorf("rank %d: coll_begin says %d bytes by loans, %d on the engine", r, loaned[r], engine[r])
				}
			}
		})
	}
}
