package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/exporter/otel/otelcoltest"
)

// The acceptance runs, with the real programs: the ten-line example and
// vccl-bench under vcclrun, telemetry on by environment alone.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs and starts jobs")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/vccl-go/vccl/cmd/vcclrun", "github.com/vccl-go/vccl/cmd/vccl-bench", "github.com/vccl-go/vccl/examples/telemetry")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	vcclrun, bench, example := filepath.Join(bin, "vcclrun"), filepath.Join(bin, "vccl-bench"), filepath.Join(bin, "telemetry")

	t.Run("example", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "trace")
		stdout, stderr := run(t, jobEnv("VCCL_TELEMETRY=1", EnvDir+"="+dir), vcclrun, "-n", "2", "--", example)
		if stdout != "10 all-reduces of 256 KiB on 2 ranks\n" || !onlyVcclrun(stderr) {
			t.Errorf("the job printed\nstdout: %q\nstderr: %q", stdout, stderr)
		}
		checkTraces(t, dir, 2)
	})

	// With no OTEL_* variable no span exporter starts (were one to, it
	// would try localhost:4318 and, failing, log), and the exporters print
	// nothing: the program's output is its own.
	t.Run("silent", func(t *testing.T) {
		stdout, stderr := run(t, jobEnv("VCCL_TELEMETRY=1"), example)
		if stdout != "10 all-reduces of 256 KiB on 1 ranks\n" || stderr != "" {
			t.Errorf("the program printed\nstdout: %q\nstderr: %q", stdout, stderr)
		}
	})

	t.Run("vccl-bench", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "trace")
		stdout, _ := run(t, jobEnv("VCCL_TELEMETRY=1", EnvDir+"="+dir), vcclrun, "-n", "4", "--", bench, "allreduce", "-b", "64K", "-e", "1M", "-n", "3", "-w", "1")
		if !strings.Contains(stdout, "1048576") {
			t.Errorf("no 1 MiB row in vccl-bench's output:\n%s", stdout)
		}
		checkTraces(t, dir, 4)
	})

	t.Run("otel", func(t *testing.T) {
		col := otelcoltest.Start(t)
		service := fmt.Sprintf("vccl-e2e-%d", os.Getpid())
		// Without a scheme, as people write it: plain HTTP.
		env := jobEnv("VCCL_TELEMETRY=1", EnvAddr+"=off", "OTEL_SERVICE_NAME="+service,
			fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=localhost:%d", col.HTTP))
		if stdout, stderr := run(t, env, vcclrun, "-n", "2", "--", example); !onlyVcclrun(stderr) || !strings.HasPrefix(stdout, "10 all-reduces") {
			t.Errorf("the job printed\nstdout: %q\nstderr: %q", stdout, stderr)
		}
		// The job has exited, so its spans were sent; the collector
		// writes them out within its flush interval.
		spans := col.WaitSpans(t, service, 20, func(s *otelcoltest.Span) bool { return s.Name == "allreduce" })
		perRank := map[any]int{}
		for _, s := range spans {
			perRank[s.Attr("vccl.rank")]++
		}
		if perRank[int64(0)] != 10 || perRank[int64(1)] != 10 {
			t.Errorf("all-reduce spans per rank: %v, want 10 of each", perRank)
		}
	})
}

// onlyVcclrun says whether stderr holds vcclrun's own lines alone (the job
// id and where to watch it): the ranks printed nothing there.
func onlyVcclrun(stderr string) bool {
	for _, l := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, "vcclrun: ") {
			return false
		}
	}
	return true
}

// jobEnv is this process's environment without the variables that steer
// telemetry, plus vars.
func jobEnv(vars ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VCCL_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return append(env, vars...)
}

// run runs a program to completion, within a deadline, and returns what it
// printed.
func run(t *testing.T, env []string, prog string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(prog), strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}
