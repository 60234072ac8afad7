package ui

import (
	"fmt"
	"slices"
	"strings"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/vccl-go/vccl/analyzer"
)

// Smallest terminal the screens are laid out for; below it the model says
// so instead of drawing a mess.
const (
	minWidth  = 40
	minHeight = 10
)

// View draws the screen.
func (m Model) View() tea.View {
	v := tea.NewView(m.Render())
	v.AltScreen = true
	v.WindowTitle = "vccl-top"
	return v
}

// Render draws the screen as styled text of m's size.
func (m Model) Render() string {
	if m.quitting {
		return ""
	}
	w, h := m.width, m.height
	if w < minWidth || h < minHeight {
		lines := make([]string, max(h, 1))
		lines[0] = fmt.Sprintf("too small: %d×%d, need %d×%d", w, h, minWidth, minHeight)
		for i := range lines {
			lines[i] = fit(lines[i], w)
		}
		return strings.Join(lines, "\n")
	}
	lines := []string{m.headerLine(w), m.tabsLine(w)}
	bh := m.bodyHeight()
	var body []string
	switch {
	case m.showHelp:
		body = m.helpView(w, bh)
	case m.frames == 0:
		body = []string{"", m.st.dim.Render(" waiting for the first frame from " + m.describeSource())}
	default:
		switch m.screen {
		case ScreenOverview:
			body = m.overview(w, bh)
		case ScreenMatrix:
			body = m.matrix(w, bh)
		case ScreenLinks:
			body = m.linksView(w, bh)
		case ScreenDetail:
			body = m.detailView(w, bh)
		case ScreenFindings:
			body = m.findingsView(w, bh)
		case ScreenGPU:
			body = m.gpuView(w, bh)
		}
	}
	for len(body) < bh {
		body = append(body, "")
	}
	body = body[:bh]
	lines = append(lines, body...)
	lines = append(lines, m.statusLine(w), m.keysLine(w))
	for i := range lines {
		lines[i] = fit(lines[i], w)
	}
	return strings.Join(lines, "\n")
}

func (m *Model) describeSource() string {
	if m.frame.Target != "" {
		return m.frame.Source + " " + m.frame.Target
	}
	return "the source"
}

func (m *Model) headerLine(w int) string {
	f := &m.frame
	left := " vccl-top"
	if f.Source != "" {
		left += "  " + f.Source
		if f.Target != "" {
			left += " " + f.Target
		}
	}
	if f.JobID != "" {
		left += "  job " + f.JobID
	} else if f.UID != "" {
		uid := f.UID
		if len(uid) > 8 {
			uid = uid[:8]
		}
		left += "  uid " + uid
	}
	var right []string
	if n := m.size(); n > 0 {
		right = append(right, fmt.Sprintf("%d/%d up", f.Up(), n))
	}
	if r := f.Replay; r != nil {
		state := "▶"
		switch {
		case r.Done:
			state = "end"
		case r.Paused || m.paused:
			state = "‖"
		}
		right = append(right, fmt.Sprintf("%s %s/%s ×%g", state, FormatNs(r.PosNs-r.StartNs), FormatNs(r.EndNs-r.StartNs), r.Speed))
	}
	if m.paused {
		right = append(right, "PAUSED")
	}
	right = append(right, clock(f.Time)+" ")
	rs := strings.Join(right, "  ")
	gap := w - ansi.StringWidth(left) - ansi.StringWidth(rs)
	if gap < 1 {
		left = ansi.Truncate(left, max(w-ansi.StringWidth(rs)-1, 0), "…")
		gap = max(w-ansi.StringWidth(left)-ansi.StringWidth(rs), 0)
	}
	return m.st.header.Render(fit(left+strings.Repeat(" ", gap)+rs, w))
}

func (m *Model) tabsLine(w int) string {
	var parts []string
	for i, s := range m.tabs() {
		label := fmt.Sprintf(" %d %s", i+1, s)
		if s == ScreenFindings && len(m.frame.Findings) > 0 {
			label += fmt.Sprintf(" (%d)", len(m.frame.Findings))
		}
		label += " "
		if s == m.screen {
			parts = append(parts, m.st.tabOn.Render(label))
		} else {
			parts = append(parts, m.st.tab.Render(label))
		}
	}
	if m.screen == ScreenDetail {
		parts = append(parts, m.st.tabOn.Render(fmt.Sprintf(" Link %d→%d ", m.detail.from, m.detail.to)))
	}
	return strings.Join(parts, " ")
}

func (m *Model) statusLine(w int) string {
	if m.filtering {
		return m.input.View()
	}
	var parts []string
	if f := m.filters[m.screen]; f != "" {
		parts = append(parts, "filter: "+m.st.accent.Render(f)+" (esc clears)")
	}
	if modes := sortModes[m.screen]; len(modes) > 0 && m.screen != ScreenMatrix {
		parts = append(parts, "sort: "+modes[m.sorts[m.screen]])
	}
	if m.screen == ScreenMatrix || m.screen == ScreenDetail {
		if m.mBacklog {
			parts = append(parts, "colour: backlog (m: bandwidth)")
		} else {
			parts = append(parts, "colour: bandwidth (m: backlog)")
		}
	}
	if m.player != nil {
		parts = append(parts, fmt.Sprintf("speed ×%g (+/-)", m.speed))
	}
	if m.paused {
		parts = append(parts, m.st.warn.Render("paused (p resumes)"))
	}
	return " " + strings.Join(parts, " · ")
}

func (m *Model) keysLine(w int) string {
	h := m.help
	h.SetWidth(w - 1)
	return " " + h.ShortHelpView(m.keys.ShortHelp())
}

func (m *Model) helpView(w, h int) []string {
	hm := m.help
	hm.SetWidth(w - 2)
	lines := []string{"", m.st.title.Render(" Keys"), ""}
	for _, l := range strings.Split(hm.FullHelpView(m.keys.FullHelp()), "\n") {
		lines = append(lines, " "+l)
	}
	lines = append(lines, "",
		" Screens: 1 overview (ranks, collectives), 2 matrix (rank × peer), 3 links,",
		" 4 findings (the analyzer's, newest first), 5 GPUs (with a GPU source).",
		" enter drills down (rank → matrix → link; finding → its link); esc goes back.",
		" / filters the list by words (a number is a rank); s changes the order.",
		"", m.st.dim.Render(" ? or esc closes this help."))
	return lines
}

// column of a table: its title, width, alignment, and the width below
// which it is dropped (0: never).
type column struct {
	title string
	w     int
	right bool
	minW  int
}

// table renders a header and rows of cells, dropping the columns the
// width has no room for; the last column takes the width left.
type table struct {
	cols  []column
	shown []bool
	last  int // width of the last column shown
}

func newTable(w int, cols ...column) *table {
	t := &table{cols: cols, shown: make([]bool, len(cols))}
	used := 1 // the selection mark
	for i, c := range cols {
		if c.minW > 0 && w < c.minW {
			continue
		}
		t.shown[i] = true
		used += c.w + 1
	}
	lastIdx := -1
	for i := range cols {
		if t.shown[i] {
			lastIdx = i
		}
	}
	if lastIdx >= 0 {
		t.last = cols[lastIdx].w
		if !cols[lastIdx].right {
			t.last = max(cols[lastIdx].w+w-used, cols[lastIdx].w)
		}
	}
	return t
}

func (t *table) render(cells []string) string {
	var b strings.Builder
	lastIdx := -1
	for i := range t.cols {
		if t.shown[i] {
			lastIdx = i
		}
	}
	for i, c := range t.cols {
		if !t.shown[i] {
			continue
		}
		cw := c.w
		if i == lastIdx {
			cw = t.last
		}
		s := ""
		if i < len(cells) {
			s = cells[i]
		}
		if c.right {
			b.WriteString(rfit(s, cw))
		} else {
			b.WriteString(fit(s, cw))
		}
		if i != lastIdx {
			b.WriteByte(' ')
		}
	}
	return strings.TrimRight(b.String(), " ")
}

func (t *table) header(st styles) string {
	titles := make([]string, len(t.cols))
	for i, c := range t.cols {
		titles[i] = c.title
	}
	return " " + st.dim.Render(t.render(titles))
}

// list renders rows (already cells) in h lines with the selected one
// visible and marked.
func (m *Model) list(t *table, cells [][]string, sel, h int) []string {
	if h <= 0 {
		return nil
	}
	off := 0
	if sel >= h {
		off = sel - h + 1
	}
	var out []string
	for i := off; i < len(cells) && len(out) < h; i++ {
		line := t.render(cells[i])
		if i == sel {
			out = append(out, m.st.sel.Render("▸"+ansi.Strip(line)))
		} else {
			out = append(out, " "+line)
		}
	}
	if len(cells) > h {
		more := fmt.Sprintf(" %d–%d of %d", off+1, min(off+h, len(cells)), len(cells))
		out[len(out)-1] = fit(out[len(out)-1], max(t.lastWidth()-len(more), 0)) + m.st.dim.Render(more)
	}
	return out
}

func (t *table) lastWidth() int {
	w := 1
	for i, c := range t.cols {
		if t.shown[i] {
			w += c.w + 1
		}
	}
	return w - 1 + t.last - t.lastCol().w
}

func (t *table) lastCol() column {
	for i := len(t.cols) - 1; i >= 0; i-- {
		if t.shown[i] {
			return t.cols[i]
		}
	}
	return column{}
}

func (m *Model) since(r Rank) string {
	if r.Since.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s (%s)", clock(r.Since), ago(m.frame.Time, r.Since))
}

func (m *Model) overview(w, h int) []string {
	f := &m.frame
	var send, recv float64
	for _, l := range f.Links {
		if l.Dir == "recv" {
			recv += l.BandwidthBps
		} else {
			send += l.BandwidthBps
		}
	}
	var lost uint64
	for _, r := range f.Ranks {
		lost += r.Lost
	}
	var perSec float64
	for _, c := range f.Colls {
		perSec += c.PerSec
	}
	up, n := f.Up(), m.size()
	state := m.st.up.Render(fmt.Sprintf("%d up", up))
	if down := n - up; down > 0 {
		state += ", " + m.st.down.Render(fmt.Sprintf("%d DOWN", down))
	}
	lines := []string{
		fmt.Sprintf(" %s %d ranks: %s   collectives %.1f/s   bytes sent %s   lost %d",
			m.st.title.Render("Job"), n, state, perSec, FormatBps(send), lost),
	}
	// Collectives, by operation.
	ct := newTable(w,
		column{title: "OPERATION", w: 13},
		column{title: "CALLS", w: 9, right: true, minW: 70},
		column{title: "CALLS/S", w: 8, right: true},
		column{title: "BUSBW", w: 10, right: true},
		column{title: "ALGBW", w: 10, right: true, minW: 90},
		column{title: "TIME", w: 7, right: true},
		column{title: "SKEW", w: 8, right: true},
	)
	lines = append(lines, ct.header(m.st))
	maxColl := max(min(len(f.Colls), h/3), 1)
	if len(f.Colls) == 0 {
		lines = append(lines, m.st.dim.Render(" no collectives seen yet"))
	}
	for i, c := range f.Colls {
		if i == maxColl {
			lines = append(lines, m.st.dim.Render(fmt.Sprintf(" … %d more operations", len(f.Colls)-i)))
			break
		}
		skew := FormatNs(c.SkewNs)
		if c.SkewEstimated {
			skew = "~" + skew
		}
		lines = append(lines, " "+ct.render([]string{c.Op, fmt.Sprint(c.Calls), fmt.Sprintf("%.1f", c.PerSec),
			FormatBps(c.BusBWBps), FormatBps(c.AlgBWBps), FormatNs(c.AvgTimeNs), skew}))
	}
	for _, n := range f.Notes {
		lines = append(lines, m.st.dim.Render(" "+n))
	}
	lines = append(lines, "")
	// Ranks.
	rt := newTable(w,
		column{title: "RANK", w: 5, right: true},
		column{title: "STATE", w: 5},
		column{title: "SINCE", w: 18},
		column{title: "SEND", w: 10, right: true},
		column{title: "RECV", w: 10, right: true},
		column{title: "P99", w: 6, right: true, minW: 76},
		column{title: "BACKLOG", w: 7, right: true, minW: 86},
		column{title: "HOST / ERROR", w: 12},
	)
	lines = append(lines, rt.header(m.st))
	rows := m.rows(ScreenOverview)
	cells := make([][]string, len(rows))
	for i, r := range rows {
		rs, _ := f.RankState(r.rank)
		st, where := m.st.up.Render("up"), rs.Host
		if rs.PID != 0 {
			where += fmt.Sprintf(" pid %d", rs.PID)
		}
		sendS, recvS, p99, backlog := FormatBps(r.totals.send), FormatBps(r.totals.recv), FormatNs(r.totals.p99), fmt.Sprint(r.totals.backlog)
		if !rs.Up {
			st = m.st.down.Render("DOWN")
			sendS, recvS, p99, backlog = "-", "-", "-", "-"
			if rs.Err != "" {
				where = m.st.down.Render(rs.Err)
			}
		}
		cells[i] = []string{fmt.Sprint(r.rank), st, m.since(rs), sendS, recvS, p99, backlog, where}
	}
	if len(rows) == 0 {
		lines = append(lines, m.st.dim.Render(" no ranks match"))
	}
	lines = append(lines, m.list(rt, cells, m.selected(ScreenOverview, rows), h-len(lines))...)
	return lines
}

func (m *Model) matrix(w, h int) []string {
	f := &m.frame
	ps := pairs(f)
	rows, cols := m.matrixRows(), m.matrixCols()
	what := "send bandwidth"
	heat := bwHeat
	val := func(p *pairStats) float64 { return p.bw }
	cell := func(p *pairStats) string { return shortBps(p.bw) }
	if m.mBacklog {
		what, heat = "backlog (WRs outstanding)", backlogHeat
		val = func(p *pairStats) float64 { return float64(p.backlog) }
		cell = func(p *pairStats) string { return fmt.Sprint(p.backlog) }
	}
	hi := 0.0
	for _, p := range ps {
		hi = max(hi, val(p))
	}
	hiS := FormatBps(hi)
	if m.mBacklog {
		hiS = fmt.Sprintf("%.0f WRs", hi)
	}
	lines := []string{fmt.Sprintf(" %s rank → peer, %s   max %s", m.st.title.Render("Matrix"), what, hiS)}
	if len(rows) == 0 || len(cols) == 0 {
		return append(lines, m.st.dim.Render(" no ranks match"))
	}
	const labelW, cellW = 8, 6
	visCols := max((w-labelW)/cellW, 1)
	visRows := max(h-5, 1)
	ci, ri := indexOf(cols, m.mCol), indexOf(rows, m.mRow)
	coff := max(ci-visCols+1, 0)
	roff := max(ri-visRows+1, 0)
	// Column header.
	var hb strings.Builder
	hb.WriteString(fit(" from\\to", labelW))
	for j := coff; j < len(cols) && j < coff+visCols; j++ {
		s := rfit(fmt.Sprint(cols[j]), cellW-1) + " "
		if j == ci {
			s = m.st.title.Render(s)
		} else {
			s = m.st.dim.Render(s)
		}
		hb.WriteString(s)
	}
	lines = append(lines, hb.String())
	for i := roff; i < len(rows) && i < roff+visRows; i++ {
		r := rows[i]
		rs, known := f.RankState(r)
		label := fmt.Sprintf("%5d  ", r)
		switch {
		case known && !rs.Up:
			label = m.st.down.Render(fmt.Sprintf("%5d! ", r))
		case i == ri:
			label = m.st.title.Render(label)
		}
		var b strings.Builder
		b.WriteString(fit(label, labelW))
		for j := coff; j < len(cols) && j < coff+visCols; j++ {
			c := cols[j]
			var s string
			style := lipgloss.NewStyle()
			if c == r {
				s = m.st.dim.Render(rfit("·", cellW-1))
			} else if p := ps[pairKey{int32(r), int32(c)}]; p != nil {
				lvl := heatLevel(val(p), hi, len(heat))
				style = style.Foreground(heat[lvl])
				s = style.Render(rfit(cell(p), cellW-1))
			} else {
				s = m.st.dim.Render(rfit("-", cellW-1))
			}
			if i == ri && j == ci {
				b.WriteString(m.st.sel.Render("[" + rfit(strings.TrimSpace(ansi.Strip(s)), cellW-2) + "]"))
				continue
			}
			b.WriteString(s + " ")
		}
		lines = append(lines, b.String())
	}
	lines = append(lines, "")
	// The selected cell, spelled out.
	if m.mRow == m.mCol {
		lines = append(lines, m.st.dim.Render(fmt.Sprintf(" rank %d to itself: move to another column", m.mRow)))
	} else if p := ps[pairKey{int32(m.mRow), int32(m.mCol)}]; p != nil {
		lines = append(lines, fmt.Sprintf(" %d → %d: %s  p50 %s  p99 %s  backlog %d  (enter: detail)",
			m.mRow, m.mCol, FormatBps(p.bw), FormatNs(p.p50), FormatNs(p.p99), p.backlog))
	} else {
		lines = append(lines, m.st.dim.Render(fmt.Sprintf(" %d → %d: no traffic seen", m.mRow, m.mCol)))
	}
	legend := " scale "
	for i := range heat {
		legend += lipgloss.NewStyle().Foreground(heat[i]).Render("██")
	}
	legend += m.st.dim.Render("  low → high   ! rank down   · self   - no link")
	lines = append(lines, legend)
	return lines
}

func (m *Model) linksView(w, h int) []string {
	t := newTable(w,
		column{title: "LINK", w: 16},
		column{title: "SEEN BY", w: 7},
		column{title: "BANDWIDTH", w: 10, right: true},
		column{title: "P50", w: 6, right: true},
		column{title: "P99", w: 6, right: true},
		column{title: "BACKLOG", w: 7, right: true},
		column{title: "CREDIT", w: 6, right: true, minW: 70},
		column{title: "WRS", w: 6, right: true, minW: 78},
	)
	rows := m.rows(ScreenLinks)
	lines := []string{fmt.Sprintf(" %s %d link directions over their windows", m.st.title.Render("Links"), len(rows)), t.header(m.st)}
	cells := make([][]string, len(rows))
	for i, r := range rows {
		l := r.link
		credit := pct(l.CreditWaitNs, l.WindowNs)
		if l.CreditWaiting {
			credit = m.st.warn.Render(credit + "*")
		}
		cells[i] = []string{l.Name(), fmt.Sprintf("%d %s", l.Rank, l.Dir), FormatBps(l.BandwidthBps), FormatNs(l.LatP50Ns), FormatNs(l.LatP99Ns),
			fmt.Sprint(l.Backlog), credit, fmt.Sprint(l.Completions)}
	}
	if len(rows) == 0 {
		lines = append(lines, m.st.dim.Render(" no links match"))
	}
	return append(lines, m.list(t, cells, m.selected(ScreenLinks, rows), h-len(lines))...)
}

func (m *Model) detailView(w, h int) []string {
	f := &m.frame
	p := m.detail
	ps := pairs(f)
	cur := ps[p]
	state := func(r int32) string {
		rs, ok := f.RankState(int(r))
		switch {
		case !ok:
			return fmt.Sprintf("rank %d ?", r)
		case rs.Up:
			return m.st.up.Render(fmt.Sprintf("rank %d up", r))
		}
		return m.st.down.Render(fmt.Sprintf("rank %d DOWN since %s", r, clock(rs.Since)))
	}
	var chans []Link
	for _, l := range f.Links {
		if l.From() == p.from && l.To() == p.to && l.Dir == "send" {
			chans = append(chans, l)
		}
	}
	if len(chans) == 0 { // the sender reports nothing: the receiver's view
		for _, l := range f.Links {
			if l.From() == p.from && l.To() == p.to {
				chans = append(chans, l)
			}
		}
	}
	lines := []string{fmt.Sprintf(" %s %d → %d   %s · %s   (r: %d → %d)", m.st.title.Render("Link"), p.from, p.to,
		state(p.from), state(p.to), p.to, p.from), ""}
	s := m.hist[p]
	if s == nil {
		s = &series{}
	}
	const labelW, valueW = 13, 22
	sw := max(w-labelW-valueW-2, 8)
	spark := func(name string, xs []float64, now string, hi string, style lipgloss.Style) string {
		return " " + fit(name, labelW-1) + style.Render(Sparkline(xs, sw)) + " " + fit(now+m.st.dim.Render(hi), valueW)
	}
	maxOf := func(xs []float64) float64 {
		hi := 0.0
		for _, x := range xs {
			hi = max(hi, x)
		}
		return hi
	}
	var bw, p50, p99 float64
	var backlog uint32
	if cur != nil {
		bw, p50, p99, backlog = cur.bw, float64(cur.p50), float64(cur.p99), cur.backlog
	}
	lines = append(lines,
		spark("bandwidth", s.bw, FormatBps(bw), " max "+shortBps(maxOf(s.bw)), lipgloss.NewStyle().Foreground(colGood)),
		spark("latency p50", s.p50, FormatNs(int64(p50)), " max "+FormatNs(int64(maxOf(s.p50))), lipgloss.NewStyle().Foreground(colInfo)),
		spark("latency p99", s.p99, FormatNs(int64(p99)), " max "+FormatNs(int64(maxOf(s.p99))), lipgloss.NewStyle().Foreground(colAccent)),
		spark("backlog", s.backlog, fmt.Sprintf("%d WRs", backlog), fmt.Sprintf(" max %.0f", maxOf(s.backlog)), lipgloss.NewStyle().Foreground(colWarn)),
	)
	span := FormatNs(int64(min(len(s.bw), sw)) * m.interval.Nanoseconds())
	lines = append(lines, m.st.dim.Render(fmt.Sprintf(" %sthe last %s, a sample every %s", strings.Repeat(" ", labelW-1), span, FormatNs(m.interval.Nanoseconds()))))
	if cur != nil {
		lines = append(lines, fmt.Sprintf(" credit wait %s of the window · pending %d WRs · completions %d · failed %d",
			pct(cur.creditWaitNs, cur.windowNs), cur.pending, cur.completions, cur.failed))
	} else {
		lines = append(lines, m.st.dim.Render(" no traffic on this link in the window"))
	}
	lines = append(lines, "")
	t := newTable(w,
		column{title: "CHANNEL", w: 7, right: true},
		column{title: "PATH", w: 7},
		column{title: "SEEN BY", w: 9},
		column{title: "BANDWIDTH", w: 10, right: true},
		column{title: "P50", w: 6, right: true},
		column{title: "P99", w: 6, right: true},
		column{title: "BACKLOG", w: 7, right: true},
		column{title: "CREDIT", w: 6, right: true, minW: 76},
	)
	lines = append(lines, t.header(m.st))
	slices.SortFunc(chans, func(a, b Link) int { return int(a.Channel)*4 + int(a.Path) - int(b.Channel)*4 - int(b.Path) })
	for _, l := range chans {
		path := "primary"
		if l.Path != 0 {
			path = "backup"
		}
		who := fmt.Sprintf("%d %s", l.Rank, l.Dir)
		lines = append(lines, " "+t.render([]string{fmt.Sprint(l.Channel), path, who, FormatBps(l.BandwidthBps),
			FormatNs(l.LatP50Ns), FormatNs(l.LatP99Ns), fmt.Sprint(l.Backlog), pct(l.CreditWaitNs, l.WindowNs)}))
		if len(lines) >= h {
			break
		}
	}
	return lines
}

func (m *Model) findingsView(w, h int) []string {
	t := newTable(w,
		column{title: "SEEN", w: 8},
		column{title: "SEVERITY", w: 8},
		column{title: "KIND", w: 12},
		column{title: "WHERE", w: 13},
		column{title: "IMPACT", w: 6, right: true, minW: 90},
		column{title: "SUMMARY", w: 20},
	)
	rows := m.rows(ScreenFindings)
	lines := []string{fmt.Sprintf(" %s %d, newest first; enter shows the link", m.st.title.Render("Findings"), len(rows)), t.header(m.st)}
	if len(m.frame.Findings) == 0 {
		return append(lines, "", m.st.dim.Render(" No findings. The analyzer's live findings appear here as it makes them."))
	}
	cells := make([][]string, len(rows))
	for i, r := range rows {
		fd := r.finding
		sev := fd.Severity.String()
		switch fd.Severity {
		case analyzer.SeverityCritical:
			sev = m.st.crit.Render(sev)
		case analyzer.SeverityWarning:
			sev = m.st.warn.Render(sev)
		default:
			sev = m.st.info.Render(sev)
		}
		cells[i] = []string{clock(fd.Seen), sev, fd.Kind.String(), fd.Culprit(), FormatNs(fd.ImpactNs), fd.Summary}
	}
	sel := m.selected(ScreenFindings, rows)
	lines = append(lines, m.list(t, cells, sel, h-len(lines)-3)...)
	if len(rows) > 0 {
		fd := rows[sel].finding
		lines = append(lines, "", m.st.dim.Render(" "+ansi.Truncate(fd.Summary, w-2, "…")))
	}
	return lines
}

func (m *Model) gpuView(w, h int) []string {
	t := newTable(w,
		column{title: "GPU", w: 3, right: true},
		column{title: "NAME", w: 14, minW: 86},
		column{title: "UTIL", w: 4, right: true},
		column{title: "MEM", w: 4, right: true},
		column{title: "NVLINK TX", w: 10, right: true},
		column{title: "NVLINK RX", w: 10, right: true},
		column{title: "PCIE TX", w: 10, right: true},
		column{title: "PCIE RX", w: 10, right: true},
	)
	rows := m.rows(ScreenGPU)
	lines := []string{fmt.Sprintf(" %s %d GPUs: NVLink and PCIe throughput (NVML)", m.st.title.Render("GPUs"), len(rows)), t.header(m.st)}
	cells := make([][]string, len(rows))
	for i, r := range rows {
		g := r.gpu
		cells[i] = []string{fmt.Sprint(g.Index), g.Name, fmt.Sprintf("%.0f%%", g.UtilPct),
			fmt.Sprintf("%.0f%%", g.MemUtilPct), FormatBps(g.NVLinkTxBps), FormatBps(g.NVLinkRxBps),
			FormatBps(g.PCIeTxBps), FormatBps(g.PCIeRxBps)}
		if g.Err != "" {
			cells[i] = []string{fmt.Sprint(g.Index), g.Name, m.st.down.Render(g.Err)}
		}
	}
	sel := m.selected(ScreenGPU, rows)
	lines = append(lines, m.list(t, cells, sel, h-len(lines)-3)...)
	if len(rows) > 0 {
		g := rows[sel].gpu
		if s := m.gpuHist[g.Index]; s != nil {
			lines = append(lines, "", fmt.Sprintf(" GPU %d NVLink %s %s", g.Index,
				lipgloss.NewStyle().Foreground(colGood).Render(Sparkline(s.bw, max(w-34, 8))), FormatBps(g.NVLinkTxBps+g.NVLinkRxBps)))
		}
	}
	return lines
}
