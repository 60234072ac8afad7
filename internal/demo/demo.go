// Package demo is the job `make run` starts on every rank: point-to-point
// ping-pong between rank pairs and all-reduces of growing size, with flow
// telemetry on, then a report of what the records say about each link and
// each collective, gathered to rank 0 and printed once. The exporters are
// the telemetry package's (cmd/vccl-demo attaches them); the report says
// where they are (Config.Outputs).
package demo

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
)

// Config sizes the workload.
type Config struct {
	Iters     int   // repetitions of each measurement
	P2PSizes  []int // ping-pong message sizes in bytes
	CollSizes []int // all-reduce sizes in bytes (float32)

	// Outputs, if set, is called once the workload is done and returns
	// lines saying where this rank's telemetry went (the telemetry
	// package's Exporters.Outputs), appended to its part of the report.
	Outputs func(context.Context) []string
}

// DefaultConfig is what `make run` uses.
func DefaultConfig() Config {
	return Config{Iters: 20, P2PSizes: []int{8, 64 << 10, 4 << 20}, CollSizes: []int{64 << 10, 1 << 20, 16 << 20}}
}

// Run runs the workload on c, whose telemetry must be on, and writes the
// report to w on rank 0. win must be attached to c's collector.
func Run(ctx context.Context, c *collective.Comm, cfg Config, win *flowtel.Window, colls *CollStats, w io.Writer) error {
	if c.Collector() == nil {
		return fmt.Errorf("demo: telemetry is off (set VCCL_TELEMETRY=1 or use WithTelemetry)")
	}
	var timings []string
	peer := c.Rank() ^ 1
	for _, size := range cfg.P2PSizes {
		if peer >= c.Size() {
			break
		}
		buf := make([]byte, size)
		start := time.Now()
		for range cfg.Iters {
			var err error
			if c.Rank() < peer {
				if err = collective.Send(ctx, c, buf, peer); err == nil {
					err = collective.Recv(ctx, c, buf, peer)
				}
			} else {
				if err = collective.Recv(ctx, c, buf, peer); err == nil {
					err = collective.Send(ctx, c, buf, peer)
				}
			}
			if err != nil {
				return fmt.Errorf("ping-pong of %d bytes with rank %d: %w", size, peer, err)
			}
		}
		oneWay := time.Since(start) / time.Duration(2*cfg.Iters)
		timings = append(timings, fmt.Sprintf("ping-pong %s with rank %d: %v one way, %.2f GB/s", human(size), peer, oneWay, float64(size)/oneWay.Seconds()/1e9))
	}
	for _, size := range cfg.CollSizes {
		buf := make([]float32, size/4)
		for i := range buf {
			buf[i] = float32(c.Rank())
		}
		start := time.Now()
		for range cfg.Iters {
			if err := collective.AllReduce(ctx, c, buf, buf, collective.Sum); err != nil {
				return fmt.Errorf("all-reduce of %d bytes: %w", size, err)
			}
		}
		el := time.Since(start) / time.Duration(cfg.Iters)
		n := float64(c.Size())
		busbw := float64(size) / el.Seconds() / 1e9 * 2 * (n - 1) / n
		timings = append(timings, fmt.Sprintf("all-reduce %s: %v per call, busbw %.2f GB/s", human(size), el, busbw))
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	// Deliver every record so far before reading the sinks.
	if err := c.Collector().Flush(ctx); err != nil {
		return err
	}
	report := Report(c.Rank(), timings, win.SnapshotAt(win.Now()), colls.Summary())
	if cfg.Outputs != nil {
		for _, l := range cfg.Outputs(ctx) {
			report += "  " + l + "\n"
		}
	}
	return gatherAndPrint(ctx, c, report, w)
}

func human(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// Report formats one rank's part of the report.
func Report(rank int, timings []string, links []flowtel.LinkStats, colls []CollSummary) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "== rank %d ==\n", rank)
	for _, t := range timings {
		fmt.Fprintf(&sb, "  %s\n", t)
	}
	tw := tabwriter.NewWriter(&sb, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  link\tdir\tWRs\tbytes\tGB/s\tlat p50\tlat p99\tlat max\tbacklog\tcredit wait\t\n")
	for _, l := range links {
		fmt.Fprintf(tw, "  %d→%d ch%d\t%s\t%d\t%d\t%.2f\t%v\t%v\t%v\t%d\t%v\t\n", l.Key.Rank, l.Key.Peer, l.Key.Channel, l.Key.Dir,
			l.Completions, l.Bytes, l.BandwidthBps/1e9, time.Duration(l.LatP50Ns), time.Duration(l.LatP99Ns),
			time.Duration(l.LatMaxNs), l.Backlog, time.Duration(l.CreditWaitNs))
	}
	tw.Flush()
	tw = tabwriter.NewWriter(&sb, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  collective\tbytes\tcalls\tmean\tmax\t\n")
	for _, s := range colls {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%v\t%v\t\n", s.Op, s.Bytes, s.Calls, time.Duration(s.MeanNs), time.Duration(s.MaxNs))
	}
	tw.Flush()
	return sb.String()
}

// gatherAndPrint collects every rank's report on rank 0, which prints them
// in rank order (the ranks' own stdout would interleave).
func gatherAndPrint(ctx context.Context, c *collective.Comm, report string, w io.Writer) error {
	const slot = 64 << 10
	own := make([]byte, slot)
	copy(own, report)
	all := make([]byte, slot*c.Size())
	if err := collective.Gather(ctx, c, own, all, 0); err != nil {
		return err
	}
	if c.Rank() != 0 {
		return nil
	}
	for r := range c.Size() {
		part := all[r*slot : (r+1)*slot]
		if i := slices.Index(part, 0); i >= 0 {
			part = part[:i]
		}
		w.Write(part)
	}
	return nil
}

// CollStats is a sink that times collectives: a view over flowtel's fold,
// whose call is a rank's coll_begin to its last part's coll_end.
type CollStats struct {
	flowtel.NopHandler
	mu   sync.Mutex
	fold *flowtel.Fold
	by   map[collKey]*CollSummary
}

type collKey struct {
	op    flowtel.Op
	bytes uint64
}

// CollSummary is the timing of one kind of collective call.
type CollSummary struct {
	Op     string
	Bytes  uint64
	Calls  int
	MeanNs int64
	MaxNs  int64
	total  int64
}

// NewCollStats returns an empty CollStats.
func NewCollStats() *CollStats {
	s := &CollStats{by: map[collKey]*CollSummary{}}
	s.fold = flowtel.NewFold(s, flowtel.FoldConfig{GapNs: -1})
	return s
}

// Consume implements flowtel.Sink.
func (s *CollStats) Consume(_ context.Context, recs []flowtel.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fold.Add(recs)
	return nil
}

// CallEnded implements flowtel.Handler: it times each whole call.
func (s *CollStats) CallEnded(c *flowtel.Call) {
	d := c.DurationNs()
	if !c.Complete || d == 0 {
		return
	}
	k := collKey{c.Op, c.Bytes}
	sum := s.by[k]
	if sum == nil {
		sum = &CollSummary{Op: c.Op.String(), Bytes: c.Bytes}
		s.by[k] = sum
	}
	sum.Calls++
	sum.total += d
	sum.MaxNs = max(sum.MaxNs, d)
	sum.MeanNs = sum.total / int64(sum.Calls)
}

// Shutdown implements flowtel.Sink.
func (s *CollStats) Shutdown(context.Context) error { return nil }

// Summary returns the timings, by operation then size.
func (s *CollStats) Summary() []CollSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]CollSummary, 0, len(s.by))
	for _, v := range s.by {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Op != out[j].Op {
			return out[i].Op < out[j].Op
		}
		return out[i].Bytes < out[j].Bytes
	})
	return out
}
