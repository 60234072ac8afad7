package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/term"
	"github.com/vccl-go/vccl/telemetry"
)

// The test binary doubles as the rank program: run with helperVar set, it
// acts out the named behaviour instead of running tests.
const helperVar = "VCCLRUN_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperVar); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

func helper(mode string) int {
	// A rank left behind by a broken test must not live on.
	time.AfterFunc(60*time.Second, func() { os.Exit(99) })
	rank := os.Getenv("RANK")
	block := func() int {
		fmt.Println("ready")
		select {}
	}
	switch mode {
	case "telemetry":
		// A VCCL job with live endpoints, up until the test has read
		// vcclrun's announcement (it then creates the release file).
		ctx := context.Background()
		comm, err := collective.NewFromEnv(ctx, collective.WithTelemetry(true), collective.WithTelemetryAttachers(false))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		e, err := telemetry.Attach(ctx, comm, telemetry.Config{Live: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for {
			if _, err := os.Stat(os.Getenv("RELEASE_FILE")); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		e.Close(ctx)
		if err := comm.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "env":
		fmt.Printf("env RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s LOCAL_WORLD_SIZE=%s MASTER_ADDR=%s MASTER_PORT=%s VCCL_JOB_TOKEN=%s VCCL_RANK=%q\n",
			rank, os.Getenv("WORLD_SIZE"), os.Getenv("LOCAL_RANK"), os.Getenv("LOCAL_WORLD_SIZE"),
			os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"), os.Getenv("VCCL_JOB_TOKEN"), os.Getenv("VCCL_RANK"))
		return 0
	case "output":
		os.Stdout.WriteString("first ")
		os.Stdout.WriteString("half\nsecond line\n")
		os.Stderr.WriteString("to stderr\n")
		os.Stdout.WriteString("no newline at exit")
		return 0
	case "progress":
		// What vccl-bench does: a bar on stderr, redrawn after carriage
		// returns and erased before it ends, and the table on stdout.
		fmt.Printf("status lines %q\n", os.Getenv(term.StatusLinesVar))
		for i := range 3 {
			fmt.Fprintf(os.Stderr, "\r\x1b[Kbar %d", i)
		}
		fmt.Fprint(os.Stderr, "\r\x1b[K")
		fmt.Println("table")
		fmt.Fprint(os.Stderr, "\r\x1b[Kleft behind")
		return 0
	case "fail":
		if rank == "1" {
			fmt.Println("failing")
			return 3
		}
		return block()
	case "sigkill":
		if rank == "1" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		return block()
	case "ignoreterm":
		// Every rank ignores SIGTERM; rank 1 fails when the test
		// opens the FIFO, which it does once all ranks are ready.
		signal.Ignore(syscall.SIGTERM)
		if rank == "1" {
			fmt.Println("ready")
			f, err := os.Open(os.Getenv("VCCLRUN_TEST_FIFO"))
			if err == nil {
				f.Close()
			}
			return 3
		}
		return block()
	case "block":
		return block()
	case "rendezvous":
		return rendezvous()
	case "cpus":
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		m := regexp.MustCompile(`(?m)^Cpus_allowed_list:\s*(\S+)$`).FindSubmatch(b)
		if m == nil {
			fmt.Fprintln(os.Stderr, "no Cpus_allowed_list in /proc/self/status")
			return 1
		}
		fmt.Printf("cpus %s\n", m[1])
		return 0
	case "sigint":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGINT)
		fmt.Println("ready")
		<-c
		fmt.Println("got interrupt")
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 2
}

// rendezvous reads the environment vcclrun set the way a VCCL program does
// and meets the other ranks through rank 0's store.
func rendezvous() int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	env, err := bootstrap.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if env.Rank == 0 {
		s, err := bootstrap.Serve(ctx, env.Addr(), env.Token)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer s.Close()
	}
	c, err := bootstrap.Dial(ctx, env.Addr(), env.Token, env.Rank)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	if err := c.Barrier(ctx, "up", env.Size); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	n, err := c.Add(ctx, "n", 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Rank 0 keeps the store up until everyone is done with it: each rank
	// says so with its last request, and rank 0 waits for all of them. (A
	// barrier would not do: a rank may still be sending its wait for the
	// release when the last one arrives and rank 0 leaves.)
	if err := c.Set(ctx, fmt.Sprintf("left/%d", env.Rank), nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if env.Rank == 0 {
		keys := make([]string, env.Size)
		for r := range keys {
			keys[r] = fmt.Sprintf("left/%d", r)
		}
		if err := c.Wait(ctx, keys...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Printf("rank %d of %d (%s, local %d/%d) met the others, add #%d\n", env.Rank, env.Size, env.Source, env.LocalRank, env.LocalSize, n)
	return 0
}

// output collects what the ranks write and reports once n lines matched
// "ready" have arrived.
type output struct {
	mu     sync.Mutex
	b      bytes.Buffer
	want   int
	ready  int
	readyC chan struct{}
}

func newOutput(wantReady int) *output {
	return &output{want: wantReady, readyC: make(chan struct{})}
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b.Write(p)
	o.ready += bytes.Count(p, []byte("] ready\n"))
	if o.want > 0 && o.ready == o.want {
		close(o.readyC)
		o.want = 0
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// job is a Config that runs this test binary as the ranks in mode.
func job(t *testing.T, n int, mode string, extraEnv ...string) (Config, *output, *output) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr := newOutput(0), newOutput(0)
	// The race detector otherwise sleeps a second in every exiting rank.
	env := append([]string{helperVar + "=" + mode, "PATH=" + os.Getenv("PATH"), "GORACE=atexit_sleep_ms=0"}, extraEnv...)
	return Config{N: n, Grace: 5 * time.Second, TagOutput: TagOutputAll, Prog: exe, Env: env, Stdout: stdout, Stderr: stderr}, stdout, stderr
}

// runJob runs cfg and checks it ended within the test's deadline.
func runJob(t *testing.T, ctx context.Context, cfg Config) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	err := Run(ctx, cfg)
	if ctx.Err() != nil {
		t.Fatalf("job outlived the test deadline: %v", err)
	}
	return time.Since(start), err
}

func TestEnvPerRank(t *testing.T) {
	ctx := testCtx(t)
	cfg, stdout, stderr := job(t, 3, "env", "RANK=99", "VCCL_RANK=7", "MASTER_ADDR=elsewhere")
	if _, err := runJob(t, ctx, cfg); err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, stderr)
	}
	re := regexp.MustCompile(`(?m)^\[(\d)\] env RANK=(\d) WORLD_SIZE=3 LOCAL_RANK=(\d) LOCAL_WORLD_SIZE=3 MASTER_ADDR=127\.0\.0\.1 MASTER_PORT=(\d+) VCCL_JOB_TOKEN=([0-9a-f]{32}) VCCL_RANK=""$`)
	ms := re.FindAllStringSubmatch(stdout.String(), -1)
	if len(ms) != 3 {
		t.Fatalf("want 3 env lines, got:\n%s", stdout)
	}
	seen := map[string]bool{}
	for _, m := range ms {
		if m[1] != m[2] || m[2] != m[3] {
			t.Errorf("line tagged [%s] has RANK=%s LOCAL_RANK=%s", m[1], m[2], m[3])
		}
		seen[m[1]] = true
		if m[4] != ms[0][4] || m[5] != ms[0][5] {
			t.Errorf("ranks disagree on port or token: %q vs %q", m[0], ms[0][0])
		}
	}
	if len(seen) != 3 {
		t.Errorf("ranks seen: %v", seen)
	}
}

// The environment vcclrun sets is the one bootstrap.FromEnv reads.
func TestRanksRendezvous(t *testing.T) {
	ctx := testCtx(t)
	cfg, stdout, stderr := job(t, 3, "rendezvous")
	if _, err := runJob(t, ctx, cfg); err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for r := range 3 {
		if want := fmt.Sprintf("[%d] rank %d of 3 (torchrun, local %d/3) met the others", r, r, r); !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

func TestInheritedTokenKept(t *testing.T) {
	ctx := testCtx(t)
	cfg, stdout, _ := job(t, 2, "env", "VCCL_JOB_TOKEN=mine")
	cfg.Port = 4242
	if _, err := runJob(t, ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(stdout.String(), "MASTER_PORT=4242 VCCL_JOB_TOKEN=mine "); n != 2 {
		t.Fatalf("inherited token or port not passed on:\n%s", stdout)
	}
}

func TestOutputTagged(t *testing.T) {
	ctx := testCtx(t)
	cfg, stdout, stderr := job(t, 2, "output")
	if _, err := runJob(t, ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		for _, want := range []string{"first half", "second line", "no newline at exit"} {
			if line := fmt.Sprintf("[%d] %s\n", r, want); !strings.Contains(stdout.String(), line) {
				t.Errorf("stdout lacks %q:\n%s", line, stdout)
			}
		}
		if line := fmt.Sprintf("[%d] to stderr\n", r); !strings.Contains(stderr.String(), line) {
			t.Errorf("stderr lacks %q:\n%s", line, stderr)
		}
	}
	if n := strings.Count(stdout.String(), "\n"); n != 6 {
		t.Errorf("want 6 stdout lines, got %d:\n%s", n, stdout)
	}

	cfg, stdout, _ = job(t, 1, "output")
	cfg.TagOutput = TagOutputNone
	if _, err := runJob(t, ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if got := stdout.String(); got != "first half\nsecond line\nno newline at exit" {
		t.Errorf("untagged output = %q", got)
	}

	// By default rank 0's stdout passes through bare, whole lines; every
	// other line is tagged.
	cfg, stdout, stderr = job(t, 2, "output")
	cfg.TagOutput = TagOutputAuto
	if _, err := runJob(t, ctx, cfg); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	bare := 0
	for _, l := range lines {
		switch l {
		case "first half", "second line", "no newline at exit":
			bare++
		case "[1] first half", "[1] second line", "[1] no newline at exit":
		default:
			t.Errorf("stdout line %q", l)
		}
	}
	if bare != 3 || len(lines) != 6 || !strings.Contains(stderr.String(), "[0] to stderr\n") || !strings.Contains(stderr.String(), "[1] to stderr\n") {
		t.Errorf("auto tagging: stdout %q, stderr %q", stdout, stderr)
	}
}

// On a terminal, vcclrun tells the ranks it shows status lines and shows
// a rank's bar without making it output; elsewhere the ranks are told
// nothing (even when vcclrun itself inherited the variable).
func TestStatusLine(t *testing.T) {
	ctx := testCtx(t)
	for _, on := range []bool{false, true} {
		cfg, stdout, stderr := job(t, 1, "progress", term.StatusLinesVar+"=1")
		cfg.StatusLine = on
		if _, err := runJob(t, ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{false: `[0] status lines ""`, true: `[0] status lines "1"`}[on]; !strings.Contains(stdout.String(), want) {
			t.Errorf("status line %v: stdout lacks %s:\n%q", on, want, stdout)
		}
		if strings.Contains(stdout.String(), "bar") {
			t.Errorf("the bar reached stdout: %q", stdout)
		}
		if !on {
			continue
		}
		// The bar was drawn (a pipe read may hold several of its
		// states: the last one shows), and the one left behind by the
		// exiting rank was erased, not printed.
		got := stderr.String()
		if !strings.Contains(got, "[0] left behind") || strings.Contains(got, "\n") || !strings.HasSuffix(got, "\r\x1b[K") {
			t.Errorf("stderr with a status line: %q", got)
		}
	}
}

func TestRankFailureStopsOthers(t *testing.T) {
	ctx := testCtx(t)
	cfg, stdout, _ := job(t, 3, "fail")
	took, err := runJob(t, ctx, cfg)
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || re.ExitCode != 3 || re.Signal != 0 {
		t.Fatalf("err = %#v (%v), want rank 1 exit code 3", err, err)
	}
	if !reflect.DeepEqual(re.Stopped, []int{0, 2}) {
		t.Errorf("stopped ranks %v, want [0 2]", re.Stopped)
	}
	if took >= cfg.Grace {
		t.Errorf("job took %v: the others were not stopped by SIGTERM", took)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "rank 1 exited with code 3") {
		t.Errorf("message %q", msg)
	}
	if ExitCode(err) != 3 {
		t.Errorf("ExitCode = %d, want 3", ExitCode(err))
	}
	if !strings.Contains(stdout.String(), "[1] failing\n") {
		t.Errorf("stdout:\n%s", stdout)
	}
}

func TestRankKilledBySignal(t *testing.T) {
	ctx := testCtx(t)
	cfg, _, _ := job(t, 2, "sigkill")
	_, err := runJob(t, ctx, cfg)
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || re.Signal != syscall.SIGKILL {
		t.Fatalf("err = %v, want rank 1 killed by SIGKILL", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "rank 1 was killed by signal SIGKILL") {
		t.Errorf("message %q", msg)
	}
	if ExitCode(err) != 128+9 {
		t.Errorf("ExitCode = %d, want 137", ExitCode(err))
	}
}

// Ranks that ignore SIGTERM are killed once the grace period is over.
func TestGraceThenKill(t *testing.T) {
	ctx := testCtx(t)
	fifo := filepath.Join(t.TempDir(), "fail")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, stdout, _ := job(t, 3, "ignoreterm", "VCCLRUN_TEST_FIFO="+fifo)
	stdout.want = 3
	cfg.Grace = 300 * time.Millisecond
	go func() {
		select {
		case <-stdout.readyC:
			// Blocks until rank 1 opens the other end, then releases it.
			if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				f.Close()
			}
		case <-ctx.Done():
		}
	}()
	took, err := runJob(t, ctx, cfg)
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || re.ExitCode != 3 {
		t.Fatalf("err = %v, want rank 1 exit code 3", err)
	}
	if took < cfg.Grace {
		t.Errorf("job ended after %v, before the %v grace period", took, cfg.Grace)
	}
}

func TestTimeout(t *testing.T) {
	ctx := testCtx(t)
	cfg, _, _ := job(t, 2, "block")
	cfg.Timeout = 300 * time.Millisecond
	took, err := runJob(t, ctx, cfg)
	var te *TimeoutError
	if !errors.As(err, &te) || err.Error() != "job timed out after 300ms" {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if ExitCode(err) != 124 {
		t.Errorf("ExitCode = %d", ExitCode(err))
	}
	if took < cfg.Timeout {
		t.Errorf("job ended after %v, before its timeout", took)
	}
}

func TestSignalForwarded(t *testing.T) {
	ctx := testCtx(t)
	cfg, stdout, _ := job(t, 2, "sigint")
	stdout.want = 2
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	go func() {
		select {
		case <-stdout.readyC:
			sigs <- syscall.SIGINT
		case <-ctx.Done():
		}
	}()
	_, err := runJob(t, ctx, cfg)
	var ie *InterruptedError
	if !errors.As(err, &ie) || err.Error() != "interrupted by SIGINT" {
		t.Fatalf("err = %v, want interrupted by SIGINT", err)
	}
	if ExitCode(err) != 130 {
		t.Errorf("ExitCode = %d, want 130", ExitCode(err))
	}
	for r := range 2 {
		if line := fmt.Sprintf("[%d] got interrupt\n", r); !strings.Contains(stdout.String(), line) {
			t.Errorf("rank %d did not get the signal:\n%s", r, stdout)
		}
	}
}

func TestContextCancelStopsJob(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	cfg, stdout, _ := job(t, 2, "block")
	stdout.want = 2
	go func() {
		select {
		case <-stdout.readyC:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context canceled", err)
	}
}

func TestRunErrors(t *testing.T) {
	ctx := testCtx(t)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{N: 0, Prog: "true"}, "at least one rank"},
		{Config{N: 1}, "no program"},
		{Config{N: 1, Prog: "definitely-not-a-program-vcclrun"}, "cannot run definitely-not-a-program-vcclrun"},
		{Config{N: 1, Prog: "true", Grace: -1}, "negative"},
	} {
		if err := Run(ctx, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

func TestMainExitStatus(t *testing.T) {
	ctx := testCtx(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(helperVar, "fail")
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	var stdout, stderr bytes.Buffer
	code := Main(ctx, []string{"-n", "2", "--grace", "2s", "--", exe}, &stdout, &stderr, nil)
	if code != 3 {
		t.Errorf("exit status %d, want 3", code)
	}
	if want := "vcclrun: rank 1 exited with code 3; stopped rank(s) 0\n"; stderr.String() != want {
		t.Errorf("stderr = %q, want %q", stderr.String(), want)
	}

	stderr.Reset()
	if code := Main(ctx, []string{"-n", "0", "prog"}, &stdout, &stderr, nil); code != 2 || !strings.Contains(stderr.String(), "vcclrun: -n 0: need at least one rank\nusage: vcclrun") {
		t.Errorf("bad -n: status %d, stderr %q", code, stderr.String())
	}
}

// A signal or the timeout while ranks still start stops the job at once:
// vcclrun -n 1024 answers SIGTERM in moments, not once every rank has
// started, and starts no more.
func TestStopWhileStarting(t *testing.T) {
	for _, how := range []string{"signal", "timeout"} {
		t.Run(how, func(t *testing.T) {
			ctx := testCtx(t)
			cfg, stdout, _ := job(t, MaxRanks, "block")
			cfg.Bind = BindNone
			sigs := make(chan os.Signal, 1)
			cfg.Signals = sigs
			if how == "signal" {
				sigs <- syscall.SIGTERM
			} else {
				cfg.Timeout = 100 * time.Millisecond
			}
			took, err := runJob(t, ctx, cfg)
			var ie *InterruptedError
			var te *TimeoutError
			if how == "signal" && !errors.As(err, &ie) || how == "timeout" && !errors.As(err, &te) {
				t.Fatalf("err = %v", err)
			}
			started := strings.Count(stdout.String(), "ready")
			if took > 5*time.Second || started >= MaxRanks {
				t.Fatalf("the job ended %v after the start, %d of %d ranks having started", took, started, MaxRanks)
			}
			t.Logf("%s: the job ended after %v; %d of %d ranks had started (and said ready)", how, took, started, MaxRanks)
		})
	}
}

func TestTooManyRanks(t *testing.T) {
	if _, err := ParseArgs([]string{"-n", "3000", "/bin/true"}); err == nil || !strings.Contains(err.Error(), "at most 1024") {
		t.Fatalf("-n 3000: %v", err)
	}
	if err := Run(context.Background(), Config{N: MaxRanks + 1, Prog: "/bin/true"}); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("Run with %d ranks: %v", MaxRanks+1, err)
	}
}

// vcclrun says on stderr, while the job runs, its job id (the one every
// telemetry output carries), rank 0's live endpoint and a vccl-top command
// line that watches the job, and never the job token.
func TestAnnounce(t *testing.T) {
	ctx := testCtx(t)
	release := filepath.Join(t.TempDir(), "release")
	cfg, _, stderr := job(t, 2, "telemetry", "RELEASE_FILE="+release)
	cfg.Announce = true
	errc := make(chan error, 1)
	go func() { _, err := runJob(t, ctx, cfg); errc <- err }()
	live := regexp.MustCompile(`(?m)^vcclrun: live telemetry at (http://127\.0\.0\.1:\d+) \(rank 0: /metrics, /v1/info\), while the job runs; watch it: vccl-top --targets (\S+)$`)
	var m []string
	for m == nil {
		select {
		case err := <-errc:
			t.Fatalf("the job ended (%v) before vcclrun said where to watch it:\n%s", err, stderr)
		case <-ctx.Done():
			t.Fatalf("no announcement:\n%s", stderr)
		case <-time.After(20 * time.Millisecond):
		}
		m = live.FindStringSubmatch(stderr.String())
	}
	// The endpoint answers while the job runs, as announced.
	resp, err := http.Get(m[1] + "/v1/info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		CommID uint32 `json:"comm_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("job: %v\n%s", err, stderr)
	}
	want := fmt.Sprintf("vcclrun: job %s: 2 ranks, rendezvous 127.0.0.1:", flowtel.JobID(info.CommID))
	if !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("stderr does not start with %q:\n%s", want, stderr)
	}
	if n := len(strings.Split(m[2], ",")); n != 2 || !strings.HasPrefix(m[2], m[1]+",") {
		t.Errorf("vccl-top --targets %s: want rank 0's endpoint, then rank 1's", m[2])
	}
	if tok := regexp.MustCompile(`[0-9a-f]{32}`).FindString(stderr.String()); tok != "" {
		t.Errorf("stderr shows what looks like the job token %s:\n%s", tok, stderr)
	}
}
