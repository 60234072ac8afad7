package source

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/exporter/arrow/arrowtest"
	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/bounded"
	"github.com/vccl-go/vccl/ui"
)

// vccl-top --replay of a trace whose metadata says world_size = 2^31-1:
// the replay, the analysis and a frame within 5 s and 200 MB.
func TestHostileReplayWorldSize(t *testing.T) {
	bounded.Check(t, bounded.Issue31, func(t *testing.T) {
		dir := arrowtest.TwoRanks(t, math.MaxInt32)
		r, err := NewReplay(ReplayConfig{Dir: dir, Manual: true, Window: flowtel.WindowConfig{N: 64, T: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		_, end := r.Span()
		if err := r.AdvanceTo(end); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		if err := r.WaitAnalyzed(ctx); err != nil {
			t.Fatal(err)
		}
		f := r.Frame()
		if f.Size != 2 || !strings.Contains(strings.Join(f.Notes, "\n"), "out of range") {
			t.Fatalf("frame of %d ranks, notes %q", f.Size, f.Notes)
		}
	})
}

// hostileEndpoint serves /v1/info with the given size, and /v1/stream and
// /metrics as given.
func hostileEndpoint(t *testing.T, size int, stream, metrics http.HandlerFunc) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/info", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(live.Info{Rank: 0, Size: size, UID: "hostile0", CommID: 7})
	})
	if stream != nil {
		mux.HandleFunc("/v1/stream", stream)
	}
	if metrics != nil {
		mux.HandleFunc("/metrics", metrics)
	}
	mux.HandleFunc("/v1/records", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(live.HeaderNext, "0")
		w.Header().Set(live.HeaderPending, "0")
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// jobStore serves a store in which rank 0 published ep as its endpoint.
func jobStore(t *testing.T, ctx context.Context, ep string) string {
	srv, err := bootstrap.Serve(ctx, "127.0.0.1:0", "tok")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	st, err := bootstrap.Dial(ctx, srv.Addr().String(), "tok", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Set(ctx, bootstrap.UIDKey, []byte("hostile0")); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(live.Endpoint{Rank: 0, URL: ep})
	if err := st.Set(ctx, live.StoreKey("hostile0", 0), b); err != nil {
		t.Fatal(err)
	}
	return srv.Addr().String()
}

// once does what vccl-top --once does with a live source: frames until
// every rank answers or wait passes, then one more.
func once(src interface{ Frame() ui.Frame }, wait time.Duration) ui.Frame {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		src.Frame()
		time.Sleep(50 * time.Millisecond)
	}
	return src.Frame()
}

// vccl-top --job --once against an endpoint that answers with a job of
// 2^31-1 ranks: it returns within 5 s and 200 MB, saying what is wrong.
func TestHostileJobSize(t *testing.T) {
	bounded.Check(t, bounded.Issue31, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		ep := hostileEndpoint(t, math.MaxInt32, nil, nil)
		addr := jobStore(t, ctx, ep.URL)
		if _, err := Job(addr, "tok", nil)(ctx); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Fatalf("discovery of a job of 2^31-1 ranks: %v", err)
		}
		l, err := NewLive(LiveConfig{Target: "job", Discover: Job(addr, "tok", nil), NoAnalyzer: true})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		f := once(l, time.Second)
		if f.Size > MaxRanks || len(f.Ranks) > MaxRanks {
			t.Fatalf("a frame of %d ranks (%d rows)", f.Size, len(f.Ranks))
		}
		// endpoints.json saying the same.
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, live.EndpointsFile), []byte(fmt.Sprintf(`{"uid":"x","size":%d,"endpoints":[{"rank":0,"url":%q}]}`, math.MaxInt32, ep.URL)), 0o644)
		if _, err := Dir(dir)(ctx); err == nil {
			t.Fatal("endpoints.json of 2^31-1 ranks accepted")
		}
	})
}

// An endpoint whose stream is one endless line, and whose /metrics never
// ends: the source reads at most its bounds of either, within 5 s and
// 200 MB, and shows the rank down.
func TestHostileStreamAndMetrics(t *testing.T) {
	bounded.Check(t, bounded.Issue31, func(t *testing.T) {
		endless := func(w http.ResponseWriter, r *http.Request) {
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			w.Write([]byte("data: "))
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}
		metrics := func(w http.ResponseWriter, r *http.Request) {
			line := []byte("vccl_collectives_total{collective=\"allreduce\",rank=\"0\"} 1\n")
			for i := 0; r.Context().Err() == nil; i++ {
				if _, err := w.Write(bytes.Replace(line, []byte("allreduce"), []byte(fmt.Sprintf("op%d", i)), 1)); err != nil {
					return
				}
			}
		}
		ep := hostileEndpoint(t, 1, endless, metrics)
		l, err := NewLive(LiveConfig{Target: "hostile", Discover: Targets([]string{ep.URL}), NoAnalyzer: true,
			StaleAfter: 3 * time.Second, MetricsEvery: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		deadline := time.Now().Add(3 * time.Second)
		for {
			f := l.Frame()
			if len(f.Ranks) == 1 && strings.Contains(f.Ranks[0].Err, "longer than") {
				t.Logf("rank 0: %s", f.Ranks[0].Err)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the endless stream is not refused: %+v", f.Ranks)
			}
			time.Sleep(20 * time.Millisecond)
		}
		sc, err := l.scrape(context.Background(), ep.URL+"/metrics")
		if err == nil || sc != nil {
			t.Fatalf("an endless /metrics parsed: %v", err)
		}
	})
}

// Discovery follows only what looks like a live endpoint: no other
// scheme, path, credentials or redirect.
func TestDiscoveredURLsChecked(t *testing.T) {
	for _, u := range []string{"file:///etc/passwd", "http://169.254.169.254/latest/meta-data", "http://user:pw@h:1", "http://h:1/?q", "gopher://h:70", "http://h", "http://:80"} {
		if checkEndpointURL(u) == nil {
			t.Errorf("%q admitted", u)
		}
	}
	for _, u := range []string{"http://10.0.0.1:9100", "http://node7:9100/", "https://[::1]:9100"} {
		if err := checkEndpointURL(u); err != nil {
			t.Errorf("%q refused: %v", u, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := jobStore(t, ctx, "http://169.254.169.254:80/latest/meta-data/")
	if _, err := Job(addr, "tok", nil)(ctx); err == nil || !strings.Contains(err.Error(), "want http://host:port") {
		t.Fatalf("a store naming a metadata URL: %v", err)
	}
	// An endpoint that redirects is not followed.
	followed := false
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed = true }))
	defer target.Close()
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusFound)
	}))
	defer redir.Close()
	addr2 := jobStore(t, ctx, redir.URL)
	if _, err := Job(addr2, "tok", nil)(ctx); err == nil || followed {
		t.Fatalf("a redirecting endpoint: %v (followed %v)", err, followed)
	}
}

// FuzzReadEvents: any stream ends in events and an error, never a panic,
// and no event is larger than the bound.
func FuzzReadEvents(f *testing.F) {
	f.Add([]byte("event: windows\nid: 1\ndata: {\"rank\":0}\n\n"))
	f.Add([]byte("retry: 1000\n\nevent: finding\ndata: [1,\ndata: 2]\n\n"))
	f.Add([]byte("data: " + strings.Repeat("x", 70000)))
	f.Add([]byte("\r\n\r\n:comment\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		n := 0
		err := readEvents(bytes.NewReader(in), func(name, data string) {
			n++
			if len(data) > maxEventBytes {
				t.Fatalf("an event of %d bytes", len(data))
			}
		})
		if err == nil || n > len(in) {
			t.Fatalf("%d events from %d bytes, err %v", n, len(in), err)
		}
	})
}

// FuzzParseScrape: any /metrics body parses or fails, never panics, and
// the collective counters come only from the collective metrics.
func FuzzParseScrape(f *testing.F) {
	f.Add([]byte(fmt.Sprintf(metricsText, 0, 10, 25e9, 0.01)))
	f.Add([]byte("# TYPE vccl_collectives_total counter\nvccl_collectives_total{collective=\"x\"} NaN\n"))
	f.Add([]byte("vccl_bus_bandwidth_bytes_per_second_bucket{le=\"+Inf\"} 1\n"))
	f.Add([]byte("# HELP\n#\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		sc, err := parseScrape(bytes.NewReader(in), time.Unix(0, 0))
		if err != nil {
			return
		}
		if len(sc.ops) > maxSeries {
			t.Fatalf("%d operations", len(sc.ops))
		}
	})
}

// FuzzReplayMeta: traces whose metadata says anything (rank, world size,
// ids, host) replay or are refused, never panic, and never size the view
// beyond MaxRanks.
func FuzzReplayMeta(f *testing.F) {
	f.Add(0, 2, uint32(7), "uid0", "node0", int64(0))
	f.Add(math.MaxInt32, math.MaxInt32, uint32(0), "", "", int64(-1))
	f.Add(-1, -5, ^uint32(0), "\x00", strings.Repeat("h", 300), int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, rank, world int, comm uint32, uid, host string, wall int64) {
		dir := t.TempDir()
		sink, err := arrow.New(arrow.Meta{Rank: rank, WorldSize: world, CommID: comm, CommUID: uid, Host: host, WallUnixNs: wall}, arrow.WithDir(dir))
		if err != nil {
			return
		}
		recs := []flowtel.Record{{TsNs: 1, Kind: flowtel.KindWRPost, Rank: int32(rank), Peer: 1, Comm: comm}, {TsNs: 2, Kind: flowtel.KindWC, Rank: int32(rank), Peer: 1, Comm: comm}}
		sink.Consume(context.Background(), recs)
		if sink.Shutdown(context.Background()) != nil {
			return
		}
		r, err := NewReplay(ReplayConfig{Dir: dir, Manual: true, Window: flowtel.WindowConfig{N: 16, T: time.Second}})
		if err != nil {
			return
		}
		defer r.Close()
		_, end := r.Span()
		r.AdvanceTo(end)
		if fr := r.Frame(); fr.Size > MaxRanks || len(fr.Ranks) > MaxRanks {
			t.Fatalf("a frame of %d ranks", fr.Size)
		}
	})
}
