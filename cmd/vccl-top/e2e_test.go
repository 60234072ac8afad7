package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/internal/syncbuf"
	"github.com/vccl-go/vccl/ui"
)

// The end-to-end tests run vccl-top in tmux against a real 4-rank job
// (topjob under vcclrun) and against the testdata trace, and read the
// screen with capture-pane. VCCLTOP_SCREENSHOTS=DIR keeps every screen they
// capture there (docs/vccl-top.md's screenshots come from it).

var bins struct {
	once sync.Once
	dir  string
	err  error
}

// build builds vcclrun, vccl-top and topjob once per test binary.
func build(t *testing.T) string {
	t.Helper()
	bins.once.Do(func() {
		bins.dir, bins.err = os.MkdirTemp("", "vccl-top-e2e-")
		if bins.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", bins.dir+"/", "./cmd/vcclrun", "./cmd/vccl-top", "./cmd/vccl-top/internal/topjob")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			bins.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// tmux is one vccl-top running in a tmux session of its own server.
type tmux struct {
	t      *testing.T
	socket string
	shots  string
}

func needTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (.ci/setup.d/50-tmux.sh installs it)")
	}
}

func startTmux(t *testing.T, w, h int, args ...string) *tmux {
	t.Helper()
	tm := &tmux{t: t, socket: fmt.Sprintf("vccl-top-e2e-%d-%d", os.Getpid(), time.Now().UnixNano()), shots: os.Getenv("VCCLTOP_SCREENSHOTS")}
	cmd := append([]string{"-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", fmt.Sprint(w), "-y", fmt.Sprint(h),
		"env", "TERM=xterm-256color", "COLORTERM=truecolor"}, args...)
	tm.run(cmd...)
	t.Cleanup(func() { exec.Command("tmux", "-L", tm.socket, "kill-server").Run() })
	return tm
}

func (tm *tmux) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", tm.socket}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (tm *tmux) capture() string { return tm.run("capture-pane", "-p", "-t", "top") }

func (tm *tmux) keys(keys ...string) { tm.run(append([]string{"send-keys", "-t", "top"}, keys...)...) }

// waitFor captures the pane until ok holds, for at most d.
func (tm *tmux) waitFor(what string, d time.Duration, ok func(screen string) bool) string {
	tm.t.Helper()
	deadline := time.Now().Add(d)
	var s string
	for {
		s = tm.capture()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("the screen did not show %s within %v:\n%s", what, d, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shot keeps the screen as a screenshot when VCCLTOP_SCREENSHOTS is set.
func (tm *tmux) shot(name, screen string) {
	if tm.shots == "" {
		return
	}
	os.MkdirAll(tm.shots, 0o755)
	os.WriteFile(filepath.Join(tm.shots, name+".txt"), []byte(screen), 0o644)
}

var (
	bandwidthRe = regexp.MustCompile(`\b[1-9][0-9.]* [kMG]B/s`)
	clockRe     = regexp.MustCompile(`\d\d:\d\d:\d\d\s*$`)
)

// rankLine returns the overview's line of rank r.
func rankLine(screen string, r int) string {
	re := regexp.MustCompile(fmt.Sprintf(`(?m)^[▸ ]\s+%d (up|DOWN) .*$`, r))
	return re.FindString(screen)
}

func allRanksUp(screen string, n int) bool {
	for r := range n {
		if l := rankLine(screen, r); !strings.Contains(l, " up ") || !bandwidthRe.MatchString(l) {
			return false
		}
	}
	return true
}

func header(screen string) string { return strings.SplitN(screen, "\n", 2)[0] }

// keepsUpdating waits until the header's clock moves: the screen is not
// frozen.
func (tm *tmux) keepsUpdating(screen string) string {
	tm.t.Helper()
	before := clockRe.FindString(header(screen))
	return tm.waitFor("a moving clock", 5*time.Second, func(s string) bool {
		c := clockRe.FindString(header(s))
		return c != "" && c != before
	})
}

// job is a 4-rank topjob under vcclrun.
type job struct {
	cmd  *exec.Cmd
	dir  string
	out  *syncbuf.Buffer
	done chan struct{}
}

func startJob(t *testing.T, bin string) *job {
	t.Helper()
	j := &job{dir: t.TempDir(), out: &syncbuf.Buffer{}, done: make(chan struct{})}
	j.cmd = exec.Command(filepath.Join(bin, "vcclrun"), "-n", "4", "--grace", "90s", "--",
		filepath.Join(bin, "topjob"), "-linger", "90s", "-pause", "10ms", "-count", "65536")
	j.cmd.Env = append(os.Environ(), "VCCL_TELEMETRY_DIR="+j.dir, "VCCL_JOB_TOKEN=e2e-token", "VCCL_TELEMETRY_ADDR=127.0.0.1:0")
	j.cmd.Stdout, j.cmd.Stderr = j.out, j.out
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { j.cmd.Wait(); close(j.done) }()
	t.Cleanup(func() {
		syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-j.done:
		case <-time.After(10 * time.Second):
			t.Error("the job did not end after SIGKILL")
		}
		if t.Failed() {
			t.Logf("job output:\n%s", j.out.String())
		}
	})
	return j
}

// endpoints waits for endpoints.json to list every rank.
func (j *job) endpoints(t *testing.T) live.Endpoints {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		eps, err := live.ReadEndpoints(j.dir)
		if err == nil && len(eps.Endpoints) == 4 {
			return eps
		}
		select {
		case <-j.done:
			t.Fatalf("the job ended before publishing its endpoints:\n%s", j.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no endpoints.json with 4 ranks in 60s (%v):\n%s", err, j.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rendezvousRe finds what rank 0 prints on stdout, which vcclrun passes
// through bare.
var rendezvousRe = regexp.MustCompile(`(?m)^rendezvous (\S+)$`)

func TestLiveJobInTmux(t *testing.T) {
	needTmux(t)
	bin := build(t)
	j := startJob(t, bin)
	eps := j.endpoints(t)

	// --once, by the rendezvous store and by targets.
	m := rendezvousRe.FindStringSubmatch(j.out.String())
	if m == nil {
		t.Fatalf("rank 0 did not print the rendezvous address:\n%s", j.out.String())
	}
	out, err := exec.Command(filepath.Join(bin, "vccl-top"), "--job", m[1], "--token", "e2e-token", "--once", "--output", "json", "--gpu", "off").Output()
	if err != nil {
		t.Fatalf("vccl-top --job --once: %v", err)
	}
	var f ui.Frame
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatalf("--output json: %v\n%s", err, out)
	}
	if f.Up() != 4 || len(f.Links) == 0 || f.UID != eps.UID {
		t.Errorf("--job --once: %d up, %d links, uid %q (want %q)", f.Up(), len(f.Links), f.UID, eps.UID)
	}
	var targets []string
	for _, e := range eps.Endpoints {
		targets = append(targets, e.URL)
	}
	out, err = exec.Command(filepath.Join(bin, "vccl-top"), "--targets", strings.Join(targets, ","), "--once", "--gpu", "off").Output()
	if err != nil || !strings.Contains(string(out), "ranks 4/4 up") || !strings.Contains(string(out), "allreduce") {
		t.Errorf("--targets --once --output table: %v\n%s", err, out)
	}

	// The screen: every rank up with bandwidth.
	tm := startTmux(t, 100, 30, filepath.Join(bin, "vccl-top"), "--dir", j.dir, "--gpu", "off")
	screen := tm.waitFor("4 ranks up with bandwidth, and the collectives", 30*time.Second, func(s string) bool {
		return allRanksUp(s, 4) && regexp.MustCompile(`allreduce\s+\d+\s+[0-9.]+\s+[1-9]`).MatchString(s)
	})
	tm.shot("overview", screen)
	tm.keys("2")
	tm.shot("matrix", tm.waitFor("the matrix", 5*time.Second, func(s string) bool { return strings.Contains(s, "from\\to") }))
	tm.keys("Enter")
	tm.shot("link", tm.waitFor("the link detail with sparklines", 5*time.Second, func(s string) bool {
		return strings.Contains(s, "latency p99") && strings.ContainsAny(s, "▁▂▃▄▅▆▇█")
	}))
	tm.keys("3")
	tm.shot("links", tm.waitFor("the links", 5*time.Second, func(s string) bool { return strings.Contains(s, "link directions over their windows") }))
	tm.keys("1")
	tm.waitFor("the overview", 5*time.Second, func(s string) bool { return strings.Contains(s, "OPERATION") })

	// Kill rank 3: shown down, with since when, while the screen keeps
	// updating and the others stay up.
	if err := syscall.Kill(eps.Endpoints[3].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	screen = tm.waitFor("rank 3 down", 15*time.Second, func(s string) bool {
		return strings.Contains(rankLine(s, 3), "DOWN") && strings.Contains(s, "3 up, 1 DOWN")
	})
	tm.shot("rank-down", screen)
	if l := rankLine(screen, 3); !regexp.MustCompile(`DOWN\s+\d\d:\d\d:\d\d \(\d+s\)`).MatchString(l) {
		t.Errorf("rank 3's line says no since when: %q", l)
	}
	screen = tm.keepsUpdating(screen)
	for r := range 3 {
		if l := rankLine(screen, r); !strings.Contains(l, " up ") {
			t.Errorf("rank %d is not up after rank 3 died: %q", r, l)
		}
	}
	// Keys still answer.
	tm.keys("2")
	tm.waitFor("rank 3 marked down in the matrix", 5*time.Second, func(s string) bool { return strings.Contains(s, "    3! ") })
	tm.keys("q")
}

func TestReplayInTmux(t *testing.T) {
	needTmux(t)
	bin := build(t)
	trace, err := filepath.Abs("testdata/trace")
	if err != nil {
		t.Fatal(err)
	}
	tm := startTmux(t, 80, 24, filepath.Join(bin, "vccl-top"), "--replay", trace, "--speed", "0.5")
	screen := tm.waitFor("4 ranks up with bandwidth", 30*time.Second, func(s string) bool { return allRanksUp(s, 4) })
	tm.shot("replay", screen)
	pos := func(s string) string { return regexp.MustCompile(`[▶‖] \S+/`).FindString(header(s)) }
	first := pos(screen)
	screen = tm.waitFor("rank 3 down", 30*time.Second, func(s string) bool {
		return strings.Contains(rankLine(s, 3), "DOWN") && strings.Contains(s, "3 up, 1 DOWN")
	})
	tm.shot("replay-rank-down", screen)
	if pos(screen) == first && !strings.Contains(header(screen), "end ") {
		t.Errorf("the replay did not move:\n%s", screen)
	}
	// The findings the analyzer made of the trace, and keys still answer.
	tm.keys("4")
	tm.shot("findings", tm.waitFor("the findings screen", 10*time.Second, func(s string) bool { return strings.Contains(s, "SEVERITY") }))
	tm.keys("?")
	tm.shot("help", tm.waitFor("the help", 5*time.Second, func(s string) bool { return strings.Contains(s, "drill down") && strings.Contains(s, "Keys") }))
	tm.keys("q")
}
