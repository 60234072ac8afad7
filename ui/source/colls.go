package source

import (
	"cmp"
	"slices"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/ui"
)

// collTracker turns records, in time order, into the overview's
// collectives: calls per second, bus and algorithm bandwidth, time, and
// the arrival skew, over the last span of trace time. It is a view over
// flowtel's fold, whose call is one rank's part in a collective, from its
// first coll_begin to the last coll_end of the channel parts it was split
// into. The arrival skew of a collective is its last rank's begin minus
// its first rank's.
type collTracker struct {
	flowtel.NopHandler
	fold  *flowtel.Fold
	span  int64 // ns of trace time the rates and means cover
	calls map[callKey]*call
	world int            // ranks in the job (the traces' world size)
	size  map[uint32]int // ranks seen per communicator
	done  []doneCall     // rank calls ended within the span, by end time
	skews []skewSample
	total map[string]map[int32]uint64 // calls ended, by op and rank
}

type callKey struct {
	comm uint32
	seq  uint64
}

// call is a collective across the ranks: when each ended rank began.
type call struct {
	op      flowtel.Op
	begins  map[int32]int64
	firstTs int64
}

type doneCall struct {
	end          int64
	op           flowtel.Op
	rank         int32
	timeNs       int64
	algBW, busBW float64
}

type skewSample struct {
	ts   int64
	op   flowtel.Op
	skew int64
}

func newCollTracker(span int64, world int) *collTracker {
	t := &collTracker{span: span, world: world, calls: map[callKey]*call{}, size: map[uint32]int{}, total: map[string]map[int32]uint64{}}
	t.fold = flowtel.NewFold(t, flowtel.FoldConfig{GapNs: -1})
	return t
}

func (t *collTracker) add(r *flowtel.Record) { t.fold.AddRecord(r) }

// CallEnded implements flowtel.Handler: one rank's call ended.
func (t *collTracker) CallEnded(c *flowtel.Call) {
	if !c.Complete {
		return // some part's end never came: not a call that ended
	}
	k := callKey{c.Comm, c.Seq}
	cl := t.calls[k]
	if cl == nil {
		cl = &call{op: c.Op, begins: map[int32]int64{}, firstTs: c.BeginNs}
		t.calls[k] = cl
	}
	cl.begins[c.Rank] = c.BeginNs
	if n := len(cl.begins); n > t.size[c.Comm] {
		t.size[c.Comm] = n
	}
	op := c.Op.String()
	if t.total[op] == nil {
		t.total[op] = map[int32]uint64{}
	}
	t.total[op][c.Rank]++
	if algbw := c.AlgBW(); algbw > 0 {
		t.done = append(t.done, doneCall{end: c.EndNs, op: c.Op, rank: c.Rank, timeNs: c.DurationNs(),
			algBW: algbw, busBW: c.BusBW(t.ranks(c.Comm))})
	}
	if len(cl.begins) >= t.ranks(k.comm) {
		t.finish(k, cl)
	}
}

// ranks is the size of communicator comm: the job's, or the ranks seen in
// one call if more (a trace without its world size).
func (t *collTracker) ranks(comm uint32) int { return max(t.world, t.size[comm]) }

// finish records a call's skew and forgets it.
func (t *collTracker) finish(k callKey, c *call) {
	if len(c.begins) > 1 {
		lo, hi := int64(1<<62), int64(-1<<62)
		for _, b := range c.begins {
			lo, hi = min(lo, b), max(hi, b)
		}
		t.skews = append(t.skews, skewSample{ts: hi, op: c.op, skew: hi - lo})
	}
	delete(t.calls, k)
}

// advance drops what is older than the span before now; calls some rank
// never ended (it died) are finished after 10 spans.
func (t *collTracker) advance(now int64) {
	cut := now - t.span
	i := 0
	for i < len(t.done) && t.done[i].end < cut {
		i++
	}
	t.done = t.done[i:]
	j := 0
	for j < len(t.skews) && t.skews[j].ts < cut {
		j++
	}
	t.skews = t.skews[j:]
	for k, c := range t.calls {
		if c.firstTs < now-10*t.span {
			t.finish(k, c)
		}
	}
}

// colls returns the collectives as of now.
func (t *collTracker) colls(now int64) []ui.Coll {
	t.advance(now)
	type agg struct {
		n           int
		ranks       map[int32]bool
		time        int64
		alg, bus    float64
		skew, skews int64
	}
	aggs := map[string]*agg{}
	get := func(op flowtel.Op) *agg {
		name := op.String()
		a := aggs[name]
		if a == nil {
			a = &agg{ranks: map[int32]bool{}}
			aggs[name] = a
		}
		return a
	}
	for _, d := range t.done {
		a := get(d.op)
		a.n++
		a.ranks[d.rank] = true
		a.time += d.timeNs
		a.alg += d.algBW
		a.bus += d.busBW
	}
	for _, s := range t.skews {
		a := get(s.op)
		a.skew += s.skew
		a.skews++
	}
	var out []ui.Coll
	for op, perRank := range t.total {
		c := ui.Coll{Op: op}
		for _, n := range perRank {
			c.Calls = max(c.Calls, n)
		}
		if a := aggs[op]; a != nil {
			if a.n > 0 {
				c.PerSec = float64(a.n) / float64(len(a.ranks)) / (float64(t.span) / 1e9)
				c.AvgTimeNs = a.time / int64(a.n)
				c.AlgBWBps = a.alg / float64(a.n)
				c.BusBWBps = a.bus / float64(a.n)
			}
			if a.skews > 0 {
				c.SkewNs = a.skew / a.skews
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b ui.Coll) int { return cmp.Compare(a.Op, b.Op) })
	return out
}
