package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/gpu/nvml"
	"github.com/vccl-go/vccl/ui"
)

// fakeProm answers /api/v1/query with canned vectors, by the metric the
// query names; ranks lists the ranks that have series.
func fakeProm(t *testing.T, ranks *atomic.Value) *httptest.Server {
	vec := func(w http.ResponseWriter, samples ...string) {
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[%s]}}`, strings.Join(samples, ","))
	}
	s := func(labels string, v float64) string {
		return fmt.Sprintf(`{"metric":{%s},"value":[1700000000.0,"%g"]}`, labels, v)
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		live := ranks.Load().([]int)
		link := func(rank int, dir string) string {
			return fmt.Sprintf(`"rank":"%d","peer":"%d","channel":"0","path":"0","direction":"%s"`, rank, (rank+1)%4, dir)
		}
		var out []string
		switch {
		case strings.HasPrefix(q, "count by (rank)"):
			for _, r := range live {
				out = append(out, s(fmt.Sprintf(`"rank":"%d"`, r), 3))
			}
		case strings.Contains(q, "rate(vccl_link_bytes_total"):
			for _, r := range live {
				out = append(out, s(link(r, "send"), 1.5e9), s(link(r, "recv"), 1.4e9))
			}
		case strings.HasPrefix(q, "histogram_quantile(0.99"):
			for _, r := range live {
				out = append(out, s(link(r, "send"), 0.000035))
			}
		case strings.HasPrefix(q, "histogram_quantile(0.5"):
			for _, r := range live {
				out = append(out, s(link(r, "send"), 0.000012), s(link(r, "recv"), math.NaN()) /* Prometheus says NaN without samples */)
			}
		case strings.Contains(q, "vccl_link_backlog_wrs"):
			for _, r := range live {
				out = append(out, s(fmt.Sprintf(`"rank":"%d","peer":"%d","channel":"0","path":"0"`, r, (r+1)%4), 2))
			}
		case strings.HasPrefix(q, "max by (collective) (sum by (collective, rank) (vccl_collectives_total"):
			out = append(out, s(`"collective":"allreduce"`, 8120))
		case strings.HasPrefix(q, "avg by (collective)"):
			out = append(out, s(`"collective":"allreduce"`, 812))
		case strings.Contains(q, "vccl_bus_bandwidth_bytes_per_second_sum"):
			out = append(out, s(`"collective":"allreduce"`, 1.23e9))
		case strings.HasPrefix(q, "max by (collective) (sum by (collective, rank) (rate(vccl_collective_exec"):
			out = append(out, s(`"collective":"allreduce"`, 120e-6))
		case strings.Contains(q, "vccl_collective_exec_time_seconds_sum"):
			out = append(out, s(`"collective":"allreduce"`, 1200e-6))
		}
		vec(w, out...)
	}))
}

func TestPrometheus(t *testing.T) {
	var ranks atomic.Value
	ranks.Store([]int{0, 1, 2, 3})
	hs := fakeProm(t, &ranks)
	defer hs.Close()
	p, err := NewPrometheus(PromConfig{URL: hs.URL, Every: 20 * time.Millisecond, Selector: `job="vccl"`})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for name, q := range p.PromQueries() {
		if !strings.Contains(q, `job="vccl"`) || strings.Contains(q, ",}") {
			t.Errorf("query %s lacks the selector: %s", name, q)
		}
	}
	f := waitFrame(t, p, "4 ranks up with links", func(f *ui.Frame) bool { return f.Up() == 4 && len(f.Links) == 8 })
	var send ui.Link
	for _, l := range f.Links {
		if l.Rank == 1 && l.Dir == "send" {
			send = l
		}
	}
	if send.BandwidthBps != 1.5e9 || send.LatP99Ns != 35_000 || send.LatP50Ns != 12_000 || send.Backlog != 2 || send.Peer != 2 {
		t.Errorf("link 1->2: %+v", send)
	}
	if len(f.Colls) != 1 {
		t.Fatalf("collectives %+v", f.Colls)
	}
	if c := f.Colls[0]; c.Op != "allreduce" || c.Calls != 8120 || c.PerSec != 812 || c.BusBWBps != 1.23e9 || c.AvgTimeNs != 1_200_000 || c.SkewNs != 120_000 {
		t.Errorf("collective %+v", c)
	}
	// Rank 3's series go stale: it is down, since then.
	ranks.Store([]int{0, 1, 2})
	f = waitFrame(t, p, "rank 3 down", func(f *ui.Frame) bool { r, _ := f.RankState(3); return !r.Up && f.Up() == 3 })
	for _, l := range f.Links {
		if l.Rank == 3 {
			t.Errorf("a link of the down rank: %+v", l)
		}
	}
}

func TestPrometheusDown(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	url := hs.URL
	hs.Close()
	p, err := NewPrometheus(PromConfig{URL: url, Every: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitFrame(t, p, "a note on the error", func(f *ui.Frame) bool {
		return len(f.Notes) > 0 && strings.Contains(f.Notes[0], "prometheus:")
	})
	if _, err := NewPrometheus(PromConfig{URL: "nohost"}); err == nil {
		t.Error("a URL without a host was taken")
	}
}

func TestReplay(t *testing.T) {
	r, err := NewReplay(ReplayConfig{Dir: "../../cmd/vccl-top/testdata/trace", Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start, end := r.Span()
	if end-start < int64(time.Second) {
		t.Fatalf("trace spans %v", time.Duration(end-start))
	}
	f := r.Frame()
	if f.Size != 4 || f.Source != "replay" || f.Replay == nil || f.Replay.PosNs != start {
		t.Fatalf("first frame: %+v", f)
	}
	// One second in: every rank up, traffic on the ring, collectives.
	if err := r.AdvanceTo(start + int64(time.Second)); err != nil {
		t.Fatal(err)
	}
	f = r.Frame()
	if f.Up() != 4 {
		t.Errorf("a second in: %d ranks up: %+v", f.Up(), f.Ranks)
	}
	var bw float64
	for _, l := range f.Links {
		bw += l.BandwidthBps
	}
	if bw <= 0 {
		t.Errorf("a second in: no bandwidth: %+v", f.Links)
	}
	if len(f.Colls) == 0 || f.Colls[0].PerSec <= 0 || f.Colls[0].BusBWBps <= 0 || f.Colls[0].SkewEstimated {
		t.Errorf("a second in: collectives %+v", f.Colls)
	}
	// At the end: rank 3, killed, is down since its last record.
	if err := r.AdvanceTo(end); err != nil {
		t.Fatal(err)
	}
	f = r.Frame()
	r3, _ := f.RankState(3)
	if r3.Up || r3.Since.IsZero() || !f.Replay.Done || f.Up() != 3 {
		t.Errorf("at the end: rank 3 %+v, %d up, replay %+v", r3, f.Up(), f.Replay)
	}
	// Speed and pause.
	if s := r.SetSpeed(1e6); s != MaxSpeed {
		t.Errorf("speed %g", s)
	}
	r.SetPaused(true)
	if f := r.Frame(); !f.Replay.Paused {
		t.Error("not paused")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.WaitAnalyzed(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReplayClock(t *testing.T) {
	r, err := NewReplay(ReplayConfig{Dir: "../../cmd/vccl-top/testdata/trace", Speed: 64, Tick: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f := waitFrame(t, r, "the end of the replay", func(f *ui.Frame) bool { return f.Replay.Done })
	if f.Up() != 3 {
		t.Errorf("%d up at the end", f.Up())
	}
}

func TestReplayErrors(t *testing.T) {
	if _, err := NewReplay(ReplayConfig{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "no Arrow traces") {
		t.Errorf("empty dir: %v", err)
	}
	if _, err := NewReplay(ReplayConfig{Dir: "/nonexistent"}); err == nil {
		t.Error("a missing dir was taken")
	}
}

type fakeSampler struct {
	n   int
	err error
}

func (f *fakeSampler) Devices() []nvml.Device {
	return []nvml.Device{{Index: 0, Name: "NVIDIA H200"}, {Index: 1, Name: "NVIDIA H200"}}
}

func (f *fakeSampler) Sample() (nvml.Sample, error) {
	f.n++
	if f.err != nil {
		return nvml.Sample{}, f.err
	}
	return nvml.Sample{GPUs: []nvml.GPU{
		{Index: 0, NVLinkOK: true, NVLinkTXBps: 100e9 * float64(f.n), NVLinkRXBps: 90e9, PCIeTXBps: 1e9, UtilGPU: 70, UtilMemory: 30},
		{Index: 1, Err: errors.New("GPU is lost")},
	}}, nil
}

type staticSource struct{ f ui.Frame }

func (s staticSource) Frame() ui.Frame { return s.f }
func (s staticSource) Close() error    { return nil }

func TestWithGPUs(t *testing.T) {
	src := WithGPUs(staticSource{ui.Frame{Source: "live"}}, NVML(&fakeSampler{}), 10*time.Millisecond)
	defer src.Close()
	f := waitFrame(t, src, "GPUs", func(f *ui.Frame) bool { return len(f.GPUs) == 2 && f.GPUs[0].NVLinkTxBps >= 200e9 })
	g := f.GPUs[0]
	if g.Name != "NVIDIA H200" || g.UtilPct != 70 || g.MemUtilPct != 30 || g.NVLinkRxBps != 90e9 || g.PCIeTxBps != 1e9 {
		t.Errorf("GPU 0: %+v", g)
	}
	if f.GPUs[1].Err != "GPU is lost" {
		t.Errorf("GPU 1: %+v", f.GPUs[1])
	}
	if _, ok := src.(ui.Player); ok {
		t.Error("a live source became a player")
	}
	// A reader that fails: no GPUs (no panel), a note.
	bad := WithGPUs(staticSource{ui.Frame{}}, NVML(&fakeSampler{err: errors.New("nvml: no usable NVIDIA management library")}), time.Hour)
	defer bad.Close()
	if f := bad.Frame(); f.GPUs != nil || len(f.Notes) != 1 {
		t.Errorf("failing reader: %+v", f)
	}
	b, _ := json.Marshal(f)
	if !strings.Contains(string(b), `"nvlink_tx_bps"`) {
		t.Errorf("json: %s", b)
	}
}

// The replay reads Parquet traces as it reads Arrow ones, and names the
// job by its id.
func TestReplayParquet(t *testing.T) {
	src := "../../cmd/vccl-top/testdata/trace"
	files, err := arrow.ListFiles(src)
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: %v, %v", src, files, err)
	}
	dir := t.TempDir()
	for _, f := range files {
		if _, err := arrow.ConvertFile(f, filepath.Join(dir, arrow.ConvertedName(f, arrow.FormatParquet)), arrow.FormatParquet); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewReplay(ReplayConfig{Dir: dir, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start, _ := r.Span()
	if err := r.AdvanceTo(start + int64(time.Second)); err != nil {
		t.Fatal(err)
	}
	f := r.Frame()
	var bw float64
	for _, l := range f.Links {
		bw += l.BandwidthBps
	}
	meta, err := arrow.OpenFiles(files[0])
	if err != nil {
		t.Fatal(err)
	}
	job := flowtel.JobID(meta.File().Meta.CommID)
	meta.Close()
	if f.Up() != 4 || bw <= 0 || f.JobID != job {
		t.Errorf("a second into the Parquet replay: %d up, %g B/s, job %q (want %q)", f.Up(), bw, f.JobID, job)
	}
}
