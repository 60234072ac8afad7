package otel

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

func TestOTLPEndpoint(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		grpc    bool
		want    string
		wantErr string
	}{
		{env: nil, want: ""},
		// No scheme: plain HTTP, as the specification and the other SDKs.
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"}, want: "http://localhost:4318/v1/traces"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4317"}, grpc: true, want: "http://localhost:4317"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318", "OTEL_EXPORTER_OTLP_INSECURE": "false"}, want: "https://collector:4318/v1/traces"},
		// The general variable is a base URL; the traces one is used as is.
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otlp.example:443/prefix/"}, want: "https://otlp.example:443/prefix/v1/traces"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/custom", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored:1"}, want: "http://127.0.0.1:9/custom"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "127.0.0.1:9"}, want: "http://127.0.0.1:9"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "unix:///run/otel.sock"}, grpc: true, want: ""},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://x:1"}, wantErr: "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://"}, wantErr: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
	} {
		got, err := otlpEndpoint(func(k string) string { return c.env[k] }, c.grpc)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v (grpc %v): %q, %v; want an error naming %s", c.env, c.grpc, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v (grpc %v): %q, %v; want %q", c.env, c.grpc, got, err, c.want)
		}
	}
}

// An endpoint given without a scheme receives the spans over plain HTTP,
// at the signal's path.
func TestEndpointWithoutSchemeIsPlainHTTP(t *testing.T) {
	got := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type"):
		default:
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	// localhost:PORT, the usual form. (With an IP literal the SDK, which
	// reads the variable too, logs that it cannot parse it as a URL; our
	// endpoint wins all the same.)
	hostport := strings.Replace(strings.TrimPrefix(srv.URL, "http://"), "127.0.0.1", "localhost", 1)
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", hostport) // read by the SDK too
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := New(ctx, WithEnv(os.Getenv))
	if err != nil {
		t.Fatal(err)
	}
	e.AddComm(fakeComm{id: 7, uid: "scheme-less", size: 1})
	now := flowtel.Monotonic()
	begin := flowtel.Record{TsNs: now - 1000, Kind: flowtel.KindCollBegin, Op: flowtel.OpAllReduce, Comm: 7, CollSeq: 1, Bytes: 64, Peer: -1}
	end := begin
	end.TsNs, end.Kind = now, flowtel.KindCollEnd
	if err := e.Consume(ctx, []flowtel.Record{begin, end}); err != nil {
		t.Fatal(err)
	}
	if err := e.Shutdown(ctx); err != nil {
		t.Fatalf("exporting to %s: %v", hostport, err)
	}
	select {
	case req := <-got:
		if req != "POST /v1/traces application/x-protobuf" {
			t.Errorf("the receiver got %q, want POST /v1/traces of protobuf", req)
		}
	case <-ctx.Done():
		t.Fatal("no request reached the receiver")
	}
}
