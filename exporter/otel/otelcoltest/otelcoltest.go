// Package otelcoltest runs the real OpenTelemetry Collector for tests: an
// OTLP receiver (gRPC and HTTP) on 127.0.0.1 whose spans go to a file the
// test reads back, as a user's collector would receive them. The binary is
// the one .ci/setup.d/40-otelcol.sh builds; without it tests skip, saying
// so.
package otelcoltest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/internal/syncbuf"
	"github.com/vccl-go/vccl/internal/testproc"
)

// EnvBinary names the collector binary; without it the one in $VCCL_CACHE
// (default ~/.cache/vccl) that .ci/setup.d/40-otelcol.sh builds is used.
const EnvBinary = "VCCL_OTELCOL"

// Collector is a running collector.
type Collector struct {
	GRPC, HTTP int // the receiver's ports on 127.0.0.1
	out        string
	logs       *syncbuf.Buffer
}

// Start runs a collector until the test ends.
func Start(t testing.TB) *Collector {
	t.Helper()
	cache := os.Getenv("VCCL_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "vccl")
	}
	bin := testproc.Binary(t, "otelcol-vccl", EnvBinary, "build it with bash .ci/setup.d/40-otelcol.sh", filepath.Join(cache, "otelcol-vccl"))
	dir := t.TempDir()
	c := &Collector{GRPC: testproc.FreePort(t), HTTP: testproc.FreePort(t), out: filepath.Join(dir, "spans.jsonl")}
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
`, c.GRPC, c.HTTP, c.out)
	cfgPath := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c.logs = testproc.Start(t, exec.Command(bin, "--config="+cfgPath), testproc.Listening(c.GRPC, c.HTTP))
	return c
}

// Span is a span as the collector wrote it (OTLP JSON).
type Span struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Name         string `json:"name"`
	Start        string `json:"startTimeUnixNano"`
	End          string `json:"endTimeUnixNano"`
	Attributes   []KV   `json:"attributes"`
	Events       []struct {
		Name string `json:"name"`
		Time string `json:"timeUnixNano"`
		Attr []KV   `json:"attributes"`
	} `json:"events"`
	Status struct {
		Code int `json:"code"`
	} `json:"status"`
	Service  string `json:"-"` // its resource's service.name
	Scope    string `json:"-"` // its instrumentation scope's name
	Resource []KV   `json:"-"` // its resource's attributes
}

// KV is an OTLP attribute.
type KV struct {
	Key   string `json:"key"`
	Value struct {
		StringValue *string         `json:"stringValue"`
		IntValue    json.RawMessage `json:"intValue"` // int64 as a JSON string
		DoubleValue *float64        `json:"doubleValue"`
		BoolValue   *bool           `json:"boolValue"`
	} `json:"value"`
}

// Attr returns attribute k as a string, int64, float64 or bool; nil when
// the span has none.
func (s *Span) Attr(k string) any { return attr(s.Attributes, k) }

// ResourceAttr returns attribute k of the span's resource, as Attr does.
func (s *Span) ResourceAttr(k string) any { return attr(s.Resource, k) }

func attr(kvs []KV, k string) any {
	for _, kv := range kvs {
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

// Nanos parses an OTLP time (ns since 1970, as a decimal string).
func Nanos(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }

// Spans returns the spans of service the collector has written so far.
func (c *Collector) Spans(t testing.TB, service string) []Span {
	t.Helper()
	f, err := os.Open(c.out)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Span
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var req struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []KV `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Scope struct {
						Name string `json:"name"`
					} `json:"scope"`
					Spans []Span `json:"spans"`
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
				for _, s := range ss.Spans {
					s.Service, s.Scope, s.Resource = svc, ss.Scope.Name, rs.Resource.Attributes
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// WaitSpans polls the collector's output until service has n spans that
// keep says to count (nil: all), and fails the test if it has another
// number after 30 s.
func (c *Collector) WaitSpans(t testing.TB, service string, n int, keep func(*Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var got []Span
		for _, s := range c.Spans(t, service) {
			if keep == nil || keep(&s) {
				got = append(got, s)
			}
		}
		if len(got) >= n || time.Now().After(deadline) {
			if len(got) != n {
				t.Fatalf("the collector has %d spans of %s, want %d\n%s", len(got), service, n, c.logs.String())
			}
			return got
		}
		<-tick.C
	}
}
