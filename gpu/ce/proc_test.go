package ce_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/gpu/ce"
	"github.com/vccl-go/vccl/gpu/cuda"
	"github.com/vccl-go/vccl/gpu/gpubench"
)

const envProcRank = "VCCL_CE_TEST_PROC"

func TestNewProcWithoutDriver(t *testing.T) {
	if cuda.Available() {
		t.Skip("a GPU is present")
	}
	if _, err := ce.NewProc(context.Background(), ce.ProcConfig{}); !errors.Is(err, cuda.ErrNoDriver) {
		t.Fatalf("NewProc without a driver: %v, want ErrNoDriver", err)
	}
}

// TestProc starts two processes (this test binary, as TestProcRank), one
// per GPU, joined by the host library through the torchrun variables, and
// runs gpubench.ProcCheck in both: IPC buffers and events, transfers both
// ways, all-gather, slots wrapping, a mismatch.
func TestProc(t *testing.T) {
	twoGPUs(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var wg sync.WaitGroup
	outs := make([]string, 2)
	errs := make([]error, 2)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestProcRank$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), envProcRank+"=1", "RANK="+strconv.Itoa(r), "WORLD_SIZE=2",
				"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
			b, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(b), err
		}()
	}
	wg.Wait()
	for r := 0; r < 2; r++ {
		if errs[r] != nil || !strings.Contains(outs[r], "proc rank ok") {
			t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
		} else {
			t.Logf("rank %d:\n%s", r, outs[r])
		}
	}
}

// TestProcRank is one rank of TestProc.
func TestProcRank(t *testing.T) {
	if os.Getenv(envProcRank) == "" {
		t.Skip("runs as a rank of TestProc")
	}
	ctx := context.Background()
	p, err := ce.NewProc(ctx, ce.ProcConfig{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	failed, err := gpubench.ProcCheck(ctx, p, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if failed > 0 {
		t.Fatalf("%d cases failed", failed)
	}
	fmt.Println("proc rank ok")
}
