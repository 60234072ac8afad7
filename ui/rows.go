package ui

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// sortModes names the orders s cycles through, per screen.
var sortModes = [screenCount][]string{
	ScreenOverview: {"rank", "state", "send", "p99"},
	ScreenLinks:    {"bandwidth", "p99", "backlog", "credit wait", "link"},
	ScreenFindings: {"newest", "severity", "impact"},
	ScreenGPU:      {"index", "nvlink"},
}

// row is one line of a list screen.
type row struct {
	id      string
	text    string // what the filter matches
	rank    int
	up      bool
	totals  rankTotals
	link    Link
	finding Finding
	gpu     GPU
}

func rankID(r int) string { return fmt.Sprintf("r%d", r) }

// rows returns the rows of a list screen, filtered and sorted.
func (m *Model) rows(s Screen) []row {
	var rs []row
	f := &m.frame
	switch s {
	case ScreenOverview:
		tot := totals(f)
		for _, r := range f.Ranks {
			state := "up"
			if !r.Up {
				state = "down"
			}
			x := rankTotals{}
			if t := tot[int32(r.Rank)]; t != nil {
				x = *t
			}
			rs = append(rs, row{id: rankID(r.Rank), rank: r.Rank, up: r.Up, totals: x,
				text: fmt.Sprintf("rank %d r%d %s %s %s", r.Rank, r.Rank, state, r.Host, r.Err)})
		}
		switch sortModes[s][m.sorts[s]] {
		case "state":
			slices.SortStableFunc(rs, func(a, b row) int { return cmp.Compare(btoi(a.up), btoi(b.up)) })
		case "send":
			slices.SortStableFunc(rs, func(a, b row) int { return cmp.Compare(b.totals.send, a.totals.send) })
		case "p99":
			slices.SortStableFunc(rs, func(a, b row) int { return cmp.Compare(b.totals.p99, a.totals.p99) })
		}
	case ScreenLinks:
		for _, l := range f.Links {
			text := fmt.Sprintf("%s %s rank %d peer %d %d %s", l.Name(), l.Dir, l.Rank, l.Peer, l.Rank, l.Dir)
			if l.CreditWaiting {
				text += " waiting"
			}
			rs = append(rs, row{id: fmt.Sprintf("%s %d %s", l.Name(), l.Rank, l.Dir), link: l, text: text})
		}
		switch sortModes[s][m.sorts[s]] {
		case "bandwidth":
			slices.SortStableFunc(rs, func(a, b row) int { return cmp.Compare(b.link.BandwidthBps, a.link.BandwidthBps) })
		case "p99":
			slices.SortStableFunc(rs, func(a, b row) int { return cmp.Compare(b.link.LatP99Ns, a.link.LatP99Ns) })
		case "backlog":
			slices.SortStableFunc(rs, func(a, b row) int { return cmp.Compare(b.link.Backlog, a.link.Backlog) })
		case "credit wait":
			slices.SortStableFunc(rs, func(a, b row) int { return cmp.Compare(b.link.CreditWaitNs, a.link.CreditWaitNs) })
		}
	case ScreenFindings:
		for _, fd := range f.Findings {
			rs = append(rs, row{id: fmt.Sprintf("%s %s %d", fd.Kind, fd.Culprit(), fd.StartNs), finding: fd,
				text: fmt.Sprintf("%s %s %s %s", fd.Severity, fd.Kind, fd.Culprit(), fd.Summary)})
		}
		switch sortModes[s][m.sorts[s]] {
		case "severity":
			slices.SortStableFunc(rs, func(a, b row) int { return cmp.Compare(b.finding.Severity, a.finding.Severity) })
		case "impact":
			slices.SortStableFunc(rs, func(a, b row) int { return cmp.Compare(b.finding.ImpactNs, a.finding.ImpactNs) })
		}
	case ScreenGPU:
		for _, g := range f.GPUs {
			rs = append(rs, row{id: fmt.Sprintf("g%d", g.Index), gpu: g, text: fmt.Sprintf("gpu %d %s %s", g.Index, g.Name, g.Host)})
		}
		if sortModes[s][m.sorts[s]] == "nvlink" {
			slices.SortStableFunc(rs, func(a, b row) int {
				return cmp.Compare(b.gpu.NVLinkTxBps+b.gpu.NVLinkRxBps, a.gpu.NVLinkTxBps+a.gpu.NVLinkRxBps)
			})
		}
	}
	return filterRows(rs, m.filters[s])
}

// filterRows keeps the rows whose text holds every word of the filter
// (case-insensitive). A bare number matches a rank exactly: "3" is rank 3,
// not 13.
func filterRows(rs []row, filter string) []row {
	words := strings.Fields(strings.ToLower(filter))
	if len(words) == 0 {
		return rs
	}
	out := rs[:0:0]
	for _, r := range rs {
		text := " " + strings.ToLower(r.text) + " "
		ok := true
		for _, w := range words {
			if isNumber(w) {
				w = " " + w + " "
				if !strings.Contains(text, w) && !strings.Contains(text, "->"+strings.TrimSpace(w)+" ") &&
					!strings.Contains(text, " "+strings.TrimSpace(w)+"->") {
					ok = false
					break
				}
				continue
			}
			if !strings.Contains(text, w) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, r)
		}
	}
	return out
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// selected returns the index of the screen's selected row in rows: the row
// with the id selected before, else the same position.
func (m *Model) selected(s Screen, rows []row) int {
	if len(rows) == 0 {
		return 0
	}
	sel := m.sel[s]
	if sel.id != "" {
		for i := range rows {
			if rows[i].id == sel.id {
				return i
			}
		}
	}
	return clampIdx(sel.idx, len(rows))
}

// matrixRows are the ranks the matrix shows as senders (filtered); its
// columns are every rank.
func (m *Model) matrixRows() []int {
	var rs []row
	for _, r := range m.frame.Ranks {
		state := "up"
		if !r.Up {
			state = "down"
		}
		rs = append(rs, row{rank: r.Rank, text: fmt.Sprintf("rank %d r%d %s %s", r.Rank, r.Rank, state, r.Host)})
	}
	// Ranks the links name that the frame lists no state for.
	seen := map[int]bool{}
	for _, r := range rs {
		seen[r.rank] = true
	}
	for i := range m.size() {
		if !seen[i] {
			rs = append(rs, row{rank: i, text: fmt.Sprintf("rank %d r%d", i, i)})
		}
	}
	slices.SortFunc(rs, func(a, b row) int { return cmp.Compare(a.rank, b.rank) })
	rs = filterRows(rs, m.filters[ScreenMatrix])
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.rank
	}
	return out
}

func (m *Model) matrixCols() []int {
	out := make([]int, m.size())
	for i := range out {
		out[i] = i
	}
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
