package live

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/flowtel/flowteltest"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// linkRecords returns n sends of 1 MiB from rank 0 to rank 1, one every
// 1µs from t0, each completing 400ns after its post.
func linkRecords(t0 int64, n int) []flowtel.Record {
	var recs []flowtel.Record
	for i := range n {
		ts := t0 + int64(i)*1000
		post := flowtel.Record{TsNs: ts, Kind: flowtel.KindWRPost, Rank: 0, Peer: 1, QP: 1, Comm: 7,
			WrID: flowtel.WRID(uint64(i), false), Bytes: 1 << 20, Depth: 1}
		wc := post
		wc.TsNs, wc.Kind, wc.Depth = ts+400, flowtel.KindWC, 0
		recs = append(recs, post, wc)
	}
	return recs
}

func newTestServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Info.Size == 0 {
		cfg.Info = Info{Rank: 0, Size: 2, UID: "cafe0123", CommID: 7, Host: "node0", ClockOffsetNs: -5, ClockErrorNs: 2}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET %s: %s %s", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

func TestInfoAndWindows(t *testing.T) {
	fc := flowteltest.NewFakeClock(1_000_000)
	col := flowtel.NewCollector()
	s := newTestServer(t, Config{Clock: fc.Clock(), Collector: col})
	col.AddSink(s.Window())
	col.Start()
	defer col.Shutdown(context.Background())
	rec := col.NewRecorder()
	for _, r := range linkRecords(1_000_000, 100) {
		rec.Record(&r)
	}
	if err := col.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	fc.Set(1_000_000 + 100*1000)

	var info Info
	getJSON(t, s.URL()+"/v1/info", &info)
	if info.Rank != 0 || info.Size != 2 || info.UID != "cafe0123" || info.CommID != 7 || info.Host != "node0" ||
		info.ClockOffsetNs != -5 || info.ClockErrorNs != 2 || info.URL != s.URL() || info.PID != os.Getpid() ||
		info.SchemaVersion != flowtel.SchemaVersion || info.Window.N != flowtel.DefaultWindowN || info.Window.TNs != int64(flowtel.DefaultWindowT) {
		t.Errorf("info %+v", info)
	}
	if info.Telemetry == nil || info.Telemetry.Drained != 200 || len(info.Telemetry.Sinks) != 1 || info.Telemetry.Sinks[0].Records != 200 {
		t.Errorf("telemetry %+v", info.Telemetry)
	}

	var snap Snapshot
	getJSON(t, s.URL()+"/v1/windows", &snap)
	if snap.Rank != 0 || snap.NowNs != 1_000_000+100*1000 || len(snap.Links) != 1 {
		t.Fatalf("snapshot %+v", snap)
	}
	l := snap.Links[0]
	if l.Rank != 0 || l.Peer != 1 || l.Dir != "send" || l.Completions != 100 || l.Bytes != 100<<20 ||
		l.LatencySamples != 100 || l.LatP50Ns != 400 || l.LatP99Ns != 400 || l.BandwidthBps <= 0 {
		t.Errorf("link %+v", l)
	}

	// /metrics: the summary until a handler is installed, then the handler.
	m := getText(t, s.URL()+"/metrics")
	for _, want := range []string{
		`vccl_live_info{rank="0",size="2",uid="cafe0123",host="node0"} 1`,
		"vccl_live_records_drained_total 200",
		`vccl_live_sink_dropped_records_total{sink="0",type="*flowtel.Window"} 0`,
		`vccl_live_link_window_bytes{rank="0",peer="1",channel="0",path="0",dir="send"} 104857600`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, m)
		}
	}
	promtoolCheck(t, m)
	s.SetMetrics(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "from the prom exporter") }))
	if m := getText(t, s.URL()+"/metrics"); m != "from the prom exporter" {
		t.Errorf("/metrics with a handler: %q", m)
	}
	s.SetMetrics(nil)
	if m := getText(t, s.URL()+"/metrics"); !strings.Contains(m, "vccl_live_info") {
		t.Errorf("/metrics after removing the handler: %q", m)
	}

	s.AddInfo("arrow", func() any { return map[string]int{"files": 3} })
	var raw map[string]any
	getJSON(t, s.URL()+"/v1/info", &raw)
	if fmt.Sprint(raw["extra"]) != "map[arrow:map[files:3]]" {
		t.Errorf("extra info: %v", raw["extra"])
	}
	if idx := getText(t, s.URL()+"/"); !strings.Contains(idx, "/v1/stream") {
		t.Errorf("index: %q", idx)
	}
}

// The handler works on its own too (httptest), with a caller's window and
// a metrics handler given up front.
func TestHandler(t *testing.T) {
	win := flowtel.NewWindow(flowtel.WindowConfig{N: 16, T: time.Second})
	win.Update(linkRecords(5000, 3))
	s := newTestServer(t, Config{Window: win, Metrics: http.NotFoundHandler()})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	var snap Snapshot
	getJSON(t, ts.URL+"/v1/windows", &snap)
	if len(snap.Links) != 1 || snap.Links[0].Completions != 3 || snap.Window.N != 16 || snap.NowNs != 5000+2*1000+400 {
		t.Errorf("snapshot %+v", snap)
	}
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics with the handler given: %s", resp.Status)
	}
	resp, err = http.Post(ts.URL+"/v1/info", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/info: %s", resp.Status)
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name, id, data string
}

// readEvents reads server-sent events from r onto a channel, until r ends.
func readEvents(r io.Reader) <-chan sseEvent {
	ch := make(chan sseEvent, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return ch
}

func nextEvent(t *testing.T, ch <-chan sseEvent, name string) sseEvent {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended before a %q event", name)
			}
			if ev.name == name {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %q event", name)
		}
	}
}

func TestStream(t *testing.T) {
	win := flowtel.NewWindow(flowtel.WindowConfig{})
	s := newTestServer(t, Config{Window: win})
	if s.cfg.StreamInterval != 100*time.Millisecond {
		t.Fatalf("default stream interval %v, want 100ms (10 Hz)", s.cfg.StreamInterval)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL()+"/v1/stream?interval=10ms", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := readEvents(resp.Body)

	// Snapshots come one after another, numbered, and show new records.
	var first Snapshot
	ev := nextEvent(t, events, "windows")
	if err := json.Unmarshal([]byte(ev.data), &first); err != nil {
		t.Fatal(err)
	}
	win.Update(linkRecords(1000, 10))
	for {
		var snap Snapshot
		ev := nextEvent(t, events, "windows")
		if err := json.Unmarshal([]byte(ev.data), &snap); err != nil {
			t.Fatal(err)
		}
		if snap.Seq <= first.Seq || ev.id != fmt.Sprint(snap.Seq) {
			t.Fatalf("snapshot %d (id %s) after %d", snap.Seq, ev.id, first.Seq)
		}
		if len(snap.Links) == 1 && snap.Links[0].Completions == 10 {
			break
		}
	}

	// Published events (the analyzer's findings) reach the stream.
	type finding struct {
		Kind string `json:"kind"`
		Peer int    `json:"peer"`
	}
	if err := s.Publish("finding", finding{Kind: "slow_link", Peer: 1}); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, events, "finding")
	if ev.data != `{"kind":"slow_link","peer":1}` {
		t.Errorf("finding event %q", ev.data)
	}
	if err := s.Publish("bad\nname", 1); err == nil {
		t.Error("Publish took an event name with a line break")
	}

	// Close ends the stream.
	closed := make(chan error, 1)
	go func() { closed <- s.Close(testCtx(t)) }()
	deadline := time.After(20 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-events:
		case <-deadline:
			t.Fatal("the stream did not end on Close")
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// A client that does not read misses published events, counted; it never
// slows Publish.
func TestStreamSlowClient(t *testing.T) {
	s := newTestServer(t, Config{Window: flowtel.NewWindow(flowtel.WindowConfig{})})
	conn, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/stream HTTP/1.1\r\nHost: x\r\n\r\n")
	// Wait for the subscription (the response has started).
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("status line %q, %v", line, err)
	}
	start := time.Now()
	big := strings.Repeat("x", 4096)
	for range 10 * streamQueue {
		s.Publish("finding", big)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Publish took %v with a client that does not read", d)
	}
	s.mu.Lock()
	var missed uint64
	for sub := range s.subs {
		missed += sub.missed.Load()
	}
	s.mu.Unlock()
	if missed == 0 {
		t.Error("no missed events counted")
	}
}

func TestStreamInterval(t *testing.T) {
	s := newTestServer(t, Config{Window: flowtel.NewWindow(flowtel.WindowConfig{}), StreamInterval: time.Millisecond})
	if s.cfg.StreamInterval != MinStreamInterval {
		t.Errorf("interval %v, want the minimum %v", s.cfg.StreamInterval, MinStreamInterval)
	}
	for _, q := range []string{"1ms", "fast"} {
		resp, err := http.Get(s.URL() + "/v1/stream?interval=" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("interval=%s: %s", q, resp.Status)
		}
	}
}

func TestResolveAddr(t *testing.T) {
	for _, tc := range []struct {
		in   string
		rank int
		want string
		on   bool
		bad  bool
	}{
		{"", 3, "127.0.0.1:0", true, false},
		{"off", 0, "", false, false},
		{"9100", 2, "127.0.0.1:9102", true, false},
		{":9100", 1, ":9101", true, false},
		{"0.0.0.0:0", 5, "0.0.0.0:0", true, false},
		{"[::1]:8000", 1, "[::1]:8001", true, false},
		{"host:x", 0, "", false, true},
		{"65535", 1, "", false, true},
	} {
		got, on, err := resolveAddr(tc.in, tc.rank)
		if (err != nil) != tc.bad || got != tc.want || on != tc.on {
			t.Errorf("resolveAddr(%q, %d) = %q, %v, %v", tc.in, tc.rank, got, on, err)
		}
	}
}

// Two ranks publish through a real rendezvous store; rank 0 gathers both
// into endpoints.json.
func TestAnnounce(t *testing.T) {
	ctx := testCtx(t)
	srv, err := bootstrap.Serve(ctx, "127.0.0.1:0", "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir0, dir1 := t.TempDir(), t.TempDir() // as if on two hosts
	var servers [2]*Server
	for r := range 2 {
		cl, err := bootstrap.Dial(ctx, srv.Addr().String(), "tok", r)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		dir := dir0
		if r == 1 {
			dir = dir1
		}
		servers[r] = newTestServer(t, Config{Info: Info{Rank: r, Size: 2, UID: "feed", Host: fmt.Sprintf("host%d", r)}, Dir: dir,
			Window: flowtel.NewWindow(flowtel.WindowConfig{})})
		if err := servers[r].Announce(ctx, cl); err != nil {
			t.Fatal(err)
		}
		b, err := cl.Get(ctx, StoreKey("feed", r))
		if err != nil {
			t.Fatal(err)
		}
		var ep Endpoint
		json.Unmarshal(b, &ep)
		if ep != servers[r].Endpoint() {
			t.Errorf("store has %+v for rank %d", ep, r)
		}
	}
	for _, s := range servers {
		if err := s.WaitAnnounced(ctx); err != nil {
			t.Fatal(err)
		}
	}
	eps, err := ReadEndpoints(dir0)
	if err != nil {
		t.Fatal(err)
	}
	if eps.UID != "feed" || eps.Size != 2 || len(eps.Endpoints) != 2 || eps.Endpoints[0] != servers[0].Endpoint() || eps.Endpoints[1] != servers[1].Endpoint() {
		t.Errorf("rank 0's endpoints.json: %+v", eps)
	}
	if eps, err := ReadEndpoints(dir1); err != nil || len(eps.Endpoints) != 1 || eps.Endpoints[0].Rank != 1 {
		t.Errorf("rank 1's endpoints.json: %+v, %v", eps, err)
	}
	// Each endpoint named in the file answers.
	for _, ep := range eps.Endpoints {
		var info Info
		getJSON(t, ep.URL+"/v1/info", &info)
		if info.Rank != ep.Rank {
			t.Errorf("%s answers as rank %d", ep.URL, info.Rank)
		}
	}
}

// Rank 0 waiting for a rank that never comes stops with Close.
func TestAnnounceGatherStopsOnClose(t *testing.T) {
	ctx := testCtx(t)
	srv, err := bootstrap.Serve(ctx, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cl, err := bootstrap.Dial(ctx, srv.Addr().String(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s := newTestServer(t, Config{Info: Info{Rank: 0, Size: 3, UID: "lonely"}, Dir: t.TempDir(), Window: flowtel.NewWindow(flowtel.WindowConfig{})})
	if err := s.Announce(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitAnnounced(ctx); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("WaitAnnounced after Close: %v", err)
	}
}

// Go's function runs until Close, which ends its context and waits for it;
// after Close, Go starts nothing.
func TestGoStopsAtClose(t *testing.T) {
	s := newTestServer(t, Config{Window: flowtel.NewWindow(flowtel.WindowConfig{})})
	started, returned := make(chan struct{}), make(chan struct{})
	s.Go(func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		close(returned)
	})
	<-started
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-returned:
	default:
		t.Fatal("Close returned before the background function did")
	}
	ran := false
	s.Go(func(context.Context) { ran = true })
	if ran {
		t.Error("Go ran a function after Close")
	}
}

// Many writers merging at once, from this process and from others
// (through the lock file), lose no entry.
func TestMergeEndpointsConcurrent(t *testing.T) {
	dir := t.TempDir()
	// An old job's file is replaced.
	if err := MergeEndpoints(dir, "old", 1, Endpoint{Rank: 0, URL: "http://old"}); err != nil {
		t.Fatal(err)
	}
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- MergeEndpoints(dir, "new", n, Endpoint{Rank: r, URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+r)})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	eps, err := ReadEndpoints(dir)
	if err != nil {
		t.Fatal(err)
	}
	if eps.UID != "new" || len(eps.Endpoints) != n {
		t.Fatalf("endpoints %+v", eps)
	}
	for i, ep := range eps.Endpoints {
		if ep.Rank != i || ep.URL != fmt.Sprintf("http://127.0.0.1:%d", 9000+i) {
			t.Errorf("entry %d: %+v", i, ep)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*")); len(m) != 0 {
		t.Errorf("left behind %v", m)
	}
}

// promtoolCheck lints a /metrics body with promtool (Debian's prometheus
// package, which .ci/setup.d/41-prometheus.sh installs), where it is
// installed.
func promtoolCheck(t *testing.T, body string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not found (apt-get install prometheus): /metrics not linted")
		return
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s\n%s", err, out, body)
	}
}
