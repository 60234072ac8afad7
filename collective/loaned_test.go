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
)

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
			// n workers a rank, whatever the machine's CPUs: the
			// phases split, up to four ways at these sizes.
			loanWorkersForTests.Store(int32(n))
			t.Cleanup(func() { loanWorkersForTests.Store(0) })
			ctx := testCtx(t, 2*time.Minute)
			comms := newLocal(t, n, WithTransport("shm"))
			cases := 0
			for _, dt := range dts {
				es := dt.Size()
				counts := []int{loanedMin(n) / es, loanedMin(n)/es + 3*loanChunk/es + n + 1}
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
			mc := matrixCase{op: OpAllReduce, dt: Float32, redop: Sum, count: loanedMin(n)/4 - 1}
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

// Each element of an all-reduce by loans is reduced by one rank, so every
// rank gets the same bits, in place and out of place, from inputs whose
// sums depend on the order they are added in.
func TestLoanedSameBits(t *testing.T) {
	byLoans(t)
	const n = 3
	count := loanedMin(n)/4 + 5
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

// Ranks whose all-reduces by loans differ in size fall back to the engine
// together, whose call check fails the call on every rank naming the
// sizes; the next call by loans works.
func TestLoanedSizeMismatch(t *testing.T) {
	byLoans(t)
	comms := newLocal(t, 3, WithTransport("shm"))
	ctx := testCtx(t, time.Minute)
	base := loanedMin(3) / 4
	errs := onRanks(comms, func(c *Comm) error {
		buf := make([]float32, base+c.Rank()/2) // ranks 0 and 1 agree, rank 2 does not
		return AllReduce(ctx, c, buf, buf, Sum)
	})
	for r, err := range errs {
		var mm *MismatchError
		if !errors.As(err, &mm) || !strings.Contains(err.Error(), "count") {
			t.Fatalf("rank %d: %v, want a count mismatch", r, err)
		}
	}
	mc := matrixCase{op: OpAllReduce, dt: Float32, redop: Sum, count: base}
	if err := runOnAll(comms, func(c *Comm) error { return runCase(ctx, c, mc) }); err != nil {
		t.Fatalf("after the mismatch: %v", err)
	}
	if !wentByLoans(comms[0], mailboxCalls(comms[0]), &request{call: call{op: OpAllReduce, redop: Sum}, dt: Float32}) {
		t.Fatal("after the mismatch: not by loans")
	}
}

// A rank whose peer never makes its all-reduce by loans fails the call by
// its deadline, naming the peer it waited for, and withdraws its loan.
func TestLoanedDeadline(t *testing.T) {
	byLoans(t)
	comms := newLocal(t, 2, WithTransport("shm"))
	count := loanedMin(2) / 4
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	buf := make([]float32, count)
	err := AllReduce(ctx, comms[0], buf, buf, Sum)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("%v, want the deadline, naming rank 1", err)
	}
	if comms[1].small.boxes[0].PeerLent(mailboxCalls(comms[0])) {
		t.Fatal("rank 0's loan is still up after its call failed")
	}
}

// A rank's all-reduce by loans returns only once every peer has read what
// it lent: rank 1 holds back its reads of rank 0's reduced block until
// rank 0's call returns (or a while passes, as it must where the call is
// right), and rank 0 then overwrites its buffer at once; rank 1 must
// still get the sum.
func TestLoanedHeldUntilRead(t *testing.T) {
	byLoans(t)
	comms := newLocal(t, 2, WithTransport("shm"))
	ctx := testCtx(t, time.Minute)
	count := loanedMin(2) / 4
	returned := make(chan struct{})
	comms[1].small.testGather = func(int) {
		select {
		case <-returned:
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Cleanup(func() { comms[1].small.testGather = nil })
	errs := onRanks(comms, func(c *Comm) error {
		buf := make([]float32, count)
		for i := range buf {
			buf[i] = float32(c.Rank() + 1)
		}
		err := AllReduce(ctx, c, buf, buf, Sum)
		if c.Rank() == 0 {
			for i := range buf {
				buf[i] = -1
			}
			close(returned)
			return err
		}
		for i, v := range buf {
			if err == nil && v != 3 {
				return fmt.Errorf("element %d = %v, want 3", i, v)
			}
		}
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
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

// Ranks in processes of their own make all-reduces by loans, each rank
// reading its peers' memory by process_vm_readv: in and out of place
// (the output read at its distance from the input), in one round and in
// several, split among two workers, every result checked.
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
	for _, count := range []int{loanedMin(n) / 4, n*loanRound/4 + 3*loanChunk/4 + 1} {
		for _, inPlace := range []bool{false, true} {
			mc := matrixCase{op: OpAllReduce, dt: Float32, redop: Sum, count: count, inPlace: inPlace}
			if err := runCase(ctx, c, mc); err != nil {
				t.Fatalf("%v: %v", mc, err)
			}
			if !wentByLoans(c, mailboxCalls(c), &request{call: call{op: OpAllReduce, redop: Sum}, dt: Float32}) {
				t.Fatalf("%v: not by loans", mc)
			}
		}
	}
	fmt.Printf("loaned rank ok: rank %d\n", c.Rank())
}
