package analyzer

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// Report is what an analysis found: the findings worst first, a summary of
// the collectives, and the series the HTML report charts.
type Report struct {
	Job      Job       `json:"job"`
	Findings []Finding `json:"findings"`
	// BelowFloor counts the findings under the noise floor (severity info),
	// not listed unless Options.ListBelowFloor.
	BelowFloor  int                 `json:"below_floor"`
	Collectives []CollectiveSummary `json:"collectives"`
	Warnings    []string            `json:"warnings"`

	// Links are every link's totals, sorted by communicator and link.
	Links []LinkSummary `json:"links"`

	// For charts (not in the JSON output).
	Series   Series          `json:"-"`
	Timeline []TimelineEntry `json:"-"`
}

// Job describes what was analysed.
type Job struct {
	Files       []FileSummary `json:"files,omitempty"`
	Comms       []CommSummary `json:"comms"`
	Records     uint64        `json:"records"`
	LostRecords uint64        `json:"lost_records"` // dropped before they were written (KindLost)
	LateRecords uint64        `json:"late_records"` // came after their slice was judged (counted in the oldest kept)
	BadRecords  uint64        `json:"bad_records"`  // no valid time stamp, or far out of order: skipped
	StartNs     int64         `json:"start_ns"`
	EndNs       int64         `json:"end_ns"`
}

// FileSummary describes one trace file that was read.
type FileSummary struct {
	Path      string `json:"path"`
	Rank      int    `json:"rank"`
	Segment   int    `json:"segment"`
	Records   int64  `json:"records"`
	Finished  bool   `json:"finished"`
	Truncated bool   `json:"truncated"`
}

// CommSummary describes one communicator of the trace.
type CommSummary struct {
	ID          uint32 `json:"id"`
	JobID       string `json:"job_id"` // ID as flowtel.JobID prints it: trace file names, metrics and spans use the same
	UID         string `json:"uid,omitempty"`
	Ranks       int    `json:"ranks"`
	Collectives int    `json:"collectives"`
}

// CollectiveSummary summarises the calls of one operation, algorithm and
// size on one communicator. Bus bandwidth is nccl-tests': the payload over
// the time from the last rank's coll_begin to the last rank's coll_end,
// times collective.BusBWFactor. Arrival skew is the time from the first
// rank's coll_begin to the last's (-1 for point-to-point calls, which are
// timed per rank).
type CollectiveSummary struct {
	Comm      uint32  `json:"comm"`
	Op        string  `json:"op"`
	Algo      string  `json:"algo"`
	Bytes     uint64  `json:"bytes"`
	Count     int     `json:"count"`
	BusBWP50  float64 `json:"busbw_p50_bps"`
	BusBWP99  float64 `json:"busbw_p99_bps"`
	TimeP50Ns int64   `json:"time_p50_ns"`
	SkewP50Ns int64   `json:"skew_p50_ns"`
	SkewP99Ns int64   `json:"skew_p99_ns"`
	SkewMaxNs int64   `json:"skew_max_ns"`
}

// LinkSummary is one link's totals. SentBytes adds up the payload of the
// sender's completed sends (wc records of sends: even wr_id), LandedBytes
// that of the receiver's completed receives.
type LinkSummary struct {
	Comm        uint32  `json:"comm"`
	JobID       string  `json:"job_id"`
	Link        LinkRef `json:"link"`
	SentBytes   uint64  `json:"sent_bytes"`
	LandedBytes uint64  `json:"landed_bytes"`
	XferBps     float64 `json:"xfer_bps"`    // bytes over transfer time of the paired WRs (see slow link)
	MaxBacklog  uint64  `json:"max_backlog"` // most bytes of sends outstanding at once
	FailedWRs   uint64  `json:"failed_wrs"`
	// The sender's WR latency, post to completion, over the sends whose
	// post was seen (LatSamples): nearest-rank percentiles within 1%.
	LatSamples uint64 `json:"lat_samples"`
	LatP50Ns   int64  `json:"lat_p50_ns"`
	LatP99Ns   int64  `json:"lat_p99_ns"`
	LatMaxNs   int64  `json:"lat_max_ns"`
	// CreditWaitNs is the time during which at least one send waited for
	// credit, overlapping waits counted once.
	CreditWaitNs int64 `json:"credit_wait_ns"`
}

// Series are per-link values over time: point k covers
// [OriginNs + k*StepNs, OriginNs + (k+1)*StepNs).
type Series struct {
	OriginNs int64
	StepNs   int64
	Points   int
	Links    []LinkSeries
}

// LinkSeries is one link's chart data.
type LinkSeries struct {
	Comm       uint32
	Link       LinkRef
	Bps        []float64 // bytes delivered per second (sent, when the receiver's trace is missing)
	Backlog    []float64 // average bytes of sends in flight (posted, not landed)
	CreditWait []float64 // share of the time a send waited for credit
}

// TimelineEntry is one collective of the timeline chart: each rank's
// coll_begin and coll_end (0: not seen).
type TimelineEntry struct {
	Comm   uint32
	Seq    uint64
	Op     string
	Bytes  uint64
	Begins []int64
	Ends   []int64
}

// candidate is a detector episode that the final pass may keep, merge or
// drop.
type candidate struct {
	f     Finding
	short bool // too short or sparse to report by itself; may still be backed up behind a root
}

// Finish judges everything still open and returns the report. The analyzer
// is spent afterwards.
func (a *Analyzer) Finish() *Report {
	if a.finished {
		return &Report{}
	}
	a.finished = true
	a.fold.Advance(a.lastTs) // ranks silent at the end, in a call
	a.deadRanks()
	a.fold.Finish() // calls whose end never came, ended incomplete
	a.judgeUpTo(math.MaxInt64)
	for _, c := range sortedComms(a.comms) {
		var open []*collState
		for _, cs := range c.colls {
			open = append(open, cs)
		}
		slices.SortFunc(open, func(x, y *collState) int { return cmp.Compare(x.seq, y.seq) })
		for _, cs := range open {
			a.judgeColl(c, cs)
		}
	}
	for _, l := range a.list {
		a.closeBP(l)
		a.closeSlow(l)
		if l.det.evNext < len(l.events) || l.det.fo != nil {
			a.failoverSlice(l, math.MaxInt64/a.w)
		}
	}
	keys := make([]qpKey, 0, len(a.hol))
	for k := range a.hol {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y qpKey) int {
		return cmp.Or(cmp.Compare(x.comm, y.comm), cmp.Compare(x.rank, y.rank), cmp.Compare(x.qp, y.qp))
	})
	for _, k := range keys {
		a.closeHOL(a.hol[k])
	}

	r := &Report{}
	r.Findings = a.finalFindings()
	span := a.lastTs - a.firstTs
	for i := range r.Findings {
		f := &r.Findings[i]
		f.Severity = severityOf(f.ImpactNs, span)
		if f.Kind == KindDeadRank {
			f.Severity = SeverityCritical // the job cannot go on without it
		}
		if f.Collectives == nil {
			f.Collectives = []uint64{}
		}
	}
	if !a.o.ListBelowFloor {
		kept := r.Findings[:0]
		for _, f := range r.Findings {
			if f.Severity == SeverityInfo {
				r.BelowFloor++
				continue
			}
			kept = append(kept, f)
		}
		r.Findings = kept
	}
	sortFindings(r.Findings)
	r.Job = Job{Records: a.records, LostRecords: a.lost, LateRecords: a.late, BadRecords: a.badTs + a.farAhead,
		StartNs: a.firstTs, EndNs: a.lastTs}
	for _, c := range sortedComms(a.comms) {
		n := 0
		for _, g := range c.groups {
			if !g.key.op.IsP2P() {
				n += g.count
			}
		}
		r.Job.Comms = append(r.Job.Comms, CommSummary{ID: c.id, JobID: flowtel.JobID(c.id), Ranks: int(c.size), Collectives: n})
		r.Collectives = append(r.Collectives, c.summaries()...)
		for _, t := range c.timeline {
			r.Timeline = append(r.Timeline, TimelineEntry{Comm: c.id, Seq: t.seq, Op: t.op.String(), Bytes: t.bytes, Begins: t.begins, Ends: t.ends})
		}
	}
	if r.Collectives == nil {
		r.Collectives = []CollectiveSummary{}
	}
	if a.lost > 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%d records were dropped before they reached the trace (lost records): findings rest on the rest", a.lost))
	}
	if a.badTs+a.farAhead > 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%d records had no valid time stamp or one far out of order, and were skipped", a.badTs+a.farAhead))
	}
	a.linkReport(r)
	return r
}

func sortedComms(m map[uint32]*commState) []*commState {
	cs := make([]*commState, 0, len(m))
	for _, c := range m {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(x, y *commState) int { return cmp.Compare(x.id, y.id) })
	return cs
}

func (c *commState) summaries() []CollectiveSummary {
	var out []CollectiveSummary
	for _, g := range c.groups {
		s := CollectiveSummary{Comm: c.id, Op: g.key.op.String(), Algo: g.key.algo.String(), Bytes: g.key.bytes, Count: g.count,
			BusBWP50: g.busbw.quantile(0.5), BusBWP99: g.busbw.quantile(0.99), TimeP50Ns: int64(g.dur.quantile(0.5)),
			SkewP50Ns: -1, SkewP99Ns: -1, SkewMaxNs: -1}
		if g.key.op.IsP2P() {
			s.Algo = "-"
		}
		if g.nSkew > 0 {
			s.SkewP50Ns, s.SkewP99Ns, s.SkewMaxNs = int64(g.skew.quantile(0.5)), int64(g.skew.quantile(0.99)), g.maxSk
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y CollectiveSummary) int {
		return cmp.Or(cmp.Compare(x.Op, y.Op), cmp.Compare(x.Bytes, y.Bytes), cmp.Compare(x.Algo, y.Algo))
	})
	return out
}

// finalFindings settles the candidates: backpressure keeps its roots (the
// links backed up behind them become Related), stalls that a late rank,
// backpressure or a slow link explains are dropped and the rest keep their
// roots.
func (a *Analyzer) finalFindings() []Finding {
	var out []Finding
	var bps, stalls []candidate
	for _, c := range a.cands {
		switch c.f.Kind {
		case KindBackpressure:
			bps = append(bps, c)
		case KindStall:
			stalls = append(stalls, c)
		case KindSlowLink:
			if a.significantSlow(&c.f) {
				out = append(out, c.f)
			}
		default:
			out = append(out, c.f)
		}
	}
	for _, c := range a.comms {
		out = append(out, a.stragglerFindings(c)...)
		out = append(out, a.rankFindings(c)...)
	}
	out = append(out, a.failoverFindings()...)

	// Backpressure: an episode starved of credit while one of its
	// receiver's own links is backpressured is pushed back by it; the
	// others are roots, and the pushed episodes that overlap a root are
	// listed with it. In a cycle of pushed episodes (a ring backed up all
	// round) the one that fell furthest below its baseline is the root.
	pushed := make([]bool, len(bps))
	for x, c := range bps {
		if c.f.Evidence["credit_starved_share"] < 0.5 {
			continue
		}
		// Pushed back by a slow link out of its receiver.
		for k := range out {
			d := &out[k]
			if d.Kind == KindSlowLink && d.Comm == c.f.Comm && d.Channel == c.f.Channel && d.Rank == c.f.Peer &&
				overlaps(span{c.f.StartNs, c.f.EndNs}, span{d.StartNs, d.EndNs}) {
				pushed[x] = true
				d.Related = append(d.Related, c.f.Link())
				break
			}
		}
		if pushed[x] {
			continue
		}
		for y, d := range bps {
			if x != y && d.f.Comm == c.f.Comm && d.f.Channel == c.f.Channel && d.f.Rank == c.f.Peer &&
				overlaps(span{c.f.StartNs, c.f.EndNs}, span{d.f.StartNs, d.f.EndNs}) {
				pushed[x] = true
				break
			}
		}
	}
	root := make([]bool, len(bps))
	for x, c := range bps {
		root[x] = !pushed[x] && !c.short && a.outlierBP(bps, x)
	}
	for x, c := range bps {
		if !pushed[x] {
			continue
		}
		// A pushed episode with no root overlapping it: the worst of its
		// overlapping group is the root.
		best, has := x, false
		for y, d := range bps {
			if d.f.Comm != c.f.Comm || !overlaps(span{c.f.StartNs, c.f.EndNs}, span{d.f.StartNs, d.f.EndNs}) {
				continue
			}
			if root[y] {
				has = true
				break
			}
			if d.f.Evidence["rate_ratio"] < bps[best].f.Evidence["rate_ratio"] {
				best = y
			}
		}
		if !has && !bps[best].short {
			root[best] = true
		}
	}
	for x, c := range bps {
		if !root[x] {
			continue
		}
		f := c.f
		for y, d := range bps {
			// The links backed up behind it: upstream ones, not the same
			// pair's other channels (the same fault).
			if !root[y] && d.f.Comm == f.Comm && (d.f.Rank != f.Rank || d.f.Peer != f.Peer) &&
				overlaps(span{d.f.StartNs, d.f.EndNs}, span{f.StartNs, f.EndNs}) {
				f.Related = append(f.Related, d.f.Link())
			}
		}
		slices.SortFunc(f.Related, cmpLinkRef)
		f.Related = slices.Compact(f.Related)
		f.Summary = bpSummary(&f)
		out = append(out, f)
	}

	out = mergeEpisodes(out, a.o.MaxListed)
	out = foldAftermath(out)
	out = foldSlowLinks(out)
	for k := range out {
		if f := &out[k]; len(f.Related) > 1 {
			slices.SortFunc(f.Related, cmpLinkRef)
			f.Related = slices.Compact(f.Related)
		}
	}

	// Stalls: drop what is explained by another finding of the comm.
	var explainers []Finding
	for _, f := range out {
		if f.Kind == KindBackpressure || f.Kind == KindSlowLink || f.Kind == KindFailover || f.Kind == KindStraggler {
			explainers = append(explainers, f)
		}
	}
	for _, c := range bps { // non-root episodes explain too
		explainers = append(explainers, c.f)
	}
	var live []Finding
	for x, c := range stalls {
		f := c.f
		if c.short || !outlierStall(stalls, x, a.o.Backpressure.Outlier) {
			continue
		}
		covered := int64(0)
		for _, e := range explainers {
			if e.Comm == f.Comm {
				covered += max(0, min(e.EndNs, f.EndNs)-max(e.StartNs, f.StartNs))
			}
		}
		if float64(covered) >= a.o.Stall.MaxExplained*float64(f.DurationNs()) {
			continue
		}
		live = append(live, f)
	}
	// A stall that others started after, on the same comm and channel, is
	// the root; the rest follow it.
	slices.SortStableFunc(live, func(x, y Finding) int { return cmp.Compare(x.StartNs, y.StartNs) })
	used := make([]bool, len(live))
	for x := range live {
		if used[x] {
			continue
		}
		used[x] = true
		f := live[x]
		for y := x + 1; y < len(live); y++ {
			g := live[y]
			if used[y] || g.Comm != f.Comm || g.Channel != f.Channel || !overlaps(span{f.StartNs, f.EndNs}, span{g.StartNs, g.EndNs}) {
				continue
			}
			used[y] = true
			f.Related = append(f.Related, g.Link())
		}
		f.Summary = stallSummary(&f)
		out = append(out, f)
	}
	return out
}

// outlierBP reports whether backpressure episode x stands out against the
// job's own: its flagged time is at least Backpressure.Outlier times the
// longest episode of any other link of its communicator at other times (a
// host whose every link slows now and then names none). Episodes it
// overlaps are left out: a backed-up ring flags its upstream links too.
func (a *Analyzer) outlierBP(bps []candidate, x int) bool {
	c := &bps[x].f
	var others float64
	for y := range bps {
		d := &bps[y].f
		if y == x || d.Comm != c.Comm || d.Link() == c.Link() || overlaps(span{c.StartNs, c.EndNs}, span{d.StartNs, d.EndNs}) {
			continue
		}
		others = max(others, d.Evidence["flagged_ms"])
	}
	c.Evidence["others_longest_ms"] = others
	return c.Evidence["flagged_ms"] >= a.o.Backpressure.Outlier*others
}

// aftermath is how long after a rank stops not running (or dies) the
// links of its communicator may still suffer for it: every link idled
// meanwhile, and connections idle that long restart slowly (TCP's
// congestion window after idle).
const aftermath = int64(time.Second)

// foldAftermath lists the link findings that begin while a rank does not
// run, or within aftermath of its end, and end soon after, under that
// rank's finding: one cause, one finding. A link finding that began before
// (another fault, at the same time) stays.
func foldAftermath(fs []Finding) []Finding {
	drop := make([]bool, len(fs))
	for i := range fs {
		r := &fs[i]
		if r.Peer >= 0 || (r.Kind != KindStall && r.Kind != KindDeadRank) {
			continue
		}
		for j := range fs {
			f := &fs[j]
			if drop[j] || f.Peer < 0 || f.Comm != r.Comm || f.StartNs < r.StartNs || f.StartNs > r.EndNs+aftermath || f.EndNs > r.EndNs+2*aftermath {
				continue
			}
			drop[j] = true
			r.Related = append(r.Related, f.Link())
		}
	}
	out := fs[:0]
	for i, f := range fs {
		if !drop[i] {
			out = append(out, f)
		}
	}
	return out
}

// mergeGap is how far apart two episodes of one link (or a pair's channels)
// may be and still be one fault: a long fault comes and goes by the
// detectors' slices.
const mergeGap = int64(time.Second)

// mergeEpisodes makes one finding of a link's backpressure or slow-link
// episodes that follow each other within mergeGap, and of the same pair's
// channels at the same time: from the first start to the last end, the
// impact summed, the evidence of the worst.
func mergeEpisodes(fs []Finding, maxListed int) []Finding {
	slices.SortStableFunc(fs, func(x, y Finding) int { return cmp.Compare(x.StartNs, y.StartNs) })
	var out []Finding
	for _, f := range fs {
		merged := false
		if f.Kind == KindBackpressure || f.Kind == KindSlowLink {
			for k := range out {
				g := &out[k]
				if g.Kind != f.Kind || g.Comm != f.Comm || g.Rank != f.Rank || g.Peer != f.Peer || f.StartNs > g.EndNs+mergeGap {
					continue
				}
				worst := g.ImpactNs < f.ImpactNs
				start, end := min(g.StartNs, f.StartNs), max(g.EndNs, f.EndNs)
				impact := g.ImpactNs + f.ImpactNs
				cl := collList{seqs: g.Collectives, n: g.NumCollectives}
				cl.merge(&collList{seqs: f.Collectives, n: f.NumCollectives}, maxListed)
				related := append(slices.Clone(g.Related), f.Related...)
				channel := g.Channel
				if f.Channel != g.Channel {
					channel = -1 // several channels of the pair
				}
				if worst {
					*g = f
				}
				g.StartNs, g.EndNs, g.ImpactNs, g.Channel = start, end, impact, channel
				g.Collectives, g.NumCollectives, g.Related = cl.seqs, cl.n, related
				g.Evidence["episodes"] = max(g.Evidence["episodes"], 1) + 1
				merged = true
				break
			}
		}
		if !merged {
			out = append(out, f)
		}
	}
	return out
}

// outlierStall reports whether link stall x is at least factor times as
// long as any other link's idling at other times: a host that deschedules
// its ranks now and then idles every link a little.
func outlierStall(stalls []candidate, x int, factor float64) bool {
	c := &stalls[x].f
	var others int64
	for y := range stalls {
		d := &stalls[y].f
		if y == x || d.Comm != c.Comm || d.Link() == c.Link() || overlaps(span{c.StartNs, c.EndNs}, span{d.StartNs, d.EndNs}) {
			continue
		}
		others = max(others, d.ImpactNs)
	}
	c.Evidence["others_longest_idle_ms"] = float64(others) / 1e6
	return float64(c.ImpactNs) >= factor*float64(others)
}

// foldSlowLinks folds a slow link, or a smaller backpressure episode, into
// a worse slow link it overlaps in time and shares a rank with: both go
// through that rank (its interface slows both directions, its
// acknowledgements too), and the worse one is the culprit.
func foldSlowLinks(fs []Finding) []Finding {
	var slow []int
	for i := range fs {
		if fs[i].Kind == KindSlowLink {
			slow = append(slow, i)
		}
	}
	slices.SortStableFunc(slow, func(x, y int) int { return cmp.Compare(fs[y].ImpactNs, fs[x].ImpactNs) })
	drop := map[int]bool{}
	for k, i := range slow {
		if drop[i] {
			continue
		}
		a := &fs[i]
		for _, j := range slow[k+1:] {
			b := &fs[j]
			if drop[j] || a.Comm != b.Comm || !overlaps(span{a.StartNs, a.EndNs}, span{b.StartNs, b.EndNs}) {
				continue
			}
			if a.Rank == b.Rank || a.Rank == b.Peer || a.Peer == b.Rank || a.Peer == b.Peer {
				drop[j] = true
				a.Related = append(a.Related, b.Link())
				a.Summary += fmt.Sprintf("; also slower through the same rank: %s (%.0f%% of its peers)", b.Link(), 100*b.Evidence["ratio"])
			}
		}
		for j := range fs {
			b := &fs[j]
			if b.Kind != KindBackpressure || drop[j] || b.ImpactNs >= a.ImpactNs || a.Comm != b.Comm ||
				a.Rank == b.Rank && a.Peer == b.Peer || !overlaps(span{a.StartNs, a.EndNs}, span{b.StartNs, b.EndNs}) {
				continue
			}
			if a.Rank == b.Rank || a.Rank == b.Peer || a.Peer == b.Rank || a.Peer == b.Peer {
				drop[j] = true
				a.Related = append(a.Related, b.Link())
				a.Summary += fmt.Sprintf("; also backed up through the same rank: %s (%.0f%% of its baseline for %s)",
					b.Link(), 100*b.Evidence["rate_ratio"], fmtDur(b.DurationNs()))
			}
		}
	}
	kept := fs[:0]
	for i := range fs {
		if !drop[i] {
			kept = append(kept, fs[i])
		}
	}
	return kept
}

func cmpLinkRef(x, y LinkRef) int {
	return cmp.Or(cmp.Compare(x.Rank, y.Rank), cmp.Compare(x.Peer, y.Peer), cmp.Compare(x.Channel, y.Channel))
}

func bpSummary(f *Finding) string {
	e := f.Evidence
	var sb strings.Builder
	fmt.Fprintf(&sb, "link %d->%d ch%d delivered %s while busy, %.0f%% of its %s baseline, with %s in flight on average (baseline %s)",
		f.Rank, f.Peer, f.Channel, fmtBps(e["rate_bps"]), 100*e["rate_ratio"], fmtBps(e["baseline_rate_bps"]),
		fmtBytes(uint64(e["backlog_bytes"])), fmtBytes(uint64(e["baseline_backlog_bytes"])))
	if e["credit_wait_share"] >= 0.05 {
		fmt.Fprintf(&sb, ", waiting for credit %.0f%% of the time", 100*e["credit_wait_share"])
	}
	if e["credit_starved_share"] >= 0.5 {
		fmt.Fprintf(&sb, "; rank %d, not backed up itself, does not post receives fast enough", f.Peer)
	} else {
		sb.WriteString("; the data is posted and credited but does not land: the link itself is slow")
	}
	if len(f.Related) > 0 {
		fmt.Fprintf(&sb, "; backed up behind it: %s", joinLinks(f.Related))
	}
	return sb.String()
}

func stallSummary(f *Finding) string {
	s := fmt.Sprintf("link %d->%d ch%d sat idle for %s inside collective %s with nothing posted or waiting: rank %d had nothing to send (a stall upstream of the network or in compute)",
		f.Rank, f.Peer, f.Channel, fmtDur(f.DurationNs()), fmtSeqs(f.Collectives), f.Rank)
	if len(f.Related) > 0 {
		s += "; then idle too: " + joinLinks(f.Related)
	}
	return s
}

func fmtSeqs(s []uint64) string {
	if len(s) == 0 {
		return "?"
	}
	return fmt.Sprint(s[0])
}

func joinLinks(ls []LinkRef) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.String()
	}
	return strings.Join(parts, ", ")
}

// linkReport fills the report's link totals and chart series.
func (a *Analyzer) linkReport(r *Report) {
	ls := slices.Clone(a.list)
	slices.SortFunc(ls, func(x, y *link) int {
		return cmp.Or(cmp.Compare(x.key.comm, y.key.comm), cmp.Compare(x.key.src, y.key.src),
			cmp.Compare(x.key.dst, y.key.dst), cmp.Compare(x.key.ch, y.key.ch))
	})
	step := a.seriesW * a.w
	r.Series = Series{OriginNs: a.seriesOrigin * a.w, StepNs: step, Points: a.seriesN}
	for _, l := range ls {
		ref := LinkRef{Rank: l.key.src, Peer: l.key.dst, Channel: int32(l.key.ch)}
		if l.sentBytes == 0 && l.landedBytes == 0 && l.creditWaitNs == 0 {
			continue
		}
		r.Links = append(r.Links, LinkSummary{Comm: l.key.comm, JobID: flowtel.JobID(l.key.comm), Link: ref, SentBytes: l.sentBytes, LandedBytes: l.landedBytes,
			XferBps: safeDiv(float64(l.xferBytes), float64(l.xferNs)) * 1e9, MaxBacklog: l.maxOut, FailedWRs: l.failed,
			LatSamples: l.lat.Count(), LatP50Ns: l.lat.Percentile(50), LatP99Ns: l.lat.Percentile(99), LatMaxNs: l.lat.Max(),
			CreditWaitNs: l.creditWaitNs})
		if len(l.series) == 0 {
			continue
		}
		s := LinkSeries{Comm: l.key.comm, Link: ref, Bps: make([]float64, a.seriesN), Backlog: make([]float64, a.seriesN),
			CreditWait: make([]float64, a.seriesN)}
		for k, p := range l.series {
			b := p.done
			if l.landMode {
				b = p.landed // delivered, where the receiver's records say
			}
			s.Bps[k] = float64(b) * 1e9 / float64(step)
			s.Backlog[k] = p.backlog / float64(step)
			s.CreditWait[k] = float64(p.wait) / float64(step)
		}
		r.Series.Links = append(r.Series.Links, s)
	}
}

// fmtDur prints a duration with 3 significant digits.
func fmtDur(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3gs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3gms", float64(d)/1e6)
	case d >= time.Microsecond:
		return fmt.Sprintf("%.3gµs", float64(d)/1e3)
	}
	return fmt.Sprintf("%dns", ns)
}

// fmtBps prints a rate in bytes per second.
func fmtBps(b float64) string {
	switch {
	case b >= 1e9:
		return fmt.Sprintf("%.3g GB/s", b/1e9)
	case b >= 1e6:
		return fmt.Sprintf("%.3g MB/s", b/1e6)
	case b >= 1e3:
		return fmt.Sprintf("%.3g kB/s", b/1e3)
	}
	return fmt.Sprintf("%.3g B/s", b)
}

// fmtBytes prints a size in binary units.
func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.3g GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.3g MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.3g KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
