// Package bounded checks that a piece of work, fed a hostile input, ends
// within a time and a memory bound: the test runs the work in a child
// process (the test binary itself, running just that test), kills it past
// the time bound, and reads its peak resident memory from the kernel, so a
// run that would allocate gigabytes or loop for ever fails the test instead
// of taking the test process down with it.
package bounded

import (
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/vccl-go/vccl/internal/syncbuf"
)

// Limits of one piece of work.
type Limits struct {
	Time time.Duration // wall time, from the child's start to its exit
	RSS  int64         // peak resident memory, bytes
}

// Issue31 is the bound issue 31 sets on each hostile input: 5 s and 200 MB.
var Issue31 = Limits{Time: 5 * time.Second, RSS: 200 << 20}

const childVar = "VCCL_BOUNDED_CHILD"

// Check runs work in a child process and fails t if the child fails, takes
// longer than lim.Time or peaks above lim.RSS. In the child (the same test,
// re-run), it runs work with the child's t and returns.
func Check(t *testing.T, lim Limits, work func(t *testing.T)) {
	t.Helper()
	if os.Getenv(childVar) == t.Name() {
		work(t)
		return
	}
	if raceEnabled {
		// The race detector multiplies memory by 5 to 10: the bound is
		// the plain build's.
		t.Skip("memory bounds are measured without the race detector")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childVar+"="+t.Name(), "GOMAXPROCS=2")
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it at twice the bound: the work is then over its bound, and the
	// test ends rather than hang with it.
	kill := time.AfterFunc(2*lim.Time, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	took := time.Since(start)
	kill.Stop()
	var rss int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = int64(ru.Maxrss) * 1024 // kilobytes on Linux
	}
	if err != nil {
		t.Fatalf("the work failed or was killed after %v (%v):\n%s", took, err, out)
	}
	if took > lim.Time {
		t.Errorf("the work took %v, bound %v", took, lim.Time)
	}
	if rss > lim.RSS {
		t.Errorf("the work peaked at %d MB resident, bound %d MB", rss>>20, lim.RSS>>20)
	}
	t.Logf("ran in %v, peak %d MB resident (bounds %v, %d MB)", took.Round(time.Millisecond), rss>>20, lim.Time, lim.RSS>>20)
}
