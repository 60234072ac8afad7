package ui

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// FormatBps formats a rate in bytes per second with a decimal prefix:
// "1.23 GB/s", "812 kB/s", "0 B/s".
func FormatBps(bps float64) string {
	return formatUnit(bps, "B/s")
}

func formatUnit(v float64, unit string) string {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return "0 " + unit
	}
	prefixes := []string{"", "k", "M", "G", "T", "P"}
	i := 0
	for v >= 999.5 && i < len(prefixes)-1 {
		v /= 1000
		i++
	}
	switch {
	case v >= 99.95:
		return fmt.Sprintf("%.0f %s%s", v, prefixes[i], unit)
	case v >= 9.995:
		return fmt.Sprintf("%.1f %s%s", v, prefixes[i], unit)
	}
	return fmt.Sprintf("%.2f %s%s", v, prefixes[i], unit)
}

// shortBps is a rate in at most 5 cells, for the matrix: "1.2G", "812M",
// "45k", "0".
func shortBps(bps float64) string {
	if bps < 0.5 || math.IsNaN(bps) {
		return "0"
	}
	prefixes := []string{"", "k", "M", "G", "T", "P"}
	i := 0
	for bps >= 999.5 && i < len(prefixes)-1 {
		bps /= 1000
		i++
	}
	if bps < 9.95 && i > 0 {
		return fmt.Sprintf("%.1f%s", bps, prefixes[i])
	}
	return fmt.Sprintf("%.0f%s", bps, prefixes[i])
}

// FormatNs formats a duration given in ns compactly: "850ns", "12µs",
// "1.5ms", "2.0s".
func FormatNs(ns int64) string {
	d := float64(ns)
	switch {
	case ns <= 0:
		return "0"
	case ns < 1_000:
		return fmt.Sprintf("%dns", ns)
	case ns < 10_000:
		return fmt.Sprintf("%.1fµs", d/1e3)
	case ns < 1_000_000:
		return fmt.Sprintf("%.0fµs", d/1e3)
	case ns < 10_000_000:
		return fmt.Sprintf("%.1fms", d/1e6)
	case ns < 1_000_000_000:
		return fmt.Sprintf("%.0fms", d/1e6)
	}
	return fmt.Sprintf("%.1fs", d/1e9)
}

// FormatBytes formats a size with a binary prefix: "1.5 GiB".
func FormatBytes(b uint64) string {
	v := float64(b)
	prefixes := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(prefixes)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", b)
	}
	return fmt.Sprintf("%.1f %s", v, prefixes[i])
}

// ago says how long before now t was: "4s", "3m10s", "2h5m".
func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// clock formats a wall time as the header and the since columns show it.
func clock(t time.Time) string {
	if t.IsZero() {
		return "--:--:--"
	}
	return t.Format("15:04:05")
}

var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// Sparkline draws vs (oldest first) as width cells of block characters,
// the last width values, scaled from 0 to the largest value shown. Missing
// history on the left is blank.
func Sparkline(vs []float64, width int) string {
	if width <= 0 {
		return ""
	}
	if len(vs) > width {
		vs = vs[len(vs)-width:]
	}
	hi := 0.0
	for _, v := range vs {
		hi = max(hi, v)
	}
	var b strings.Builder
	b.WriteString(strings.Repeat(" ", width-len(vs)))
	for _, v := range vs {
		if hi <= 0 || v <= 0 || math.IsNaN(v) {
			b.WriteRune(' ')
			continue
		}
		i := int(math.Ceil(v/hi*float64(len(sparkBlocks)))) - 1
		b.WriteRune(sparkBlocks[min(max(i, 0), len(sparkBlocks)-1)])
	}
	return b.String()
}

// fit pads or cuts s (which may hold ANSI styles) to exactly w cells.
func fit(s string, w int) string {
	if w <= 0 {
		return ""
	}
	n := ansi.StringWidth(s)
	if n > w {
		return ansi.Truncate(s, w, "…")
	}
	return s + strings.Repeat(" ", w-n)
}

// rfit right-aligns s in w cells, cutting it if needed.
func rfit(s string, w int) string {
	n := ansi.StringWidth(s)
	if n > w {
		return ansi.Truncate(s, w, "…")
	}
	return strings.Repeat(" ", w-n) + s
}

// pct formats a share as a percentage.
func pct(part, whole int64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(part)/float64(whole))
}
