package collective

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/internal/testproc"
)

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
