package analyzer

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// rankLife is what the analyzer knows of one rank of a communicator as a
// process: when it did not run, and where its records stop. A rank that
// writes heartbeats (flowtel.KindHeartbeat, every 10 ms while it waits with
// a call in flight) and wrote nothing at all for longer than
// Rank.NotRunning with a call in flight did not run: stopped, frozen,
// descheduled. Its links' troubles then are its own, not the network's.
type rankLife struct {
	rank     int32
	down     flowtel.FIFO[downSpan] // closed not-running spans, oldest first (bounded)
	downFrom int64                  // > 0: not running since, still
	maxDown  int64                  // its longest not-running span
	maxQuiet int64                  // its longest silence with a call in flight, however short (the fold reports from 25 ms)

	// Silent at the latest Advance or at Finish with work in flight.
	openFrom  int64
	openBeats bool
	openCalls int

	beats         flowtel.FIFO[int64] // its latest heartbeats (bounded)
	recvs         flowtel.FIFO[int64] // its latest receives' completions, 1 ms apart at least (bounded)
	lastDownSlice int64               // latest judged slice a not-running span overlapped (-1: none)
	failedAt      int64               // first failed WR of a peer with it (0: none)
	dead          *Finding            // it died (deadRanks)
}

type downSpan struct {
	from, to int64
	calls    int   // its calls in flight when it fell silent
	waitFrom int64 // a peer's first heartbeat in it: the peers waited on it from then (0: never)
}

// maxDownSpans bounds the spans a rank keeps.
const maxDownSpans = 1 << 12

// life returns rank's state in communicator c.
func (c *commState) life(rank int32) *rankLife {
	for int(rank) >= len(c.lives) {
		c.lives = append(c.lives, &rankLife{rank: int32(len(c.lives)), lastDownSlice: -1})
	}
	return c.lives[rank]
}

// gap takes a silence of a rank with work in flight from the fold.
func (a *Analyzer) gap(g *flowtel.Gap) {
	if g.Rank < 0 || g.Rank >= maxRanks {
		return
	}
	c := a.comm(g.Comm)
	rl := c.life(g.Rank)
	notRunning := g.Beats && g.ToNs-g.FromNs >= int64(a.o.Rank.NotRunning)
	if g.Open {
		rl.openFrom, rl.openBeats, rl.openCalls = g.FromNs, g.Beats, g.OpenCalls
		if notRunning {
			rl.downFrom = g.FromNs
			c.downAny = true
		}
		return
	}
	rl.openFrom, rl.downFrom = 0, 0
	if g.Beats {
		rl.maxQuiet = max(rl.maxQuiet, g.ToNs-g.FromNs)
	}
	if notRunning {
		// The peers' heartbeats up to ToNs are in: records come merged in
		// time order.
		var waitFrom int64
		for _, x := range c.lives {
			if x != rl {
				if ts := x.firstBeatIn(g.FromNs, g.ToNs); ts > 0 && (waitFrom == 0 || ts < waitFrom) {
					waitFrom = ts
				}
			}
		}
		rl.down.PushBounded(downSpan{from: g.FromNs, to: g.ToNs, calls: g.OpenCalls, waitFrom: waitFrom}, maxDownSpans)
		rl.maxDown = max(rl.maxDown, g.ToNs-g.FromNs)
		c.downAny = true
	}
}

// maxBeats bounds the heartbeats a rank keeps: 2.5 s of waiting.
const maxBeats = 256

// beat notes a heartbeat of a rank.
func (a *Analyzer) beat(r *flowtel.Record) {
	if r.Rank >= 0 && r.Rank < maxRanks {
		a.comm(r.Comm).life(r.Rank).beats.PushBounded(r.TsNs, maxBeats)
	}
}

// recvSpacing thins the receive completions a rank keeps: enough to say
// whether data came in during a gap of a few ms.
const recvSpacing = int64(time.Millisecond)

// received notes a receive of the rank completed at ts.
func (rl *rankLife) received(ts int64) {
	if rl.recvs.Len() == 0 || ts-*rl.recvs.At(rl.recvs.Len() - 1) >= recvSpacing {
		rl.recvs.PushBounded(ts, maxBeats)
	}
}

// receivedIn reports whether a receive of the rank completed within
// (from, to): data was coming in.
func (rl *rankLife) receivedIn(from, to int64) bool {
	for i := rl.recvs.Len() - 1; i >= 0; i-- {
		ts := *rl.recvs.At(i)
		if ts <= from {
			return false
		}
		if ts < to {
			return true
		}
	}
	return false
}

// waitedIn reports whether the rank wrote a heartbeat within (from, to): it
// ran and waited in the library then, for its peers.
func (rl *rankLife) waitedIn(from, to int64) bool {
	for i := rl.beats.Len() - 1; i >= 0; i-- {
		ts := *rl.beats.At(i)
		if ts <= from {
			return false
		}
		if ts < to {
			return true
		}
	}
	return false
}

// firstBeatIn returns the rank's first heartbeat within (from, to), 0 if
// none (or none kept).
func (rl *rankLife) firstBeatIn(from, to int64) int64 {
	var first int64
	for i := rl.beats.Len() - 1; i >= 0; i-- {
		ts := *rl.beats.At(i)
		if ts <= from {
			break
		}
		if ts < to {
			first = ts
		}
	}
	return first
}

// downIn returns how long rank rl did not run within [from, to).
func (rl *rankLife) downIn(from, to int64) int64 {
	var t int64
	for i := rl.down.Len() - 1; i >= 0; i-- {
		s := rl.down.At(i)
		if s.to <= from {
			break
		}
		t += overlapNs(s.from, s.to, from, to)
	}
	if rl.downFrom > 0 {
		t += overlapNs(rl.downFrom, to, from, to)
	}
	return min(t, to-from)
}

func overlapNs(a, b, lo, hi int64) int64 {
	a, b = max(a, lo), min(b, hi)
	return max(b-a, 0)
}

// markDown notes, for slice i of [from, to), which ranks of c did not run
// in it, and returns the longest such time: the slice's detectors excuse
// the links of a rank that did not run, and a link's stall is explained by
// any rank of the communicator not running.
func (c *commState) markDown(i, from, to int64) int64 {
	if !c.downAny {
		return 0
	}
	var most int64
	for _, rl := range c.lives {
		if d := rl.downIn(from, to); d > 0 {
			rl.lastDownSlice = i
			most = max(most, d)
		}
	}
	return most
}

// downMost returns the longest time any rank of c did not run within
// [from, to).
func (c *commState) downMost(from, to int64) int64 {
	if !c.downAny {
		return 0
	}
	var most int64
	for _, rl := range c.lives {
		most = max(most, rl.downIn(from, to))
	}
	return most
}

// downNear reports whether the link's sender or receiver did not run in
// the last win slices up to i: its rate then says nothing of the link.
func (l *link) downNear(i, win int64) bool {
	c := l.comm
	if !c.downAny {
		return false
	}
	s, d := c.life(l.key.src), c.life(l.key.dst)
	return s.lastDownSlice >= 0 && i-s.lastDownSlice < win || d.lastDownSlice >= 0 && i-d.lastDownSlice < win
}

// downDuring reports whether the link's sender or receiver did not run at
// some point of [from, to).
func (l *link) downDuring(from, to int64) bool {
	c := l.comm
	return c.downAny && (c.life(l.key.src).downIn(from, to) > 0 || c.life(l.key.dst).downIn(from, to) > 0)
}

// waitsArrival reports whether the link's oldest send in flight belongs to
// a collective not every rank has begun.
func (l *link) waitsArrival() bool {
	if l.flight.Len() == 0 {
		return false
	}
	seq := l.flight.Front().coll
	if seq == 0 || seq&p2pBit != 0 {
		return false
	}
	cs := l.comm.colls[seq]
	return cs != nil && !cs.allBegun(l.comm.live())
}

// rankFindings names the ranks that did not run, and the ranks that died.
func (a *Analyzer) rankFindings(c *commState) []Finding {
	var out []Finding
	o := &a.o.Rank
	for _, rl := range c.lives {
		if rl.dead != nil {
			out = append(out, *rl.dead)
			continue
		}
		// Did not run: the time it was off on its own (the others ran
		// meanwhile: a pause of the whole job names no rank) stands out
		// against the longest any other rank was silent with a call in
		// flight, long enough to be off or not: the host's own noise (a
		// host that deschedules every rank in turn names none).
		if rl.maxDown < int64(o.MinDown) {
			continue
		}
		var others int64
		for _, x := range c.lives {
			if x != rl {
				others = max(others, x.maxQuiet)
			}
		}
		var f Finding
		var longest int64
		n := 0
		for i := range rl.down.Len() {
			s := rl.down.At(i)
			// Its own silence costs the time its peers waited on it (a
			// rank that began the job's first call before its peers had
			// started waited on them), while the others ran (not a pause
			// of the whole job).
			if s.waitFrom == 0 || s.to-s.waitFrom < int64(o.MinDown) || c.jobWide(rl, s) {
				continue
			}
			if n == 0 {
				f = Finding{Kind: KindStall, Comm: c.id, Rank: rl.rank, Peer: -1, Channel: -1, Path: -1, StartNs: s.waitFrom}
			}
			n++
			f.EndNs = s.to
			f.ImpactNs += s.to - s.waitFrom
			longest = max(longest, s.to-s.waitFrom)
		}
		if n == 0 || n == 1 && longest < int64(o.MinSingle) || float64(f.ImpactNs) < o.Outlier*float64(others) {
			continue
		}
		f.Evidence = map[string]float64{
			"not_running_ms":        float64(f.ImpactNs) / 1e6,
			"times":                 float64(n),
			"longest_ms":            float64(longest) / 1e6,
			"others_longest_ms":     float64(others) / 1e6,
			"heartbeat_interval_ms": float64(flowtel.HeartbeatInterval) / 1e6,
		}
		times := ""
		if n > 1 {
			times = fmt.Sprintf(" %d times, %s in all;", n, fmtDur(f.ImpactNs))
		}
		othersOff := "no other rank was silent for 25 ms"
		if others > 0 {
			othersOff = "no other rank was silent for more than " + fmtDur(others)
		}
		f.Summary = fmt.Sprintf("rank %d did not run for up to %s with a call in flight:%s it wrote no record, not even a heartbeat, while its peers waited on it (%s)",
			rl.rank, fmtDur(longest), times, othersOff)
		out = append(out, f)
	}
	return out
}

// deadRanks finds the ranks whose records stop while their peers go on,
// with a sign of trouble: their peers' transfers with them failed after
// their last record, they were in a call at their end, or the others began
// calls they never began. Finish calls it before it judges the collectives
// still open.
func (a *Analyzer) deadRanks() {
	o := &a.o.Rank
	for _, c := range sortedComms(a.comms) {
		for _, rl := range c.lives {
			last := a.fold.LastSeen(c.id, rl.rank)
			if last == 0 || a.lastTs-last < int64(o.DeadGrace) {
				continue
			}
			inCall := rl.openFrom > 0 && rl.openCalls > 0
			failed := rl.failedAt >= last
			var missed collList
			// Calls its peers began and ended without it: a rank merely
			// late to a call its peers still wait in is a straggler in
			// the making, not dead.
			for _, cs := range c.colls {
				if cs.minBegin > last && cs.ended > 0 && (int(rl.rank) >= len(cs.ranks) || !cs.ranks[rl.rank].begun) {
					missed.add(cs.seq, a.o.MaxListed)
				}
			}
			if !inCall && !failed && missed.n == 0 {
				continue
			}
			f := Finding{Kind: KindDeadRank, Comm: c.id, Rank: rl.rank, Peer: -1, Channel: -1, Path: -1,
				StartNs: last, EndNs: a.lastTs, ImpactNs: a.lastTs - last}
			f.Collectives, f.NumCollectives = slices.Clone(missed.seqs), missed.n
			f.Evidence = map[string]float64{
				"records_stop_ns":   float64(last),
				"peers_went_on_ms":  float64(a.lastTs-last) / 1e6,
				"in_call_at_end":    b2f(inCall),
				"calls_not_begun":   float64(missed.n),
				"peer_wr_failed_ms": float64(max(rl.failedAt-last, 0)) / 1e6,
			}
			why := []string{}
			if inCall {
				why = append(why, "a call in flight")
			}
			if missed.n > 0 {
				why = append(why, fmt.Sprintf("%s its peers began and ended without it", plural(missed.n, "call")))
			}
			if failed {
				why = append(why, fmt.Sprintf("its peers' transfers with it failing %s after its last record", fmtDur(rl.failedAt-last)))
			}
			f.Summary = fmt.Sprintf("rank %d stopped: its records end %s before its peers', with %s (killed, or stopped for good)",
				rl.rank, fmtDur(a.lastTs-last), strings.Join(why, ", "))
			rl.dead = &f
		}
		c.foldFollowers()
	}
}

// foldFollowers lists, under the rank that died first, the ranks that
// stopped after it without its peers running calls without them: once a
// rank is gone its peers fail their transfers with it and exit one by one,
// and the first to go looks dead to the ones still there. A later rank that
// missed calls its peers completed died on its own and keeps its finding.
func (c *commState) foldFollowers() {
	var first *rankLife
	for _, rl := range c.lives {
		if rl.dead != nil && (first == nil || rl.dead.StartNs < first.dead.StartNs) {
			first = rl
		}
	}
	if first == nil {
		return
	}
	var followers []string
	for _, rl := range c.lives {
		if rl == first || rl.dead == nil || rl.dead.StartNs <= first.dead.StartNs || rl.dead.NumCollectives > 0 {
			continue
		}
		followers = append(followers, fmt.Sprintf("rank %d %s later", rl.rank, fmtDur(rl.dead.StartNs-first.dead.StartNs)))
		first.dead.Related = append(first.dead.Related, LinkRef{Rank: rl.rank, Peer: -1, Channel: -1})
		rl.dead = nil
	}
	if len(followers) > 0 {
		first.dead.Evidence["ranks_stopped_after"] = float64(len(followers))
		first.dead.Summary += "; then " + strings.Join(followers, ", ")
	}
}

// jobWide reports whether most of the other ranks did not run during s
// either: a pause of the whole job, not of rl.
func (c *commState) jobWide(rl *rankLife, s *downSpan) bool {
	others, off := 0, 0
	for _, x := range c.lives {
		if x == rl {
			continue
		}
		others++
		if 2*x.downIn(s.from, s.to) >= s.to-s.from {
			off++
		}
	}
	return others > 0 && 2*off >= others
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
