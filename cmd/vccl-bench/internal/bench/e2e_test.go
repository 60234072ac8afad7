package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/internal/testproc"
)

// The acceptance run, scaled down: vccl-bench under the real vcclrun, two
// processes, every result checked.
func TestUnderVcclrun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"github.com/vccl-go/vccl/cmd/vcclrun", "github.com/vccl-go/vccl/cmd/vccl-bench")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	launcher, tool := filepath.Join(dir, "vcclrun"), filepath.Join(dir, "vccl-bench")
	// run returns the job's stdout; its stderr (vcclrun's own lines) only
	// when it fails.
	run := func(t *testing.T, env []string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, launcher, append([]string{"-n", "2", "--", tool}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("vcclrun -n 2 -- vccl-bench %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return string(out)
	}

	t.Run("allreduce", func(t *testing.T) {
		out := run(t, nil, strings.Fields("allreduce -b 8 -e 64K -f 4 -c 1")...)
		// Only rank 0 prints, and vcclrun passes rank 0's stdout bare.
		row := regexp.MustCompile(`^ +(\d+) +(\d+) +float +sum +-1 +([\d.]+) +([\d.]+) +([\d.]+) +(\S+) +([\d.]+) +([\d.]+) +([\d.]+) +(\S+)$`)
		var sizes []string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "[") {
				t.Errorf("a prefixed line on stdout: %q", line)
			}
			m := row.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			sizes = append(sizes, m[1])
			if m[6] != "0" || m[10] != "0" {
				t.Errorf("#wrong %s out of place, %s in place: %q", m[6], m[10], line)
			}
		}
		if got := strings.Join(sizes, " "); got != "8 32 128 512 2048 8192 32768" {
			t.Errorf("rows for sizes %q:\n%s", got, out)
		}
		for _, want := range []string{"# nThread 1 nGpus 1 minBytes 8 maxBytes 65536 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0\n",
			"# Out of bounds values : 0 OK", "# Avg bus bandwidth    : ", "transport shm", "# Collective test concluded: vccl-bench allreduce\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in\n%s", want, out)
			}
		}
	})

	t.Run("allgather-tcp-json", func(t *testing.T) {
		out := run(t, []string{"VCCL_TRANSPORT=tcp"}, strings.Fields("allgather -b 1K -e 16K -f 4 -n 3 -w 1 --json --telemetry on")...)
		var rep Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		if rep.Ranks != 2 || rep.Wrong != 0 || len(rep.Results) != 3 || !rep.Telemetry || rep.RankInfo[0].Transport != "tcp" {
			t.Errorf("report: %+v", rep)
		}
		for _, r := range rep.Results {
			if r.OutOfPlace.BusBW <= 0 || r.InPlace == nil || r.InPlace.Wrong != 0 {
				t.Errorf("result %+v", r)
			}
		}
	})
}

// A parser written for nccl-tests' output (bench/nccl-tests-parse.py: a
// regular expression per row, the footer's lines) reads vccl-bench's table
// under vcclrun and finds the figures of the same run's JSON document,
// within the table's rounding.
func TestNCCLTestsParserReadsTable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	python := testproc.Binary(t, "python3", "VCCL_PYTHON", "apt-get install python3")
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"github.com/vccl-go/vccl/cmd/vcclrun", "github.com/vccl-go/vccl/cmd/vccl-bench")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, args := range []string{"allreduce -b 8 -e 1M -f 8 -d float", "allgather -b 1K -e 64K -f 8 -d half -c 0", "sendrecv -b 8 -e 4K -f 8 -d int32"} {
		t.Run(strings.Fields(args)[0], func(t *testing.T) {
			jsonPath := filepath.Join(dir, "report.json")
			cmd := exec.CommandContext(ctx, filepath.Join(dir, "vcclrun"), append(append([]string{"-n", "2", "--", filepath.Join(dir, "vccl-bench")}, strings.Fields(args)...), "--json-file", jsonPath)...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			table, err := cmd.Output()
			if err != nil {
				t.Fatalf("vccl-bench %s: %v\n%s%s", args, err, table, stderr.String())
			}
			parse := exec.CommandContext(ctx, python, "../../../../bench/nccl-tests-parse.py")
			parse.Stdin = strings.NewReader(string(table))
			parsed, err := parse.Output()
			if err != nil {
				t.Fatalf("nccl-tests-parse.py: %v", err)
			}
			var got struct {
				Rows []struct {
					Size       int64          `json:"size"`
					Count      int            `json:"count"`
					Type       string         `json:"type"`
					RedOp      string         `json:"redop"`
					Root       int            `json:"root"`
					OutOfPlace *parsedMeasure `json:"out_of_place"`
					InPlace    *parsedMeasure `json:"in_place"`
				} `json:"rows"`
				AvgBusBW    float64 `json:"avg_busbw"`
				OutOfBounds *int64  `json:"out_of_bounds"`
			}
			if err := json.Unmarshal(parsed, &got); err != nil {
				t.Fatalf("%v: %s", err, parsed)
			}
			b, err := os.ReadFile(jsonPath)
			if err != nil {
				t.Fatal(err)
			}
			var rep Report
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			if len(got.Rows) != len(rep.Results) || len(got.Rows) == 0 {
				t.Fatalf("parsed %d rows, the JSON has %d:\n%s", len(got.Rows), len(rep.Results), table)
			}
			for i, r := range rep.Results {
				p := got.Rows[i]
				if p.Size != r.Size || p.Count != r.Count || p.Type != r.Type || p.RedOp != r.RedOp || p.Root != r.Root {
					t.Errorf("row %d: parsed %d %d %s %s %d, JSON %d %d %s %s %d", i, p.Size, p.Count, p.Type, p.RedOp, p.Root, r.Size, r.Count, r.Type, r.RedOp, r.Root)
				}
				p.OutOfPlace.check(t, fmt.Sprintf("%d bytes out of place", r.Size), &r.OutOfPlace)
				if (p.InPlace == nil) != (r.InPlace == nil) {
					t.Errorf("%d bytes: in place parsed %v, JSON %v", r.Size, p.InPlace, r.InPlace)
				} else if p.InPlace != nil {
					p.InPlace.check(t, fmt.Sprintf("%d bytes in place", r.Size), r.InPlace)
				}
			}
			if math.Abs(got.AvgBusBW-rep.AvgBusBW) > 1e-5*rep.AvgBusBW {
				t.Errorf("avg busbw parsed %v, JSON %v", got.AvgBusBW, rep.AvgBusBW)
			}
			if got.OutOfBounds == nil || *got.OutOfBounds != max(rep.Wrong, 0) {
				t.Errorf("out of bounds parsed %v, JSON wrong %d", got.OutOfBounds, rep.Wrong)
			}
			wantType := map[string]string{"allreduce": "float", "allgather": "half", "sendrecv": "int32"}[strings.Fields(args)[0]]
			if rep.Type != wantType {
				t.Errorf("type %q, want nccl-tests' %q", rep.Type, wantType)
			}
		})
	}
}

// parsedMeasure is a measurement as nccl-tests-parse.py read it.
type parsedMeasure struct {
	TimeUs float64 `json:"time_us"`
	AlgBW  float64 `json:"algbw_gbps"`
	BusBW  float64 `json:"busbw_gbps"`
	Wrong  *int64  `json:"wrong"`
}

// check compares with the JSON's figure within what printing it in its
// column rounds away.
func (p *parsedMeasure) check(t *testing.T, what string, m *Measure) {
	t.Helper()
	for _, f := range []struct {
		name       string
		parsed, js float64
		width      int
	}{{"time", p.TimeUs, m.TimeUs, 7}, {"algbw", p.AlgBW, m.AlgBW, 6}, {"busbw", p.BusBW, m.BusBW, 6}} {
		printed, _ := strconv.ParseFloat(strings.TrimSpace(floatStr(f.js, f.width)), 64)
		// Rounding moves a value by up to half the printed unit: exactly
		// half for a value like 0.925, which float arithmetic may put a
		// hair above it.
		if f.parsed != printed || math.Abs(f.parsed-f.js) > 0.5*math.Max(1e-2, math.Abs(f.js)*1e-2)*(1+1e-9) {
			t.Errorf("%s: %s parsed %v, JSON %v", what, f.name, f.parsed, f.js)
		}
	}
	switch {
	case m.Wrong < 0 && p.Wrong != nil, m.Wrong >= 0 && (p.Wrong == nil || *p.Wrong != m.Wrong):
		t.Errorf("%s: #wrong parsed %v, JSON %d", what, p.Wrong, m.Wrong)
	}
}
