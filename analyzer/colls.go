package analyzer

import (
	"cmp"
	"math"
	"slices"

	"github.com/vccl-go/vccl/flowtel"
)

// commState is what the analyzer knows of one communicator.
type commState struct {
	id        uint32
	size      int32 // ranks (SetWorldSize, or the highest rank seen + 1)
	sizeKnown bool

	colls  map[uint64]*collState    // collectives not yet judged
	open   flowtel.FIFO[*collState] // the same, oldest first (judged ones are skipped when they come first)
	arrive []*collState             // collectives whose arrival window may still cover slices to judge, by creation

	// Excused time (some rank has not arrived at a collective others
	// began), cumulative up to slice cumAt.
	cumExcused int64
	cumAt      int64
	cumSet     bool
	// Slices with a backpressured link, cumulative, and the latest one.
	cumBP   int64
	bpSlice int64
	excNow  int64 // excused time in the slice being judged
	bpNow   bool  // a link was backpressured in it

	rankChans [][]*rankChan // by rank: its sides of the channels
	slowN     int           // link-collectives found slow, all links
	judgedN   int           // link-collectives compared, all links
	judgedLks int           // links compared at least once
	lives     []*rankLife   // by rank: when it ran (rank.go)
	downAny   bool          // some rank did not run at some point
	lastEnd   []int64       // by rank: its latest coll_end
	writer    []bool        // by rank: it wrote a coll_begin
	nWriters  int32
	groups    map[groupKey]*collGroup
	strag     []stragRank // by rank
	judged    int         // collectives judged for arrival skew
	lateAll   int         // of which some rank arrived MinLate after all others
	first     int64       // first and last collective times
	last      int64

	timeline []timelineColl
	tlStride int
	tlSeen   int
}

func newCommState(id uint32) *commState {
	return &commState{id: id, colls: map[uint64]*collState{},
		groups: map[groupKey]*collGroup{}, bpSlice: -1, tlStride: 1, first: math.MaxInt64}
}

// live is how many ranks take part: those that wrote a coll_begin (a rank
// whose trace is missing does not hold every collective open), or the size
// before any did.
func (c *commState) live() int32 {
	if c.nWriters > 0 {
		return c.nWriters
	}
	return c.size
}

func (c *commState) seeRank(r int32) {
	if r >= 0 && r < maxRanks && r+1 > c.size && !c.sizeKnown {
		c.size = r + 1
	}
}

// collState is one collective call across the ranks.
type collState struct {
	seq              uint64
	op               flowtel.Op
	algo             flowtel.Algorithm
	dtype            flowtel.Datatype
	ranks            []collRank
	begun, ended     int32
	minBegin         int64
	maxBegin, maxEnd int64
	lastTs           int64
	failed           bool
	judged           bool
	links            []*linkColl
}

type collRank struct {
	begin, end   int64
	prevEnd      int64 // the rank's latest coll_end before this call (0: none)
	bytes        uint64
	begun, ended bool
}

// linkColl is what one link moved for one collective, from paired transfers.
type linkColl struct {
	l     *link
	bytes uint64
	ns    int64
}

// allBegun: every rank has begun (some part of) the collective.
func (cs *collState) allBegun(size int32) bool { return cs.begun >= size }

// collBegin is a rank beginning a call (the first of its parts).
func (a *Analyzer) collBegin(call *flowtel.Call) {
	rank := call.Rank
	if rank < 0 || rank >= maxRanks {
		return
	}
	c := a.comm(call.Comm)
	c.seeRank(rank)
	for int(rank) >= len(c.writer) {
		c.writer = append(c.writer, false)
	}
	if !c.writer[rank] {
		c.writer[rank] = true
		c.nWriters++
	}
	ts := call.BeginNs
	c.first = min(c.first, ts)
	c.last = max(c.last, ts)
	if call.P2P() {
		return // judged as a whole at its end
	}
	cs := c.colls[call.Seq]
	if cs == nil {
		for len(c.colls) > 0 && (len(c.colls) >= maxOpenColls || a.collRanks+int(rank)+1 > maxCollRanks) {
			a.expireOldest(c)
		}
		cs = &collState{seq: call.Seq, op: call.Op, algo: call.Algo, dtype: call.Dtype, minBegin: ts, maxBegin: ts}
		c.colls[call.Seq] = cs
		c.arrive = append(c.arrive, cs)
		c.open.Push(cs)
	}
	cs.lastTs = max(cs.lastTs, ts)
	for int(rank) >= len(cs.ranks) {
		cs.ranks = append(cs.ranks, collRank{})
		a.collRanks++
	}
	cr := &cs.ranks[rank]
	if cr.begun {
		return
	}
	cr.begun, cr.begin = true, ts
	if int(rank) < len(c.lastEnd) {
		cr.prevEnd = c.lastEnd[rank]
	}
	cs.begun++
	cs.minBegin = min(cs.minBegin, ts)
	cs.maxBegin = max(cs.maxBegin, ts)
	a.unpark(c, rank, call.Seq, ts)
}

// noteEnd remembers a rank's latest coll_end.
func (c *commState) noteEnd(rank int32, ts int64) {
	for int(rank) >= len(c.lastEnd) {
		c.lastEnd = append(c.lastEnd, 0)
	}
	c.lastEnd[rank] = max(c.lastEnd[rank], ts)
}

const (
	maxOpenColls = 1 << 14
	maxOpenP2P   = 1 << 14
	// maxCollRanks bounds the per-rank entries of the collectives still
	// open, all together (memory, whatever the input).
	maxCollRanks = 1 << 21
)

// collEnd is a rank's call ended: every part (Complete), or ended
// incomplete by the fold (its other parts' records never came).
func (a *Analyzer) collEnd(call *flowtel.Call) {
	rank := call.Rank
	if rank < 0 || rank >= maxRanks {
		return
	}
	if call.Ended == 0 {
		return
	}
	c := a.comm(call.Comm)
	ts := call.EndNs
	c.last = max(c.last, ts)
	c.noteEnd(rank, ts)
	if call.P2P() {
		if call.Complete && call.Status == flowtel.StatusOK {
			d := max(call.DurationNs(), 1)
			g := c.group(groupKey{op: call.Op, bytes: call.Bytes})
			g.add(d, float64(call.Bytes)*1e9/float64(d), -1)
		}
		return
	}
	cs := c.colls[call.Seq]
	if cs == nil || int(rank) >= len(cs.ranks) {
		return
	}
	cs.lastTs = max(cs.lastTs, ts)
	cr := &cs.ranks[rank]
	cr.end = max(cr.end, ts)
	cr.bytes = call.Bytes
	cs.maxEnd = max(cs.maxEnd, ts)
	if call.Status != flowtel.StatusOK {
		cs.failed = true
	}
	if call.Complete && !cr.ended {
		cr.ended = true
		cs.ended++
		if cs.ended >= c.live() {
			a.judgeColl(c, cs)
		}
	}
}

// linkColl returns the accumulator of link l in collective seq, or nil when
// the collective is not (or no longer) open.
func (a *Analyzer) linkColl(l *link, seq uint64) *linkColl {
	cs := l.comm.colls[seq]
	if cs == nil {
		return nil
	}
	for _, lc := range cs.links {
		if lc.l == l {
			return lc
		}
	}
	lc := &linkColl{l: l}
	cs.links = append(cs.links, lc)
	return lc
}

// collTimeout: a collective with no news for this long is judged with what
// is known (a rank died, or its records were lost).
const collTimeout = int64(30e9)

// expireCollectives judges the collectives quiet since before ts-collTimeout.
func (a *Analyzer) expireCollectives(ts int64) {
	for _, c := range a.comms {
		if len(c.colls) == 0 {
			continue
		}
		var old []*collState
		for _, cs := range c.colls {
			if cs.lastTs < ts-collTimeout {
				old = append(old, cs)
			}
		}
		slices.SortFunc(old, func(x, y *collState) int { return cmp.Compare(x.seq, y.seq) })
		for _, cs := range old {
			a.judgeColl(c, cs)
		}
	}
}

// pruneOpen drops the judged collectives from the front of the open queue
// and, when judged ones behind an old open one make up most of it,
// everywhere: its memory follows the collectives open.
func (c *commState) pruneOpen() {
	for c.open.Len() > 0 && (*c.open.Front()).judged {
		c.open.PopFront()
	}
	// The arrival windows of judged collectives are dropped as slices
	// are judged (advanceExcuse); a trace with no link traffic judges
	// none, so they are bounded here too.
	if len(c.arrive) > 2*maxOpenColls {
		k := 0
		for k < len(c.arrive)-maxOpenColls && c.arrive[k].judged {
			k++
		}
		clear(c.arrive[:k])
		c.arrive = c.arrive[k:]
	}
	if c.open.Len() > 2*len(c.colls)+1024 {
		var keep flowtel.FIFO[*collState]
		for i := range c.open.Len() {
			if cs := *c.open.At(i); !cs.judged {
				keep.Push(cs)
			}
		}
		c.open = keep
	}
}

// expireOldest judges the oldest collective still open, to make room: in
// constant time, whatever the number open.
func (a *Analyzer) expireOldest(c *commState) {
	for c.open.Len() > 0 {
		cs := c.open.PopFront()
		if !cs.judged {
			a.judgeColl(c, cs)
			return
		}
	}
}

// judgeColl closes a collective: its summary, arrival skew (stragglers) and
// per-link bandwidth (slow links).
func (a *Analyzer) judgeColl(c *commState, cs *collState) {
	delete(c.colls, cs.seq)
	a.collRanks -= len(cs.ranks)
	cs.judged = true
	c.pruneOpen()
	size := c.live()
	complete := cs.begun >= size && cs.ended >= size && !cs.failed && len(cs.ranks) > 0
	var bytes uint64
	for _, cr := range cs.ranks {
		bytes = max(bytes, cr.bytes)
	}
	skew := int64(-1)
	if cs.begun >= size && size >= 2 {
		skew = cs.maxBegin - cs.minBegin
		a.judgeArrival(c, cs)
	}
	if complete {
		dur := max(cs.maxEnd-cs.maxBegin, 1)
		algbw := float64(bytes) * 1e9 / float64(dur)
		busbw := algbw * flowtel.BusBWFactor(cs.op, int(size))
		g := c.group(groupKey{op: cs.op, algo: cs.algo, bytes: bytes})
		g.add(dur, busbw, skew)
	}
	a.judgeLinks(c, cs)
	a.sampleTimeline(c, cs)
}

// groupKey groups collectives for the summary: operation, algorithm, size.
type groupKey struct {
	op    flowtel.Op
	algo  flowtel.Algorithm
	bytes uint64
}

// collGroup summarises the calls of one group.
type collGroup struct {
	key   groupKey
	count int
	busbw hist
	skew  hist
	dur   hist
	nSkew int
	maxSk int64
}

func (c *commState) group(k groupKey) *collGroup {
	g := c.groups[k]
	if g == nil {
		g = &collGroup{key: k}
		c.groups[k] = g
	}
	return g
}

func (g *collGroup) add(dur int64, busbw float64, skew int64) {
	g.count++
	g.busbw.add(busbw)
	g.dur.add(float64(dur))
	if skew >= 0 {
		g.nSkew++
		g.skew.add(float64(skew))
		g.maxSk = max(g.maxSk, skew)
	}
}

// hist is a log-scale histogram with about 1% resolution: memory bounded by
// the range of its values, not their number.
type hist struct {
	counts map[int32]uint64
	zeros  uint64
	n      uint64
}

const histBase = 1.01

var logHistBase = math.Log(histBase)

func (h *hist) add(v float64) {
	h.n++
	if !(v >= 1) { // also NaN
		h.zeros++
		return
	}
	if h.counts == nil {
		h.counts = map[int32]uint64{}
	}
	h.counts[int32(math.Floor(math.Log(v)/logHistBase))]++
}

// quantile returns the nearest-rank q-quantile (0 < q <= 1): the lower edge
// of its bucket, so within 1% below the true value.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	if rank <= h.zeros {
		return 0
	}
	keys := make([]int32, 0, len(h.counts))
	for k := range h.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	seen := h.zeros
	for _, k := range keys {
		seen += h.counts[k]
		if seen >= rank {
			return math.Pow(histBase, float64(k))
		}
	}
	return math.Pow(histBase, float64(keys[len(keys)-1]))
}

// timelineColl is one collective kept for the timeline chart.
type timelineColl struct {
	seq    uint64
	op     flowtel.Op
	bytes  uint64
	begins []int64 // by rank; 0: unknown
	ends   []int64
}

func (a *Analyzer) sampleTimeline(c *commState, cs *collState) {
	c.tlSeen++
	if (c.tlSeen-1)%c.tlStride != 0 {
		return
	}
	if len(c.timeline) >= a.o.TimelineCollectives {
		kept := c.timeline[:0]
		for i, t := range c.timeline {
			if i%2 == 0 {
				kept = append(kept, t)
			}
		}
		c.timeline = kept
		c.tlStride *= 2
		if (c.tlSeen-1)%c.tlStride != 0 {
			return
		}
	}
	t := timelineColl{seq: cs.seq, op: cs.op, begins: make([]int64, len(cs.ranks)), ends: make([]int64, len(cs.ranks))}
	for r, cr := range cs.ranks {
		t.bytes = max(t.bytes, cr.bytes)
		if cr.begun {
			t.begins[r] = cr.begin
		}
		if cr.ended {
			t.ends[r] = cr.end
		}
	}
	c.timeline = append(c.timeline, t)
}
