package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteJSON writes f as indented JSON: `vccl-top --once --output json`.
func WriteJSON(w io.Writer, f Frame) error {
	f.Normalize()
	if f.Ranks == nil {
		f.Ranks = []Rank{}
	}
	if f.Links == nil {
		f.Links = []Link{}
	}
	if f.Colls == nil {
		f.Colls = []Coll{}
	}
	if f.Findings == nil {
		f.Findings = []Finding{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(f)
}

// WriteTable writes f as plain tables, for scripts and logs: `vccl-top
// --once --output table`.
func WriteTable(w io.Writer, f Frame) error {
	f.Normalize()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "source %s %s  time %s  ranks %d/%d up\n", f.Source, f.Target, f.Time.Format("2006-01-02T15:04:05.000Z07:00"), f.Up(), max(f.Size, len(f.Ranks)))
	if r := f.Replay; r != nil {
		fmt.Fprintf(w, "replay at %s of %s\n", FormatNs(r.PosNs-r.StartNs), FormatNs(r.EndNs-r.StartNs))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "RANK\tSTATE\tSINCE\tSEND\tRECV\tP99\tBACKLOG\tLOST\tHOST\t")
	tot := totals(&f)
	for _, r := range f.Ranks {
		x := rankTotals{}
		if t := tot[int32(r.Rank)]; t != nil {
			x = *t
		}
		state := "up"
		if !r.Up {
			state = "down"
		}
		since := "-"
		if !r.Since.IsZero() {
			since = r.Since.Format("15:04:05")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t\n", r.Rank, state, since, FormatBps(x.send), FormatBps(x.recv),
			FormatNs(x.p99), x.backlog, r.Lost, r.Host)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "OPERATION\tCALLS\tCALLS/S\tBUSBW\tALGBW\tTIME\tSKEW\t")
	for _, c := range f.Colls {
		skew := FormatNs(c.SkewNs)
		if c.SkewEstimated {
			skew = "~" + skew
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\t%s\t%s\t\n", c.Op, c.Calls, c.PerSec, FormatBps(c.BusBWBps), FormatBps(c.AlgBWBps), FormatNs(c.AvgTimeNs), skew)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "LINK\tDIR\tBANDWIDTH\tP50\tP99\tBACKLOG\tCREDIT\tWRS\t")
	for _, l := range f.Links {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t\n", l.Name(), l.Dir, FormatBps(l.BandwidthBps), FormatNs(l.LatP50Ns), FormatNs(l.LatP99Ns),
			l.Backlog, pct(l.CreditWaitNs, l.WindowNs), l.Completions)
	}
	tw.Flush()
	if len(f.Findings) > 0 {
		fmt.Fprintln(w)
		for _, fd := range f.Findings {
			fmt.Fprintf(w, "%s %s %s: %s\n", fd.Severity, fd.Kind, fd.Culprit(), fd.Summary)
		}
	}
	if len(f.GPUs) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "GPU\tNAME\tUTIL\tNVLINK TX\tNVLINK RX\tPCIE TX\tPCIE RX\t")
		for _, g := range f.GPUs {
			fmt.Fprintf(tw, "%d\t%s\t%.0f%%\t%s\t%s\t%s\t%s\t\n", g.Index, g.Name, g.UtilPct, FormatBps(g.NVLinkTxBps), FormatBps(g.NVLinkRxBps), FormatBps(g.PCIeTxBps), FormatBps(g.PCIeRxBps))
		}
		tw.Flush()
	}
	for _, n := range f.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}
