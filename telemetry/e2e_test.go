package telemetry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		if stdout != "[0] 10 all-reduces of 256 KiB on 2 ranks\n" || stderr != "" {
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
		col := startCollector(t)
		service := fmt.Sprintf("vccl-e2e-%d", os.Getpid())
		// Without a scheme, as people write it: plain HTTP.
		env := jobEnv("VCCL_TELEMETRY=1", EnvAddr+"=off", "OTEL_SERVICE_NAME="+service,
			fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=localhost:%d", col.http))
		if stdout, stderr := run(t, env, vcclrun, "-n", "2", "--", example); stderr != "" || !strings.HasPrefix(stdout, "[0] 10 all-reduces") {
			t.Errorf("the job printed\nstdout: %q\nstderr: %q", stdout, stderr)
		}
		// The job has exited, so its spans were sent; the collector
		// writes them out within its flush interval.
		spans := col.waitSpans(t, service, "allreduce", 20)
		perRank := map[string]int{}
		for _, s := range spans {
			perRank[s.rank]++
		}
		if perRank["0"] != 10 || perRank["1"] != 10 {
			t.Errorf("all-reduce spans per rank: %v, want 10 of each", perRank)
		}
	})
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

// The OpenTelemetry Collector that .ci/setup.d/40-otelcol.sh builds, as
// exporter/otel's collector test runs it.
const envOtelcol = "VCCL_OTELCOL"

func collectorBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(envOtelcol); p != "" {
		return p
	}
	cache := os.Getenv("VCCL_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "vccl")
	}
	p := filepath.Join(cache, "otelcol-vccl")
	if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
		return p
	}
	msg := fmt.Sprintf("OpenTelemetry Collector not found at %s (build it with .ci/setup.d/40-otelcol.sh, or set %s)", p, envOtelcol)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// otelcol is a running collector that writes the spans it receives over
// OTLP/HTTP to a file.
type otelcol struct {
	http int
	out  string
	logs *bytes.Buffer
}

func startCollector(t *testing.T) *otelcol {
	t.Helper()
	bin := collectorBinary(t)
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	c := &otelcol{http: port, out: filepath.Join(dir, "spans.jsonl"), logs: &bytes.Buffer{}}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
exporters:
  file:
    path: %s
    flush_interval: 50ms
service:
  telemetry:
    logs:
      level: warn
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, c.http, c.out)
	cfgPath := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config="+cfgPath)
	cmd.Stdout, cmd.Stderr = c.logs, c.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("collector output:\n%s", c.logs)
		}
	})
	// Ready when the receiver accepts connections.
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.http), time.Second)
		if err == nil {
			conn.Close()
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector not listening on %d after 60s: %v\n%s", c.http, err, c.logs)
		}
		select {
		case err := <-exited:
			t.Fatalf("collector exited: %v\n%s", err, c.logs)
		case <-tick.C:
		}
	}
}

// span is what the test reads of a span the collector wrote.
type span struct {
	name, rank string
}

// spans reads the spans named name the collector has written so far for
// service (OTLP JSON, a request per line).
func (c *otelcol) spans(service, name string) []span {
	f, err := os.Open(c.out)
	if err != nil {
		return nil
	}
	defer f.Close()
	type kv struct {
		Key   string `json:"key"`
		Value struct {
			StringValue *string         `json:"stringValue"`
			IntValue    json.RawMessage `json:"intValue"`
		} `json:"value"`
	}
	var out []span
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var req struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []kv `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Spans []struct {
						Name       string `json:"name"`
						Attributes []kv   `json:"attributes"`
					} `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if json.Unmarshal(sc.Bytes(), &req) != nil {
			continue // a line being written
		}
		for _, rs := range req.ResourceSpans {
			svc := ""
			for _, a := range rs.Resource.Attributes {
				if a.Key == "service.name" && a.Value.StringValue != nil {
					svc = *a.Value.StringValue
				}
			}
			if svc != service {
				continue
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if s.Name != name {
						continue
					}
					sp := span{name: s.Name}
					for _, a := range s.Attributes {
						if a.Key == "vccl.rank" {
							sp.rank = strings.Trim(string(a.Value.IntValue), `"`)
						}
					}
					out = append(out, sp)
				}
			}
		}
	}
	return out
}

// waitSpans polls the collector's output until it holds n spans named name
// of service, or fails at a deadline.
func (c *otelcol) waitSpans(t *testing.T, service, name string, n int) []span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got := c.spans(service, name)
		if len(got) >= n || time.Now().After(deadline) {
			if len(got) != n {
				t.Fatalf("the collector has %d %q spans of %s, want %d\n%s", len(got), name, service, n, c.logs)
			}
			return got
		}
		<-tick.C
	}
}
