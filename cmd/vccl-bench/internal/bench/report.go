package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The table is nccl-tests' layout, column for column, so that scripts and
// eyes that read nccl-tests read it too.

func writeHeader(w io.Writer, r *Report) {
	fmt.Fprintf(w, "# vccl-bench %s: %d ranks  minBytes %d maxBytes %d step: %s(factor) warmup iters: %d iters: %d validation: %d telemetry: %s\n",
		r.Collective, r.Ranks, r.MinBytes, r.MaxBytes, strconv.FormatFloat(r.Factor, 'g', -1, 64), r.Warmup, r.Iters, b2i(r.Check), telemetryMode(r))
	fmt.Fprintf(w, "# %s, %s, %d CPUs, %s\n", r.Host, r.Date, r.CPUs, r.GoVersion)
	fmt.Fprintln(w, "#")
	fmt.Fprintln(w, "# Using ranks")
	for _, ri := range r.RankInfo {
		fmt.Fprintf(w, "#  Rank %2d Pid %7d on %10s transport %s cpus %d\n", ri.Rank, ri.Pid, ri.Host, ri.Transport, ri.CPUs)
	}
	fmt.Fprintln(w, "#")
	// The labels centred over their 33-column blocks, which start at 52 and 85.
	fmt.Fprintf(w, "#%s%s%s%s\n", strings.Repeat(" ", 61), "out-of-place", strings.Repeat(" ", 97-74), "in-place")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""), " "))
}

func writeRow(w io.Writer, r Result) {
	fmt.Fprintf(w, "%12d  %12d  %8s  %6s  %6d", r.Size, r.Count, r.Type, r.RedOp, r.Root)
	for _, m := range []*Measure{&r.OutOfPlace, r.InPlace} {
		if m == nil {
			fmt.Fprintf(w, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A")
			continue
		}
		wrong := "N/A"
		if m.Wrong >= 0 {
			wrong = strconv.FormatInt(m.Wrong, 10)
		}
		fmt.Fprintf(w, "  %7s  %6.2f  %6.2f  %6s", timeStr(m.TimeUs), m.AlgBW, m.BusBW, wrong)
	}
	fmt.Fprintln(w)
	if r.OutOfPlace.TelemetryOn != nil {
		writeTelemetryRow(w, r)
	}
	if r.OutOfPlace.NCCL == nil {
		return
	}
	fmt.Fprintf(w, "#%11s  %12s  %8s  %6s  %6s", "NCCL", "", "", "", "")
	for _, m := range []*Measure{&r.OutOfPlace, r.InPlace} {
		if m == nil || m.NCCL == nil {
			fmt.Fprintf(w, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A")
			continue
		}
		ratio := "N/A"
		if m.NCCL.BusBW > 0 {
			ratio = fmt.Sprintf("%.2fx", m.BusBW/m.NCCL.BusBW)
		}
		fmt.Fprintf(w, "  %7s  %6.2f  %6.2f  %6s", timeStr(m.NCCL.TimeUs), m.NCCL.AlgBW, m.NCCL.BusBW, ratio)
	}
	fmt.Fprintln(w)
}

// writeTelemetryRow writes, under a row timed with telemetry off, the same
// calls timed with telemetry on (--telemetry alternate), with the on/off
// busbw ratio where the row has #wrong. The row above is then the "off" one.
func writeTelemetryRow(w io.Writer, r Result) {
	fmt.Fprintf(w, "#%11s  %12s  %8s  %6s  %6s", "telem. on", "", "", "", "")
	for _, m := range []*Measure{&r.OutOfPlace, r.InPlace} {
		if m == nil || m.TelemetryOn == nil {
			fmt.Fprintf(w, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A")
			continue
		}
		on := m.TelemetryOn
		ratio := "N/A"
		if m.BusBW > 0 {
			ratio = fmt.Sprintf("%.3fx", on.BusBW/m.BusBW)
		}
		fmt.Fprintf(w, "  %7s  %6.2f  %6.2f  %6s", timeStr(on.TimeUs), on.AlgBW, on.BusBW, ratio)
	}
	fmt.Fprintln(w)
}

func telemetryMode(r *Report) string {
	if r.Alternate {
		return "alternate (rows: off; '# telem. on' rows: on, busbw on/off)"
	}
	return onOff(r.Telemetry)
}

// timeStr keeps the column 7 wide, as nccl-tests does.
func timeStr(us float64) string {
	switch {
	case us >= 10000:
		return fmt.Sprintf("%7.0f", us)
	case us >= 100:
		return fmt.Sprintf("%7.1f", us)
	}
	return fmt.Sprintf("%7.2f", us)
}

func writeFooter(w io.Writer, r *Report) {
	switch {
	case r.Wrong < 0:
		fmt.Fprintln(w, "# Out of bounds values : N/A (not checked: -c 0)")
	case r.Wrong == 0:
		fmt.Fprintln(w, "# Out of bounds values : 0 OK")
	default:
		fmt.Fprintf(w, "# Out of bounds values : %d FAILED\n", r.Wrong)
	}
	fmt.Fprintf(w, "# Avg bus bandwidth    : %.6g \n", r.AvgBusBW)
	if r.Telemetry {
		fmt.Fprintf(w, "# Telemetry records    : %d kept, %d dropped (all ranks)\n", r.Records, r.RecordsDropped)
	}
	fmt.Fprintln(w, "#")
}

// WriteJSON writes the report as one indented JSON document.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
