package analyzer

import (
	"fmt"
	"math"
	"slices"
)

// stragRank tallies one rank's late arrivals.
type stragRank struct {
	count       int
	sumLate     int64
	maxLate     int64
	waitImposed int64
	first, last int64
	colls       collList
}

// judgeArrival accounts the arrival skew of a collective every rank began.
func (a *Analyzer) judgeArrival(c *commState, cs *collState) {
	c.judged++
	latest := int32(-1)
	lb, second := int64(-1), int64(-1)
	for r, cr := range cs.ranks {
		if !cr.begun {
			continue
		}
		if b := cr.begin; b > lb {
			second, lb, latest = lb, b, int32(r)
		} else if b > second {
			second = b
		}
	}
	if latest < 0 || second < 0 {
		return
	}
	late := lb - second
	if late < int64(a.o.Straggler.MinLate) {
		return
	}
	// Late on its own account: it spent longer outside the library since
	// its previous call than the others did (not merely finishing that
	// call late).
	cl := &cs.ranks[latest]
	if cl.prevEnd == 0 {
		return
	}
	var gaps []float64
	for r, cr := range cs.ranks {
		if int32(r) != latest && cr.begun && cr.prevEnd > 0 {
			gaps = append(gaps, float64(cr.begin-cr.prevEnd))
		}
	}
	if len(gaps) == 0 {
		return
	}
	own := lb - cl.prevEnd - int64(median(gaps))
	late = min(late, own)
	if late < int64(a.o.Straggler.MinLate) {
		return
	}
	c.lateAll++
	for int(latest) >= len(c.strag) {
		c.strag = append(c.strag, stragRank{})
	}
	st := &c.strag[latest]
	if st.count == 0 {
		st.first = cs.minBegin
	}
	st.count++
	st.sumLate += late
	st.maxLate = max(st.maxLate, late)
	st.last = lb
	for _, cr := range cs.ranks {
		if cr.begun {
			st.waitImposed += max(0, min(lb-cr.begin, late))
		}
	}
	st.colls.add(cs.seq, a.o.MaxListed)
}

// stragglerFindings turns the tallies into findings.
func (a *Analyzer) stragglerFindings(c *commState) []Finding {
	o := &a.o.Straggler
	var out []Finding
	for r, st := range c.strag {
		var others int64
		for q, x := range c.strag {
			if q != r {
				others = max(others, x.maxLate)
			}
		}
		// One arrival late by far more than anyone else ever was (a hang
		// between calls) is a straggler on its own.
		single := st.maxLate >= int64(o.MinSingleLate) && float64(st.maxLate) >= o.Outlier*float64(others)
		// A rank is last by chance one time in (ranks): it must be last
		// more often than chance allows (a host that deschedules every
		// rank in turn names none).
		ranks := max(int(c.live()), 2)
		pv := binomTail(c.lateAll, st.count, 1/float64(ranks))
		if !single && (st.count < o.MinCount || float64(st.count) < o.MinShare*float64(c.lateAll) ||
			float64(st.count) < o.MinFraction*float64(c.judged) || pv > a.o.Significance/float64(ranks)) {
			continue
		}
		f := Finding{Kind: KindStraggler, Comm: c.id, Rank: int32(r), Peer: -1, Channel: -1, Path: -1,
			StartNs: st.first, EndNs: st.last, ImpactNs: st.sumLate}
		f.Collectives, f.NumCollectives = slices.Clone(st.colls.seqs), st.colls.n
		f.Evidence = map[string]float64{
			"late_collectives":   float64(st.count),
			"collectives":        float64(c.judged),
			"late_share":         float64(st.count) / float64(max(c.lateAll, 1)),
			"mean_late_ms":       float64(st.sumLate) / float64(st.count) / 1e6,
			"max_late_ms":        float64(st.maxLate) / 1e6,
			"others_waited_ms":   float64(st.waitImposed) / 1e6,
			"late_all_ranks":     float64(c.lateAll),
			"min_late_ms":        float64(o.MinLate) / 1e6,
			"late_per_100_coll":  100 * float64(st.count) / float64(max(c.judged, 1)),
			"others_max_late_ms": float64(others) / 1e6,
			"p_value":            pv,
		}
		f.Summary = fmt.Sprintf("rank %d began %d of %d collectives last, %s after every other rank on average (at most %s); the others waited %s in all",
			r, st.count, c.judged, fmtDur(st.sumLate/int64(st.count)), fmtDur(st.maxLate), fmtDur(st.waitImposed))
		out = append(out, f)
	}
	return out
}

// slowEpisode is a run of collectives in which a link was slower than the
// others.
type slowEpisode struct {
	active    bool
	slow      int
	total     int
	normalRun int
	start     int64
	end       int64
	sumBW     float64
	sumPeerBW float64
	minRatio  float64
	extraNs   float64
	colls     collList
	bytes     uint64
}

// judgeLinks compares the bandwidth of the links one collective used.
func (a *Analyzer) judgeLinks(c *commState, cs *collState) {
	o := &a.o.SlowLink
	var ls []*linkColl
	for _, lc := range cs.links {
		// A transfer too short to time says nothing of the link; nor does
		// one whose sender or receiver did not run meanwhile.
		if lc.bytes < o.MinBytes || lc.ns < int64(o.MinXfer) || lc.l.downDuring(cs.minBegin, cs.maxEnd) {
			continue
		}
		ls = append(ls, lc)
	}
	if len(ls) < 2 {
		return
	}
	bws := make([]float64, len(ls))
	for k, lc := range ls {
		bws[k] = float64(lc.bytes) / float64(lc.ns)
	}
	others := make([]float64, 0, len(ls)-1)
	for k, lc := range ls {
		// Like for like: the links that moved about as much (an algorithm
		// whose links carry different shares times them differently).
		others = others[:0]
		for j, b := range bws {
			if j != k && 2*ls[j].bytes >= lc.bytes && ls[j].bytes <= 2*lc.bytes {
				others = append(others, b)
			}
		}
		if len(others) == 0 {
			continue
		}
		peer := median(others)
		ratio := safeDiv(bws[k], peer)
		slow := ratio < o.Ratio
		d := &lc.l.det
		if d.judgedN == 0 {
			c.judgedLks++
		}
		d.judgedN++
		c.judgedN++
		if slow {
			d.slowN++
			c.slowN++
		}
		a.slowStep(lc.l, cs, slow, bws[k], peer, ratio, lc)
	}
}

// significantSlow reports whether a slow-link finding stands out against
// how often the job's other links were slow: the chance that a link slow as
// often as the others by luck is slow in as many of its collectives,
// bounded by Options.Significance over the links compared (a host that
// slows every link in turn, descheduling or sharing a NIC, names none).
// It adds the figures to the finding's evidence.
func (a *Analyzer) significantSlow(f *Finding) bool {
	c := a.comms[f.Comm]
	l := a.links[linkKey{comm: f.Comm, src: f.Rank, dst: f.Peer, ch: uint16(f.Channel)}]
	if c == nil || l == nil {
		return true
	}
	n, k := int(f.Evidence["collectives"]), int(f.Evidence["slow_collectives"])
	p0 := (float64(c.slowN-l.det.slowN) + 0.5) / (float64(c.judgedN-l.det.judgedN) + 1)
	pv := binomTail(n, k, min(p0, 1))
	f.Evidence["job_slow_rate"] = p0
	f.Evidence["p_value"] = pv
	return pv <= a.o.Significance/float64(max(c.judgedLks, 1))
}

// binomTail is P(X >= k) for X ~ Binomial(n, p).
func binomTail(n, k int, p float64) float64 {
	if k <= 0 {
		return 1
	}
	if k > n || p <= 0 {
		return 0
	}
	if p >= 1 {
		return 1
	}
	lg := func(x int) float64 { v, _ := math.Lgamma(float64(x) + 1); return v }
	var sum float64
	for i := k; i <= n; i++ {
		sum += math.Exp(lg(n) - lg(i) - lg(n-i) + float64(i)*math.Log(p) + float64(n-i)*math.Log1p(-p))
	}
	return min(sum, 1)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (a *Analyzer) slowStep(l *link, cs *collState, slow bool, bw, peer, ratio float64, lc *linkColl) {
	ep := &l.det.slow
	o := &a.o.SlowLink
	if !slow {
		if ep.active {
			ep.total++
			ep.normalRun++
			if ep.normalRun > o.MaxGap {
				a.closeSlow(l)
			}
		}
		return
	}
	// Slow again after normal collectives: an episode that would fall
	// under SlowLink.MinFraction with it was chance slowness (a busy
	// host's); it ends there (reported if it stood on its own) and this
	// one starts afresh, so a fault after stray slow collectives is not
	// diluted by them.
	if ep.active && ep.normalRun > 0 && float64(ep.slow+1) < o.MinFraction*float64(ep.total+1) {
		a.closeSlow(l)
	}
	if !ep.active {
		*ep = slowEpisode{active: true, start: cs.minBegin, minRatio: ratio}
	}
	ep.slow++
	ep.total++
	ep.normalRun = 0
	ep.end = cs.maxEnd
	ep.sumBW += bw
	ep.sumPeerBW += peer
	ep.minRatio = min(ep.minRatio, ratio)
	ep.bytes += lc.bytes
	if peer > 0 {
		ep.extraNs += max(0, float64(lc.ns)-float64(lc.bytes)/peer)
	}
	ep.colls.add(cs.seq, a.o.MaxListed)
}

func (a *Analyzer) closeSlow(l *link) {
	ep := &l.det.slow
	if !ep.active {
		return
	}
	ep.active = false
	o := &a.o.SlowLink
	judged := ep.total - ep.normalRun
	if ep.slow < o.MinCollectives || float64(ep.slow) < o.MinFraction*float64(judged) || ep.end-ep.start < int64(o.MinDuration) {
		return
	}
	f := a.linkFinding(KindSlowLink, l, ep.start, ep.end)
	f.ImpactNs = int64(ep.extraNs)
	f.Collectives, f.NumCollectives = slices.Clone(ep.colls.seqs), ep.colls.n
	bw, peer := ep.sumBW/float64(ep.slow), ep.sumPeerBW/float64(ep.slow)
	f.Evidence = map[string]float64{
		"bw_bps":            bw * 1e9,
		"peers_bw_bps":      peer * 1e9,
		"ratio":             safeDiv(bw, peer),
		"min_ratio":         ep.minRatio,
		"slow_collectives":  float64(ep.slow),
		"collectives":       float64(judged),
		"extra_ms":          ep.extraNs / 1e6,
		"bytes":             float64(ep.bytes),
		"threshold_ratio":   o.Ratio,
		"link_xfer_bw_bps":  safeDiv(float64(l.xferBytes), float64(l.xferNs)) * 1e9,
		"link_xfer_seconds": float64(l.xferNs) / 1e9,
	}
	f.Summary = fmt.Sprintf("link %d->%d ch%d moved data at %s in %d of %d collectives, %.0f%% of the other links' %s; %s lost",
		l.key.src, l.key.dst, l.key.ch, fmtBps(bw*1e9), ep.slow, judged, 100*safeDiv(bw, peer), fmtBps(peer*1e9), fmtDur(int64(ep.extraNs)))
	a.cands = append(a.cands, candidate{f: f})
}
