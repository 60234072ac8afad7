// Package launch is vcclrun's logic: it starts N local ranks of a program
// with the torchrun-style environment that bootstrap.FromEnv reads, tags
// their output with their rank, forwards signals to them, and stops the job
// as soon as one rank fails.
package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/internal/term"
)

// Config describes one job.
type Config struct {
	N       int           // ranks to start, ≥ 1
	Grace   time.Duration // between SIGTERM and SIGKILL when stopping ranks
	Timeout time.Duration // stop the job after this long; 0 = never
	// TagOutput says which output lines get a "[rank] " prefix:
	// TagOutputAuto ("" too), TagOutputAll or TagOutputNone.
	TagOutput string
	// Bind: how ranks are bound to CPUs, BindCore (Open MPI's default:
	// each rank whole cores of its own, when the ranks fit in the CPUs
	// vcclrun may use; Linux only) or BindNone. "" is BindCore.
	Bind string
	// StatusLine: Stderr is a terminal, on which the ranks' status lines
	// (what a rank writes to stderr after a carriage return: a progress
	// bar) are shown on one line kept below the output; the ranks learn it
	// from term.StatusLinesVar.
	StatusLine bool
	// Announce: say on Stderr, as soon as the job has them, its job id
	// and where and how to watch it live.
	Announce bool
	Prog     string   // program (looked up in PATH if it has no slash)
	Args     []string // its arguments

	Env     []string         // environment the ranks inherit; nil = os.Environ()
	Stdout  io.Writer        // nil = os.Stdout
	Stderr  io.Writer        // nil = os.Stderr
	Port    int              // MASTER_PORT; 0 = a free port
	Signals <-chan os.Signal // signals to forward to every rank; nil = none
}

// MaxRanks bounds -n: a local launcher's job, one process per rank, on one
// host.
const MaxRanks = 1024

// Output tagging, Config.TagOutput and --tag-output.
const (
	// TagOutputAuto prefixes every line but those rank 0 writes to
	// stdout, which pass through as they are: what rank 0 prints (a
	// report, vccl-bench's table) reads as the program's own, as under
	// mpirun or srun, and other ranks' lines stay told apart.
	TagOutputAuto = "auto"
	TagOutputAll  = "true"  // every line, rank 0's stdout too
	TagOutputNone = "false" // none
)

// tagged says whether rank's lines on stdout (or stderr) get a prefix.
func (c *Config) tagged(rank int, stdout bool) bool {
	switch c.TagOutput {
	case TagOutputAll:
		return true
	case TagOutputNone:
		return false
	}
	return rank != 0 || !stdout
}

// Binding policies for Config.Bind, named as Open MPI's --bind-to.
const (
	BindCore = "core"
	BindNone = "none"
)

// Variables vcclrun sets for every rank. Inherited values of these, and of
// the VCCL_* variables that would take precedence over them in
// bootstrap.FromEnv, are removed; VCCL_JOB_TOKEN is kept if set.
var rankVars = []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}

var shadowingVars = []string{"VCCL_RANK", "VCCL_WORLD_SIZE", "VCCL_LOCAL_RANK", "VCCL_LOCAL_WORLD_SIZE", "VCCL_MASTER_ADDR", "VCCL_MASTER_PORT"}

const (
	tokenVar     = "VCCL_JOB_TOKEN"
	tokenFileVar = "VCCL_JOB_TOKEN_FILE"
)

// RankError: a rank failed, and the job was stopped because of it.
type RankError struct {
	Rank     int
	ExitCode int            // the rank's exit status, when it exited (-1 when killed)
	Signal   syscall.Signal // the signal that killed it, when one did (0 otherwise)
	Stopped  []int          // ranks vcclrun then stopped (running as far as it knew)
}

func (e *RankError) Error() string {
	var s string
	if e.Signal != 0 {
		s = fmt.Sprintf("rank %d was killed by signal %s", e.Rank, signalName(e.Signal))
	} else {
		s = fmt.Sprintf("rank %d exited with code %d", e.Rank, e.ExitCode)
	}
	if len(e.Stopped) > 0 {
		ids := make([]string, len(e.Stopped))
		for i, r := range e.Stopped {
			ids[i] = strconv.Itoa(r)
		}
		s += "; stopped rank(s) " + strings.Join(ids, ", ")
	}
	return s
}

// TimeoutError: the job ran past Config.Timeout and was stopped.
type TimeoutError struct{ After time.Duration }

func (e *TimeoutError) Error() string { return fmt.Sprintf("job timed out after %v", e.After) }

// InterruptedError: vcclrun received a signal, forwarded it, and the job ended.
type InterruptedError struct{ Signal os.Signal }

func (e *InterruptedError) Error() string {
	name := e.Signal.String()
	if s, ok := e.Signal.(syscall.Signal); ok {
		name = signalName(s)
	}
	return "interrupted by " + name
}

// ExitCode is the status vcclrun exits with for an error from Run: the failed
// rank's exit code, or 128+signal when a signal killed it or interrupted the
// job (as shells report), 124 on timeout (as timeout(1)), 1 otherwise.
func ExitCode(err error) int {
	var re *RankError
	var te *TimeoutError
	var ie *InterruptedError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &re):
		if re.Signal != 0 {
			return 128 + int(re.Signal)
		}
		if re.ExitCode > 0 && re.ExitCode < 256 {
			return re.ExitCode
		}
		return 1
	case errors.As(err, &te):
		return 124
	case errors.As(err, &ie):
		if s, ok := ie.Signal.(syscall.Signal); ok {
			return 128 + int(s)
		}
		return 1
	default:
		return 1
	}
}

// rank is one started process.
type rank struct {
	id     int
	cmd    *exec.Cmd
	flush  []*prefixWriter
	exited bool
}

type exitEvent struct {
	rank  int
	state *os.ProcessState
	err   error
}

// Run starts the job and returns when every rank has exited: nil if all
// exited 0, else why the job failed (*RankError for the first rank that
// failed, *TimeoutError, *InterruptedError, ctx's error, or a start error).
// When a rank fails, the job times out or ctx is done, the ranks still
// running get SIGTERM and, Grace later, SIGKILL. Signals from cfg.Signals
// are forwarded to every running rank, which then have Grace to exit.
func Run(ctx context.Context, cfg Config) error {
	if cfg.N < 1 {
		return fmt.Errorf("need at least one rank, got -n %d", cfg.N)
	}
	if cfg.N > MaxRanks {
		return fmt.Errorf("-n %d: at most %d ranks on one host", cfg.N, MaxRanks)
	}
	if cfg.Prog == "" {
		return errors.New("no program to run")
	}
	if cfg.Grace < 0 || cfg.Timeout < 0 {
		return errors.New("grace and timeout must not be negative")
	}
	path, err := exec.LookPath(cfg.Prog)
	if err != nil {
		return fmt.Errorf("cannot run %s: %w", cfg.Prog, err)
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	stdout, stderr := cfg.Stdout, cfg.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	port := cfg.Port
	if port == 0 {
		if port, err = freePort(); err != nil {
			return err
		}
	}
	var binding [][]int // each rank's CPUs; nil: not bound
	switch cfg.Bind {
	case "", BindCore:
		if bindingSupported {
			cpus, err := allowedCPUs()
			if err != nil {
				return err
			}
			binding = planBinding(cfg.N, cpus)
		}
	case BindNone:
	default:
		return fmt.Errorf("bind %q: want %s or %s", cfg.Bind, BindCore, BindNone)
	}
	base, token, tokenFile := jobEnv(env)
	if token == "" && !tokenFile {
		if token, err = newToken(); err != nil {
			return err
		}
	}

	var outMu sync.Mutex
	outW := newLockedWriter(&outMu, stdout)
	errW := newLockedWriter(&outMu, stderr)
	if cfg.StatusLine {
		st := newStatusLine(stderr, cfg.N)
		outW.st, errW.st = st, st
		base = append(base, term.StatusLinesVar+"=1")
	}
	events := make(chan exitEvent, cfg.N)
	ranks := make([]*rank, 0, cfg.N)
	running := 0

	signalAll := func(sig syscall.Signal) {
		for _, r := range ranks {
			if !r.exited {
				// The rank leads its own process group: reach it and
				// its children. ESRCH (already gone) is fine.
				syscall.Kill(-r.cmd.Process.Pid, sig)
			}
		}
	}

	// startRank starts rank i.
	startRank := func(i int) error {
		cmd := exec.Command(path, cfg.Args...)
		cmd.Env = append(append([]string(nil), base...),
			"RANK="+strconv.Itoa(i),
			"WORLD_SIZE="+strconv.Itoa(cfg.N),
			"LOCAL_RANK="+strconv.Itoa(i),
			"LOCAL_WORLD_SIZE="+strconv.Itoa(cfg.N),
			"MASTER_ADDR=127.0.0.1",
			"MASTER_PORT="+strconv.Itoa(port),
		)
		if token != "" {
			cmd.Env = append(cmd.Env, tokenVar+"="+token)
		}
		cmd.SysProcAttr = sysProcAttr()
		// A rank's children may keep its pipes open after it exits:
		// stop waiting for them after this long.
		cmd.WaitDelay = max(cfg.Grace, time.Second)
		r := &rank{id: i, cmd: cmd}
		if cfg.TagOutput != TagOutputNone || cfg.StatusLine {
			prefix := func(stdout bool) string {
				if cfg.tagged(i, stdout) {
					return fmt.Sprintf("[%d] ", i)
				}
				return ""
			}
			o := newPrefixWriter(outW, prefix(true))
			e := newPrefixWriter(errW, prefix(false))
			if cfg.StatusLine {
				e.status = func(text string) { errW.setStatus(i, text) }
			}
			cmd.Stdout, cmd.Stderr = o, e
			r.flush = []*prefixWriter{o, e}
		} else {
			cmd.Stdout, cmd.Stderr = outW, errW
		}
		start := cmd.Start
		if binding != nil {
			start = func() error { return startBound(cmd, binding[i]) }
		}
		if err := start(); err != nil {
			return fmt.Errorf("start rank %d: %w", i, err)
		}
		ranks = append(ranks, r)
		running++
		go func() {
			err := cmd.Wait()
			events <- exitEvent{rank: i, state: cmd.ProcessState, err: err}
		}()
		return nil
	}

	var (
		cause    error
		stopping bool
		killC    <-chan time.Time // fires Grace after stopping or forwarding
		timeoutC <-chan time.Time
		ctxDone  = ctx.Done()
		sigC     = cfg.Signals
	)
	if cfg.Timeout > 0 {
		t := time.NewTimer(cfg.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	armKill := func() {
		if killC == nil {
			killC = time.NewTimer(cfg.Grace).C
		}
	}
	stop := func(why error) {
		if cause == nil {
			cause = why
		}
		if stopping {
			return
		}
		stopping = true
		if re, ok := cause.(*RankError); ok && re == why {
			for _, r := range ranks {
				if !r.exited {
					re.Stopped = append(re.Stopped, r.id)
				}
			}
		}
		signalAll(syscall.SIGTERM)
		armKill()
	}

	// Ranks are started one by one, each start a case of the same select
	// as a signal, the timeout and a rank's exit, so any of those stops
	// the starting within a start or two (vcclrun -n 1000 answers SIGTERM
	// at once, not once every rank has started).
	exited := func(ev exitEvent) {
		r := ranks[ev.rank]
		r.exited = true
		running--
		for _, w := range r.flush {
			w.Flush()
		}
		if rerr := rankFailure(ev); rerr != nil && !stopping {
			stop(rerr)
		}
	}
	interrupted := func(sig os.Signal) {
		if s, ok := sig.(syscall.Signal); ok {
			signalAll(s)
		}
		if cause == nil {
			cause = &InterruptedError{Signal: sig}
		}
		armKill()
	}
	if cfg.Announce {
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			tok := token
			if tokenFile {
				tok, _ = bootstrap.TokenFromEnv(envGetter(base))
			}
			announce(actx, errW, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), tok, cfg.N, envGetter(base)("VCCL_TELEMETRY_DIR"))
		}()
	}
	// startable is ready while ranks remain to be started: the one select
	// below then starts the next rank or handles what has happened.
	ready := make(chan struct{})
	close(ready)
	next := 0
	for {
		var startable <-chan struct{}
		if next < cfg.N && cause == nil && !stopping {
			startable = ready
		} else if running == 0 {
			break
		}
		select {
		case <-startable:
			if err := startRank(next); err != nil {
				signalAll(syscall.SIGKILL)
				for range running {
					<-events
				}
				return err
			}
			next++
		case ev := <-events:
			exited(ev)
		case <-timeoutC:
			timeoutC = nil
			stop(&TimeoutError{After: cfg.Timeout})
		case <-ctxDone:
			ctxDone = nil
			stop(context.Cause(ctx))
		case sig := <-sigC:
			interrupted(sig)
		case <-killC:
			killC = nil
			signalAll(syscall.SIGKILL)
		}
	}
	return cause
}

// rankFailure describes how a rank ended, or nil if it exited 0.
func rankFailure(ev exitEvent) error {
	st := ev.state
	if st == nil {
		return fmt.Errorf("rank %d: %w", ev.rank, ev.err)
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &RankError{Rank: ev.rank, ExitCode: -1, Signal: ws.Signal()}
	}
	if code := st.ExitCode(); code != 0 {
		return &RankError{Rank: ev.rank, ExitCode: code}
	}
	return nil
}

// jobEnv returns env without the variables vcclrun sets (or that would
// shadow them), the inherited job token, if any, and whether a token file
// (VCCL_JOB_TOKEN_FILE, kept) names the token instead.
func jobEnv(env []string) (base []string, token string, tokenFile bool) {
	drop := make(map[string]bool, len(rankVars)+len(shadowingVars)+1)
	for _, v := range rankVars {
		drop[v] = true
	}
	for _, v := range shadowingVars {
		drop[v] = true
	}
	drop[tokenVar] = true
	drop[term.StatusLinesVar] = true // set again only if this vcclrun shows status lines
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if k == tokenVar {
			token = v // the last one wins, as in exec
		}
		if k == tokenFileVar && v != "" {
			tokenFile = true
		}
		if !drop[k] {
			base = append(base, kv)
		}
	}
	if token != "" && tokenFile {
		// VCCL_JOB_TOKEN is set: vcclrun passes it on, alone (the
		// ranks refuse both).
		tokenFile = false
		base = slices.DeleteFunc(base, func(kv string) bool { return strings.HasPrefix(kv, tokenFileVar+"=") })
	}
	return base, token, tokenFile
}

// freePort asks the kernel for a free TCP port on the loopback interface.
// Another process could take it before rank 0 listens on it; the window is
// short, and rank 0 then fails with a clear "address in use".
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// cpuList writes CPU ids as taskset and /proc's Cpus_allowed_list do: 0-3,8.
func cpuList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make a job token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
