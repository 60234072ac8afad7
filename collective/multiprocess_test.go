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
	launcher := buildVcclrun(t)
	sizes := []int{2, 3}
	if fullMatrix {
		sizes = []int{2, 3, 4, 5, 6, 7, 8}
	}
	for _, tr := range []string{"shm", "tcp"} {
		for _, n := range sizes {
			t.Run(fmt.Sprintf("%s/n=%d", tr, n), func(t *testing.T) {
				ctx := testCtx(t, 5*time.Minute)
				cmd := rankJob(ctx, launcher, []string{"-n", strconv.Itoa(n), "--"}, "TestMatrixRank",
					append(os.Environ(), envMatrixRank+"=1", EnvTransport+"="+tr))
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("job of %d ranks over %s: %v\n%s", n, tr, err, out)
				}
				wantRanksOK(t, string(out), "matrix rank ok", n)
			})
		}
	}
}

// buildVcclrun builds the launcher the multi-process tests run their jobs
// with, and returns its path. Those jobs are skipped in -short mode.
func buildVcclrun(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process job skipped in -short mode")
	}
	launcher := filepath.Join(t.TempDir(), "vcclrun")
	if out, err := exec.Command("go", "build", "-o", launcher, "github.com/vccl-go/vccl/cmd/vcclrun").CombinedOutput(); err != nil {
		t.Fatalf("building vcclrun: %v\n%s", err, out)
	}
	return launcher
}

// rankJob is the command that runs this test binary's test rankTest as
// every rank of a job that launcher starts in the environment env.
func rankJob(ctx context.Context, launcher string, launcherArgs []string, rankTest string, env []string) *exec.Cmd {
	args := append(launcherArgs, os.Args[0], "-test.run=^"+rankTest+"$", "-test.count=1", "-test.v")
	cmd := exec.CommandContext(ctx, launcher, args...)
	cmd.Env = append(env, "GORACE=atexit_sleep_ms=0")
	return cmd
}

// wantRanksOK fails the test unless each of a job's n ranks printed mark.
func wantRanksOK(t *testing.T, out, mark string, n int) {
	t.Helper()
	if got := strings.Count(out, mark); got != n {
		t.Fatalf("%d of %d ranks printed %q:\n%s", got, n, mark, out)
	}
}

// TestMatrixRank is one rank of TestMatrixMultiProcess's jobs.
func TestMatrixRank(t *testing.T) {
	if os.Getenv(envMatrixRank) == "" {
		t.Skip("runs as a rank of TestMatrixMultiProcess")
	}
	ctx := testCtx(t, 4*time.Minute)
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
