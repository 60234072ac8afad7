package telemetry

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/analyzer"
	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/live"
)

// otelVars are every variable that may ask for spans: tests clear them, so
// that the environment they run in cannot.
var otelVars = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}

// cleanEnv clears the variables the package reads.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, k := range append([]string{EnvDir, EnvAddr}, otelVars...) {
		t.Setenv(k, "")
	}
}

func TestConfigFromEnv(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		want    Config
		wantErr string
	}{
		// Nothing set: the live endpoint on a free port, nothing else.
		{env: nil, want: Config{Live: true}},
		{env: map[string]string{EnvDir: "d", EnvAddr: "off"}, want: Config{Dir: "d", Addr: "off"}},
		{env: map[string]string{EnvAddr: "9400"}, want: Config{Live: true, Addr: "9400"}},
		{env: map[string]string{EnvAddr: "host:port"}, wantErr: EnvAddr},
		// Spans only where the OTEL_* variables ask for them.
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"}, want: Config{Live: true, Spans: true}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: Config{Live: true, Spans: true}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: Config{Live: true, Spans: true}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, want: Config{Live: true, Spans: true}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"}, want: Config{Live: true}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"}, want: Config{Live: true}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: Config{Live: true}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER"},
	} {
		got, err := configFromEnv(func(k string) string { return c.env[k] })
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v: %+v, %v; want an error naming %s", c.env, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || got.Dir != c.want.Dir || got.Addr != c.want.Addr || got.Live != c.want.Live || got.Spans != c.want.Spans {
			t.Errorf("%v: %+v, %v; want %+v", c.env, got, err, c.want)
		}
	}
}

// runAll runs fn on every rank at once.
func runAll(t *testing.T, comms []*collective.Comm, fn func(c *collective.Comm) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(comms))
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(c)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// The registered attacher, from the environment alone: a trace per rank in
// a directory it creates (with a .gitignore), the live endpoints listed in
// endpoints.json and serving Prometheus metrics; Close finishes the traces.
func TestRegisteredAttacher(t *testing.T) {
	cleanEnv(t)
	dir := filepath.Join(t.TempDir(), "trace")
	t.Setenv(EnvDir, dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms, err := collective.NewLocal(ctx, 2, collective.WithTelemetry(true))
	if err != nil {
		t.Fatal(err)
	}
	runAll(t, comms, func(c *collective.Comm) error {
		buf := make([]float32, 4096)
		for range 3 {
			if err := collective.AllReduce(ctx, c, buf, buf, collective.Sum); err != nil {
				return err
			}
		}
		return c.Collector().Flush(ctx)
	})
	eps, err := live.ReadEndpoints(dir)
	if err != nil || len(eps.Endpoints) != 2 || eps.UID != comms[0].UID() {
		t.Fatalf("endpoints.json: %+v, %v", eps, err)
	}
	resp, err := http.Get(eps.Endpoints[0].URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "vccl_collectives_total") {
		t.Errorf("/metrics lacks the Prometheus exporter's metrics:\n%.2000s", body)
	}
	// What a rank serves passes promtool's lint, where promtool is
	// installed (Debian's prometheus package, .ci/setup.d/41-prometheus.sh).
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(string(body))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics on rank 0's /metrics: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not found (apt-get install prometheus): /metrics not linted")
	}
	for _, c := range comms {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The endpoints are down once their communicators are closed.
	if resp, err := http.Get(eps.Endpoints[0].URL + "/v1/info"); err == nil {
		resp.Body.Close()
		t.Errorf("rank 0's endpoint still serves after Close")
	}
	if b, err := os.ReadFile(filepath.Join(dir, ".gitignore")); err != nil || !strings.Contains(string(b), "*") {
		t.Errorf(".gitignore: %q, %v", b, err)
	}
	checkTraces(t, dir, 2)
}

// checkTraces checks that dir holds one finished trace per rank of a job of
// size ranks, which the analyzer reads, with records.
func checkTraces(t *testing.T, dir string, size int) *analyzer.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := analyzer.AnalyzeFiles(ctx, []string{dir}, analyzer.Options{})
	if err != nil {
		t.Fatalf("analyzing %s: %v", dir, err)
	}
	ranks := map[int]int{}
	for _, f := range rep.Job.Files {
		ranks[f.Rank]++
		if !f.Finished || f.Records == 0 {
			t.Errorf("%s: finished %v, %d records", f.Path, f.Finished, f.Records)
		}
	}
	if len(ranks) != size || len(rep.Job.Files) != size {
		t.Errorf("%d trace files of ranks %v, want one for each of %d ranks", len(rep.Job.Files), ranks, size)
	}
	if rep.Job.Records == 0 {
		t.Errorf("the analyzer read no records from %s", dir)
	}
	return rep
}

// With no OTEL_* variable asking, no span exporter starts; with one, it
// does. VCCL_TELEMETRY_ADDR=off: no endpoint.
func TestSpansOnlyWhenAsked(t *testing.T) {
	cleanEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms, err := collective.NewLocal(ctx, 1, collective.WithTelemetry(true), collective.WithTelemetryAttachers(false))
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	env := map[string]string{EnvAddr: "off"}
	e, err := attachEnv(ctx, comms[0], func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if e.Spans != nil || e.Live != nil || e.Arrow != nil || e.Metrics != nil {
		t.Errorf("with nothing asked for: %+v", e)
	}
	if lines := e.Outputs(ctx); len(lines) != 0 {
		t.Errorf("Outputs: %q", lines)
	}
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "localhost:1"
	if e, err = attachEnv(ctx, comms[0], func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if e.Spans == nil {
		t.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT set and no span exporter")
	}
}

// Errors name what is wrong, and fail the communicator's making.
func TestAttachErrors(t *testing.T) {
	cleanEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Setenv(EnvAddr, "127.0.0.1:http")
	_, err := collective.NewLocal(ctx, 2, collective.WithTelemetry(true))
	if err == nil || !strings.Contains(err.Error(), EnvAddr) || !strings.Contains(err.Error(), Name) {
		t.Errorf("NewLocal with %s=127.0.0.1:http: %v, want an error naming the variable and the attacher", EnvAddr, err)
	}
	t.Setenv(EnvAddr, "off")
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	t.Setenv(EnvDir, filepath.Join(file, "trace"))
	_, err = collective.NewLocal(ctx, 1, collective.WithTelemetry(true))
	if err == nil || !strings.Contains(err.Error(), "trace directory") {
		t.Errorf("NewLocal with a trace directory under a file: %v", err)
	}
	// Telemetry off: the package does nothing, and Attach says why it cannot.
	comms, err := collective.NewLocal(ctx, 1, collective.WithTelemetry(false))
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	if _, err := Attach(ctx, comms[0], Config{Live: true}); err == nil || !strings.Contains(err.Error(), "VCCL_TELEMETRY") {
		t.Errorf("Attach with telemetry off: %v", err)
	}
}
