package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/vccl-go/vccl/collective"
)

// The table is nccl-tests' output, line for line where nccl-tests has the
// line (its header lines, type names, columns, number formats and
// footer), so that scripts and eyes that read nccl-tests read it too.
// What nccl-tests does not print goes on comment lines of its own.

// NCCLTypeName is dt as nccl-tests names it in its type column (float,
// half, double, bfloat16, int32, ...).
func NCCLTypeName(dt collective.Datatype) string {
	switch dt {
	case collective.Float16:
		return "half"
	case collective.Float32:
		return "float"
	case collective.Float64:
		return "double"
	}
	return dt.String()
}

// testName is what nccl-tests' "Collective test starting" line names.
func testName(r *Report) string { return "vccl-bench " + r.Collective }

func writeHeader(w io.Writer, r *Report) {
	fmt.Fprintf(w, "# Collective test starting: %s\n", testName(r))
	// Each rank is a process with one device (nccl-tests under mpirun
	// with -g 1); the step is always a factor.
	fmt.Fprintf(w, "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %s(factor) warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0 unalign: 0\n",
		r.MinBytes, r.MaxBytes, strconv.FormatFloat(r.Factor, 'g', -1, 64), r.Warmup, r.Iters, b2i(r.Check))
	fmt.Fprintf(w, "# vccl-bench %s: %d ranks on %s, %s, %d CPUs, %s; telemetry: %s\n",
		r.Collective, r.Ranks, r.Host, r.Date, r.CPUs, r.GoVersion, telemetryMode(r))
	fmt.Fprintln(w, "#")
	fmt.Fprintln(w, "# Using devices")
	for _, ri := range r.RankInfo {
		// nccl-tests' line; a rank of host buffers has device -1.
		bus, what := "host", fmt.Sprintf("transport %s, %d CPUs", ri.Transport, ri.CPUs)
		if ri.Device >= 0 {
			bus, what = ri.DeviceBus, ri.DeviceName+", "+what
		}
		fmt.Fprintf(w, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s\n", ri.Rank, 0, ri.Pid, ri.Host, ri.Device, bus, what)
	}
	fmt.Fprintln(w, "#")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "", "")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
}

func writeRow(w io.Writer, r Result) {
	fmt.Fprintf(w, "%12d  %12d  %8s  %6s  %6d", r.Size, r.Count, r.Type, r.RedOp, r.Root)
	for _, m := range []*Measure{&r.OutOfPlace, r.InPlace} {
		if m == nil {
			fmt.Fprintf(w, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A")
			continue
		}
		fmt.Fprintf(w, "  %7s  %6s  %6s", floatStr(m.TimeUs, 7), floatStr(m.AlgBW, 6), floatStr(m.BusBW, 6))
		if m.Wrong >= 0 {
			fmt.Fprintf(w, "  %6d", m.Wrong)
		} else {
			fmt.Fprint(w, "    N/A")
		}
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
		fmt.Fprintf(w, "  %7s  %6s  %6s  %6s", floatStr(m.NCCL.TimeUs, 7), floatStr(m.NCCL.AlgBW, 6), floatStr(m.NCCL.BusBW, 6), ratio)
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
		fmt.Fprintf(w, "  %7s  %6s  %6s  %6s", floatStr(on.TimeUs, 7), floatStr(on.AlgBW, 6), floatStr(on.BusBW, 6), ratio)
	}
	fmt.Fprintln(w)
}

func telemetryMode(r *Report) string {
	with := "records alone"
	if r.Exporters != "" {
		with = "with " + r.Exporters
	}
	if r.Alternate {
		return "alternate (rows: off; '# telem. on' rows: on, " + with + ", busbw on/off)"
	}
	if r.Telemetry && r.Exporters != "" {
		return "on, " + with
	}
	return onOff(r.Telemetry)
}

// floatStr is v in a column width wide as nccl-tests writes it: two
// decimals where they fit, then one, then none, then an exponent.
func floatStr(v float64, width int) string {
	for _, prec := range []int{2, 1, 0} {
		if s := strconv.FormatFloat(v, 'f', prec, 64); len(s) <= width {
			return fmt.Sprintf("%*s", width, s)
		}
	}
	if width >= 7 {
		return fmt.Sprintf("%*.1e", width, v)
	}
	return fmt.Sprintf("%*.0e", width, v)
}

func writeFooter(w io.Writer, r *Report) {
	verdict := "OK"
	if r.Wrong > 0 {
		verdict = "FAILED"
	}
	// nccl-tests counts unchecked results as 0 wrong; say so apart.
	fmt.Fprintf(w, "# %-20s : %d %s\n", "Out of bounds values", max(r.Wrong, 0), verdict)
	if r.Wrong < 0 {
		fmt.Fprintln(w, "# (results not checked: -c 0)")
	}
	// C's %g: six significant digits.
	fmt.Fprintf(w, "# %-20s : %.6g \n", "Avg bus bandwidth", r.AvgBusBW)
	if r.Telemetry {
		fmt.Fprintf(w, "# Telemetry records    : %d kept, %d dropped (all ranks)\n", r.Records, r.RecordsDropped)
	}
	fmt.Fprintln(w, "#")
	fmt.Fprintf(w, "# Collective test concluded: %s\n", testName(r))
}

// WriteJSON writes the report as one indented JSON document.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func writeJSONFile(path string, r *Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteJSON(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
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
