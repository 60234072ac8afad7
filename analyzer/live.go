package analyzer

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// Live runs the link detectors over live windows: successive snapshots of
// flowtel.Window statistics (one rank's, or every rank's gathered by
// vccl-top or exporter/live). Each Update is one sample per link; the
// detectors are those of the offline analysis with the window's numbers in
// place of the records (see "Live" in the package documentation):
// backpressure with its root, stall and slow link.
//
// A Live is not safe for concurrent use.
type Live struct {
	o      Options
	window int64 // the snapshots' window T, ns
	links  map[liveKey]*liveLink
	order  []*liveLink
}

type liveKey struct {
	src, dst int32
	ch       uint16
}

// liveLink is one link (src -> dst on a channel) as the snapshots show it:
// the sender's DirSend statistics, and the receiver's DirRecv ones when its
// rank is in the snapshots too.
type liveLink struct {
	key liveKey

	// The latest sample.
	bps         float64 // delivered (receiver's) or completed (sender's) bytes/s
	outstanding uint64
	creditShare float64
	waiting     bool
	seenAt      int64
	raw         liveSample // the latest sample itself (the fields above are smoothed)

	recent fifo[liveSample] // the latest samples, which are judged together
	base   fifo[liveSample] // healthy samples
	fl     bool
	crd    bool
	bp     liveEpisode
	st     liveEpisode
	sl     liveEpisode
}

type liveSample struct {
	bps         float64
	outstanding uint64
	credit      float64
}

// liveSmooth is how many of a link's latest samples are judged together.
const liveSmooth = 4

type liveEpisode struct {
	active      bool
	start, last int64
	n           int
	sumBps      float64
	sumBase     float64
	sumOut      float64
	sumCredit   float64
	root        int
}

// liveBaseline is how many healthy samples a link's baseline keeps.
const liveBaseline = 16

// NewLive returns a live detector for snapshots of windows of length window
// (flowtel.WindowConfig.T; 0: flowtel.DefaultWindowT), with opts' thresholds.
func NewLive(opts Options, window time.Duration) (*Live, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if window <= 0 {
		window = flowtel.DefaultWindowT
	}
	return &Live{o: opts.withDefaults(), window: int64(window), links: map[liveKey]*liveLink{}}, nil
}

// Update takes the statistics of every link at time now (ns, the
// snapshots' time base) and returns the findings in progress, worst first:
// each with Start when its condition began and End now.
func (lv *Live) Update(now int64, stats []flowtel.LinkStats) []Finding {
	// Fold both directions' statistics into links.
	recv := map[liveKey]float64{}
	for i := range stats {
		s := &stats[i]
		if s.Key.Dir == flowtel.DirRecv && s.Key.Rank != s.Key.Peer {
			recv[liveKey{src: s.Key.Peer, dst: s.Key.Rank, ch: s.Key.Channel}] += s.BandwidthBps
		}
	}
	seen := map[liveKey]bool{}
	for i := range stats {
		s := &stats[i]
		if s.Key.Dir != flowtel.DirSend || s.Key.Rank == s.Key.Peer || s.Key.Rank < 0 || s.Key.Peer < 0 {
			continue
		}
		// A link with no record in the last window is idle: its state is
		// not news.
		if s.LastNs < now-lv.window {
			continue
		}
		k := liveKey{src: s.Key.Rank, dst: s.Key.Peer, ch: s.Key.Channel}
		l := lv.links[k]
		if l == nil {
			l = &liveLink{key: k}
			lv.links[k] = l
			lv.order = append(lv.order, l)
			slices.SortFunc(lv.order, func(a, b *liveLink) int {
				return cmp.Or(cmp.Compare(a.key.src, b.key.src), cmp.Compare(a.key.dst, b.key.dst), cmp.Compare(a.key.ch, b.key.ch))
			})
		}
		if !seen[k] {
			l.bps, l.outstanding, l.creditShare, l.waiting = 0, 0, 0, false
			seen[k] = true
		}
		if b, ok := recv[k]; ok {
			l.bps = b
		} else {
			l.bps += s.BandwidthBps
		}
		l.outstanding += s.OutstandingBytes
		l.creditShare = max(l.creditShare, float64(s.CreditWaitNs)/float64(lv.window))
		l.waiting = l.waiting || s.CreditWaiting
		l.seenAt = now
	}
	// Judge each link on its latest few samples.
	for _, l := range lv.order {
		if l.seenAt != now {
			continue
		}
		raw := liveSample{bps: l.bps, outstanding: l.outstanding, credit: l.creditShare}
		l.recent.pushBounded(raw, liveSmooth)
		var sum liveSample
		for i := range l.recent.n {
			x := l.recent.at(i)
			sum.bps += x.bps
			sum.outstanding += x.outstanding
			sum.credit += x.credit
		}
		n := float64(l.recent.n)
		l.bps, l.outstanding, l.creditShare = sum.bps/n, uint64(float64(sum.outstanding)/n), sum.credit/n
		l.raw = raw
	}
	bp := &lv.o.Backpressure
	// Backpressure: a rate under the baseline's share with bytes piling
	// up or credit missing.
	for _, l := range lv.order {
		l.fl, l.crd = false, false
		if l.seenAt != now || l.base.n < 4 {
			continue
		}
		baseBps, baseOut := l.baseline()
		dropped := l.bps < bp.RateFactor*baseBps
		backed := l.outstanding >= bp.MinBacklog && float64(l.outstanding) > bp.BacklogFactor*baseOut
		// The window's credit-wait time counts any send waiting, which a
		// pipelined ring always has: it names the cause (crd), it does not
		// flag.
		if dropped && backed {
			l.fl, l.crd = true, l.creditShare >= bp.CreditShare
		}
	}
	// (rank, channel) with a backpressured or slow outgoing link.
	flaggedOut := map[[2]int32]bool{}
	for _, l := range lv.order {
		if l.fl || l.bp.active || l.sl.active {
			flaggedOut[[2]int32{l.key.src, int32(l.key.ch)}] = true
		}
	}
	var out []Finding
	for _, l := range lv.order {
		if l.seenAt != now {
			continue
		}
		baseBps, _ := l.baseline()
		root := l.fl && (!l.crd || !flaggedOut[[2]int32{l.key.dst, int32(l.key.ch)}])
		lv.step(&l.bp, l.fl, now, l, baseBps, root, int64(bp.MaxGap))
		// Stall: the rate collapsed with nothing outstanding and no
		// credit wait.
		stalled := l.base.n >= 4 && l.bps < 0.1*baseBps && l.raw.outstanding == 0 && !l.waiting && l.raw.credit == 0
		lv.step(&l.st, stalled, now, l, baseBps, true, int64(lv.o.Stall.MinDuration))
		// The baseline follows the link, except while it is flagged.
		if !l.fl && !l.bp.active && !stalled && l.bps > 0 {
			l.base.pushBounded(l.raw, liveBaseline)
		}
	}
	// Slow link: under the share of the other active links' median; links
	// that carry under 1% of the busiest one's rate (the signature check's
	// small messages) are not compared.
	var active []*liveLink
	busiest := 0.0
	for _, l := range lv.order {
		if l.seenAt == now {
			busiest = max(busiest, l.bps)
		}
	}
	for _, l := range lv.order {
		if l.seenAt == now && l.bps > 0 && l.bps >= busiest/100 {
			active = append(active, l)
		}
	}
	for _, l := range lv.order {
		slow := false
		var peer float64
		if l.seenAt == now && l.bps >= busiest/100 && l.bps > 0 && len(active) >= 2 {
			var others []float64
			for _, o := range active {
				if o != l && o.key.ch == l.key.ch {
					others = append(others, o.bps)
				}
			}
			peer = median(others)
			slow = len(others) > 0 && l.bps < lv.o.SlowLink.Ratio*peer
		}
		lv.step(&l.sl, slow, now, l, peer, true, int64(bp.MaxGap))
	}
	// A stall while a link is backpressured or slow is explained by it.
	if lv.anyActive() {
		for _, l := range lv.order {
			l.st = liveEpisode{}
		}
	}
	for _, l := range lv.order {
		if f, ok := lv.finding(KindBackpressure, &l.bp, l, int64(bp.MinDuration)); ok {
			// The links backed up behind a root: starved links into its
			// sender.
			for _, o := range lv.order {
				if o.bp.active && o.key.dst == l.key.src && o.key.ch == l.key.ch && o.bp.root*2 < o.bp.n {
					f.Related = append(f.Related, LinkRef{Rank: o.key.src, Peer: o.key.dst, Channel: int32(o.key.ch)})
				}
			}
			if l.bp.root*2 >= l.bp.n {
				out = append(out, f)
			}
		}
		if f, ok := lv.finding(KindStall, &l.st, l, int64(lv.o.Stall.MinDuration)); ok && lv.fedWell(l) {
			out = append(out, f)
		}
		if f, ok := lv.finding(KindSlowLink, &l.sl, l, int64(bp.MinDuration)); ok {
			out = append(out, f)
		}
	}
	for i := range out {
		out[i].Severity = severityOf(out[i].ImpactNs, max(now-out[i].StartNs, 1))
	}
	sortFindings(out)
	return out
}

// anyActive reports whether some link is backpressured or slow (a stall
// then has a cause upstream of it).
func (lv *Live) anyActive() bool {
	for _, l := range lv.order {
		if l.bp.active || l.sl.active {
			return true
		}
	}
	return false
}

// fedWell reports whether the links into l's sender deliver at their usual
// rate: then the sender has data and does not send (a stall at the sender);
// otherwise the stall comes from upstream of it.
func (lv *Live) fedWell(l *liveLink) bool {
	for _, o := range lv.order {
		if o.key.dst != l.key.src || o.key.ch != l.key.ch || o.seenAt != l.seenAt || o.base.n < 4 {
			continue
		}
		if b, _ := o.baseline(); o.bps < lv.o.Backpressure.RateFactor*b {
			return false
		}
	}
	return true
}

func (l *liveLink) baseline() (bps, out float64) {
	if l.base.n == 0 {
		return 0, 0
	}
	for i := range l.base.n {
		s := l.base.at(i)
		bps += s.bps
		out += float64(s.outstanding)
	}
	return bps / float64(l.base.n), out / float64(l.base.n)
}

// step advances an episode by one sample.
func (lv *Live) step(ep *liveEpisode, on bool, now int64, l *liveLink, ref float64, root bool, maxGap int64) {
	if !on {
		if ep.active && now-ep.last > maxGap {
			*ep = liveEpisode{}
		}
		return
	}
	if !ep.active {
		*ep = liveEpisode{active: true, start: now}
	}
	ep.last = now
	ep.n++
	ep.sumBps += l.bps
	ep.sumBase += ref
	ep.sumOut += float64(l.outstanding)
	ep.sumCredit += l.creditShare
	if root {
		ep.root++
	}
}

func (lv *Live) finding(k Kind, ep *liveEpisode, l *liveLink, minDur int64) (Finding, bool) {
	if !ep.active || ep.last-ep.start < minDur || ep.n < 2 {
		return Finding{}, false
	}
	n := float64(ep.n)
	bps, ref := ep.sumBps/n, ep.sumBase/n
	f := Finding{Kind: k, Rank: l.key.src, Peer: l.key.dst, Channel: int32(l.key.ch), Path: -1, StartNs: ep.start, EndNs: ep.last,
		ImpactNs: int64(float64(ep.last-ep.start) * max(0, 1-safeDiv(bps, ref)))}
	switch k {
	case KindBackpressure:
		f.Evidence = map[string]float64{"rate_bps": bps, "baseline_rate_bps": ref, "rate_ratio": safeDiv(bps, ref),
			"backlog_bytes": ep.sumOut / n, "credit_wait_share": ep.sumCredit / n, "samples": n}
		f.Summary = fmt.Sprintf("link %d->%d ch%d at %s, %.0f%% of its %s baseline, with %s outstanding (live window)",
			f.Rank, f.Peer, f.Channel, fmtBps(bps), 100*safeDiv(bps, ref), fmtBps(ref), fmtBytes(uint64(ep.sumOut/n)))
	case KindStall:
		f.ImpactNs = ep.last - ep.start
		f.Evidence = map[string]float64{"rate_bps": bps, "baseline_rate_bps": ref, "samples": n}
		f.Summary = fmt.Sprintf("link %d->%d ch%d fell to %s from %s with nothing outstanding: rank %d has nothing to send (live window)",
			f.Rank, f.Peer, f.Channel, fmtBps(bps), fmtBps(ref), f.Rank)
	case KindSlowLink:
		f.Evidence = map[string]float64{"bw_bps": bps, "peers_bw_bps": ref, "ratio": safeDiv(bps, ref), "samples": n}
		f.Summary = fmt.Sprintf("link %d->%d ch%d at %s, %.0f%% of the other links' %s (live window)",
			f.Rank, f.Peer, f.Channel, fmtBps(bps), 100*safeDiv(bps, ref), fmtBps(ref))
	}
	return f, true
}
