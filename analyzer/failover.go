package analyzer

import (
	"fmt"

	"github.com/vccl-go/vccl/flowtel"
)

// foEpisode is one stay of a link on its backup path.
type foEpisode struct {
	downTs     int64 // first link_down before the failover (0: none seen)
	overTs     int64 // failover
	backTs     int64 // failback (0: none)
	rank       int32 // who recorded the failover
	replayed   uint64
	downs, ups int
	// Cumulative completed bytes and busy time of the link at the window
	// edges: before the failover, at it, at the failback, after it.
	b0, b1, b2, b3     uint64
	bb0, bb1, bb2, bb3 int64
	t0, t3             int64 // window edges actually covered
	haveAfter          bool
}

// failoverSlice accounts the link events of l whose slice is judged, and the
// throughput windows around them.
func (a *Analyzer) failoverSlice(l *link, i int64) {
	d := &l.det
	w := a.w
	win := int64(a.o.Failover.Window)
	for d.evNext < len(l.events) && l.events[d.evNext].ts/w <= i {
		ev := l.events[d.evNext]
		d.evNext++
		switch flowtel.Kind(ev.kind) {
		case flowtel.KindLinkDown:
			if d.fo == nil {
				d.fo = &foEpisode{downTs: ev.ts, rank: ev.rank}
			}
			d.fo.downs++
		case flowtel.KindLinkUp:
			if d.fo != nil {
				d.fo.ups++
			}
		case flowtel.KindFailover:
			if d.fo == nil {
				d.fo = &foEpisode{rank: ev.rank}
			}
			if d.fo.overTs != 0 { // a second failover while on the backup
				d.fo.replayed += ev.bytes
				continue
			}
			fo := d.fo
			fo.overTs, fo.rank = ev.ts, ev.rank
			fo.replayed += ev.bytes
			idx := ev.ts / w
			fo.t0 = max(ev.ts-win, a.firstTs)
			fo.b0, fo.bb0 = a.cumAt(l, fo.t0/w-1)
			fo.b1, fo.bb1 = a.cumAt(l, idx-1)
		case flowtel.KindFailback:
			fo := d.fo
			if fo == nil || fo.overTs == 0 {
				continue
			}
			fo.backTs = ev.ts
			fo.b2, fo.bb2 = a.cumAt(l, ev.ts/w-1)
		}
	}
	if fo := d.fo; fo != nil && fo.backTs != 0 && i >= (fo.backTs+win)/w {
		fo.t3 = fo.backTs + win
		fo.b3, fo.bb3 = a.cumAt(l, i)
		fo.haveAfter = true
		d.foDone = append(d.foDone, *fo)
		d.fo = nil
	}
}

// cumAt returns l's cumulative completed bytes and busy time at the end of
// slice idx.
func (a *Analyzer) cumAt(l *link, idx int64) (uint64, int64) {
	h := l.history
	if h == nil || h.n == 0 {
		return 0, 0
	}
	// Newest first: the latest entry at or before idx.
	j := h.head
	for k := 0; k < h.n; k++ {
		if h.idxs[j] <= idx {
			return h.done[j], h.busy[j]
		}
		j--
		if j < 0 {
			j += len(h.done)
		}
	}
	return 0, 0
}

// failoverFindings closes the episodes at the end of the trace and merges
// the two ends of each connection.
func (a *Analyzer) failoverFindings() []Finding {
	type connKey struct {
		comm   uint32
		lo, hi int32
		ch     uint16
	}
	type epRef struct {
		l  *link
		fo foEpisode
	}
	byConn := map[connKey][]epRef{}
	var order []connKey
	for _, l := range a.list {
		d := &l.det
		eps := d.foDone
		if d.fo != nil && (d.fo.overTs != 0 || d.fo.downs > 0) {
			fo := *d.fo
			if fo.backTs != 0 {
				fo.t3 = min(fo.backTs+int64(a.o.Failover.Window), a.lastTs)
				fo.b3, fo.bb3 = d.cumDone, d.cumBusy
				fo.haveAfter = true
			} else if fo.overTs != 0 {
				fo.b2, fo.bb2 = d.cumDone, d.cumBusy
			}
			eps = append(eps, fo)
		}
		for _, fo := range eps {
			k := connKey{comm: l.key.comm, lo: min(l.key.src, l.key.dst), hi: max(l.key.src, l.key.dst), ch: l.key.ch}
			if _, ok := byConn[k]; !ok {
				order = append(order, k)
			}
			byConn[k] = append(byConn[k], epRef{l: l, fo: fo})
		}
	}
	var out []Finding
	for _, k := range order {
		eps := byConn[k]
		// Episodes of both ends that overlap are one failover.
		used := make([]bool, len(eps))
		for x := range eps {
			if used[x] {
				continue
			}
			used[x] = true
			group := []epRef{eps[x]}
			for y := x + 1; y < len(eps); y++ {
				if !used[y] && overlaps(epSpan(eps[x].fo, a.lastTs), epSpan(eps[y].fo, a.lastTs)) {
					used[y] = true
					group = append(group, eps[y])
				}
			}
			out = append(out, a.failoverFinding(k.comm, group[0].l, func(yield func(*link, foEpisode) bool) {
				for _, g := range group {
					if !yield(g.l, g.fo) {
						return
					}
				}
			}))
		}
	}
	return out
}

type span struct{ from, to int64 }

func epSpan(fo foEpisode, end int64) span {
	s := fo.overTs
	if fo.downTs != 0 && (s == 0 || fo.downTs < s) {
		s = fo.downTs
	}
	e := fo.backTs
	if e == 0 {
		e = end
	}
	return span{s, e}
}

func overlaps(x, y span) bool { return x.from <= y.to && y.from <= x.to }

func (a *Analyzer) failoverFinding(comm uint32, first *link, eps func(func(*link, foEpisode) bool)) Finding {
	var before, during, after uint64
	var bBusy, dBusy, aBusy int64
	var start, over, back, end int64
	var replayed uint64
	var downs, ups int
	rank := int32(-1)
	n := 0
	for l, fo := range eps {
		_ = l
		n++
		sp := epSpan(fo, a.lastTs)
		if start == 0 || sp.from < start {
			start = sp.from
		}
		if fo.overTs != 0 && (over == 0 || fo.overTs < over) {
			over, rank = fo.overTs, fo.rank
		}
		if fo.backTs != 0 {
			back = max(back, fo.backTs)
		}
		end = max(end, sp.to)
		replayed += fo.replayed
		downs += fo.downs
		ups += fo.ups
		if fo.overTs != 0 {
			before += fo.b1 - fo.b0
			bBusy += fo.bb1 - fo.bb0
			during += fo.b2 - fo.b1
			dBusy += fo.bb2 - fo.bb1
		}
		if fo.haveAfter {
			after += fo.b3 - fo.b2
			aBusy += fo.bb3 - fo.bb2
		}
	}
	l := first
	f := Finding{Kind: KindFailover, Comm: comm, Rank: l.key.src, Peer: l.key.dst, Channel: int32(l.key.ch), Path: 1,
		StartNs: start, EndNs: end}
	if rank >= 0 && rank != f.Rank {
		f.Rank, f.Peer = f.Peer, f.Rank
	}
	rate := func(b uint64, busy int64) float64 { return safeDiv(float64(b), float64(busy)) * 1e9 }
	bRate, dRate, aRate := rate(before, bBusy), rate(during, dBusy), rate(after, aBusy)
	f.Evidence = map[string]float64{
		"before_bps":     bRate,
		"during_bps":     dRate,
		"during_ratio":   safeDiv(dRate, bRate),
		"replayed_bytes": float64(replayed),
		"link_down":      float64(downs),
		"link_up":        float64(ups),
		"ends_recorded":  float64(n),
	}
	// Outage: from the first link_down to the failover; degraded: the stay
	// on the backup at less than the primary's throughput.
	var impact float64
	if over != 0 && start < over {
		impact += float64(over - start)
	}
	if over != 0 {
		stay := float64(end - over)
		if back != 0 {
			stay = float64(back - over)
		}
		if bRate > 0 {
			impact += stay * max(0, 1-dRate/bRate)
		}
		f.Evidence["backup_ms"] = stay / 1e6
	}
	if back != 0 {
		f.Evidence["after_bps"] = aRate
		f.Evidence["after_ratio"] = safeDiv(aRate, bRate)
	}
	f.ImpactNs = int64(impact)
	switch {
	case over == 0:
		f.Summary = fmt.Sprintf("link %d-%d ch%d went down %d time(s) with no failover recorded", f.Rank, f.Peer, f.Channel, downs)
	case back == 0:
		f.Summary = fmt.Sprintf("link %d-%d ch%d failed over to the backup path and stayed there: %s before, %s on the backup (%.0f%%); %s replayed",
			f.Rank, f.Peer, f.Channel, fmtBps(bRate), fmtBps(dRate), 100*safeDiv(dRate, bRate), fmtBytes(replayed))
	default:
		f.Summary = fmt.Sprintf("link %d-%d ch%d on the backup path for %s: %s before, %s during (%.0f%%), %s after; %s replayed",
			f.Rank, f.Peer, f.Channel, fmtDur(back-over), fmtBps(bRate), fmtBps(dRate), 100*safeDiv(dRate, bRate), fmtBps(aRate), fmtBytes(replayed))
	}
	return f
}
