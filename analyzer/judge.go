package analyzer

import (
	"math"

	"github.com/vccl-go/vccl/flowtel"
)

// linkDetect is a link's detector state.
type linkDetect struct {
	bl      baseline
	bp      bpEpisode
	win     window
	fl      bool // backpressured in the slice being judged
	crd     bool // and credit-starved
	dropped bool // its rate fell under the baseline's share (backlog or not)
	excused bool // its sender or receiver did not run lately: not judged

	// Stall: the latest slice the link was active in, and the comm's
	// cumulative excused and backpressured time at its end.
	lastActive    int64
	lastSeq       uint64
	gapExcused0   int64
	gapBP0        int64
	cumDone       uint64
	cumBusy       int64
	slow          slowEpisode
	slowN         int // collectives in which it was slow
	judgedN       int // collectives in which its bandwidth was compared
	evNext        int // next link event to account
	fo            *foEpisode
	foDone        []foEpisode
	lastActiveEnd int64
}

func (d *linkDetect) init() {
	d.lastActive = -1
}

// window sums a link's slices over the last few.
type window struct {
	slices     flowtel.FIFO[winSlice]
	landed     uint64
	busy, wire int64
	backlog    float64
}

type winSlice struct {
	idx        int64
	landed     uint64
	busy, wire int64
	backlog    float64
}

// add adds slice i and forgets the slices older than n.
func (wn *window) add(i, n int64, acc *sliceAcc) {
	for wn.slices.Len() > 0 && wn.slices.Front().idx <= i-n {
		s := wn.slices.PopFront()
		wn.landed -= s.landed
		wn.busy -= s.busy
		wn.wire -= s.wire
		wn.backlog -= s.backlog
	}
	if acc.empty() {
		return
	}
	wn.slices.PushBounded(winSlice{idx: i, landed: acc.landed, busy: acc.busy, wire: acc.wire, backlog: acc.backlog}, int(n))
	wn.landed += acc.landed
	wn.busy += acc.busy
	wn.wire += acc.wire
	wn.backlog += acc.backlog
}

// baseline is a link's recent healthy behaviour: its last slices with sends
// pending that were neither backpressured nor excused.
type baseline struct {
	done       []uint64
	busy       []int64
	backlog    []float64 // average outstanding bytes over the slice
	head, n    int
	sumDone    uint64
	sumBusy    int64
	sumBacklog float64
}

func (b *baseline) push(done uint64, busy int64, backlog float64, size int) {
	if b.done == nil {
		b.done, b.busy, b.backlog = make([]uint64, size), make([]int64, size), make([]float64, size)
	}
	if b.n == len(b.done) {
		b.sumDone -= b.done[b.head]
		b.sumBusy -= b.busy[b.head]
		b.sumBacklog -= b.backlog[b.head]
	} else {
		b.n++
	}
	b.done[b.head], b.busy[b.head], b.backlog[b.head] = done, busy, backlog
	b.sumDone += done
	b.sumBusy += busy
	b.sumBacklog += backlog
	b.head++
	if b.head == len(b.done) {
		b.head = 0
	}
}

// rate is bytes completed per ns of busy time.
func (b *baseline) rate() float64 {
	if b.sumBusy <= 0 {
		return 0
	}
	return float64(b.sumDone) / float64(b.sumBusy)
}

// meanBacklog is the average outstanding bytes over the baseline's slices.
func (b *baseline) meanBacklog() float64 {
	if b.n == 0 {
		return 0
	}
	return max(b.sumBacklog/float64(b.n), 0)
}

// bpEpisode is a run of backpressured slices of one link.
type bpEpisode struct {
	active        bool
	start, last   int64 // slices
	span          int64 // slices from start to last
	busySlices    int   // slices of the span with sends in flight
	flagged, root int
	credit        int // of which credit-starved
	sumDone       uint64
	sumBusy       int64
	sumBacklog    float64 // byte·ns
	sumWait       int64
	lostNs        float64
	baseRate      float64
	baseBacklog   float64
	colls         collList
}

// debugSlice, when set, sees every judged slice of every link (tests).
var debugSlice func(a *Analyzer, l *link, i int64, acc *sliceAcc)

// judgeUpTo judges every slice before index target.
func (a *Analyzer) judgeUpTo(target int64) {
	if !a.started {
		return
	}
	for a.final < target {
		next := int64(math.MaxInt64)
		for _, l := range a.list {
			next = min(next, l.firstData())
		}
		if next > a.final {
			// Nothing recorded before next: skip the idle slices.
			a.final = min(next, target)
			continue
		}
		a.judgeSlice(a.final)
		a.final++
	}
}

// judgeSlice judges slice i of every link.
func (a *Analyzer) judgeSlice(i int64) {
	w := a.w
	from := i * w
	for _, c := range a.comms {
		c.advanceExcuse(a, i)
		// A rank that did not run explains the stalls it caused.
		c.excNow = min(w, c.excused(a, from, from+w)+c.markDown(i, from, from+w))
		c.bpNow = false
	}
	if cap(a.accs) < len(a.list) {
		a.accs = make([]sliceAcc, len(a.list))
	}
	accs := a.accs[:len(a.list)]
	bp := &a.o.Backpressure
	// Phase 1: which links are backpressured, judged over the window
	// ending at this slice.
	win := max(int64(bp.Window)/w, 1)
	for k, l := range a.list {
		acc := l.take(i)
		accs[k] = acc
		d := &l.det
		d.fl, d.crd, d.dropped = false, false, false
		d.win.add(i, win, &acc)
		// Not judged while its sender or receiver did not run, or while
		// its oldest send belongs to a collective some rank has not
		// begun: it waits for that rank then, not for the link.
		if d.excused = l.downNear(i, win) || l.waitsArrival(); d.excused {
			continue
		}
		// The baseline must have delivered what a loaded link does: a few
		// small messages time the latency (a baseline of kB/s), not
		// what the link can move.
		if d.win.busy < int64(bp.MinBusy*float64(win*w)) || d.bl.sumBusy < int64(bp.MinBaseline) || acc.busy == 0 ||
			d.bl.sumDone < bp.MinBacklog {
			continue
		}
		busy := float64(d.win.busy)
		rate := float64(d.win.landed) / busy
		backlog := d.win.backlog / float64(win*w)
		starved := float64(d.win.busy-d.win.wire) / busy
		d.dropped = rate < bp.RateFactor*d.bl.rate()
		if d.dropped && backlog >= float64(bp.MinBacklog) && (backlog > bp.BacklogFactor*d.bl.meanBacklog() || starved >= bp.CreditShare) {
			d.fl, d.crd = true, starved >= bp.CreditShare
			l.src.bpSlice = i
			l.comm.bpNow = true
		}
	}
	if debugSlice != nil {
		for k, l := range a.list {
			debugSlice(a, l, i, &accs[k])
		}
	}
	// Phase 2: episodes, baselines, stalls, series.
	maxGap := max(int64(bp.MaxGap)/w, 1)
	for k, l := range a.list {
		acc := &accs[k]
		d := &l.det
		if d.bp.active && i-d.bp.last > maxGap {
			a.closeBP(l)
		}
		if d.bp.active && acc.busy > 0 {
			d.bp.busySlices++
		}
		if d.fl {
			if !d.bp.active {
				d.bp.busySlices = 0
			}
			a.flagBP(l, i, acc)
			if d.bp.busySlices == 0 {
				d.bp.busySlices = 1
			}
		} else if acc.busy > 0 && !d.dropped && !d.excused {
			// Only healthy slices make the baseline: a link slowing down
			// does not lower its own yardstick.
			d.bl.push(acc.landed, acc.busy, acc.backlog/float64(w), int(max(int64(bp.Baseline)/w, 1)))
		}
		a.stallSlice(l, i, acc)
		d.cumDone += acc.done
		d.cumBusy += acc.busy
		if !acc.empty() {
			a.seriesAdd(l, i, acc)
			if l.history == nil {
				l.history = newCumHistory(int(max(int64(a.o.Failover.Window)/w, 1)) + 2)
			}
			l.history.push(i, d.cumDone, d.cumBusy)
		}
		if d.evNext < len(l.events) || d.fo != nil {
			a.failoverSlice(l, i)
		}
	}
	for _, c := range a.comms {
		c.cumExcused += c.excNow
		if c.bpNow {
			c.cumBP += w
			c.bpSlice = i
		}
		c.cumAt = i + 1
	}
}

func (a *Analyzer) flagBP(l *link, i int64, acc *sliceAcc) {
	d := &l.det
	ep := &d.bp
	if !ep.active {
		*ep = bpEpisode{active: true, start: i, baseRate: d.bl.rate(), baseBacklog: d.bl.meanBacklog()}
	}
	ep.last = i
	ep.flagged++
	ep.span = i - ep.start + 1
	// The root: a link whose own receiver is not backed up (its other
	// links are not backpressured) or that is not starved of credit (the
	// wire, not the receiver, holds it up).
	downstream := l.dst.bpSlice == i
	if !d.crd || !downstream {
		ep.root++
	}
	if d.crd {
		ep.credit++
	}
	busy := float64(acc.busy)
	ep.sumDone += acc.landed
	ep.sumBusy += acc.busy
	ep.sumBacklog += acc.backlog
	ep.sumWait += acc.busy - acc.wire
	if ep.baseRate > 0 {
		ep.lostNs += busy * max(0, 1-float64(acc.landed)/busy/ep.baseRate)
	}
	addSeqs(&ep.colls, acc, a.o.MaxListed)
}

func addSeqs(cl *collList, acc *sliceAcc, max int) {
	if acc.minSeq == 0 {
		return
	}
	for s := acc.minSeq; s <= acc.maxSeq && s-acc.minSeq < 8; s++ {
		if s&p2pBit == 0 {
			cl.add(s, max)
		}
	}
	if acc.maxSeq-acc.minSeq >= 8 && acc.maxSeq&p2pBit == 0 {
		cl.add(acc.maxSeq, max)
	}
}

func (a *Analyzer) closeBP(l *link) {
	ep := &l.det.bp
	if !ep.active {
		return
	}
	ep.active = false
	w := a.w
	short := int64(ep.flagged)*w < int64(a.o.Backpressure.MinDuration) || float64(ep.flagged) < a.o.Backpressure.MinShare*float64(max(ep.busySlices, 1))
	busy := float64(max(ep.sumBusy, 1))
	rate := float64(ep.sumDone) / busy
	f := a.linkFinding(KindBackpressure, l, ep.start*w, (ep.last+1)*w)
	f.ImpactNs = int64(ep.lostNs)
	f.Collectives, f.NumCollectives = ep.colls.seqs, ep.colls.n
	f.Evidence = map[string]float64{
		"rate_bps":               rate * 1e9,
		"baseline_rate_bps":      ep.baseRate * 1e9,
		"rate_ratio":             safeDiv(rate, ep.baseRate),
		"backlog_bytes":          ep.sumBacklog / float64(int64(ep.flagged)*w),
		"baseline_backlog_bytes": ep.baseBacklog,
		"credit_wait_share":      float64(ep.sumWait) / busy,
		"flagged_ms":             float64(int64(ep.flagged)*w) / 1e6,
		"credit_starved_share":   float64(ep.credit) / float64(ep.flagged),
	}
	a.cands = append(a.cands, candidate{f: f, short: short})
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// linkFinding starts a finding about link l.
func (a *Analyzer) linkFinding(k Kind, l *link, start, end int64) Finding {
	path := int32(0)
	if l.usedPath1 {
		path = -1
	}
	return Finding{Kind: k, Comm: l.key.comm, Rank: l.key.src, Peer: l.key.dst, Channel: int32(l.key.ch),
		Path: path, StartNs: start, EndNs: end}
}

// stallSlice follows a link's idle gaps inside a collective.
func (a *Analyzer) stallSlice(l *link, i int64, acc *sliceAcc) {
	d := &l.det
	w := a.w
	c := l.comm
	st := &a.o.Stall
	active := acc.posts > 0 || acc.wrs > 0 || acc.wait > 0 || acc.busy > int64(st.MaxBusy*float64(w))
	if !active {
		return
	}
	if d.lastActive >= 0 && acc.minSeq != 0 && acc.minSeq == d.lastSeq && acc.minSeq&p2pBit == 0 {
		from, to := d.lastActiveEnd, acc.firstEv
		if from == 0 {
			from = (d.lastActive + 1) * w
		}
		if to == 0 {
			to = i * w
		}
		gap := to - from
		// Gaps from a fifth of the minimum are kept too (short): they are
		// the job's own idling, what a stall must stand out against.
		if idle := (i - d.lastActive - 1) * w; gap >= int64(st.MinDuration)/5 && idle > 0 {
			explained := (c.cumExcused - d.gapExcused0) + (c.cumBP - d.gapBP0)
			// A sender that wrote heartbeats meanwhile waited in the
			// library for its peers: it had nothing to send because
			// nothing came, a victim of the stall, not its cause. One
			// whose receives completed meanwhile had nothing to send
			// because its data came in slowly: the stall is upstream.
			src := c.life(l.key.src)
			waited := src.waitedIn(from, to) || src.receivedIn(from, to)
			if !waited && float64(explained) < st.MaxExplained*float64(idle) {
				f := a.linkFinding(KindStall, l, from, to)
				f.ImpactNs = gap
				f.Collectives, f.NumCollectives = []uint64{acc.minSeq}, 1
				f.Evidence = map[string]float64{
					"idle_ms":           float64(gap) / 1e6,
					"explained_share":   float64(explained) / float64(idle),
					"baseline_rate_bps": d.bl.rate() * 1e9,
				}
				a.cands = append(a.cands, candidate{f: f, short: gap < int64(st.MinDuration)})
			}
		}
	}
	d.lastActive = i
	d.lastActiveEnd = acc.lastEv
	d.lastSeq = acc.maxSeq
	d.gapExcused0 = c.cumExcused + c.excNow
	d.gapBP0 = c.cumBP
	if c.bpNow {
		d.gapBP0 += w
	}
}

// advanceExcuse accounts the excused time of the slices skipped since the
// last judged one.
func (c *commState) advanceExcuse(a *Analyzer, i int64) {
	if !c.cumSet {
		c.cumSet, c.cumAt = true, i
	}
	if i > c.cumAt {
		from, to := c.cumAt*a.w, i*a.w
		c.cumExcused += min(to-from, c.excused(a, from, to)+c.downMost(from, to))
		c.cumAt = i
	}
	// Forget windows that closed before this slice.
	from := i * a.w
	k := 0
	for k < len(c.arrive) {
		cs := c.arrive[k]
		if !(cs.allBegun(c.live()) || cs.judged) || cs.maxBegin >= from {
			break
		}
		k++
	}
	if k > 0 {
		clear(c.arrive[:k])
		c.arrive = c.arrive[k:]
	}
}

// excused returns the time within [from, to) when a collective had begun on
// some rank but not on every rank.
func (c *commState) excused(a *Analyzer, from, to int64) int64 {
	var lo, hi int64 = math.MaxInt64, math.MinInt64 // union of the windows, approximated by merging in order
	var total int64
	for _, cs := range c.arrive {
		s := cs.minBegin
		e := int64(math.MaxInt64)
		if cs.allBegun(c.live()) || cs.judged {
			e = cs.maxBegin
		}
		s, e = max(s, from), min(e, to)
		if e <= s {
			continue
		}
		if s > hi {
			if hi > lo {
				total += hi - lo
			}
			lo, hi = s, e
			continue
		}
		lo, hi = min(lo, s), max(hi, e)
	}
	if hi > lo {
		total += hi - lo
	}
	return total
}

// seriesAdd adds slice i of link l to its chart series.
func (a *Analyzer) seriesAdd(l *link, i int64, acc *sliceAcc) {
	if !a.seriesSet {
		a.seriesSet, a.seriesOrigin = true, i
	}
	p := (i - a.seriesOrigin) / a.seriesW
	for p >= int64(a.o.SeriesPoints) {
		a.compactSeries()
		p = (i - a.seriesOrigin) / a.seriesW
	}
	for int64(len(l.series)) <= p {
		l.series = append(l.series, seriesPoint{})
	}
	sp := &l.series[p]
	sp.done += acc.done
	sp.landed += acc.landed
	sp.backlog += acc.backlog
	sp.busy += acc.busy
	sp.wait += acc.wait
	a.seriesN = max(a.seriesN, int(p)+1)
}

// compactSeries halves the resolution of every link's series.
func (a *Analyzer) compactSeries() {
	for _, l := range a.list {
		s := l.series
		for j := 0; j < len(s); j += 2 {
			m := s[j]
			if j+1 < len(s) {
				n := s[j+1]
				m.done += n.done
				m.landed += n.landed
				m.backlog += n.backlog
				m.busy += n.busy
				m.wait += n.wait
			}
			s[j/2] = m
		}
		l.series = s[:(len(s)+1)/2]
	}
	a.seriesW *= 2
	a.seriesN = (a.seriesN + 1) / 2
}
