package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const corpus = "../../../../testdata/scenarios"

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestText(t *testing.T) {
	code, out, errs := run(t, filepath.Join(corpus, "tbf-mid-4r"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"2 finding(s), worst first", "slow_link", "backpressure", "link 2->3 ch0", "Collectives:", "allreduce", "busbw p50"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = run(t, "-v", filepath.Join(corpus, "hol-2r"))
	if code != 0 || !strings.Contains(out, "blocking WR") || !strings.Contains(out, "blocked WR") {
		t.Errorf("-v output:\n%s", out)
	}
	code, out, _ = run(t, filepath.Join(corpus, "clean-4r"))
	if code != 0 || !strings.Contains(out, "No findings") {
		t.Errorf("clean run:\n%s", out)
	}
}

func TestJSON(t *testing.T) {
	code, out, errs := run(t, "--json", filepath.Join(corpus, "straggler-4r"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r struct {
		Findings []struct {
			Kind     string             `json:"kind"`
			Severity string             `json:"severity"`
			Rank     int                `json:"rank"`
			Peer     int                `json:"peer"`
			Channel  int                `json:"channel"`
			Path     int                `json:"path"`
			StartNs  int64              `json:"start_ns"`
			EndNs    int64              `json:"end_ns"`
			Colls    []uint64           `json:"collectives"`
			Evidence map[string]float64 `json:"evidence"`
		} `json:"findings"`
		Collectives []struct {
			Op       string  `json:"op"`
			Count    int     `json:"count"`
			BusBWP50 float64 `json:"busbw_p50_bps"`
			SkewP99  int64   `json:"skew_p99_ns"`
		} `json:"collectives"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if len(r.Findings) != 1 || r.Findings[0].Kind != "straggler" || r.Findings[0].Rank != 3 || r.Findings[0].Severity == "" ||
		len(r.Findings[0].Colls) == 0 || r.Findings[0].Evidence["late_collectives"] != 10 || r.Findings[0].EndNs <= r.Findings[0].StartNs {
		t.Errorf("findings %+v", r.Findings)
	}
	if len(r.Collectives) == 0 || r.Collectives[0].Op != "allreduce" || r.Collectives[0].Count != 30 || r.Collectives[0].BusBWP50 <= 0 || r.Collectives[0].SkewP99 <= 0 {
		t.Errorf("collectives %+v", r.Collectives)
	}
}

func TestHTML(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.html")
	code, out, errs := run(t, "--html", p, filepath.Join(corpus, "tbf-mid-4r"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "HTML report: "+p) {
		t.Errorf("output does not say where the report is:\n%s", out)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, want := range []string{"<!DOCTYPE html>", "<svg", "delivered bandwidth", "bytes in flight", "Rank × peer", "Collective timeline", "backpressure", "slow_link"} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, bad := range []string{"http://", "https://", "<script"} {
		if strings.Contains(strings.ReplaceAll(html, "http://www.w3.org/2000/svg", ""), bad) {
			t.Errorf("report is not self-contained: it holds %q", bad)
		}
	}
}

func TestUsage(t *testing.T) {
	if code, _, errs := run(t); code != 2 || !strings.Contains(errs, "usage: vccl-analyze") {
		t.Errorf("no args: exit %d, %s", code, errs)
	}
	if code, _, _ := run(t, "-h"); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
	if code, _, errs := run(t, "-set", "nope=1", corpus); code != 2 || !strings.Contains(errs, "unknown option") {
		t.Errorf("-set nope: exit %d, %s", code, errs)
	}
	if code, _, errs := run(t, "-set", "slow_link.ratio=2", corpus); code != 2 || !strings.Contains(errs, "slow_link.ratio") {
		t.Errorf("-set out of range: exit %d, %s", code, errs)
	}
	if code, _, errs := run(t, "-min-severity", "loud", corpus); code != 2 || !strings.Contains(errs, "severity") {
		t.Errorf("-min-severity loud: exit %d, %s", code, errs)
	}
	if code, out, _ := run(t, "-list-options"); code != 0 || !strings.Contains(out, "straggler.min_late=2ms") {
		t.Errorf("-list-options: exit %d\n%s", code, out)
	}
	if code, _, errs := run(t, filepath.Join(t.TempDir(), "missing")); code != 1 || !strings.Contains(errs, "missing") {
		t.Errorf("missing trace: exit %d, %s", code, errs)
	}
	// Thresholds and severity filter take effect.
	if code, out, _ := run(t, "-set", "straggler.min_late=40ms", filepath.Join(corpus, "straggler-4r")); code != 0 || !strings.Contains(out, "No findings") {
		t.Errorf("straggler.min_late=40ms still finds:\n%s", out)
	}
	if code, out, _ := run(t, "-min-severity", "critical", filepath.Join(corpus, "hol-2r")); code != 0 || !strings.Contains(out, "hol_blocking") {
		t.Errorf("-min-severity critical:\n%s", out)
	}
}

// Files of two jobs: a warning for the other job's, the rest analysed.
func TestMixedJobs(t *testing.T) {
	code, out, errs := run(t, filepath.Join(corpus, "straggler-4r"), filepath.Join(corpus, "hol-2r"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "another job") || !strings.Contains(out, "straggler") {
		t.Errorf("stderr:\n%s\nstdout:\n%s", errs, out)
	}
	if code, _, errs := run(t, "-q", filepath.Join(corpus, "straggler-4r"), filepath.Join(corpus, "hol-2r")); code != 0 || errs != "" {
		t.Errorf("-q: exit %d, %s", code, errs)
	}
}
