package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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
	run := func(t *testing.T, env []string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, launcher, append([]string{"-n", "2", "--", tool}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("vcclrun -n 2 -- vccl-bench %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	t.Run("allreduce", func(t *testing.T) {
		out := run(t, nil, strings.Fields("allreduce -b 8 -e 64K -f 4 -c 1")...)
		// vcclrun prefixes each line with its rank; only rank 0 prints.
		row := regexp.MustCompile(`^\[0\] +(\d+) +(\d+) +float32 +sum +-1 +([\d.]+) +([\d.]+) +([\d.]+) +(\S+) +([\d.]+) +([\d.]+) +([\d.]+) +(\S+)$`)
		var sizes []string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "[1]") {
				t.Errorf("rank 1 printed: %q", line)
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
		for _, want := range []string{"# Out of bounds values : 0 OK", "# Avg bus bandwidth    : ", "transport shm"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in\n%s", want, out)
			}
		}
	})

	t.Run("allgather-tcp-json", func(t *testing.T) {
		out := run(t, []string{"VCCL_TRANSPORT=tcp"}, strings.Fields("allgather -b 1K -e 16K -f 4 -n 3 -w 1 --json --telemetry on")...)
		var doc strings.Builder
		for _, line := range strings.Split(out, "\n") {
			if rest, ok := strings.CutPrefix(line, "[0] "); ok {
				doc.WriteString(rest + "\n")
			}
		}
		var rep Report
		if err := json.Unmarshal([]byte(doc.String()), &rep); err != nil {
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
