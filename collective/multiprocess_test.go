package collective

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The matrix across processes: the test binary re-runs itself as every rank
// of a job started by vcclrun, over shared memory and over TCP, so bootstrap,
// the job token and the cross-process transports are exercised as users run
// them.

const envMatrixRank = "VCCL_TEST_MATRIX_RANK"

func TestMatrixMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process matrix skipped in -short mode")
	}
	launcher := buildVcclrun(t)
	sizes := []int{2, 3}
	if fullMatrix {
		sizes = []int{2, 3, 4, 5, 6, 7, 8}
	}
	for _, tr := range []string{"shm", "tcp"} {
		for _, n := range sizes {
			t.Run(fmt.Sprintf("%s/n=%d", tr, n), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, launcher, "-n", strconv.Itoa(n), "--",
					os.Args[0], "-test.run=^TestMatrixRank$", "-test.count=1")
				cmd.Env = append(os.Environ(), envMatrixRank+"=1", EnvTransport+"="+tr, "GORACE=atexit_sleep_ms=0")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("job of %d ranks over %s: %v\n%s", n, tr, err, out)
				}
				if got := strings.Count(string(out), "matrix rank ok"); got != n {
					t.Fatalf("%d of %d ranks reported success:\n%s", got, n, out)
				}
			})
		}
	}
}

// buildVcclrun builds the launcher the multi-process tests run their jobs
// with, and returns its path.
func buildVcclrun(t *testing.T) string {
	t.Helper()
	launcher := filepath.Join(t.TempDir(), "vcclrun")
	if out, err := exec.Command("go", "build", "-o", launcher, "github.com/vccl-go/vccl/cmd/vcclrun").CombinedOutput(); err != nil {
		t.Fatalf("building vcclrun: %v\n%s", err, out)
	}
	return launcher
}

// TestMatrixRank is one rank of TestMatrixMultiProcess's jobs.
func TestMatrixRank(t *testing.T) {
	if os.Getenv(envMatrixRank) == "" {
		t.Skip("runs as a rank of TestMatrixMultiProcess")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := NewFromEnv(ctx, WithChunkSize(8<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := os.Getenv(EnvTransport)
	if want == "tcp" && c.opts.ft {
		want = "ft"
	}
	for p := range c.Size() {
		if p != c.Rank() && c.Transport(p) != want {
			t.Fatalf("rank %d reaches rank %d over %s, want %s", c.Rank(), p, c.Transport(p), want)
		}
	}
	large, sample := 4099, 25
	if fullMatrix {
		large, sample = 100003, 1
	}
	cases := sampled(matrixCases(c.Size(), large), sample, uint64(c.Size()))
	for _, mc := range cases {
		if err := runCase(ctx, c, mc); err != nil {
			t.Fatalf("rank %d: %v: %v", c.Rank(), mc, err)
		}
	}
	fmt.Printf("matrix rank ok: rank %d ran %d cases\n", c.Rank(), len(cases))
}
