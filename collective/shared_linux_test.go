package collective

import (
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
