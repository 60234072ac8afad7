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

	"github.com/vccl-go/vccl/internal/testproc"
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

const envMpirunRank = "VCCL_TEST_MPIRUN_RANK"

// A program that calls NewFromEnv runs under Open MPI's mpirun as it is:
// no MASTER_ADDR, MASTER_PORT or job token passed, the ranks on one host
// find rank 0's store on loopback at a port derived from the job id.
func TestMpirun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an mpirun job")
	}
	mpirun := testproc.Binary(t, "mpirun", "VCCL_MPIRUN", "apt-get install openmpi-bin, or bash .ci/setup.d/42-openmpi.sh")
	ctx := testCtx(t, 2*time.Minute)
	const n = 3
	args := []string{"-np", "3", "--oversubscribe"}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-run-as-root") // CI runs as root; Open MPI refuses it otherwise
	}
	// Nothing of another launcher's, nor a token: what mpirun sets alone.
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "VCCL_"), strings.HasPrefix(k, "MASTER_"), strings.HasPrefix(k, "OMPI_"),
			strings.HasPrefix(k, "PMIX_"), strings.HasPrefix(k, "SLURM_"),
			k == "RANK", k == "WORLD_SIZE", k == "LOCAL_RANK", k == "LOCAL_WORLD_SIZE":
			continue
		}
		env = append(env, kv)
	}
	out, err := rankJob(ctx, mpirun, args, "TestMpirunRank", append(env, envMpirunRank+"=1")).CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	wantRanksOK(t, string(out), "mpirun rank ok", n)
}

// TestMpirunRank is one rank of TestMpirun's job.
func TestMpirunRank(t *testing.T) {
	if os.Getenv(envMpirunRank) == "" {
		t.Skip("runs as a rank of TestMpirun")
	}
	ctx := testCtx(t, time.Minute)
	c, err := NewFromEnv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := []int64{int64(c.Rank()), 1}
	if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
		t.Fatal(err)
	}
	n := int64(c.Size())
	if buf[0] != n*(n-1)/2 || buf[1] != n {
		t.Fatalf("all-reduce gave %v, want [%d %d]", buf, n*(n-1)/2, n)
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("mpirun rank ok: rank %d of %d", c.Rank(), c.Size())
}
