// Command vccl-scenario is the job behind the analyzer's labelled corpus
// (testdata/scenarios): a rank of a real VCCL job with flow telemetry on,
// writing its records as Arrow traces (through the telemetry package),
// running a workload into which testdata/scenarios/gen.sh injects one
// fault for real. It reads the
// launcher's environment (collective.NewFromEnv), so gen.sh starts each rank
// in its own network namespace, or vcclrun starts them on loopback.
//
//	vccl-scenario -dir DIR [-workload allreduce|hol] [-iters N] [-bytes N] …
//
// Workloads:
//
//	allreduce  N ring all-reduces of -bytes (float32); optionally rank
//	           -straggler sleeps -straggle before every -straggle-every'th
//	           call, and rank -inject-rank runs -inject-cmd before call
//	           -inject-iter and -heal-cmd before call -heal-iter (gen.sh uses
//	           them to add and remove a tc tbf rate limit mid-run);
//	           rank -freeze-rank stops its own process (SIGSTOP, a child
//	           sends SIGCONT) for -freeze-for, -freeze-offset into call
//	           -freeze-iter and every -freeze-every'th call after it; rank
//	           -kill-rank kills itself (SIGKILL) -freeze-offset into call
//	           -kill-iter.
//	hol        ranks 0 and 1 of a pipeline: for each of N rounds, rank 0
//	           starts one large send (-bytes) and then -small-count small
//	           sends (-small bytes) to rank 1 as separate asynchronous calls,
//	           which the one ordered connection between them completes
//	           behind the large one; an all-reduce closes every round.
//
// The rank that injects writes DIR/inject.json: what it ran and when, on
// the job's common time base (the records' ts_ns).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/telemetry"
)

type config struct {
	dir        string
	workload   string
	iters      int
	bytes      int
	small      int
	smallCount int
	gap        time.Duration
	timeout    time.Duration

	straggler     int
	straggle      time.Duration
	straggleEvery int

	injectRank int
	injectIter int
	injectCmd  string
	healIter   int
	healCmd    string

	freezeRank   int
	freezeIter   int
	freezeFor    time.Duration
	freezeEvery  int
	freezeOffset time.Duration
	killRank     int
	killIter     int
}

func main() {
	var c config
	flag.StringVar(&c.dir, "dir", os.Getenv(arrow.EnvDir), "trace directory")
	flag.StringVar(&c.workload, "workload", "allreduce", "allreduce or hol")
	flag.IntVar(&c.iters, "iters", 40, "calls (allreduce) or rounds (hol)")
	flag.IntVar(&c.bytes, "bytes", 1<<20, "all-reduce size, or the large send of hol, in bytes")
	flag.IntVar(&c.small, "small", 4<<10, "hol: bytes of each small send")
	flag.IntVar(&c.smallCount, "small-count", 4, "hol: small sends behind each large one")
	flag.DurationVar(&c.gap, "gap", time.Millisecond, "compute time between two calls, on every rank")
	flag.DurationVar(&c.timeout, "timeout", 2*time.Minute, "deadline of the whole job")
	flag.IntVar(&c.straggler, "straggler", -1, "rank that sleeps before some calls")
	flag.DurationVar(&c.straggle, "straggle", 20*time.Millisecond, "how long the straggler sleeps")
	flag.IntVar(&c.straggleEvery, "straggle-every", 3, "the straggler sleeps before every k-th call")
	flag.IntVar(&c.injectRank, "inject-rank", -1, "rank that runs -inject-cmd and -heal-cmd")
	flag.IntVar(&c.injectIter, "inject-iter", -1, "call before which -inject-cmd runs")
	flag.StringVar(&c.injectCmd, "inject-cmd", "", "shell command that injects the fault")
	flag.IntVar(&c.healIter, "heal-iter", -1, "call before which -heal-cmd runs")
	flag.StringVar(&c.healCmd, "heal-cmd", "", "shell command that removes the fault")
	flag.IntVar(&c.freezeRank, "freeze-rank", -1, "rank whose process is stopped (SIGSTOP) for -freeze-for")
	flag.IntVar(&c.freezeIter, "freeze-iter", -1, "call during which the freeze starts")
	flag.DurationVar(&c.freezeFor, "freeze-for", 2*time.Second, "how long the process stays stopped")
	flag.IntVar(&c.freezeEvery, "freeze-every", 0, "freeze again every k calls after -freeze-iter (0: once)")
	flag.DurationVar(&c.freezeOffset, "freeze-offset", time.Millisecond, "how far into the call the process stops")
	flag.IntVar(&c.killRank, "kill-rank", -1, "rank that is killed (SIGKILL) during call -kill-iter")
	flag.IntVar(&c.killIter, "kill-iter", -1, "call during which -kill-rank is killed")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "vccl-scenario:", err)
		os.Exit(1)
	}
}

func run(c config) (err error) {
	if c.dir == "" {
		return errors.New("no trace directory (-dir or " + arrow.EnvDir + ")")
	}
	if c.iters < 1 || c.bytes < 4 {
		return fmt.Errorf("-iters %d -bytes %d: want at least one call of 4 bytes", c.iters, c.bytes)
	}
	// Stopped by the launcher (another rank died): the calls fail, and the
	// traces are finished on the way out, as the peers of a dead rank's
	// need them.
	sctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(sctx, c.timeout)
	defer cancel()
	// The exporters are the telemetry package's, as any program's; the
	// trace directory comes from -dir, and a corpus directory holds traces
	// only: the live endpoint (which lists itself in endpoints.json there)
	// runs only where VCCL_TELEMETRY_ADDR asks for it.
	tcfg, err := telemetry.ConfigFromEnv()
	if err != nil {
		return err
	}
	tcfg.Dir = c.dir
	// Batches every 100 ms: a rank killed outright loses at most that.
	tcfg.ArrowOptions = append(tcfg.ArrowOptions, arrow.WithCompression(arrow.CompressionZstd), arrow.WithFlushInterval(100*time.Millisecond))
	tcfg.Live = tcfg.Live && os.Getenv(telemetry.EnvAddr) != ""
	col := flowtel.NewCollector()
	comm, err := collective.NewFromEnv(ctx, collective.WithCollector(col), collective.WithTelemetryAttachers(false))
	if err != nil {
		return err
	}
	ex, err := telemetry.Attach(ctx, comm, tcfg)
	if err != nil {
		comm.Close()
		return err
	}
	col.Start() // after Attach: the trace holds every record
	defer func() {
		// The collector's Shutdown finishes the traces, even after ctx
		// ended (the job was stopped).
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if xerr := ex.Close(sctx); err == nil {
			err = xerr
		}
		if cerr := comm.Close(); err == nil {
			err = cerr
		}
		if serr := col.Shutdown(sctx); err == nil {
			err = serr
		}
	}()
	switch c.workload {
	case "allreduce":
		err = allReduces(ctx, comm, c)
	case "hol":
		err = hol(ctx, comm, c)
	default:
		err = fmt.Errorf("unknown workload %q (want allreduce or hol)", c.workload)
	}
	if err != nil {
		return err
	}
	return comm.Barrier(ctx)
}

// injection is what DIR/inject.json holds.
type injection struct {
	Rank     int     `json:"rank"`
	Inject   string  `json:"inject_cmd,omitempty"`
	InjectNs int64   `json:"inject_ns,omitempty"`
	Heal     string  `json:"heal_cmd,omitempty"`
	HealNs   int64   `json:"heal_ns,omitempty"`
	Freezes  []int64 `json:"freezes_ns,omitempty"` // when the process stopped itself
	FreezeNs int64   `json:"freeze_for_ns,omitempty"`
}

// freeze stops this process for d, offset into the call about to start:
// a child process sends it SIGCONT after d (a stopped process cannot),
// then a goroutine sends it SIGSTOP. It returns when the stop was sent (the
// caller runs on once the process resumes), and the time of the stop on
// the job's time base.
func freeze(ctx context.Context, clk *flowtel.Clock, offset, d time.Duration) (<-chan int64, error) {
	pid := os.Getpid()
	cont := exec.CommandContext(ctx, "sh", "-c", fmt.Sprintf("sleep %.3f; kill -CONT %d", (offset+d).Seconds(), pid))
	if err := cont.Start(); err != nil {
		return nil, err
	}
	go cont.Wait()
	at := make(chan int64, 1)
	go func() {
		time.Sleep(offset)
		at <- clk.Now()
		syscall.Kill(pid, syscall.SIGSTOP)
	}()
	return at, nil
}

func shell(ctx context.Context, cmd string) error {
	out, err := exec.CommandContext(ctx, "sh", "-c", cmd).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%q: %v: %s", cmd, err, out)
	}
	return nil
}

func allReduces(ctx context.Context, comm *collective.Comm, c config) error {
	buf := make([]float32, c.bytes/4)
	for i := range buf {
		buf[i] = float32(comm.Rank())
	}
	var inj injection
	inj.Rank = comm.Rank()
	injects := comm.Rank() == c.injectRank || comm.Rank() == c.freezeRank
	var (
		cmds   sync.WaitGroup
		cmdMu  sync.Mutex
		cmdErr error
	)
	defer cmds.Wait()
	var frozen []<-chan int64
	for i := range c.iters {
		if comm.Rank() == c.freezeRank && (i == c.freezeIter || c.freezeEvery > 0 && i > c.freezeIter && (i-c.freezeIter)%c.freezeEvery == 0) {
			at, err := freeze(ctx, comm.Clock(), c.freezeOffset, c.freezeFor)
			if err != nil {
				return err
			}
			frozen = append(frozen, at)
			inj.FreezeNs = int64(c.freezeFor)
		}
		if comm.Rank() == c.killRank && i == c.killIter {
			go func() {
				time.Sleep(c.freezeOffset)
				// The injection's time: the trace of a killed rank
				// ends before it (what was not yet written is lost).
				b, _ := json.Marshal(map[string]any{"rank": comm.Rank(), "killed_ns": comm.Clock().Now()})
				os.WriteFile(filepath.Join(c.dir, "inject.json"), append(b, '\n'), 0o644)
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}()
		}
		// The fault's commands run beside the calls, not before them: a
		// rank that forks a shell (which takes long on a loaded host) would
		// be late, a straggler the analyzer rightly names.
		if injects && i == c.injectIter && c.injectCmd != "" {
			cmds.Add(1)
			go func() {
				defer cmds.Done()
				err := shell(ctx, c.injectCmd)
				cmdMu.Lock()
				defer cmdMu.Unlock()
				cmdErr = errors.Join(cmdErr, err)
				inj.Inject, inj.InjectNs = c.injectCmd, comm.Clock().Now()
			}()
		}
		if injects && i == c.healIter && c.healCmd != "" {
			cmds.Add(1)
			go func() {
				defer cmds.Done()
				err := shell(ctx, c.healCmd)
				cmdMu.Lock()
				defer cmdMu.Unlock()
				cmdErr = errors.Join(cmdErr, err)
				inj.Heal, inj.HealNs = c.healCmd, comm.Clock().Now()
			}()
		}
		if comm.Rank() == c.straggler && c.straggleEvery > 0 && i%c.straggleEvery == c.straggleEvery-1 {
			time.Sleep(c.straggle)
		}
		if err := collective.AllReduce(ctx, comm, buf, buf, collective.Sum); err != nil {
			return fmt.Errorf("all-reduce %d: %w", i, err)
		}
		if c.gap > 0 {
			time.Sleep(c.gap)
		}
	}
	for _, at := range frozen {
		inj.Freezes = append(inj.Freezes, <-at)
	}
	cmds.Wait()
	if cmdErr != nil {
		return cmdErr
	}
	if injects {
		b, _ := json.MarshalIndent(inj, "", "  ")
		return os.WriteFile(filepath.Join(c.dir, "inject.json"), append(b, '\n'), 0o644)
	}
	return nil
}

func hol(ctx context.Context, comm *collective.Comm, c config) error {
	if comm.Size() < 2 {
		return errors.New("hol needs two ranks")
	}
	big := make([]byte, c.bytes)
	smalls := make([][]byte, c.smallCount)
	for k := range smalls {
		smalls[k] = make([]byte, c.small)
	}
	red := make([]float32, 1<<14)
	hs := make([]*collective.Handle, 0, 1+c.smallCount)
	for i := range c.iters {
		hs = hs[:0]
		if r := comm.Rank(); r < 2 {
			op := collective.SendTo
			if r == 1 {
				op = collective.RecvFrom
			}
			h, err := comm.SendRecvAsync(ctx, op(1-r, collective.Bytes(big, collective.Uint8)))
			if err != nil {
				return err
			}
			hs = append(hs, h)
			for _, s := range smalls {
				h, err := comm.SendRecvAsync(ctx, op(1-r, collective.Bytes(s, collective.Uint8)))
				if err != nil {
					return err
				}
				hs = append(hs, h)
			}
		}
		for _, h := range hs {
			if err := h.Wait(ctx); err != nil {
				return fmt.Errorf("round %d: %w", i, err)
			}
		}
		if err := collective.AllReduce(ctx, comm, red, red, collective.Sum); err != nil {
			return fmt.Errorf("round %d all-reduce: %w", i, err)
		}
		if c.gap > 0 {
			time.Sleep(c.gap)
		}
	}
	return nil
}
