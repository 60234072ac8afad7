package otel

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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// envOtelcol names the OpenTelemetry Collector binary the collector test
// runs; without it the test looks in $VCCL_CACHE (default ~/.cache/vccl)
// for the otelcol-vccl that .ci/setup.d/40-otelcol.sh builds.
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

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// otelcol is a running collector writing the spans it receives to a file.
type otelcol struct {
	grpc, http int
	out        string
	logs       *bytes.Buffer
}

func startCollector(t *testing.T) *otelcol {
	t.Helper()
	bin := collectorBinary(t)
	dir := t.TempDir()
	c := &otelcol{grpc: freePort(t), http: freePort(t), out: filepath.Join(dir, "spans.jsonl"), logs: &bytes.Buffer{}}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
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
`, c.grpc, c.http, c.out)
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
	// Ready when both receivers accept connections.
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for _, port := range []int{c.grpc, c.http} {
		for {
			conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
			if err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("collector not listening on %d after 60s: %v\n%s", port, err, c.logs)
			}
			select {
			case err := <-exited:
				t.Fatalf("collector exited: %v\n%s", err, c.logs)
			case <-tick.C:
			}
		}
	}
	return c
}

// OTLP JSON, as the file exporter writes it: one request per line.
type otlpValue struct {
	StringValue *string         `json:"stringValue"`
	IntValue    json.RawMessage `json:"intValue"` // int64 as a JSON string
	DoubleValue *float64        `json:"doubleValue"`
	BoolValue   *bool           `json:"boolValue"`
}

type otlpKV struct {
	Key   string    `json:"key"`
	Value otlpValue `json:"value"`
}

type otlpSpan struct {
	TraceID      string   `json:"traceId"`
	SpanID       string   `json:"spanId"`
	ParentSpanID string   `json:"parentSpanId"`
	Name         string   `json:"name"`
	Start        string   `json:"startTimeUnixNano"`
	End          string   `json:"endTimeUnixNano"`
	Attributes   []otlpKV `json:"attributes"`
	Events       []struct {
		Name string   `json:"name"`
		Time string   `json:"timeUnixNano"`
		Attr []otlpKV `json:"attributes"`
	} `json:"events"`
	Status struct {
		Code int `json:"code"`
	} `json:"status"`
	service string
}

func (s *otlpSpan) attr(k string) any {
	for _, kv := range s.Attributes {
		if kv.Key != k {
			continue
		}
		v := kv.Value
		switch {
		case v.StringValue != nil:
			return *v.StringValue
		case v.IntValue != nil:
			n, _ := strconv.ParseInt(strings.Trim(string(v.IntValue), `"`), 10, 64)
			return n
		case v.DoubleValue != nil:
			return *v.DoubleValue
		case v.BoolValue != nil:
			return *v.BoolValue
		}
	}
	return nil
}

func nanos(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }

// spans reads the spans the collector wrote so far for service.
func (c *otelcol) spans(t *testing.T, service string) []otlpSpan {
	t.Helper()
	f, err := os.Open(c.out)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []otlpSpan
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var req struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []otlpKV `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Scope struct {
						Name string `json:"name"`
					} `json:"scope"`
					Spans []otlpSpan `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			continue // a line being written
		}
		for _, rs := range req.ResourceSpans {
			svc := ""
			for _, kv := range rs.Resource.Attributes {
				if kv.Key == "service.name" && kv.Value.StringValue != nil {
					svc = *kv.Value.StringValue
				}
			}
			if svc != service {
				continue
			}
			for _, ss := range rs.ScopeSpans {
				if ss.Scope.Name != ScopeName {
					t.Errorf("scope %q", ss.Scope.Name)
				}
				for _, s := range ss.Spans {
					s.service = svc
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// waitSpans polls the collector's output until service has n spans.
func (c *otelcol) waitSpans(t *testing.T, service string, n int) []otlpSpan {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got := c.spans(t, service)
		if len(got) >= n || time.Now().After(deadline) {
			if len(got) != n {
				t.Fatalf("collector has %d spans of %s, want %d\n%s", len(got), service, n, c.logs)
			}
			return got
		}
		<-tick.C
	}
}

func TestCollectorReceivesSpans(t *testing.T) {
	col := startCollector(t)
	for _, proto := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(proto, "/", "_"), func(t *testing.T) {
			port := col.grpc
			if proto != "grpc" {
				port = col.http
			}
			service := "vccl-test-" + strings.ReplaceAll(proto, "/", "-")
			t.Setenv("OTEL_TRACES_EXPORTER", "")
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", fmt.Sprintf("http://127.0.0.1:%d", port))
			t.Setenv("OTEL_SERVICE_NAME", service)
			t.Setenv(EnvWREvents, "1")
			sendToCollector(t, col, service)
		})
	}
}

func sendToCollector(t *testing.T, col *otelcol, service string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exp, err := New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	comm := fakeComm{id: 0xc0ffee, uid: "collector-test-" + service, size: 2}
	exp.AddComm(comm)
	c := flowtel.NewCollector(flowtel.WithMaxIdle(time.Millisecond))
	c.AddSink(exp)
	c.Start()

	// A 2-rank ring all-reduce recorded by two recorders, as two channels'
	// engines would, stamped a moment ago.
	now := flowtel.Monotonic()
	j := ringJob{comm: comm.id, ranks: 2, seq: 42, bytes: 4 << 20, base: now - 10e6, stepNs: 1e6, credit: true}
	for r := range 2 {
		rec := c.NewRecorder()
		for _, x := range j.records(r) {
			rec.Record(&x)
		}
	}
	if err := c.Shutdown(ctx); err != nil { // drains, then shuts the exporter down: flushes over OTLP
		t.Fatal(err)
	}

	spans := col.waitSpans(t, service, 6)
	byID := map[string]*otlpSpan{}
	var colls, steps []*otlpSpan
	for i := range spans {
		s := &spans[i]
		byID[s.SpanID] = s
		switch s.Name {
		case "allreduce":
			colls = append(colls, s)
		case "allreduce.step":
			steps = append(steps, s)
		default:
			t.Errorf("unexpected span %q", s.Name)
		}
	}
	if len(colls) != 2 || len(steps) != 4 {
		t.Fatalf("%d collective and %d step spans, want 2 and 4", len(colls), len(steps))
	}
	wantTrace := traceIDFor(comm.uid, comm.id, 42).String()
	ranks := map[int64]bool{}
	for _, s := range colls {
		if s.TraceID != wantTrace || s.ParentSpanID != "" {
			t.Errorf("collective span trace %s parent %q, want trace %s and no parent", s.TraceID, s.ParentSpanID, wantTrace)
		}
		rank, _ := s.attr("vccl.rank").(int64)
		ranks[rank] = true
		for k, want := range map[string]any{
			"vccl.comm": "00c0ffee", "vccl.coll_seq": int64(42), "vccl.op": "allreduce", "vccl.algo": "ring",
			"vccl.dtype": "float32", "vccl.bytes": int64(4 << 20), "vccl.world_size": int64(2),
		} {
			if got := s.attr(k); got != want {
				t.Errorf("rank %d: %s = %v (%T), want %v", rank, k, got, got, want)
			}
		}
		dur := nanos(s.End) - nanos(s.Start)
		if dur != j.end()-j.base {
			t.Errorf("rank %d: span lasts %d ns, want %d", rank, dur, j.end()-j.base)
		}
		// The spans carry wall-clock times of a moment ago.
		if age := time.Since(time.Unix(0, nanos(s.Start))); age < 0 || age > time.Minute {
			t.Errorf("rank %d: span started %v ago", rank, age)
		}
		algbw, _ := s.attr("vccl.algbw_gbps").(float64)
		busbw, _ := s.attr("vccl.busbw_gbps").(float64)
		if want := float64(j.bytes) / float64(dur); algbw != want || busbw != want {
			t.Errorf("rank %d: algbw %v busbw %v, want %v", rank, algbw, busbw, want)
		}
	}
	if !ranks[0] || !ranks[1] {
		t.Errorf("ranks %v", ranks)
	}
	for _, s := range steps {
		p := byID[s.ParentSpanID]
		if p == nil || p.Name != "allreduce" || s.TraceID != p.TraceID {
			t.Fatalf("step span %s: parent %q is not a collective span of its trace", s.SpanID, s.ParentSpanID)
		}
		if s.attr("vccl.rank") != p.attr("vccl.rank") {
			t.Errorf("step of rank %v under rank %v", s.attr("vccl.rank"), p.attr("vccl.rank"))
		}
		if nanos(s.Start) < nanos(p.Start) || nanos(s.End) > nanos(p.End) {
			t.Errorf("step outside its collective")
		}
		if s.attr("vccl.send_bytes") != int64(2<<20) || s.attr("vccl.recv_bytes") != int64(2<<20) || s.attr("vccl.peer") == nil {
			t.Errorf("step attributes %v", s.Attributes)
		}
		wantEvents := 4
		if s.attr("vccl.rank") == int64(0) && s.attr("vccl.step") == int64(0) {
			wantEvents = 6 // and the credit wait and grant
			if s.attr("vccl.credit_wait_ns") != int64(j.stepNs/4) {
				t.Errorf("credit wait %v", s.attr("vccl.credit_wait_ns"))
			}
		}
		if len(s.Events) != wantEvents {
			t.Errorf("rank %v step %v: %d WR events, want %d", s.attr("vccl.rank"), s.attr("vccl.step"), len(s.Events), wantEvents)
		}
		for _, ev := range s.Events {
			if ts := nanos(ev.Time); ts < nanos(s.Start) || ts > nanos(s.End) {
				t.Errorf("event %s outside its step", ev.Name)
			}
		}
	}
}
