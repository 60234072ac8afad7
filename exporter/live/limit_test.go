package live

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"github.com/vccl-go/vccl/internal/bounded"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// openStream opens /v1/stream and returns the response (its body open).
func openStream(t *testing.T, ctx context.Context, url string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/stream?interval=10ms", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Past MaxStreams, a stream is refused (503) at once; the streams served
// share one snapshot per MinStreamInterval, so many fast streams cost the
// rank what one does.
func TestStreamsLimited(t *testing.T) {
	bounded.Check(t, bounded.Issue31, func(t *testing.T) {
		ctx := testCtx(t)
		s := newTestServer(t, Config{Window: flowtel.NewWindow(flowtel.WindowConfig{})})
		start := time.Now()
		var open []*http.Response
		defer func() {
			for _, r := range open {
				r.Body.Close()
			}
		}()
		for range MaxStreams {
			r := openStream(t, ctx, s.URL())
			if r.StatusCode != http.StatusOK {
				t.Fatalf("stream %d: %s", len(open), r.Status)
			}
			open = append(open, r)
		}
		for range 20 {
			r := openStream(t, ctx, s.URL())
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
				t.Fatalf("a stream past the limit: %s", r.Status)
			}
		}
		// Every stream reads for 300 ms at 10 ms; the window is read about 30
		// times, not 16 × 30.
		seq0 := s.seq.Load()
		done := make(chan int, len(open))
		readCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		for _, r := range open {
			go func() {
				n := 0
				sc := bufio.NewScanner(r.Body)
				stop := context.AfterFunc(readCtx, func() { r.Body.Close() })
				defer stop()
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "event: windows") {
						n++
					}
				}
				done <- n
			}()
		}
		events := 0
		for range open {
			events += <-done
		}
		open = nil
		snaps := s.seq.Load() - seq0
		if snaps > 60 || events < 2*MaxStreams {
			t.Fatalf("%d streams got %d snapshots but the window was read %d times", MaxStreams, events, snaps)
		}
		t.Logf("%d streams at 10ms for 300ms: %d events, %d snapshots taken", MaxStreams, events, snaps)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v", d)
		}
	})
}

// A kept-alive connection that asks nothing more is closed after the idle
// timeout; at most MaxConns connections are served at once.
func TestIdleAndConnLimits(t *testing.T) {
	s := newTestServer(t, Config{Window: flowtel.NewWindow(flowtel.WindowConfig{}), IdleTimeout: 100 * time.Millisecond})
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /v1/info HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("an idle kept-alive connection was not closed")
	}
	t.Logf("idle connection closed after %v", time.Since(start))

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	s2 := newTestServer(t, Config{Window: flowtel.NewWindow(flowtel.WindowConfig{})})
	for range MaxConns {
		c, err := net.Dial("tcp", s2.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	cl := &http.Client{Timeout: 300 * time.Millisecond}
	if _, err := cl.Get(s2.URL() + "/v1/info"); err == nil {
		t.Fatalf("served a request past %d open connections", MaxConns)
	}
	conns[0].Close()
	cl.Timeout = 5 * time.Second
	r, err := cl.Get(s2.URL() + "/v1/info")
	if err != nil {
		t.Fatalf("no request served once a connection closed: %v", err)
	}
	r.Body.Close()
}

// With a bearer, every path wants it.
func TestBearer(t *testing.T) {
	s := newTestServer(t, Config{Window: flowtel.NewWindow(flowtel.WindowConfig{}), Bearer: "b3arer"})
	for _, path := range []string{"/metrics", "/v1/info", "/v1/windows", "/v1/records", "/v1/stream", "/"} {
		for _, auth := range []string{"", "Bearer wrong", "b3arer"} {
			req, _ := http.NewRequest(http.MethodGet, s.URL()+path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			r.Body.Close()
			if r.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s with %q: %s, want 401", path, auth, r.Status)
			}
		}
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL()+"/v1/info", nil)
	req.Header.Set("Authorization", "Bearer b3arer")
	var info Info
	r, err := http.DefaultClient.Do(req)
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("%v %v", r, err)
	}
	defer r.Body.Close()
	if err := decodeJSON(r.Body, &info); err != nil || !info.Auth {
		t.Fatalf("info %+v, %v", info, err)
	}
}

func decodeJSON(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }
