package analyzer

import (
	"github.com/vccl-go/vccl/flowtel"

	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText writes the findings table (worst first) and the per-collective
// summary. Times are seconds from the start of the trace.
func (r *Report) WriteText(w io.Writer, verbose bool) error {
	var sb strings.Builder
	start := r.Job.StartNs
	rel := func(ns int64) string { return fmt.Sprintf("+%.3fs", float64(ns-start)/1e9) }
	if len(r.Findings) == 0 {
		sb.WriteString("No findings: no link, rank or queue pair stood out.\n")
		if r.BelowFloor > 0 {
			fmt.Fprintf(&sb, "(%d smaller events under the noise floor, each under 1%% of the trace: -set list_below_floor=true lists them)\n", r.BelowFloor)
		}
	} else {
		fmt.Fprintf(&sb, "%d finding(s), worst first:\n", len(r.Findings))
		tw := tabwriter.NewWriter(&sb, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEVERITY\tKIND\tCULPRIT\tFROM\tTO\tIMPACT\tCOLLECTIVES\tSUMMARY")
		for _, f := range r.Findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Severity, f.Kind, f.Culprit(), rel(f.StartNs), rel(f.EndNs),
				fmtDur(f.ImpactNs), collsText(&f), f.Summary)
		}
		tw.Flush()
		if verbose {
			for i, f := range r.Findings {
				fmt.Fprintf(&sb, "\n[%d] %s %s (job %s, path %d)\n", i+1, f.Kind, f.Culprit(), flowtel.JobID(f.Comm), f.Path)
				for _, k := range f.EvidenceKeys() {
					fmt.Fprintf(&sb, "    %-24s %.6g\n", k, f.Evidence[k])
				}
				if f.Blocking != nil {
					b := f.Blocking
					fmt.Fprintf(&sb, "    blocking WR %d on QP %d: %s, coll_seq %s, latency %s\n", b.WrID, b.QP, fmtBytes(b.Bytes), fmtSeq(b.CollSeq), fmtDur(b.LatencyNs()))
					for _, x := range f.Blocked {
						fmt.Fprintf(&sb, "      blocked WR %d: %s, coll_seq %s, latency %s, %s of it behind the blocking WR\n", x.WrID, fmtBytes(x.Bytes), fmtSeq(x.CollSeq), fmtDur(x.LatencyNs()), fmtDur(x.WaitNs))
					}
				}
				if len(f.Related) > 0 {
					fmt.Fprintf(&sb, "    related: %s\n", joinLinks(f.Related))
				}
			}
		}
	}
	if len(r.Collectives) > 0 {
		sb.WriteString("\nCollectives:\n")
		tw := tabwriter.NewWriter(&sb, 2, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "job\top\talgo\tbytes\tcount\tbusbw p50\tbusbw p99\ttime p50\tskew p50\tskew p99\tskew max\t")
		for _, c := range r.Collectives {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", flowtel.JobID(c.Comm), c.Op, c.Algo, fmtBytes(c.Bytes), c.Count,
				fmtBps(c.BusBWP50), fmtBps(c.BusBWP99), fmtDur(c.TimeP50Ns), skewText(c.SkewP50Ns), skewText(c.SkewP99Ns), skewText(c.SkewMaxNs))
		}
		tw.Flush()
	}
	fmt.Fprintf(&sb, "\n%d records", r.Job.Records)
	if len(r.Job.Files) > 0 {
		fmt.Fprintf(&sb, " from %d file(s)", len(r.Job.Files))
	}
	fmt.Fprintf(&sb, ", %.3fs of trace", float64(r.Job.EndNs-r.Job.StartNs)/1e9)
	if r.Job.LostRecords > 0 {
		fmt.Fprintf(&sb, ", %d lost before writing", r.Job.LostRecords)
	}
	sb.WriteString(".\n")
	_, err := io.WriteString(w, sb.String())
	return err
}

func collsText(f *Finding) string {
	if f.NumCollectives == 0 {
		return "-"
	}
	if len(f.Collectives) == 1 && f.NumCollectives == 1 {
		return fmt.Sprint(f.Collectives[0])
	}
	lo, hi := f.Collectives[0], f.Collectives[0]
	for _, s := range f.Collectives {
		lo, hi = min(lo, s), max(hi, s)
	}
	if f.NumCollectives > len(f.Collectives) {
		return fmt.Sprintf("%d (%d-%d…)", f.NumCollectives, lo, hi)
	}
	return fmt.Sprintf("%d (%d-%d)", f.NumCollectives, lo, hi)
}

func skewText(ns int64) string {
	if ns < 0 {
		return "-"
	}
	return fmtDur(ns)
}

// WriteJSON writes the report as one JSON object: findings, collectives,
// job and warnings.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Filter drops the findings below severity min.
func (r *Report) Filter(min Severity) {
	kept := r.Findings[:0]
	for _, f := range r.Findings {
		if f.Severity >= min {
			kept = append(kept, f)
		}
	}
	r.Findings = kept
}
