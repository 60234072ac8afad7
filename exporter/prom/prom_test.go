package prom

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
)

type fakeComm struct {
	id   uint32
	size int
}

func (c fakeComm) ID() uint32 { return c.id }
func (c fakeComm) Size() int  { return c.size }

// ringJob is a synthetic ring all-reduce of one rank, as the engine and the
// transports record it: per step a receive and a send, posted and completed.
type ringJob struct {
	comm    uint32
	ranks   int
	seq     uint64
	bytes   uint64
	base    int64
	stepNs  int64
	channel uint16
	parts   uint32 // channel parts the call was split into (0: 1)
	credit  bool   // the first send waits stepNs/4 for credit
}

func (j ringJob) records(rank int) []flowtel.Record {
	n := j.ranks
	steps := 2 * (n - 1)
	chunk := j.bytes / uint64(n)
	next, prev := int32((rank+1)%n), int32((rank-1+n)%n)
	tag := func(r flowtel.Record) flowtel.Record {
		r.Comm, r.Rank, r.CollSeq, r.Channel = j.comm, int32(rank), j.seq, j.channel
		r.Op, r.Algo, r.Dtype = collective.OpAllReduce, collective.AlgoRing, collective.Float32
		return r
	}
	out := []flowtel.Record{tag(flowtel.Record{TsNs: j.base, Kind: flowtel.KindCollBegin, Peer: -1, Bytes: j.bytes, Step: max(j.parts, 1)})}
	for s := range steps {
		t0 := j.base + int64(s)*j.stepNs
		id := j.seq*100 + uint64(s)
		out = append(out,
			tag(flowtel.Record{TsNs: t0, Kind: flowtel.KindWRPost, Peer: prev, QP: uint32(prev) + 1, WrID: flowtel.WRID(id, true), Bytes: chunk, Step: uint32(s), Depth: 1}),
			tag(flowtel.Record{TsNs: t0, Kind: flowtel.KindWRPost, Peer: next, QP: uint32(next) + 1, WrID: flowtel.WRID(id, false), Bytes: chunk, Step: uint32(s), Depth: 2}))
		if j.credit && s == 0 {
			out = append(out,
				tag(flowtel.Record{TsNs: t0, Kind: flowtel.KindCreditWait, Peer: next, QP: uint32(next) + 1, WrID: flowtel.WRID(id, false), Step: uint32(s), Depth: 2}),
				tag(flowtel.Record{TsNs: t0 + j.stepNs/4, Kind: flowtel.KindCreditGrant, Peer: next, QP: uint32(next) + 1, WrID: flowtel.WRID(id, false), Step: uint32(s), Depth: 2}))
		}
		out = append(out,
			tag(flowtel.Record{TsNs: t0 + j.stepNs/2, Kind: flowtel.KindWC, Peer: next, QP: uint32(next) + 1, WrID: flowtel.WRID(id, false), Bytes: chunk, Step: uint32(s), Depth: 1}),
			tag(flowtel.Record{TsNs: t0 + j.stepNs, Kind: flowtel.KindWC, Peer: prev, QP: uint32(prev) + 1, WrID: flowtel.WRID(id, true), Bytes: chunk, Step: uint32(s), Depth: 0}))
	}
	out = append(out, tag(flowtel.Record{TsNs: j.base + int64(steps)*j.stepNs, Kind: flowtel.KindCollEnd, Peer: -1, Bytes: j.bytes}))
	return out
}

// gather returns the collector's metric families by name.
func gather(t *testing.T, c *Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// find returns the metric of family name whose labels include want.
func find(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range mf.Metric {
		have := map[string]string{}
		for _, lp := range m.Label {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	t.Fatalf("no %s with labels %v among %d series", name, want, len(mf.Metric))
	return nil
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestCollectiveMetrics(t *testing.T) {
	c := New()
	c.AddComm(fakeComm{id: 0xab, size: 2})
	j := ringJob{comm: 0xab, ranks: 2, seq: 1, bytes: 8 << 20, base: 1e6, stepNs: 500e3}
	for r := range 2 {
		c.Consume(context.Background(), j.records(r))
	}
	mfs := gather(t, c)
	durNs := float64(2 * j.stepNs)
	algbw := float64(j.bytes) / durNs
	for r := range 2 {
		lv := map[string]string{"comm": "000000ab", "rank": string(rune('0' + r)), "collective": "allreduce", "algorithm": "ring", "message_size": "4MiB"}
		for name, want := range map[string]float64{
			"vccl_algorithm_bandwidth_bytes_per_second": algbw * 1e9,
			"vccl_bus_bandwidth_bytes_per_second":       algbw * 1e9, // 2(n-1)/n = 1 for n = 2
			"vccl_collective_exec_time_seconds":         durNs / 1e9,
		} {
			h := find(t, mfs, name, lv).GetHistogram()
			if h.GetSampleCount() != 1 || !near(h.GetSampleSum(), want) {
				t.Errorf("rank %d %s: count %d sum %v, want 1 and %v", r, name, h.GetSampleCount(), h.GetSampleSum(), want)
			}
		}
		if v := find(t, mfs, "vccl_collective_bytes_total", lv).GetCounter().GetValue(); v != float64(j.bytes) {
			t.Errorf("bytes %v", v)
		}
		lv["status"] = "ok"
		if v := find(t, mfs, "vccl_collectives_total", lv).GetCounter().GetValue(); v != 1 {
			t.Errorf("count %v", v)
		}
	}
	// A failed collective is counted, not timed.
	f := ringJob{comm: 0xab, ranks: 2, seq: 2, bytes: 8 << 20, base: 1e7, stepNs: 500e3}
	recs := f.records(0)
	recs[len(recs)-1].Status = flowtel.StatusError
	c.Consume(context.Background(), recs)
	mfs = gather(t, c)
	lv := map[string]string{"rank": "0", "message_size": "4MiB"}
	if v := find(t, mfs, "vccl_collectives_total", map[string]string{"rank": "0", "status": "error"}).GetCounter().GetValue(); v != 1 {
		t.Errorf("errors %v", v)
	}
	if n := find(t, mfs, "vccl_collective_exec_time_seconds", lv).GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("failed collective timed: %d samples", n)
	}
	if st := c.Stats(); st.Collectives != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestLinkMetrics(t *testing.T) {
	c := New(WithWorldSize(2))
	j := ringJob{comm: 1, ranks: 2, seq: 1, bytes: 1 << 20, base: 1000, stepNs: 1e6, credit: true}
	c.Consume(context.Background(), j.records(0))
	c.Consume(context.Background(), []flowtel.Record{
		{TsNs: 5e6, Kind: flowtel.KindFailover, Comm: 1, Rank: 0, Peer: 1, Path: 1},
		{TsNs: 6e6, Kind: flowtel.KindFailback, Comm: 1, Rank: 0, Peer: 1, Path: 0},
		{TsNs: 6e6, Kind: flowtel.KindLinkDown, Comm: 1, Rank: 0, Peer: 1, Path: 0},
		{TsNs: 7e6, Kind: flowtel.KindLost, Rank: 0, Peer: -1, Bytes: 17},
	})
	mfs := gather(t, c)
	link := map[string]string{"comm": "00000001", "rank": "0", "peer": "1", "channel": "0", "path": "0"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range link {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	chunk := float64(j.bytes / 2)
	// Two steps: the peer is both next and prev in a 2-rank ring.
	for _, dir := range []string{"send", "recv"} {
		if v := find(t, mfs, "vccl_link_bytes_total", with("direction", dir)).GetCounter().GetValue(); v != 2*chunk {
			t.Errorf("%s bytes %v, want %v", dir, v, 2*chunk)
		}
		if v := find(t, mfs, "vccl_link_wrs_total", with("direction", dir, "status", "ok")).GetCounter().GetValue(); v != 2 {
			t.Errorf("%s WRs %v", dir, v)
		}
	}
	sendLat := find(t, mfs, "vccl_link_wr_latency_seconds", with("direction", "send")).GetHistogram()
	recvLat := find(t, mfs, "vccl_link_wr_latency_seconds", with("direction", "recv")).GetHistogram()
	if sendLat.GetSampleCount() != 2 || !near(sendLat.GetSampleSum(), 2*0.5e-3) ||
		recvLat.GetSampleCount() != 2 || !near(recvLat.GetSampleSum(), 2*1e-3) {
		t.Errorf("latency send %d/%v recv %d/%v", sendLat.GetSampleCount(), sendLat.GetSampleSum(), recvLat.GetSampleCount(), recvLat.GetSampleSum())
	}
	// 0.5ms falls in the (256µs, 1024µs] bucket.
	for _, b := range sendLat.Bucket {
		want := uint64(0)
		if b.GetUpperBound() >= 0.5e-3 {
			want = 2
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if v := find(t, mfs, "vccl_link_backlog_wrs", link).GetGauge().GetValue(); v != 0 {
		t.Errorf("backlog %v", v)
	}
	if v := find(t, mfs, "vccl_link_credit_wait_seconds_total", link).GetCounter().GetValue(); !near(v, 0.25e-3) {
		t.Errorf("credit wait %v", v)
	}
	if v := find(t, mfs, "vccl_link_failovers_total", with("path", "1")).GetCounter().GetValue(); v != 1 {
		t.Errorf("failovers %v", v)
	}
	if v := find(t, mfs, "vccl_link_failbacks_total", link).GetCounter().GetValue(); v != 1 {
		t.Errorf("failbacks %v", v)
	}
	if v := find(t, mfs, "vccl_link_down_total", link).GetCounter().GetValue(); v != 1 {
		t.Errorf("link down %v", v)
	}
	if v := mfs["vccl_telemetry_lost_records_total"].Metric[0].GetCounter().GetValue(); v != 17 {
		t.Errorf("lost %v", v)
	}
}

func TestLatencyPairingSurvivesLoss(t *testing.T) {
	c := New()
	wr := func(ts int64, kind flowtel.Kind, seq uint64) flowtel.Record {
		return flowtel.Record{TsNs: ts, Kind: kind, Comm: 1, Peer: 1, QP: 3, WrID: flowtel.WRID(seq, false), Bytes: 10}
	}
	c.Consume(context.Background(), []flowtel.Record{
		wr(100, flowtel.KindWRPost, 1),
		wr(110, flowtel.KindWRPost, 2), // its completion is lost
		wr(120, flowtel.KindWRPost, 3),
		wr(200, flowtel.KindWC, 1),
		wr(400, flowtel.KindWC, 3),
		wr(500, flowtel.KindWC, 4), // its post was lost
	})
	h := find(t, gather(t, c), "vccl_link_wr_latency_seconds", map[string]string{"direction": "send"}).GetHistogram()
	if h.GetSampleCount() != 2 || !near(h.GetSampleSum(), 100e-9+280e-9) {
		t.Errorf("latency count %d sum %v, want 2 and 380ns", h.GetSampleCount(), h.GetSampleSum())
	}
}

func TestSizeBuckets(t *testing.T) {
	want := "0B 1B 4B 16B 64B 256B 1KiB 4KiB 16KiB 64KiB 256KiB 1MiB 4MiB 16MiB 64MiB 256MiB 1GiB 4GiB"
	if got := strings.Join(SizeLabels(), " "); got != want {
		t.Errorf("size labels\n got %s\nwant %s", got, want)
	}
	for _, c := range []struct {
		n    uint64
		want string
	}{{0, "0B"}, {1, "1B"}, {3, "1B"}, {4, "4B"}, {1023, "256B"}, {1024, "1KiB"}, {2 << 20, "1MiB"}, {4 << 20, "4MiB"},
		{4<<30 - 1, "1GiB"}, {4 << 30, "4GiB"}, {1 << 40, "4GiB"}, {math.MaxUint64, "4GiB"}} {
		if got := sizeLabel(sizeBucket(c.n)); got != c.want {
			t.Errorf("size %d: %s, want %s", c.n, got, c.want)
		}
	}
}

func TestCardinalityBounds(t *testing.T) {
	c := New(WithMaxLinks(2), WithMaxComms(1))
	var recs []flowtel.Record
	for peer := int32(1); peer <= 5; peer++ {
		recs = append(recs, flowtel.Record{TsNs: 10, Kind: flowtel.KindWC, Comm: 7, Peer: peer, QP: uint32(peer), WrID: flowtel.WRID(1, false), Bytes: 100})
	}
	recs = append(recs, flowtel.Record{TsNs: 10, Kind: flowtel.KindWC, Comm: 8, Peer: 1, QP: 1, WrID: flowtel.WRID(1, false), Bytes: 100})
	c.Consume(context.Background(), recs)
	mfs := gather(t, c)
	got := map[string]float64{}
	for _, m := range mfs["vccl_link_bytes_total"].Metric {
		l := map[string]string{}
		for _, lp := range m.Label {
			l[lp.GetName()] = lp.GetValue()
		}
		got[l["comm"]+"/"+l["peer"]] += m.GetCounter().GetValue()
	}
	want := map[string]float64{"00000007/1": 100, "00000007/2": 100, "00000007/other": 300, "other/other": 100}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if st := c.Stats(); st.Links != 2 || st.Folded != 4 {
		t.Errorf("stats %+v", st)
	}
}

func TestSplitCollective(t *testing.T) {
	c := New(WithWorldSize(2))
	a := ringJob{comm: 2, ranks: 2, seq: 1, bytes: 1 << 20, base: 1000, stepNs: 1000, parts: 2}
	b := a
	b.channel, b.base = 1, 1500
	c.Consume(context.Background(), append(a.records(0)[:1], b.records(0)[:1]...))
	c.Consume(context.Background(), a.records(0)[1:])
	if st := c.Stats(); st.Collectives != 0 {
		t.Fatal("observed with a part running")
	}
	c.Consume(context.Background(), b.records(0)[1:])
	mfs := gather(t, c)
	lv := map[string]string{"message_size": "1MiB"} // both parts: 2 MiB
	h := find(t, mfs, "vccl_collective_exec_time_seconds", lv).GetHistogram()
	if h.GetSampleCount() != 1 || !near(h.GetSampleSum(), float64(b.base+2*b.stepNs-a.base)/1e9) {
		t.Errorf("exec time count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	if v := find(t, mfs, "vccl_collective_bytes_total", lv).GetCounter().GetValue(); v != 2<<20 {
		t.Errorf("bytes %v", v)
	}

	// A small call in one part is observed at its end; a second end of it
	// is late.
	s := ringJob{comm: 2, ranks: 2, seq: 2, bytes: 64, base: 9000, stepNs: 100}
	c.Consume(context.Background(), s.records(0))
	if find(t, gather(t, c), "vccl_collectives_total", map[string]string{"message_size": "64B", "status": "ok"}).GetCounter().GetValue() != 1 {
		t.Error("a one-part call not observed at its end")
	}
	c.Consume(context.Background(), s.records(0)[len(s.records(0))-1:])
	if st := c.Stats(); st.Late != 1 || st.Collectives != 2 {
		t.Errorf("late end: %+v", st)
	}
}

func TestHandler(t *testing.T) {
	c := New()
	c.Consume(context.Background(), ringJob{comm: 3, ranks: 2, seq: 1, bytes: 4096, base: 1000, stepNs: 1000}.records(0))
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`vccl_collective_exec_time_seconds_bucket{algorithm="ring",collective="allreduce",comm="00000003",message_size="4KiB",rank="0",le="1e-06"} 0`,
		`vccl_link_bytes_total{channel="0",comm="00000003",direction="send",path="0",peer="1",rank="0"} 4096`,
		"# TYPE vccl_telemetry_lost_records_total counter",
		"go_goroutines",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// A real job: two ranks in one process, telemetry on.
func TestLocalJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	col := flowtel.NewCollector(flowtel.WithMaxIdle(time.Millisecond))
	c := New()
	col.AddSink(c)
	col.Start()
	defer col.Shutdown(ctx)
	comms, err := collective.NewLocal(ctx, 2, collective.WithCollector(col), collective.WithTransport("loop"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range comms {
		c.AddComm(cm)
	}
	runAllReduces(ctx, t, comms, 3, 1<<16)
	if err := col.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mfs := gather(t, c)
	for r := range 2 {
		lv := map[string]string{"rank": string(rune('0' + r)), "collective": "allreduce", "message_size": "256KiB"}
		if n := find(t, mfs, "vccl_bus_bandwidth_bytes_per_second", lv).GetHistogram().GetSampleCount(); n != 3 {
			t.Errorf("rank %d: %d busbw samples, want 3", r, n)
		}
		if v := find(t, mfs, "vccl_link_bytes_total", map[string]string{"rank": string(rune('0' + r)), "direction": "send"}).GetCounter().GetValue(); v < 3*(1<<18)/2 {
			t.Errorf("rank %d sent %v bytes", r, v)
		}
	}
}

func runAllReduces(ctx context.Context, t *testing.T, comms []*collective.Comm, times, count int) {
	t.Helper()
	errs := make(chan error, len(comms))
	for _, cm := range comms {
		go func() {
			buf := make([]float32, count)
			for range times {
				if err := collective.AllReduce(ctx, cm, buf, buf, collective.Sum); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range comms {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// dashboard is the Grafana dashboard in deploy/grafana.
const dashboardPath = "../../deploy/grafana/vccl.json"

// dashboardExprs returns the PromQL expressions of the dashboard's panels.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	if len(out) < 10 {
		t.Fatalf("dashboard has %d queries", len(out))
	}
	return out
}

// dashboardVariableSelectors returns the series selectors of the
// dashboard's variables: X of each label_values(X, label).
func dashboardVariableSelectors(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	lv := regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`)
	var out []string
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := lv.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("dashboard variable query %q: want label_values(SELECTOR, LABEL)", v.Definition)
		}
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatal("dashboard has no variable queries")
	}
	return out
}

// Every metric the dashboard queries is one the collector exports.
func TestDashboardMetricNames(t *testing.T) {
	ch := make(chan *prometheus.Desc, 64)
	go func() { New().Describe(ch); close(ch) }()
	names := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("desc %s", d)
		}
		names[m[1]] = true
	}
	used := map[string]bool{}
	for _, e := range dashboardExprs(t) {
		for _, n := range regexp.MustCompile(`vccl_[a-z_]+`).FindAllString(e, -1) {
			base := n
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(n, suf); ok && names[b] {
					base = b
				}
			}
			if !names[base] {
				t.Errorf("the dashboard queries %s, which the collector does not export", n)
			}
			used[base] = true
		}
	}
	for n := range names {
		if !used[n] {
			t.Errorf("the dashboard does not show %s", n)
		}
	}
}

// The link latency histogram is summed per batch: its buckets follow
// Prometheus's (an observation equal to a bound counts in that bound's
// bucket; one above the last only in the count).
func TestTimeHistogramBuckets(t *testing.T) {
	for _, tc := range []struct {
		v      float64
		bucket int // -1: above every bound
	}{{0, 0}, {1e-6, 0}, {1.5e-6, 1}, {4e-6, 1}, {4.1e-6, 2}, {timeBuckets[nTimeBuckets-1], nTimeBuckets - 1}, {100, -1}} {
		h := newHistCounts(timeBuckets)
		h.observe(timeBuckets, tc.v)
		for i, n := range h.buckets {
			if want := uint64(btoi(i == tc.bucket)); n != want {
				t.Errorf("observe(%g): bucket %d (le %g) holds %d, want %d", tc.v, i, timeBuckets[i], n, want)
			}
		}
		if h.count != 1 || h.sum != tc.v {
			t.Errorf("observe(%g): count %d sum %g", tc.v, h.count, h.sum)
		}
	}
}

// bucketOf finds the bucket sort.SearchFloat64s does, for every bound,
// values between and around them, and values no histogram should see.
func TestBucketOf(t *testing.T) {
	for _, bounds := range [][]float64{timeBuckets, bwBuckets, {1}, nil} {
		vals := []float64{math.Inf(-1), -1, 0, math.Inf(1), math.NaN(), math.MaxFloat64}
		for _, b := range bounds {
			vals = append(vals, b, math.Nextafter(b, 0), math.Nextafter(b, math.Inf(1)), b*1.5)
		}
		for _, v := range vals {
			if got, want := bucketOf(bounds, v), sort.SearchFloat64s(bounds, v); got != want {
				t.Errorf("bucketOf(%d bounds, %g) = %d, want %d", len(bounds), v, got, want)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A collector folding with a window's fold (WithWindow) exports what one
// folding alone does, and leaves the window as Update would.
func TestWithWindow(t *testing.T) {
	var recs []flowtel.Record
	for seq := range uint64(3) {
		recs = append(recs, ringJob{comm: 4, ranks: 4, seq: seq + 1, bytes: 1 << 20, base: int64(seq+1) * 100_000, stepNs: 1000}.records(1)...)
	}
	recs = append(recs, recs[len(recs)-1]) // a late end: counted by both
	alone, own := New(WithWorldSize(4)), flowtel.NewWindow(flowtel.WindowConfig{})
	win := flowtel.NewWindow(flowtel.WindowConfig{})
	shared := New(WithWorldSize(4), WithWindow(win))
	for _, part := range [][]flowtel.Record{recs[:7], recs[7:]} {
		alone.Consume(context.Background(), part)
		own.Update(part)
		shared.Consume(context.Background(), part)
	}
	a, s := gather(t, alone), gather(t, shared)
	for _, mfs := range []map[string]*dto.MetricFamily{a, s} {
		for _, mf := range mfs {
			for _, m := range mf.Metric {
				if m.Counter != nil {
					m.Counter.CreatedTimestamp = nil // when each was made
				}
			}
		}
	}
	if len(a) == 0 || !reflect.DeepEqual(a, s) {
		for name := range a {
			if !reflect.DeepEqual(a[name], s[name]) {
				t.Errorf("%s differs:\nalone  %v\nshared %v", name, a[name], s[name])
			}
		}
		t.Errorf("%d families alone, %d shared", len(a), len(s))
	}
	if sa, ss := alone.Stats(), shared.Stats(); sa != ss || sa.Late != 1 {
		t.Errorf("stats alone %+v, shared %+v; want equal, 1 late", sa, ss)
	}
	now := recs[len(recs)-1].TsNs
	if w, o := win.SnapshotAt(now), own.SnapshotAt(now); len(o) == 0 || !reflect.DeepEqual(w, o) {
		t.Errorf("window\n%+v\nwant\n%+v", w, o)
	}
}
