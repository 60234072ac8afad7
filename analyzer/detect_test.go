package analyzer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// analyze runs the analyzer over records in time order, in batches.
func analyze(t testing.TB, recs []flowtel.Record, opts Options) *Report {
	t.Helper()
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(recs); i += 4096 {
		j := min(i+4096, len(recs))
		a.Add(recs[i:j])
		a.Advance(recs[j-1].TsNs)
	}
	return a.Finish()
}

func findings(r *Report) string {
	var sb strings.Builder
	for _, f := range r.Findings {
		fmt.Fprintf(&sb, "\n  %s %s %s: %s", f.Severity, f.Kind, f.Culprit(), f.Summary)
	}
	return sb.String()
}

// want checks that r has exactly the findings named, each "kind rank peer".
func want(t *testing.T, r *Report, names ...string) {
	t.Helper()
	var got []string
	for _, f := range r.Findings {
		got = append(got, fmt.Sprintf("%s %d %d", f.Kind, f.Rank, f.Peer))
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("findings %q, want %q:%s", got, names, findings(r))
	}
}

func TestSyntheticClean(t *testing.T) {
	t.Parallel()
	s := newSynth(4)
	for range 40 {
		s.allReduce(4 << 20)
	}
	r := analyze(t, s.merged(), Options{})
	want(t, r)
	if len(r.Collectives) != 1 || r.Collectives[0].Count != 40 || r.Collectives[0].Op != "allreduce" {
		t.Errorf("collectives %+v", r.Collectives)
	}
}

func TestSyntheticSlowLink(t *testing.T) {
	t.Parallel()
	s := newSynth(4)
	s.bw = func(src, dst int) float64 {
		if src == 1 && dst == 2 {
			return 0.05
		}
		return 1
	}
	for range 20 {
		s.allReduce(4 << 20)
	}
	r := analyze(t, s.merged(), Options{})
	want(t, r, "slow_link 1 2")
	f := r.Findings[0]
	if f.NumCollectives != 20 || f.Evidence["ratio"] > 0.3 {
		t.Errorf("slow link evidence %v over %d collectives", f.Evidence, f.NumCollectives)
	}
}

// A receiver that posts its receives late, behind sends that went ahead
// of their credit, holds their landing: that is the receiver's lateness,
// not the link's, and no link is slow (2 ranks, as in make run, where rank
// 0 runs ahead).
func TestSyntheticLateReceiver(t *testing.T) {
	t.Parallel()
	s := newSynth(2)
	s.recvLate = func(src, dst int, seq uint64) int64 {
		if src == 0 {
			return 400e3 // a 64 KiB chunk moves in ~85 µs
		}
		return 0
	}
	for range 20 {
		s.allReduce(4 << 20)
	}
	want(t, analyze(t, s.merged(), Options{}))
}

func TestSyntheticStraggler(t *testing.T) {
	t.Parallel()
	s := newSynth(4)
	s.late = func(rank int, seq uint64) int64 {
		if rank == 2 && seq%4 == 0 {
			return 30e6
		}
		return 0
	}
	for range 40 {
		s.allReduce(1 << 20)
	}
	r := analyze(t, s.merged(), Options{})
	want(t, r, "straggler 2 -1")
	if f := r.Findings[0]; f.NumCollectives != 10 || f.Evidence["mean_late_ms"] < 29 || f.Evidence["mean_late_ms"] > 31 {
		t.Errorf("straggler over %d collectives, evidence %v", f.NumCollectives, f.Evidence)
	}
}

// A link that slows down mid-run is the root of the backpressure; the link
// into its sender, starved of credit, is backed up behind it.
func TestSyntheticBackpressure(t *testing.T) {
	t.Parallel()
	s := newSynth(4)
	s.chunk = 256 << 10
	slow := false
	s.bw = func(src, dst int) float64 {
		if slow && src == 2 && dst == 3 {
			return 0.02
		}
		return 1
	}
	s.starve = func(src, dst int, seq uint64) int64 {
		if slow && src == 1 && dst == 2 {
			return 10e6
		}
		return 0
	}
	for i := range 60 {
		slow = i >= 30 && i < 50
		s.allReduce(4 << 20)
	}
	r := analyze(t, s.merged(), Options{})
	var bp *Finding
	for i := range r.Findings {
		if r.Findings[i].Kind == KindBackpressure {
			if bp != nil {
				t.Errorf("two backpressure findings:%s", findings(r))
			}
			bp = &r.Findings[i]
		}
	}
	if bp == nil || bp.Rank != 2 || bp.Peer != 3 {
		t.Fatalf("no backpressure root 2->3:%s", findings(r))
	}
	if len(bp.Related) == 0 || bp.Related[0] != (LinkRef{Rank: 1, Peer: 2}) {
		t.Errorf("backpressure on 2->3 lists %v behind it, want 1->2 ch0", bp.Related)
	}
	if bp.NumCollectives < 15 || bp.Evidence["rate_ratio"] > 0.2 {
		t.Errorf("backpressure over %d collectives, evidence %v", bp.NumCollectives, bp.Evidence)
	}
}

// A rank that stops sending in the middle of a collective, with nothing
// posted: a stall, named at the stalled rank's link.
func TestSyntheticStall(t *testing.T) {
	t.Parallel()
	s := newSynth(4)
	s.idle = func(rank int, seq uint64, step int) int64 {
		if rank == 1 && seq == 12 && step == 3 {
			return 120e6
		}
		return 0
	}
	for range 20 {
		s.allReduce(4 << 20)
	}
	r := analyze(t, s.merged(), Options{})
	want(t, r, "stall 1 2")
	f := r.Findings[0]
	if f.Collectives[0] != 12 || f.DurationNs() < 110e6 || f.DurationNs() > 130e6 {
		t.Errorf("stall in %v for %v", f.Collectives, time.Duration(f.DurationNs()))
	}
}

// Traffic moves to the backup path after the primary goes down, at half
// the rate, and back when it heals: one failover finding with the
// throughput before, during and after.
func TestSyntheticFailover(t *testing.T) {
	t.Parallel()
	var recs []flowtel.Record
	const comm = 7
	add := func(r flowtel.Record) {
		r.Comm = comm
		recs = append(recs, r)
	}
	var seq uint64
	now := int64(1e12)
	send := func(path uint8, xfer int64) {
		id := flowtel.WRID(seq, false)
		rid := flowtel.WRID(seq, true)
		add(flowtel.Record{TsNs: now, Kind: flowtel.KindWRPost, Rank: 1, Peer: 0, QP: 2, WrID: rid, Bytes: 64 << 10, Path: flowtel.Path(path)})
		add(flowtel.Record{TsNs: now, Kind: flowtel.KindWRPost, Rank: 0, Peer: 1, QP: 1, WrID: id, Bytes: 64 << 10, Path: flowtel.Path(path)})
		now += xfer
		add(flowtel.Record{TsNs: now, Kind: flowtel.KindWC, Rank: 0, Peer: 1, QP: 1, WrID: id, Bytes: 64 << 10, Path: flowtel.Path(path)})
		add(flowtel.Record{TsNs: now + 1000, Kind: flowtel.KindWC, Rank: 1, Peer: 0, QP: 2, WrID: rid, Bytes: 64 << 10, Path: flowtel.Path(path)})
		now += 2000
		seq++
	}
	for now < 1e12+1.5e9 {
		send(0, 100e3)
	}
	down := now
	add(flowtel.Record{TsNs: now, Kind: flowtel.KindLinkDown, Rank: 0, Peer: 1, QP: 1, Path: 0})
	add(flowtel.Record{TsNs: now + 10, Kind: flowtel.KindLinkDown, Rank: 1, Peer: 0, QP: 2, Path: 0})
	now += 200e6 // 200 ms with nothing moving
	over := now
	add(flowtel.Record{TsNs: now, Kind: flowtel.KindFailover, Rank: 0, Peer: 1, QP: 1, Path: 1, Bytes: 64 << 10})
	add(flowtel.Record{TsNs: now + 10, Kind: flowtel.KindFailover, Rank: 1, Peer: 0, QP: 2, Path: 1})
	for now < over+800e6 {
		send(1, 200e3)
	}
	back := now
	add(flowtel.Record{TsNs: now, Kind: flowtel.KindLinkUp, Rank: 0, Peer: 1, QP: 1, Path: 0})
	add(flowtel.Record{TsNs: now + 5, Kind: flowtel.KindFailback, Rank: 0, Peer: 1, QP: 1, Path: 0})
	add(flowtel.Record{TsNs: now + 10, Kind: flowtel.KindFailback, Rank: 1, Peer: 0, QP: 2, Path: 0})
	for now < back+1.5e9 {
		send(0, 100e3)
	}
	r := analyze(t, recs, Options{})
	want(t, r, "failover 0 1")
	f := r.Findings[0]
	e := f.Evidence
	t.Logf("%s; evidence %v", f.Summary, e)
	if f.StartNs != down || f.EndNs < back || f.EndNs > back+100 {
		t.Errorf("failover from %d to %d, want %d to %d", f.StartNs, f.EndNs, down, back)
	}
	// Busy-time throughput: 64 KiB per 100 µs (about 655 MB/s) on the
	// primary, half that on the backup.
	if e["before_bps"] < 600e6 || e["before_bps"] > 700e6 || e["during_ratio"] < 0.4 || e["during_ratio"] > 0.6 ||
		e["after_ratio"] < 0.9 || e["after_ratio"] > 1.1 || e["link_down"] != 2 {
		t.Errorf("evidence %v", e)
	}
	if imp := time.Duration(f.ImpactNs); imp < 550*time.Millisecond || imp > 650*time.Millisecond {
		t.Errorf("impact %v, want about 200ms down + 800ms at half rate", imp)
	}
}

// A link slow now and then by chance (every sixth collective) before it is
// slow for good: the stray slow collectives do not dilute the fault's
// episode below SlowLink.MinFraction.
func TestSlowLinkAfterStraySlowness(t *testing.T) {
	t.Parallel()
	s := newSynth(4)
	var seq int
	s.bw = func(src, dst int) float64 {
		switch {
		case src != 2 || dst != 3:
			return 1
		case seq >= 30 && seq < 45:
			return 0.05
		case seq < 30 && seq%6 == 3:
			return 0.1
		}
		return 1
	}
	for seq = 1; seq <= 60; seq++ {
		s.allReduce(4 << 20)
	}
	r := analyze(t, s.merged(), Options{})
	var slow *Finding
	for i := range r.Findings {
		if f := &r.Findings[i]; f.Kind == KindSlowLink && f.Rank == 2 && f.Peer == 3 {
			slow = f
		}
	}
	if slow == nil {
		t.Fatalf("no slow link 2->3:%s", findings(r))
	}
	if slow.Collectives[0] < 27 || slow.NumCollectives > 17 {
		t.Errorf("the slow link's episode begins at collective %d and has %d: the stray slow ones before 30 are in it:%s",
			slow.Collectives[0], slow.NumCollectives, findings(r))
	}
}
