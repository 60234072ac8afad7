package analyzer

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/vccl-go/vccl/flowtel"
)

// holAgg collects the head-of-line blocking events of one queue pair.
type holAgg struct {
	q        *qpState
	active   bool
	first    int64
	last     int64
	blockers []*holBlocker
	nBlocked int
	waitSum  int64
	waitMax  int64
	colls    collList
}

type holBlocker struct {
	ref     WRRef
	blocked []WRRef
	n       int
	maxWait int64
	sumWait int64
}

// holCheck tests whether the completed send t waited behind the send ahead
// of it (the largest pending when it was posted, as the fold names it): it
// did if the QP's previous completion came late in its latency.
func (a *Analyzer) holCheck(q *qpState, t *flowtel.Transfer) {
	prevDone := t.PrevDoneNs
	if !t.HasAhead || prevDone <= t.PostNs {
		return
	}
	o := &a.o.HOL
	doneTs := t.DoneNs
	lat := doneTs - t.PostNs
	waited := prevDone - t.PostNs
	if waited < int64(o.MinWait) || float64(waited) < o.Dominance*float64(lat) {
		return
	}
	ahead := &t.Ahead
	if float64(ahead.Bytes) < o.SizeRatio*float64(t.Bytes) && ahead.CollSeq == t.CollSeq {
		return
	}
	agg := a.hol[q.key]
	if agg == nil {
		agg = &holAgg{q: q}
		a.hol[q.key] = agg
	}
	if agg.active && t.PostNs-agg.last > int64(o.MaxGap) {
		a.closeHOL(agg)
	}
	if !agg.active {
		agg.active, agg.first = true, t.PostNs
		agg.blockers, agg.nBlocked, agg.waitSum, agg.waitMax, agg.colls = nil, 0, 0, 0, collList{}
	}
	agg.last = doneTs
	// The blocker, with its completion if it is among the latest.
	var b *holBlocker
	for _, x := range agg.blockers {
		if x.ref.WrID == ahead.WrID {
			b = x
			break
		}
	}
	if b == nil {
		ref := WRRef{Rank: q.key.rank, Peer: q.peer, QP: q.key.qp, Channel: q.ch, WrID: ahead.WrID,
			CollSeq: ahead.CollSeq, Bytes: ahead.Bytes, PostNs: ahead.PostNs}
		for k := range min(q.nRecent, holRecent) {
			if d := q.recent[k]; d.wrID == ahead.WrID {
				ref.DoneNs = d.done
			}
		}
		if ref.DoneNs == 0 {
			ref.DoneNs = prevDone
		}
		b = &holBlocker{ref: ref}
		if len(agg.blockers) < maxHOLBlockers {
			agg.blockers = append(agg.blockers, b)
		}
	}
	ref := WRRef{Rank: q.key.rank, Peer: q.peer, QP: q.key.qp, Channel: q.ch, WrID: t.WrID, CollSeq: t.CollSeq,
		Bytes: t.Bytes, PostNs: t.PostNs, DoneNs: doneTs, WaitNs: waited}
	b.n++
	b.sumWait += waited
	b.maxWait = max(b.maxWait, waited)
	if len(b.blocked) < a.o.MaxListed {
		b.blocked = append(b.blocked, ref)
	}
	agg.nBlocked++
	agg.waitSum += waited
	agg.waitMax = max(agg.waitMax, waited)
	if t.CollSeq&p2pBit == 0 {
		agg.colls.add(t.CollSeq, a.o.MaxListed)
	}
	if ahead.CollSeq&p2pBit == 0 {
		agg.colls.add(ahead.CollSeq, a.o.MaxListed)
	}
}

const maxHOLBlockers = 1 << 12

func (a *Analyzer) closeHOL(agg *holAgg) {
	if !agg.active {
		return
	}
	agg.active = false
	if agg.nBlocked < a.o.HOL.MinBlocked || len(agg.blockers) == 0 {
		return
	}
	q := agg.q
	l := q.out
	f := a.linkFinding(KindHOLBlocking, l, agg.first, agg.last)
	// The worst blocker is the one that held others up longest.
	worst := slices.MaxFunc(agg.blockers, func(x, y *holBlocker) int {
		return cmp.Or(cmp.Compare(x.sumWait, y.sumWait), cmp.Compare(y.ref.WrID, x.ref.WrID))
	})
	blk := worst.ref
	f.Blocking = &blk
	f.Blocked = slices.Clone(worst.blocked)
	// Impact: per blocker, the longest a WR waited behind it (the blocked
	// WRs waited together).
	var impact int64
	var blockerBytes uint64
	for _, b := range agg.blockers {
		impact += b.maxWait
		blockerBytes = max(blockerBytes, b.ref.Bytes)
	}
	f.ImpactNs = impact
	f.Collectives, f.NumCollectives = slices.Clone(agg.colls.seqs), agg.colls.n
	var blockedBytes uint64
	for _, r := range worst.blocked {
		blockedBytes = max(blockedBytes, r.Bytes)
	}
	f.Evidence = map[string]float64{
		"blocked_wrs":           float64(agg.nBlocked),
		"blocking_wrs":          float64(len(agg.blockers)),
		"wait_total_ms":         float64(agg.waitSum) / 1e6,
		"wait_mean_ms":          float64(agg.waitSum) / float64(agg.nBlocked) / 1e6,
		"wait_max_ms":           float64(agg.waitMax) / 1e6,
		"blocking_bytes":        float64(blk.Bytes),
		"blocking_latency_ms":   float64(blk.LatencyNs()) / 1e6,
		"blocked_bytes_max":     float64(blockedBytes),
		"worst_blocked_wrs":     float64(worst.n),
		"largest_blocker_bytes": float64(blockerBytes),
	}
	f.Summary = fmt.Sprintf("on QP %d (%d->%d ch%d) %d WRs waited behind larger or other calls' WRs (%d blockers), %s each on average; worst: WR %d of %s (coll_seq %s) held %d WRs for up to %s",
		q.key.qp, q.key.rank, q.peer, q.ch, agg.nBlocked, len(agg.blockers), fmtDur(agg.waitSum/int64(agg.nBlocked)),
		blk.WrID, fmtBytes(blk.Bytes), fmtSeq(blk.CollSeq), worst.n, fmtDur(worst.maxWait))
	a.cands = append(a.cands, candidate{f: f})
}

func fmtSeq(s uint64) string {
	if s&p2pBit != 0 {
		return fmt.Sprintf("p2p#%d", s&^p2pBit)
	}
	return fmt.Sprint(s)
}
