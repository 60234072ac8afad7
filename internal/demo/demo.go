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
	"strconv"
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
	var pingPong []string
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
		pp := fmt.Sprintf("%s in %s", Bytes(uint64(size)), Duration(oneWay.Nanoseconds()))
		if size >= 1<<10 {
			pp += " (" + Rate(float64(size)/oneWay.Seconds()) + ")"
		}
		pingPong = append(pingPong, pp)
	}
	for _, size := range cfg.CollSizes {
		buf := make([]float32, size/4)
		for i := range buf {
			buf[i] = float32(c.Rank())
		}
		for range cfg.Iters {
			if err := collective.AllReduce(ctx, c, buf, buf, collective.Sum); err != nil {
				return fmt.Errorf("all-reduce of %d bytes: %w", size, err)
			}
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	// Deliver every record so far before reading the sinks.
	if err := c.Collector().Flush(ctx); err != nil {
		return err
	}
	var timings []string
	if len(pingPong) > 0 {
		timings = append(timings, fmt.Sprintf("ping-pong with rank %d, one way: %s", peer, strings.Join(pingPong, ", ")))
	}
	var outputs []string
	if cfg.Outputs != nil {
		outputs = cfg.Outputs(ctx)
	}
	report := Report(c.Rank(), c.Size(), timings, win.SnapshotAt(win.Now()), colls.Summary(), outputs)
	return gatherAndPrint(ctx, c, report, w)
}

// Report formats one rank's section of the report: its timings, the calls
// and the links its telemetry records show, and lines of its own (where its
// telemetry went).
func Report(rank, size int, timings []string, links []flowtel.LinkStats, colls []CollSummary, lines []string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "== rank %d of %d ==\n", rank, size)
	for _, t := range timings {
		fmt.Fprintf(&sb, "%s\n", t)
	}
	if len(colls) > 0 {
		fmt.Fprintln(&sb, "calls, from coll_begin to coll_end in its records:")
		tw := tabwriter.NewWriter(&sb, 2, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "    call\tsize\tcalls\tmean\tmax\t\n")
		for _, s := range colls {
			fmt.Fprintf(tw, "    %s\t%s\t%d\t%s\t%s\t\n", s.Op, Bytes(s.Bytes), s.Calls, Duration(s.MeanNs), Duration(s.MaxNs))
		}
		tw.Flush()
	}
	if len(links) > 0 {
		fmt.Fprintln(&sb, "links, from its work requests (latency: post to completion; credit wait: sends held back by the receiver):")
		tw := tabwriter.NewWriter(&sb, 2, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "    link\tdir\tWRs\tbytes\trate\tlat p50\tlat p99\tlat max\tbacklog\tcredit wait\t\n")
		for _, l := range links {
			fmt.Fprintf(tw, "    %d→%d ch%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t\n", l.Key.Rank, l.Key.Peer, l.Key.Channel, l.Key.Dir,
				l.Completions, Bytes(l.Bytes), Rate(l.BandwidthBps), Duration(l.LatP50Ns), Duration(l.LatP99Ns),
				Duration(l.LatMaxNs), l.Backlog, Duration(l.CreditWaitNs))
		}
		tw.Flush()
	}
	for _, l := range lines {
		fmt.Fprintf(&sb, "%s\n", l)
	}
	return sb.String()
}

// Bytes is n in binary units, three significant digits: "8 B", "64 KiB",
// "423 MiB", "1.5 GiB".
func Bytes(n uint64) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	v, units := float64(n), []string{"KiB", "MiB", "GiB", "TiB"}
	i := -1
	for v >= 1<<10 && i < len(units)-1 {
		v /= 1 << 10
		i++
	}
	return sig3(v) + " " + units[i]
}

// Duration is ns in the unit that keeps it between 1 and 1000, three
// significant digits: "721 ns", "30.5 µs", "2.78 ms", "1.2 s".
func Duration(ns int64) string {
	v := float64(ns)
	switch {
	case ns == 0:
		return "0"
	case ns < 1_000:
		return fmt.Sprintf("%d ns", ns)
	case ns < 999_500: // what rounds to 1000 µs is 1 ms
		return sig3(v/1e3) + " µs"
	case ns < 999_500_000:
		return sig3(v/1e6) + " ms"
	}
	return sig3(v/1e9) + " s"
}

// Rate is a bandwidth in decimal units, as nccl-tests' GB/s: "252 MB/s",
// "1.51 GB/s".
func Rate(bps float64) string {
	switch {
	case bps >= 1e9:
		return sig3(bps/1e9) + " GB/s"
	case bps >= 1e6:
		return sig3(bps/1e6) + " MB/s"
	case bps >= 1e3:
		return sig3(bps/1e3) + " kB/s"
	}
	return fmt.Sprintf("%.0f B/s", bps)
}

// sig3 writes v (1 ≤ v < 1000 or so) with three significant digits and no
// trailing zeros: 4, 30.5, 423, 1.5.
func sig3(v float64) string {
	prec := 2
	switch {
	case v >= 100:
		prec = 0
	case v >= 10:
		prec = 1
	}
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
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
