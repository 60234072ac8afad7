package analyzer

import (
	"github.com/vccl-go/vccl/flowtel"

	"cmp"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"
)

// WriteHTML writes a self-contained HTML report (inline CSS and SVG, no
// script, nothing fetched): the findings, bandwidth and backlog over time
// per link with the findings marked, a rank × peer heat map of delivered
// bandwidth, the collective timeline, and the per-collective summary.
func (r *Report) WriteHTML(w io.Writer) error {
	d := htmlData{R: r, Start: r.Job.StartNs, Span: max(r.Job.EndNs-r.Job.StartNs, 1)}
	for i := range r.Findings {
		f := &r.Findings[i]
		d.Findings = append(d.Findings, htmlFinding{N: i + 1, F: f, Color: kindColor(f.Kind),
			From: d.rel(f.StartNs), To: d.rel(f.EndNs), Impact: fmtDur(f.ImpactNs), Colls: collsText(f), Evidence: evidenceText(f)})
	}
	d.Links = template.HTML(d.linkCharts())
	d.Heat = template.HTML(d.heatmap())
	d.Timeline = template.HTML(d.timeline())
	for _, c := range r.Collectives {
		d.Colls = append(d.Colls, []string{flowtel.JobID(c.Comm), c.Op, c.Algo, fmtBytes(c.Bytes), fmt.Sprint(c.Count),
			fmtBps(c.BusBWP50), fmtBps(c.BusBWP99), fmtDur(c.TimeP50Ns), skewText(c.SkewP50Ns), skewText(c.SkewP99Ns), skewText(c.SkewMaxNs)})
	}
	return htmlTmpl.Execute(w, &d)
}

type htmlData struct {
	R        *Report
	Start    int64
	Span     int64
	Findings []htmlFinding
	Links    template.HTML
	Heat     template.HTML
	Timeline template.HTML
	Colls    [][]string
}

type htmlFinding struct {
	N        int
	F        *Finding
	Color    string
	From, To string
	Impact   string
	Colls    string
	Evidence string
}

func (d *htmlData) rel(ns int64) string { return fmt.Sprintf("+%.3fs", float64(ns-d.Start)/1e9) }

func kindColor(k Kind) string {
	switch k {
	case KindBackpressure:
		return "#d62728"
	case KindHOLBlocking:
		return "#9467bd"
	case KindStraggler:
		return "#ff7f0e"
	case KindSlowLink:
		return "#8c564b"
	case KindStall:
		return "#e377c2"
	case KindFailover:
		return "#17becf"
	}
	return "#7f7f7f"
}

func evidenceText(f *Finding) string {
	var sb strings.Builder
	for _, k := range f.EvidenceKeys() {
		fmt.Fprintf(&sb, "%s = %.6g\n", k, f.Evidence[k])
	}
	if f.Blocking != nil {
		b := f.Blocking
		fmt.Fprintf(&sb, "blocking WR %d (QP %d): %s, coll_seq %s, latency %s\n", b.WrID, b.QP, fmtBytes(b.Bytes), fmtSeq(b.CollSeq), fmtDur(b.LatencyNs()))
		for _, x := range f.Blocked {
			fmt.Fprintf(&sb, "  blocked WR %d: %s, coll_seq %s, latency %s, %s behind the blocking WR\n", x.WrID, fmtBytes(x.Bytes), fmtSeq(x.CollSeq), fmtDur(x.LatencyNs()), fmtDur(x.WaitNs))
		}
	}
	if len(f.Related) > 0 {
		fmt.Fprintf(&sb, "related: %s\n", joinLinks(f.Related))
	}
	return sb.String()
}

// Chart geometry.
const (
	chartW   = 760.0
	chartH   = 70.0
	labelW   = 130.0
	axisH    = 18.0
	plotW    = chartW - labelW - 30
	maxLinks = 48
)

func (d *htmlData) x(ns int64) float64 {
	return labelW + plotW*float64(ns-d.Start)/float64(d.Span)
}

// bands marks the findings about a link (or, with all, every finding) on a
// chart of height h.
func (d *htmlData) bands(sb *strings.Builder, match func(*Finding) bool, y, h float64) {
	for i := range d.R.Findings {
		f := &d.R.Findings[i]
		if !match(f) {
			continue
		}
		x0, x1 := d.x(f.StartNs), d.x(f.EndNs)
		fmt.Fprintf(sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.18"><title>%s %s</title></rect>`,
			x0, y, max(x1-x0, 1.5), h, kindColor(f.Kind), f.Kind, template.HTMLEscapeString(f.Culprit()))
	}
}

func (d *htmlData) axis(sb *strings.Builder, y float64) {
	fmt.Fprintf(sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999" stroke-width="1"/>`, labelW, y, labelW+plotW, y)
	for k := 0; k <= 5; k++ {
		ns := d.Start + d.Span*int64(k)/5
		x := d.x(ns)
		fmt.Fprintf(sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999" stroke-width="1"/><text x="%.1f" y="%.1f" font-size="10" fill="#555" text-anchor="middle">%s</text>`,
			x, y, x, y+4, x, y+14, d.rel(ns))
	}
}

// linkCharts draws, per link, the bandwidth it delivered (line) and its
// bytes in flight (shaded) over time, with its findings marked.
func (d *htmlData) linkCharts() string {
	s := d.R.Series
	links := slices.Clone(s.Links)
	if len(links) == 0 || s.Points == 0 {
		return `<p class="note">No link traffic in the trace.</p>`
	}
	involved := func(l *LinkSeries) bool {
		for i := range d.R.Findings {
			f := &d.R.Findings[i]
			if f.Comm == l.Comm && f.Rank == l.Link.Rank && f.Peer == l.Link.Peer && (f.Channel < 0 || f.Channel == l.Link.Channel) {
				return true
			}
		}
		return false
	}
	// Links that carried only a few small messages (the signature check)
	// are left out.
	var busiest float64
	totals := make([]float64, len(links))
	for i := range links {
		for _, v := range links[i].Bps {
			totals[i] += v
		}
		busiest = max(busiest, totals[i])
	}
	kept := links[:0]
	quiet := 0
	for i := range links {
		if totals[i] >= busiest/100 || involved(&links[i]) {
			kept = append(kept, links[i])
		} else {
			quiet++
		}
	}
	links = kept
	note := ""
	if quiet > 0 {
		note = fmt.Sprintf(`<p class="note">%d link(s) that carried under 1%% of the busiest link's bytes are not shown.</p>`, quiet)
	}
	if len(links) > maxLinks {
		total := func(l *LinkSeries) float64 {
			t := 0.0
			for _, v := range l.Bps {
				t += v
			}
			return t
		}
		slices.SortStableFunc(links, func(a, b LinkSeries) int {
			ia, ib := involved(&a), involved(&b)
			if ia != ib {
				if ia {
					return -1
				}
				return 1
			}
			return cmp.Compare(total(&b), total(&a))
		})
		note += fmt.Sprintf(`<p class="note">%d of %d links shown: those named by findings, then the busiest.</p>`, maxLinks, len(links))
		links = links[:maxLinks]
		slices.SortFunc(links, func(a, b LinkSeries) int {
			return cmp.Or(cmp.Compare(a.Comm, b.Comm), cmpLinkRef(a.Link, b.Link))
		})
	}
	// One scale for every link's bandwidth, one for backlog.
	maxBps, maxBack := 1.0, 1.0
	for _, l := range links {
		for k := range l.Bps {
			maxBps = max(maxBps, l.Bps[k])
			maxBack = max(maxBack, l.Backlog[k])
		}
	}
	var sb strings.Builder
	sb.WriteString(note)
	h := float64(len(links))*(chartH+6) + axisH + 24
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="Helvetica,Arial,sans-serif" style="display:block;margin:8px 0">`, chartW, h)
	fmt.Fprintf(&sb, `<text x="%.1f" y="12" font-size="11" fill="#444"><tspan fill="#1f77b4">━ delivered bandwidth</tspan> (scale %s)   <tspan fill="#ff7f0e">▇ bytes in flight</tspan> (scale %s)   shaded: findings</text>`,
		labelW, fmtBps(maxBps), fmtBytes(uint64(maxBack)))
	pt := func(k int) int64 { return s.OriginNs + int64(k)*s.StepNs + s.StepNs/2 }
	for li := range links {
		l := &links[li]
		y0 := 20 + float64(li)*(chartH+6)
		fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#fbfbfb" stroke="#e5e5e5"/>`, labelW, y0, plotW, chartH)
		d.bands(&sb, func(f *Finding) bool {
			return f.Comm == l.Comm && (f.Rank == l.Link.Rank && (f.Peer == l.Link.Peer || f.Peer < 0)) && (f.Channel < 0 || f.Channel == l.Link.Channel)
		}, y0, chartH)
		// Backlog: a filled area.
		var area strings.Builder
		fmt.Fprintf(&area, "%.1f,%.1f ", d.x(pt(0)), y0+chartH)
		for k := range l.Backlog {
			fmt.Fprintf(&area, "%.1f,%.1f ", d.x(pt(k)), y0+chartH-chartH*l.Backlog[k]/maxBack)
		}
		fmt.Fprintf(&area, "%.1f,%.1f", d.x(pt(len(l.Backlog)-1)), y0+chartH)
		fmt.Fprintf(&sb, `<polygon points="%s" fill="#ff7f0e" fill-opacity="0.45"/>`, area.String())
		var line strings.Builder
		for k := range l.Bps {
			fmt.Fprintf(&line, "%.1f,%.1f ", d.x(pt(k)), y0+chartH-chartH*l.Bps[k]/maxBps)
		}
		fmt.Fprintf(&sb, `<polyline points="%s" fill="none" stroke="#1f77b4" stroke-width="1.2"/>`, line.String())
		peak := 0.0
		for _, v := range l.Bps {
			peak = max(peak, v)
		}
		fmt.Fprintf(&sb, `<text x="4" y="%.1f" font-size="11" fill="#222">%s</text><text x="4" y="%.1f" font-size="9" fill="#777">peak %s</text>`,
			y0+chartH/2, template.HTMLEscapeString(l.Link.String()), y0+chartH/2+13, fmtBps(peak))
	}
	d.axis(&sb, 20+float64(len(links))*(chartH+6))
	sb.WriteString(`</svg>`)
	return sb.String()
}

// heatmap colours each rank -> peer cell by the bandwidth its paired
// transfers achieved; culprits of findings are outlined.
func (d *htmlData) heatmap() string {
	type cell struct {
		bytes      uint64
		xferB      float64
		xferNs     float64
		culprit    bool
		hasTraffic bool
	}
	n := int32(0)
	cells := map[[2]int32]*cell{}
	for _, l := range d.R.Links {
		n = max(n, l.Link.Rank+1, l.Link.Peer+1)
		k := [2]int32{l.Link.Rank, l.Link.Peer}
		c := cells[k]
		if c == nil {
			c = &cell{}
			cells[k] = c
		}
		c.bytes += max(l.SentBytes, l.LandedBytes)
		if l.XferBps > 0 {
			c.xferB += l.XferBps * float64(max(l.SentBytes, l.LandedBytes))
			c.xferNs += float64(max(l.SentBytes, l.LandedBytes))
		}
		c.hasTraffic = true
	}
	if n == 0 || n > 256 {
		return `<p class="note">No links to map.</p>`
	}
	for _, f := range d.R.Findings {
		if f.Peer >= 0 {
			if c := cells[[2]int32{f.Rank, f.Peer}]; c != nil {
				c.culprit = true
			}
		}
	}
	maxBW := 0.0
	for _, c := range cells {
		if c.xferNs > 0 {
			maxBW = max(maxBW, c.xferB/c.xferNs)
		}
	}
	size := min(48.0, 560.0/float64(n))
	var sb strings.Builder
	w, h := max(60+size*float64(n)+160, 720), 40+size*float64(n)+20
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="Helvetica,Arial,sans-serif" style="display:block;margin:8px 0">`, w, h)
	fmt.Fprintf(&sb, `<text x="60" y="14" font-size="11" fill="#444">rows: sending rank, columns: receiving peer; colour: bandwidth of its transfers (darker is faster, red outline: named by a finding)</text>`)
	for i := range n {
		fmt.Fprintf(&sb, `<text x="50" y="%.1f" font-size="10" fill="#555" text-anchor="end">%d</text>`, 40+size*(float64(i)+0.6), i)
		fmt.Fprintf(&sb, `<text x="%.1f" y="34" font-size="10" fill="#555" text-anchor="middle">%d</text>`, 60+size*(float64(i)+0.5), i)
	}
	for i := range n {
		for j := range n {
			x, y := 60+size*float64(j), 40+size*float64(i)
			c := cells[[2]int32{i, j}]
			if c == nil || !c.hasTraffic {
				fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f4f4f4" stroke="#fff"/>`, x, y, size, size)
				continue
			}
			bw := 0.0
			if c.xferNs > 0 {
				bw = c.xferB / c.xferNs
			}
			t := 0.0
			if maxBW > 0 {
				t = bw / maxBW
			}
			fill := fmt.Sprintf("rgb(%d,%d,%d)", int(235-200*t), int(240-150*t), int(250-70*t))
			stroke, sw := "#fff", 1.0
			if c.culprit {
				stroke, sw = "#d62728", 3
			}
			fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="%s" stroke-width="%.0f"><title>%d->%d: %s, %s</title></rect>`,
				x, y, size, size, fill, stroke, sw, i, j, fmtBytes(c.bytes), fmtBps(bw))
		}
	}
	fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" font-size="10" fill="#555" text-anchor="middle">max %s</text>`, 70+size*float64(n), 52.0, fmtBps(maxBW))
	sb.WriteString(`</svg>`)
	return sb.String()
}

// timeline draws each kept collective as a bar per rank from its
// coll_begin to its coll_end, with the findings marked.
func (d *htmlData) timeline() string {
	tl := d.R.Timeline
	if len(tl) == 0 {
		return `<p class="note">No collectives in the trace.</p>`
	}
	n := 0
	for _, t := range tl {
		n = max(n, len(t.Begins))
	}
	if n > 256 {
		n = 256
	}
	rowH := max(8.0, min(22.0, 400.0/float64(n)))
	h := 24 + rowH*float64(n) + axisH + 8
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="Helvetica,Arial,sans-serif" style="display:block;margin:8px 0">`, chartW, h)
	ops := map[string]string{}
	palette := []string{"#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f"}
	for _, t := range tl {
		if _, ok := ops[t.Op]; !ok {
			ops[t.Op] = palette[len(ops)%len(palette)]
		}
	}
	var legend []string
	for op, c := range ops {
		legend = append(legend, fmt.Sprintf(`<tspan fill="%s">▇ %s</tspan>`, c, op))
	}
	slices.Sort(legend)
	fmt.Fprintf(&sb, `<text x="%.1f" y="12" font-size="11" fill="#444">%s   (%d collectives shown)   shaded: findings</text>`, labelW, strings.Join(legend, "  "), len(tl))
	d.bands(&sb, func(*Finding) bool { return true }, 20, rowH*float64(n))
	for r := range n {
		y := 20 + rowH*float64(r)
		fmt.Fprintf(&sb, `<text x="4" y="%.1f" font-size="11" fill="#222">rank %d</text>`, y+rowH*0.7, r)
	}
	for _, t := range tl {
		for r := 0; r < len(t.Begins) && r < n; r++ {
			b, e := t.Begins[r], t.Ends[r]
			if b == 0 {
				continue
			}
			if e == 0 {
				e = b
			}
			y := 20 + rowH*float64(r)
			x0, x1 := d.x(b), d.x(e)
			fmt.Fprintf(&sb, `<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s"><title>%s #%d (%s) rank %d: %s</title></rect>`,
				x0, y+1, math.Max(x1-x0, 0.6), rowH-2, ops[t.Op], t.Op, t.Seq, fmtBytes(t.Bytes), r, fmtDur(e-b))
		}
	}
	d.axis(&sb, 20+rowH*float64(n)+2)
	sb.WriteString(`</svg>`)
	return sb.String()
}

var htmlTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"spanSeconds": func(ns int64) float64 { return float64(ns) / 1e9 },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>vccl-analyze report</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{text-align:left;padding:4px 6px;border-bottom:1px solid #eee;vertical-align:top}
th{background:#fafafa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.sev{font-weight:600;border-radius:3px;padding:1px 6px;color:#fff}.sev-critical{background:#c0392b}.sev-warning{background:#e67e22}.sev-info{background:#7f8c8d}
.kind{font-weight:600}.note{color:#666;font-size:13px}pre{background:#f7f7f7;padding:8px;font-size:12px;white-space:pre-wrap;margin:4px 0}
details summary{cursor:pointer;color:#555;font-size:12px}.warn{color:#a04000}
</style></head><body>
<h1>vccl-analyze</h1>
<div class="note">{{len .R.Job.Files}} file(s), {{.R.Job.Records}} records, {{printf "%.3f" (spanSeconds .Span)}}s of trace{{range .R.Job.Comms}}; job {{.JobID}}{{if .UID}} ({{.UID}}){{end}}: {{.Ranks}} ranks, {{.Collectives}} collectives{{end}}{{if .R.Job.LostRecords}}; {{.R.Job.LostRecords}} records lost before writing{{end}}.</div>
{{range .R.Warnings}}<div class="warn">warning: {{.}}</div>{{end}}
<h2>Findings</h2>
{{if .Findings}}<table><tr><th>#</th><th>severity</th><th>kind</th><th>culprit</th><th>from</th><th>to</th><th>impact</th><th>collectives</th><th>what the records show</th></tr>
{{range .Findings}}<tr><td>{{.N}}</td><td><span class="sev sev-{{.F.Severity}}">{{.F.Severity}}</span></td><td class="kind" style="color:{{.Color}}">{{.F.Kind}}</td><td>{{.F.Culprit}}</td><td class="num">{{.From}}</td><td class="num">{{.To}}</td><td class="num">{{.Impact}}</td><td>{{.Colls}}</td>
<td>{{.F.Summary}}<details><summary>evidence</summary><pre>{{.Evidence}}</pre></details></td></tr>
{{end}}</table>{{else}}<p>No findings: no link, rank or queue pair stood out.</p>{{end}}
<h2>Bandwidth and bytes in flight per link</h2>
{{.Links}}
<h2>Rank × peer</h2>
{{.Heat}}
<h2>Collective timeline</h2>
{{.Timeline}}
<h2>Collectives</h2>
{{if .Colls}}<table><tr><th>job</th><th>op</th><th>algo</th><th>bytes</th><th>count</th><th>busbw p50</th><th>busbw p99</th><th>time p50</th><th>skew p50</th><th>skew p99</th><th>skew max</th></tr>
{{range .Colls}}<tr>{{range .}}<td class="num">{{.}}</td>{{end}}</tr>{{end}}</table>{{else}}<p class="note">No collectives.</p>{{end}}
<p class="note">Times are seconds from the start of the trace, on the job's common time base. Definitions of each finding: docs/analyzer.md.</p>
</body></html>
`))
