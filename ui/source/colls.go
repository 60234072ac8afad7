package source

import (
	"cmp"
	"slices"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/ui"
)

// collTracker turns coll_begin and coll_end records, in time order, into
// the overview's collectives: calls per second, bus and algorithm
// bandwidth, time, and the arrival skew, over the last span of trace time.
// A call split over channels has a begin and an end per channel part
// (Record.Step says how many); a rank's call is its first begin to its
// last end, with the parts' payloads summed. The arrival skew of a call is
// its last rank's first begin minus its first rank's.
type collTracker struct {
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

type call struct {
	op      uint8
	ranks   map[int32]*rankCall
	ended   int
	firstTs int64
}

type rankCall struct {
	begin, end  int64
	parts, ends uint32
	want        uint32
	bytes       uint64
	failed      bool
	done        bool
}

type doneCall struct {
	end          int64
	op           uint8
	rank         int32
	timeNs       int64
	algBW, busBW float64
}

type skewSample struct {
	ts   int64
	op   uint8
	skew int64
}

func newCollTracker(span int64, world int) *collTracker {
	return &collTracker{span: span, world: world, calls: map[callKey]*call{}, size: map[uint32]int{}, total: map[string]map[int32]uint64{}}
}

func (t *collTracker) add(r *flowtel.Record) {
	if r.Kind != flowtel.KindCollBegin && r.Kind != flowtel.KindCollEnd {
		return
	}
	k := callKey{r.Comm, r.CollSeq}
	c := t.calls[k]
	if c == nil {
		c = &call{op: uint8(r.Op), ranks: map[int32]*rankCall{}, firstTs: r.TsNs}
		t.calls[k] = c
	}
	rc := c.ranks[r.Rank]
	if rc == nil {
		rc = &rankCall{begin: r.TsNs, want: max(r.Step, 1)}
		c.ranks[r.Rank] = rc
		if n := len(c.ranks); n > t.size[r.Comm] {
			t.size[r.Comm] = n
		}
	}
	if r.Kind == flowtel.KindCollBegin {
		rc.parts++
		rc.bytes += r.Bytes
		rc.begin = min(rc.begin, r.TsNs)
		return
	}
	rc.ends++
	rc.end = max(rc.end, r.TsNs)
	rc.failed = rc.failed || r.Status != flowtel.StatusOK
	if rc.done || rc.ends < rc.want {
		return
	}
	rc.done = true
	c.ended++
	op := flowtel.Op(c.op).String()
	if t.total[op] == nil {
		t.total[op] = map[int32]uint64{}
	}
	t.total[op][r.Rank]++
	if !rc.failed && rc.end > rc.begin {
		d := doneCall{end: rc.end, op: c.op, rank: r.Rank, timeNs: rc.end - rc.begin}
		d.algBW = float64(rc.bytes) / (float64(d.timeNs) / 1e9)
		d.busBW = d.algBW * flowtel.BusBWFactor(flowtel.Op(c.op), t.ranks(r.Comm))
		t.done = append(t.done, d)
	}
	if c.ended >= t.ranks(k.comm) {
		t.finish(k, c)
	}
}

// ranks is the size of communicator comm: the job's, or the ranks seen in
// one call if more (a trace without its world size).
func (t *collTracker) ranks(comm uint32) int { return max(t.world, t.size[comm]) }

// finish records a call's skew and forgets it.
func (t *collTracker) finish(k callKey, c *call) {
	if len(c.ranks) > 1 {
		lo, hi := int64(1<<62), int64(-1<<62)
		for _, rc := range c.ranks {
			lo, hi = min(lo, rc.begin), max(hi, rc.begin)
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
	get := func(op uint8) *agg {
		name := flowtel.Op(op).String()
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
