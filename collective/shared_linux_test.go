package collective

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

const envSharedRank = "VCCL_TEST_SHARED_RANK"

// Buffers from SharedSlice (shm.AllocShared) across processes: the direct algorithms'
// receives read them from the receivers' own mappings of the senders'
// files. Every rank's input differs in every call, so a receiver that
// mapped the wrong peer's file, or read a call late, shows in the sums.
func TestSharedBuffersMultiProcess(t *testing.T) {
	launcher := buildVcclrun(t)
	const n = 2 // ranks with a core each: the direct algorithms' pulls (more are crowded here, and take the mailboxes)
	ctx := testCtx(t, 3*time.Minute)
	env := append(os.Environ(), envSharedRank+"=1", EnvTransport+"=shm", EnvAlgo+"=direct")
	out, err := rankJob(ctx, launcher, []string{"-n", strconv.Itoa(n), "--"}, "TestSharedBuffersRank", env).CombinedOutput()
	if err != nil {
		t.Fatalf("job of %d ranks: %v\n%s", n, err, out)
	}
	wantRanksOK(t, string(out), "shared rank ok", n)
}

// TestSharedBuffersRank is one rank of TestSharedBuffersMultiProcess's job.
func TestSharedBuffersRank(t *testing.T) {
	if os.Getenv(envSharedRank) == "" {
		t.Skip("runs as a rank of TestSharedBuffersMultiProcess")
	}
	ctx := testCtx(t, 2*time.Minute)
	c, err := NewFromEnv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = 4 << 20
	alloc := func(bytes int) []float32 {
		s, err := SharedSlice[float32](bytes / 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { FreeSharedSlice(s) })
		return s
	}
	w, r := c.Size(), c.Rank()
	in, sum, all := alloc(size), alloc(size), alloc(w*size)
	for it := range 4 {
		value := func(rank int) float32 { return float32(rank + 1 + 100*it) }
		for i := range in {
			in[i] = value(r)
		}
		if err := AllReduce(ctx, c, in, sum, Sum); err != nil {
			t.Fatal(err)
		}
		var want float32
		for q := range w {
			want += value(q)
		}
		for i, v := range sum {
			if v != want {
				t.Fatalf("rank %d call %d: all-reduce element %d = %g, want %g", r, it, i, v, want)
			}
		}
		if err := AllGather(ctx, c, in, all); err != nil {
			t.Fatal(err)
		}
		for i, v := range all {
			if q := i / len(in); v != value(q) {
				t.Fatalf("rank %d call %d: all-gather element %d (rank %d's) = %g, want %g", r, it, i, q, v, value(q))
			}
		}
	}
	// The peer's buffers are mapped here: the reads did not go by
	// process_vm_readv.
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	own := fmt.Sprintf("/memfd:vccl-host-%d-", os.Getpid())
	peers := 0
	for line := range strings.Lines(string(maps)) {
		if strings.Contains(line, "/memfd:vccl-host-") && !strings.Contains(line, own) {
			peers++
		}
	}
	if peers == 0 {
		t.Fatalf("rank %d maps none of its peers' shared buffers:\n%s", r, maps)
	}
	fmt.Printf("shared rank ok: rank %d\n", r)
}

func TestSharedSlice(t *testing.T) {
	s, err := SharedSlice[float64](1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 1000 || s[0] != 0 || s[999] != 0 {
		t.Fatalf("SharedSlice[float64](1000): len %d, ends %g %g; want 1000 zeroed", len(s), s[0], s[999])
	}
	s[0], s[999] = 1, 2
	FreeSharedSlice(s)
	again, err := SharedSlice[float64](1000)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeSharedSlice(again)
	if &again[0] != &s[0] || again[0] != 0 || again[999] != 0 {
		t.Fatalf("after FreeSharedSlice the same count: same memory %v, ends %g %g; want the memory again, zeroed", &again[0] == &s[0], again[0], again[999])
	}
	for _, n := range []int{0, -1, math.MaxInt} {
		if _, err := SharedSlice[float64](n); err == nil || !strings.Contains(err.Error(), strconv.Itoa(n)) {
			t.Errorf("SharedSlice(%d): %v, want an error naming the count", n, err)
		}
	}
}

// Calls by loans whose all-gather reads write past the caches
// (gatherPastCaches, here at any size), from buffers the peers map and from
// heap buffers (read by single copy through a bounce buffer, in pieces,
// the last one short), give every rank the whole result: an all-reduce,
// an all-gather and a broadcast from either end, in place and apart, with
// blocks that end off a cache line.
func TestLoanedStreamPastCaches(t *testing.T) {
	byLoans(t)
	loanStreamForTests.Store(1)
	t.Cleanup(func() { loanStreamForTests.Store(0) })
	const n = 3
	ctx, comms := loanComms(t, n)
	for _, heap := range []bool{false, true} {
		alloc := func(count int) []float32 {
			if heap {
				return make([]float32, count)
			}
			s, err := SharedSlice[float32](count)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { FreeSharedSlice(s) })
			return s
		}
		extra := 0
		if heap {
			extra = 3 * (512 << 10) / 4 // reads of several pieces
		}
		streamPastCaches(ctx, t, comms, alloc, extra, heap)
	}
}

func streamPastCaches(ctx context.Context, t *testing.T, comms []*Comm, alloc func(int) []float32, extra int, heap bool) {
	n := len(comms)
	value := func(rank, nth, i int) float32 { return float32(rank*1000 + nth*7 + i%4093) }
	nth := 0
	for _, op := range []Op{OpAllReduce, OpAllGather, OpBroadcast} {
		roots := []int{0}
		if op == OpBroadcast {
			roots = []int{0, n - 1}
		}
		count := loanedLeast(op, n)/4 + 3*loanChunk/4 + 5 + extra
		for _, root := range roots {
			for _, inPlace := range []bool{false, true} {
				nth++
				ins, outs := make([][]float32, n), make([][]float32, n)
				for r := range n {
					ins[r] = alloc(count)
					for i := range ins[r] {
						ins[r][i] = value(r, nth, i)
					}
					switch {
					case op == OpAllGather && inPlace:
						outs[r] = alloc(n * count)
						copy(outs[r][r*count:], ins[r])
						ins[r] = outs[r][r*count : (r+1)*count]
					case op == OpAllGather:
						outs[r] = alloc(n * count)
					case inPlace:
						outs[r] = ins[r]
					default:
						outs[r] = alloc(count)
					}
				}
				err := runOnAll(comms, func(c *Comm) error {
					r := c.Rank()
					switch op {
					case OpAllReduce:
						return AllReduce(ctx, c, ins[r], outs[r], Sum)
					case OpAllGather:
						return AllGather(ctx, c, ins[r], outs[r])
					}
					return Broadcast(ctx, c, ins[r], outs[r], root)
				})
				what := fmt.Sprintf("%v root %d in place %v, %d elements a rank, heap %v", op, root, inPlace, count, heap)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				rq := &request{call: call{op: op, root: root}, dt: Float32}
				if op == OpAllReduce {
					rq.call.redop = Sum
				}
				if !wentByLoans(comms[0], mailboxCalls(comms[0]), rq) {
					t.Fatalf("%s: not by loans", what)
				}
				for r := range n {
					for i, got := range outs[r] {
						var want float32
						switch op {
						case OpAllReduce:
							for q := range n {
								want += value(q, nth, i)
							}
						case OpAllGather:
							want = value(i/count, nth, i%count)
						default:
							want = value(root, nth, i)
						}
						if got != want {
							t.Fatalf("%s: rank %d element %d = %g, want %g", what, r, i, got, want)
						}
					}
				}
			}
		}
	}
}
