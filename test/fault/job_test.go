//go:build linux

package fault

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/syncbuf"
)

// job is a running all-reduce loop, one worker process per rank, each in
// its namespace.
type job struct {
	t     testing.TB
	nw    *network
	procs []*exec.Cmd
	stdin []io.WriteCloser
	errs  []*syncbuf.Buffer

	mu     sync.Mutex
	events []event
	exited []bool
	codes  []int
	notify chan struct{} // signalled on every event and exit
	wg     sync.WaitGroup
}

var jobPort = 29500 + os.Getpid()%2000

// start starts the ranks with cfg and extra environment; it returns once
// every rank reported ready.
func (nw *network) start(cfg workerConfig, env ...string) *job {
	t := nw.t
	t.Helper()
	b, _ := json.Marshal(cfg)
	j := &job{t: t, nw: nw, notify: make(chan struct{}, 1), exited: make([]bool, nw.n), codes: make([]int, nw.n)}
	jobPort++
	base := append(os.Environ(),
		envWorker+"="+string(b),
		fmt.Sprintf("WORLD_SIZE=%d", nw.n),
		"MASTER_ADDR="+nw.addr(0, 2),
		fmt.Sprintf("MASTER_PORT=%d", jobPort),
		"VCCL_JOB_TOKEN=fault-"+nw.id,
		"VCCL_TRANSPORT=tcp",
		"VCCL_FAULT_TOLERANCE=1",
		"VCCL_SOCKET_IFNAME=nic0,nic1",
		"VCCL_TIMEOUT=30s",
		"VCCL_TELEMETRY=1",
		"GORACE=atexit_sleep_ms=0",
	)
	for r := range nw.n {
		cmd := exec.Command("ip", "netns", "exec", nw.ns[r], os.Args[0])
		cmd.Env = append(append(append([]string{}, base...), fmt.Sprintf("RANK=%d", r), fmt.Sprintf("LOCAL_RANK=%d", r)), env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		j.stdin = append(j.stdin, in)
		errb := &syncbuf.Buffer{}
		cmd.Stderr = errb
		j.errs = append(j.errs, errb)
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting rank %d: %v", r, err)
		}
		j.procs = append(j.procs, cmd)
		j.wg.Add(1)
		go j.read(r, stdout)
	}
	t.Cleanup(j.kill)
	j.waitFor(fmt.Sprintf("%d ranks ready", nw.n), 60*time.Second, func() bool { return j.count("ready", -1) == nw.n })
	return j
}

func (j *job) read(rank int, r io.Reader) {
	defer j.wg.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // not ours (a stray print)
		}
		ev.Rank = rank
		j.mu.Lock()
		j.events = append(j.events, ev)
		j.mu.Unlock()
		j.signal()
	}
	j.procs[rank].Wait()
	j.mu.Lock()
	j.exited[rank] = true
	j.codes[rank] = j.procs[rank].ProcessState.ExitCode()
	j.mu.Unlock()
	j.signal()
}

func (j *job) signal() {
	select {
	case j.notify <- struct{}{}:
	default:
	}
}

// snapshot returns the events so far.
func (j *job) snapshot() []event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]event(nil), j.events...)
}

// count counts events of kind ev from rank (-1: any rank).
func (j *job) count(ev string, rank int) int {
	n := 0
	for _, e := range j.snapshot() {
		if e.Ev == ev && (rank < 0 || e.Rank == rank) {
			n++
		}
	}
	return n
}

// waitFor waits until cond holds, failing t after limit (or at once when
// a rank reported an error or a wrong result it was not expected to).
//
// The limit is on a clock that runs only while this process runs: each
// wake-up counts the time since the last, at most waitCredit, however late
// the scheduler woke it. On a host whose CPUs are hogged, the ranks are
// starved alike and the deadline stretches with the starvation measured
// here; on an idle host it is limit.
func (j *job) waitFor(what string, limit time.Duration, cond func() bool) time.Duration {
	j.t.Helper()
	start := time.Now()
	last := start
	var credited time.Duration
	for !cond() {
		select {
		case <-j.notify:
		case <-time.After(50 * time.Millisecond):
		}
		now := time.Now()
		credited += min(now.Sub(last), waitCredit)
		last = now
		if credited > limit {
			j.t.Fatalf("%s: not within %v of running time (%v of wall time)\n%s", what, limit, now.Sub(start).Round(time.Millisecond), j.diag())
		}
	}
	return time.Since(start)
}

// waitCredit is the most one wake-up of waitFor counts toward its limit:
// a little over its 50 ms poll.
const waitCredit = 75 * time.Millisecond

// itersDone returns how many iterations rank 0 reported.
func (j *job) lastIter() int {
	last := -1
	for _, e := range j.snapshot() {
		if e.Ev == "iter" && e.Iter > last {
			last = e.Iter
		}
	}
	return last
}

// waitIters waits for rank 0 to report k more iterations.
func (j *job) waitIters(k int, limit time.Duration) {
	j.t.Helper()
	from := j.lastIter()
	j.waitFor(fmt.Sprintf("%d more all-reduces after %d", k, from), limit, func() bool {
		j.failOnError()
		return j.lastIter() >= from+k || j.allExited()
	})
}

func (j *job) allExited() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, x := range j.exited {
		if !x {
			return false
		}
	}
	return true
}

// failOnError fails t if a rank reported an error or a wrong result.
func (j *job) failOnError() {
	j.t.Helper()
	for _, e := range j.snapshot() {
		if e.Ev == "error" || e.Ev == "wrong" {
			j.t.Fatalf("rank %d: %s at iteration %d: %s\n%s", e.Rank, e.Ev, e.Iter, e.Msg, j.diag())
		}
	}
}

// stop asks rank 0 to end the loop and waits for every rank to exit.
func (j *job) stop(limit time.Duration) {
	j.t.Helper()
	fmt.Fprintln(j.stdin[0], "stop")
	j.waitExit(limit)
}

func (j *job) waitExit(limit time.Duration) {
	j.t.Helper()
	j.waitFor("every rank to exit", limit, func() bool {
		j.failOnError()
		return j.allExited()
	})
	j.wg.Wait()
}

// sigkill kills rank r's process and returns the time it did.
func (j *job) sigkill(r int) int64 {
	ts := flowtel.Monotonic()
	j.procs[r].Process.Signal(syscall.SIGKILL)
	return ts
}

// release lets ranks that reported an error exit.
func (j *job) release() {
	for _, in := range j.stdin {
		fmt.Fprintln(in, "exit")
	}
}

func (j *job) kill() {
	j.mu.Lock()
	exited := append([]bool(nil), j.exited...)
	j.mu.Unlock()
	for r, p := range j.procs {
		if !exited[r] {
			p.Process.Kill()
		}
	}
	for _, in := range j.stdin {
		in.Close()
	}
	done := make(chan struct{})
	go func() { j.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// diag returns the tail of every rank's stderr.
func (j *job) diag() string {
	var b strings.Builder
	for r, e := range j.errs {
		s := e.String()
		if len(s) > 3000 {
			s = "…" + s[len(s)-3000:]
		}
		fmt.Fprintf(&b, "--- rank %d stderr:\n%s\n", r, s)
	}
	return b.String()
}

// done returns each rank's final report.
func (j *job) done() []event {
	out := make([]event, j.nw.n)
	for _, e := range j.snapshot() {
		if e.Ev == "done" {
			out[e.Rank] = e
		}
	}
	return out
}
