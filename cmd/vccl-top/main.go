// Command vccl-top is a live terminal view of a running VCCL job, or of
// its Arrow traces replayed: ranks up and down, collectives, a rank × peer
// matrix, link sparklines, the analyzer's findings and, on a GPU host, the
// GPUs' NVLink and PCIe throughput (docs/vccl-top.md).
//
//	vccl-top --dir DIR                 endpoints.json in DIR (default $VCCL_TELEMETRY_DIR)
//	vccl-top --job HOST:PORT           the job's rendezvous store (token: $VCCL_JOB_TOKEN)
//	vccl-top --targets H:P,H:P,…       the ranks' live endpoints
//	vccl-top --prometheus URL          a Prometheus server scraping the ranks
//	vccl-top --replay DIR [--speed 2]  Arrow traces, replayed
//	vccl-top … --once --output table|json   one snapshot, printed
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/gpu/nvml"
	"github.com/vccl-go/vccl/internal/jobauth"
	"github.com/vccl-go/vccl/ui"
	"github.com/vccl-go/vccl/ui/source"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	dir, job, token, targets string
	prometheus, selector     string
	promRange                time.Duration
	replay                   string
	speed                    float64
	replayStart              time.Duration
	once                     bool
	output                   string
	wait, interval, stale    time.Duration
	gpu, screen              string
	noMetrics, analyzerOff   bool
	window                   flowtel.WindowConfig // VCCL_TELEMETRY_WINDOW, for replays

	// Wiring, replaced in tests.
	gpuOpen func() (source.Sampler, func() error, error)
	program func(m tea.Model) error
	stdout  io.Writer
}

const usage = `usage: vccl-top [SOURCE] [--once --output table|json] [flags]

A live terminal view of a VCCL job: ranks up and down, collectives per
second, bus bandwidth and arrival skew per operation, a rank × peer matrix,
link sparklines (bandwidth, latency p50/p99, backlog) at 10 Hz, the
analyzer's findings, and the GPUs' NVLink and PCIe throughput on a GPU host.

SOURCE is one of (default: --dir $VCCL_TELEMETRY_DIR):
  --dir DIR            the live endpoints listed in DIR/endpoints.json
  --job HOST:PORT      the job's rendezvous store (MASTER_ADDR:MASTER_PORT),
                       with the job token of $VCCL_JOB_TOKEN or --token
  --targets A,B,...    the ranks' live endpoints (host:port or URLs), in rank order
  --prometheus URL     a Prometheus server that scrapes the ranks (big jobs)
  --replay DIR         the Arrow traces in DIR, replayed (--speed, p, +, -)

Keys: arrows or j/k move, enter drills down, esc goes back, / filters,
s sorts, p pauses, m switches the matrix colour, ? shows every key, q quits.

flags:
`

func parse(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("vccl-top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.dir, "dir", "", "read endpoints.json in `DIR` (default $"+live.EnvDir+")")
	fs.StringVar(&c.job, "job", "", "the job's rendezvous store `HOST:PORT`")
	fs.StringVar(&c.token, "token", getenv("VCCL_JOB_TOKEN"), "the job `token` (default $VCCL_JOB_TOKEN)")
	fs.StringVar(&c.targets, "targets", "", "comma-separated live endpoints, in rank order")
	fs.StringVar(&c.prometheus, "prometheus", "", "a Prometheus server `URL`")
	fs.StringVar(&c.selector, "selector", "", "with --prometheus: label matchers narrowing the series to one job, e.g. job=\"vccl\"")
	fs.DurationVar(&c.promRange, "range", 30*time.Second, "with --prometheus: the rate window")
	fs.StringVar(&c.replay, "replay", "", "replay the Arrow traces in `DIR`")
	fs.Float64Var(&c.speed, "speed", 1, "replay speed (1: real time; + and - change it)")
	fs.DurationVar(&c.replayStart, "from", 0, "with --replay: start this far into the trace")
	fs.BoolVar(&c.once, "once", false, "print one snapshot and exit")
	fs.StringVar(&c.output, "output", "table", "with --once: table or json")
	fs.DurationVar(&c.wait, "wait", 5*time.Second, "with --once: the longest wait for every rank to answer")
	fs.DurationVar(&c.interval, "interval", ui.DefaultInterval, "screen refresh interval")
	fs.DurationVar(&c.stale, "stale", time.Second, "a rank silent this long is shown down")
	fs.StringVar(&c.gpu, "gpu", "auto", "GPU panel through NVML: auto, on or off")
	fs.StringVar(&c.screen, "screen", "overview", "first screen: overview, matrix, links or findings")
	fs.BoolVar(&c.noMetrics, "no-metrics", false, "live: do not read the ranks' /metrics (no collectives)")
	fs.BoolVar(&c.analyzerOff, "no-analyzer", false, "replay: do not run the analyzer over the trace")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	sources := 0
	for _, s := range []string{c.dir, c.job, c.targets, c.prometheus, c.replay} {
		if s != "" {
			sources++
		}
	}
	switch {
	case sources > 1:
		return nil, errors.New("give one source: --dir, --job, --targets, --prometheus or --replay")
	case sources == 0:
		c.dir = getenv(live.EnvDir)
		if c.dir == "" {
			return nil, errors.New("no source: give --dir, --job, --targets, --prometheus or --replay (or set " + live.EnvDir + ")")
		}
	}
	var err error
	if c.window, err = flowtel.ParseWindowEnv(getenv(flowtel.EnvWindow)); err != nil {
		return nil, err
	}
	if c.output != "table" && c.output != "json" {
		return nil, fmt.Errorf("--output %q: want table or json", c.output)
	}
	if c.gpu != "auto" && c.gpu != "on" && c.gpu != "off" {
		return nil, fmt.Errorf("--gpu %q: want auto, on or off", c.gpu)
	}
	if _, ok := screens[c.screen]; !ok {
		return nil, fmt.Errorf("--screen %q: want overview, matrix, links or findings", c.screen)
	}
	if c.speed <= 0 {
		return nil, fmt.Errorf("--speed %g: must be positive", c.speed)
	}
	return c, nil
}

var screens = map[string]ui.Screen{"overview": ui.ScreenOverview, "matrix": ui.ScreenMatrix, "links": ui.ScreenLinks, "findings": ui.ScreenFindings}

// open makes the source the flags ask for.
func open(c *config) (ui.Source, error) {
	var src ui.Source
	var err error
	liveSrc := func(target string, disc func(context.Context) (source.Discovery, error)) (ui.Source, error) {
		return source.NewLive(source.LiveConfig{Target: target, Discover: disc, StaleAfter: c.stale, NoMetrics: c.noMetrics,
			Bearer: jobauth.Bearer(c.token)})
	}
	switch {
	case c.replay != "":
		var r *source.Replay
		r, err = source.NewReplay(source.ReplayConfig{Dir: c.replay, Speed: c.speed, Manual: c.once, Window: c.window})
		if err == nil {
			start, end := r.Span()
			switch {
			case c.once:
				err = r.AdvanceTo(end)
			case c.replayStart > 0:
				err = r.AdvanceTo(start + int64(c.replayStart))
			}
			src = r
		}
	case c.prometheus != "":
		src, err = source.NewPrometheus(source.PromConfig{URL: c.prometheus, Selector: c.selector, Range: c.promRange})
	case c.job != "":
		src, err = liveSrc("job "+c.job, source.Job(c.job, c.token, nil))
	case c.targets != "":
		ts := strings.Split(c.targets, ",")
		src, err = liveSrc(fmt.Sprintf("%d targets", len(ts)), source.Targets(ts))
	default:
		src, err = liveSrc("dir "+c.dir, source.Dir(c.dir))
	}
	if err != nil {
		return nil, err
	}
	// The GPU panel shows this host's GPUs: beside a live job, not a
	// replay of another time.
	if c.gpu != "off" && c.gpuOpen != nil && c.replay == "" {
		s, closeFn, gerr := c.gpuOpen()
		switch {
		case gerr == nil:
			src = &closing{Source: source.WithGPUs(src, source.NVML(s), time.Second), also: closeFn}
		case c.gpu == "on":
			src.Close()
			return nil, gerr
		}
	}
	return src, nil
}

// closing closes also after its source.
type closing struct {
	ui.Source
	also func() error
}

func (c *closing) Close() error { return errors.Join(c.Source.Close(), c.also()) }

func openNVML() (source.Sampler, func() error, error) {
	c, err := nvml.Open()
	if err != nil {
		return nil, nil, err
	}
	return c, c.Close, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "vccl-top:", err)
		return 2
	}
	c.stdout = stdout
	c.gpuOpen = openNVML
	c.program = func(m tea.Model) error {
		_, err := tea.NewProgram(m).Run()
		return err
	}
	if err := runConfig(c); err != nil {
		fmt.Fprintln(stderr, "vccl-top:", err)
		return 1
	}
	return 0
}

func runConfig(c *config) error {
	src, err := open(c)
	if err != nil {
		return err
	}
	defer src.Close()
	if c.once {
		return once(c, src)
	}
	return c.program(ui.New(src, ui.Options{Interval: c.interval, Screen: screens[c.screen]}))
}

// once prints one snapshot: for a live source once every rank has answered
// (or --wait has passed), for a replay at the end of the trace.
func once(c *config, src ui.Source) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.wait)
	defer cancel()
	if r, ok := underlying(src).(*source.Replay); ok {
		if !c.analyzerOff {
			actx, acancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer acancel()
			r.WaitAnalyzed(actx)
		}
	} else {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			f := src.Frame()
			if ready(&f, !c.noMetrics && c.prometheus == "") {
				break
			}
			select {
			case <-ctx.Done():
			case <-t.C:
				continue
			}
			break
		}
	}
	f := src.Frame()
	if c.output == "json" {
		return ui.WriteJSON(c.stdout, f)
	}
	return ui.WriteTable(c.stdout, f)
}

// ready: every rank answered, with links (and collectives, when read).
func ready(f *ui.Frame, colls bool) bool {
	if f.Size == 0 || f.Up() < f.Size || len(f.Links) == 0 {
		return false
	}
	return !colls || len(f.Colls) > 0
}

func underlying(s ui.Source) ui.Source {
	if c, ok := s.(*closing); ok {
		return underlying(c.Source)
	}
	return s
}
