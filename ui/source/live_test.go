package source

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/analyzer"
	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/ui"
)

// waitFrame polls src until ok holds for its frame, or fails after 10s.
func waitFrame(t *testing.T, src ui.Source, what string, ok func(*ui.Frame) bool) ui.Frame {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f := src.Frame()
		if ok(&f) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("no frame with %s within 10s; last: %+v", what, f)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rankServer is one rank's live endpoint over a window fed with a send
// stream to the next rank, and a Prometheus text /metrics.
type rankServer struct {
	srv *live.Server
	win *flowtel.Window
}

const metricsText = `# TYPE vccl_collectives_total counter
vccl_collectives_total{collective="allreduce",comm="00000007",rank="%[1]d",status="ok",algorithm="ring",message_size="1MiB"} %[2]d
# TYPE vccl_bus_bandwidth_bytes_per_second histogram
vccl_bus_bandwidth_bytes_per_second_bucket{collective="allreduce",comm="00000007",rank="%[1]d",algorithm="ring",message_size="1MiB",le="+Inf"} %[2]d
vccl_bus_bandwidth_bytes_per_second_sum{collective="allreduce",comm="00000007",rank="%[1]d",algorithm="ring",message_size="1MiB"} %[3]g
vccl_bus_bandwidth_bytes_per_second_count{collective="allreduce",comm="00000007",rank="%[1]d",algorithm="ring",message_size="1MiB"} %[2]d
# TYPE vccl_collective_exec_time_seconds histogram
vccl_collective_exec_time_seconds_bucket{collective="allreduce",comm="00000007",rank="%[1]d",algorithm="ring",message_size="1MiB",le="+Inf"} %[2]d
vccl_collective_exec_time_seconds_sum{collective="allreduce",comm="00000007",rank="%[1]d",algorithm="ring",message_size="1MiB"} %[4]g
vccl_collective_exec_time_seconds_count{collective="allreduce",comm="00000007",rank="%[1]d",algorithm="ring",message_size="1MiB"} %[2]d
`

// startRanks serves n ranks' endpoints, each with a window of 100 sends to
// the next rank.
func startRanks(t *testing.T, n int) []*rankServer {
	t.Helper()
	var rs []*rankServer
	for r := range n {
		clk := flowtel.NewClock(0, 0)
		win := flowtel.NewWindow(flowtel.WindowConfig{N: 1024, T: time.Hour}, flowtel.WithWindowClock(clk))
		calls := 100 * (r + 1)
		metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			// Rank r's calls take (1000 + 100r)µs: the skew estimate is
			// the spread, 100(n-1)µs.
			fmt.Fprintf(w, metricsText, r, calls, 2.5e9*float64(calls), float64(calls)*(1000+100*float64(r))/1e6)
			calls += 10
		})
		srv, err := live.New(live.Config{Addr: "127.0.0.1:0", Window: win, Clock: clk, Metrics: metrics,
			Info: live.Info{Rank: r, Size: n, UID: "cafe0123", CommID: 7, Host: "node0"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close(context.Background()) })
		now := clk.Now()
		var recs []flowtel.Record
		const gap = 1000
		for i := range 100 {
			ts := now - 100*gap + int64(i)*gap
			post := flowtel.Record{TsNs: ts, Kind: flowtel.KindWRPost, Rank: int32(r), Peer: int32((r + 1) % n), QP: 1, Comm: 7,
				WrID: flowtel.WRID(uint64(i), false), Bytes: 1 << 20, Depth: 1}
			wc := post
			wc.TsNs, wc.Kind, wc.Depth = ts+400, flowtel.KindWC, 0
			recs = append(recs, post, wc)
		}
		win.Update(recs)
		rs = append(rs, &rankServer{srv: srv, win: win})
	}
	return rs
}

func TestLiveTargets(t *testing.T) {
	rs := startRanks(t, 3)
	var targets []string
	for _, r := range rs {
		targets = append(targets, strings.TrimPrefix(r.srv.URL(), "http://"))
	}
	l, err := NewLive(LiveConfig{Target: "3 targets", Discover: Targets(targets), MetricsEvery: 50 * time.Millisecond,
		StaleAfter: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Every rank's metrics read twice: the skew estimate is the spread of
	// their mean times, 200µs.
	f := waitFrame(t, l, "3 ranks up with links and collectives", func(f *ui.Frame) bool {
		return f.Up() == 3 && len(f.Links) == 3 && len(f.Colls) == 1 && f.Colls[0].PerSec > 0 && f.Colls[0].SkewNs == 200_000
	})
	if f.UID != "cafe0123" || f.Size != 3 || f.Source != "live" {
		t.Errorf("frame: uid %q size %d source %q", f.UID, f.Size, f.Source)
	}
	for _, ln := range f.Links {
		if ln.BandwidthBps <= 0 || ln.Dir != "send" || ln.WindowNs != int64(time.Hour) {
			t.Errorf("link %+v", ln)
		}
	}
	for _, rk := range f.Ranks {
		if rk.Host != "node0" || rk.PID == 0 || rk.Since.IsZero() {
			t.Errorf("rank %+v", rk)
		}
	}
	c := f.Colls[0]
	if c.Op != "allreduce" || c.BusBWBps != 2.5e9 || !c.SkewEstimated {
		t.Errorf("collective %+v", c)
	}

	// A finding published on a rank's stream shows, once.
	fd := analyzer.Finding{Kind: analyzer.KindSlowLink, Severity: analyzer.SeverityWarning, Rank: 1, Peer: 2, Channel: 0,
		StartNs: 5, EndNs: 10, Summary: "slow"}
	waitFrame(t, l, "the finding", func(f *ui.Frame) bool {
		rs[1].srv.Publish("finding", fd)
		rs[2].srv.Publish("findings", []analyzer.Finding{fd})
		return len(f.Findings) == 1 && f.Findings[0].Kind == analyzer.KindSlowLink && !f.Findings[0].Seen.IsZero()
	})

	// Rank 2 dies: it is shown down with since when and why; the others
	// stay up; Frame never waits on it.
	killed := time.Now()
	rs[2].srv.Close(context.Background())
	f = waitFrame(t, l, "rank 2 down", func(f *ui.Frame) bool {
		r2, _ := f.RankState(2)
		return !r2.Up && f.Up() == 2
	})
	r2, _ := f.RankState(2)
	if r2.Since.Before(killed.Add(-time.Second)) || r2.Err == "" {
		t.Errorf("rank 2 down: %+v", r2)
	}
	for _, ln := range f.Links {
		if ln.Rank == 2 {
			t.Errorf("a link of the dead rank: %+v", ln)
		}
	}
	start := time.Now()
	for range 100 {
		l.Frame()
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("100 frames took %v with a rank down", d)
	}
}

func TestLiveStaleRank(t *testing.T) {
	// An endpoint that accepts the stream and then says nothing (a hung
	// process) is down after StaleAfter.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"rank":0,"size":1,"uid":"u","host":"h","pid":1}`)
	})
	mux.HandleFunc("GET /v1/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: windows\ndata: {\"rank\":0,\"links\":[]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	hs := httptest.NewServer(mux)
	defer hs.Close()
	l, err := NewLive(LiveConfig{Discover: Targets([]string{hs.URL}), StaleAfter: 200 * time.Millisecond, NoMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	waitFrame(t, l, "rank 0 up", func(f *ui.Frame) bool { return f.Up() == 1 })
	f := waitFrame(t, l, "rank 0 down", func(f *ui.Frame) bool { return len(f.Ranks) == 1 && !f.Ranks[0].Up })
	if !strings.Contains(f.Ranks[0].Err, "no data for") {
		t.Errorf("err %q", f.Ranks[0].Err)
	}
}

func TestDirAndJobDiscovery(t *testing.T) {
	rs := startRanks(t, 2)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := bootstrap.Serve(ctx, "127.0.0.1:0", "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var sts []*bootstrap.Client
	for r := range rs {
		// Each rank publishes through its own connection: its endpoint's
		// key is bound to its rank.
		st, err := bootstrap.Dial(ctx, srv.Addr().String(), "tok", r)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		sts = append(sts, st)
	}
	if err := sts[0].Set(ctx, bootstrap.UIDKey, []byte("cafe0123")); err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if err := r.srv.Announce(ctx, sts[i]); err != nil && !strings.Contains(err.Error(), "gather") {
			t.Fatal(err)
		}
		if err := live.MergeEndpoints(dir, "cafe0123", 2, r.srv.Endpoint()); err != nil {
			t.Fatal(err)
		}
	}
	for name, disc := range map[string]func(context.Context) (Discovery, error){
		"dir": Dir(dir),
		"job": Job(srv.Addr().String(), "tok", nil),
	} {
		t.Run(name, func(t *testing.T) {
			d, err := disc(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d.UID != "cafe0123" || d.Size != 2 || len(d.Endpoints) != 2 || d.Endpoints[1].URL != rs[1].srv.URL() {
				t.Fatalf("discovery %+v", d)
			}
		})
	}
	if _, err := Job(srv.Addr().String(), "wrong", nil)(ctx); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("a wrong token: %v", err)
	}
}

func TestParseScrapeStandIn(t *testing.T) {
	// The live endpoint's stand-in summary has no collectives: none, no error.
	sc, err := parseScrape(strings.NewReader("# The Prometheus exporter is not attached\nvccl_live_window_lost_records 0\n"), time.Now())
	if err != nil || len(sc.ops) != 0 {
		t.Fatalf("stand-in: %v %+v", err, sc)
	}
}

// The ranks of the real tbf run (link 2->3 rate limited mid-run) serve
// their records as if they had just written them: the source reads them
// from every endpoint and its analysis names 2->3, and no other link, as
// vccl-analyze does of the trace.
func TestLiveAnalyzerFindings(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "scenarios", "tbf-mid-4r")
	files, err := arrow.ListFiles(dir)
	if err != nil || len(files) != 4 {
		t.Fatalf("%s: %v (%d files)", dir, err, len(files))
	}
	var perRank [][]flowtel.Record
	var last int64
	for _, f := range files {
		recs, err := arrow.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			last = max(last, r.TsNs)
		}
		perRank = append(perRank, recs)
	}
	clk := flowtel.NewClock(0, 0)
	shift := clk.Now() - last // the trace ends now
	var targets []string
	for _, recs := range perRank {
		win := flowtel.NewWindow(flowtel.WindowConfig{}, flowtel.WithWindowClock(clk))
		srv, err := live.New(live.Config{Addr: "127.0.0.1:0", Window: win, Clock: clk,
			Info: live.Info{Rank: int(recs[0].Rank), Size: 4, UID: "tbf", CommID: recs[0].Comm}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close(context.Background()) })
		for i := range recs {
			recs[i].TsNs += shift
		}
		srv.RecordSink().Consume(context.Background(), recs)
		win.Update(recs)
		targets = append(targets, srv.URL())
	}
	l, err := NewLive(LiveConfig{Discover: Targets(targets), NoMetrics: true, AnalyzeEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f := waitFrame(t, l, "a finding on 2->3", func(f *ui.Frame) bool {
		for _, fd := range f.Findings {
			if fd.Rank == 2 && fd.Peer == 3 && fd.Severity >= analyzer.SeverityWarning {
				return true
			}
		}
		return false
	})
	for _, fd := range f.Findings {
		if (fd.Rank != 2 || fd.Peer != 3) && fd.Severity >= analyzer.SeverityWarning || fd.Seen.IsZero() {
			t.Errorf("finding %s %s: %s", fd.Kind, fd.Culprit(), fd.Summary)
		}
	}
}
