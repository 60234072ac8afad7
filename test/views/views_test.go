package views

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/vccl-go/vccl/analyzer"
	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/exporter/otel"
	"github.com/vccl-go/vccl/exporter/prom"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/flowtel/flowteltest"
)

// link is one direction of a connection as a rank records it, over every
// path: rank -> peer for its sends, peer -> rank for its receives.
type link struct {
	rank, peer int32
	ch         uint16
	dir        flowtel.Dir
}

func (l link) String() string { return fmt.Sprintf("%d->%d ch%d %s", l.rank, l.peer, l.ch, l.dir) }

// facts is what a view says of one link.
type facts struct {
	bytes     uint64
	failed    int
	latencies int   // WRs whose latency is known
	p50, p99  int64 // nearest-rank WR latency percentiles
	waitNs    int64 // credit-wait time (sends)
}

func TestViewsAgree(t *testing.T) {
	for _, src := range []struct {
		name string
		recs func(t *testing.T) ([]flowtel.Record, int)
	}{
		{"local job over tcp", localJob},
		{"corpus tbf-mid-4r", corpus("tbf-mid-4r")},
		{"corpus hol-2r", corpus("hol-2r")},
	} {
		t.Run(src.name, func(t *testing.T) {
			recs, world := src.recs(t)
			win := window(recs)
			checkWaits := false
			for l, f := range win {
				checkWaits = checkWaits || f.waitNs > 0
				if f.latencies == 0 {
					t.Errorf("window: link %v has no latency", l)
				}
			}
			if len(win) == 0 {
				t.Fatal("no links in the records")
			}
			t.Logf("%d records, %d link directions, credit waits: %v", len(recs), len(win), checkWaits)

			compare(t, "prometheus", win, promFacts(t, recs, world), func(w, p facts) []string {
				var bad []string
				if w.failed == 0 && w.bytes != p.bytes {
					bad = append(bad, fmt.Sprintf("bytes %d, window %d", p.bytes, w.bytes))
				}
				if w.latencies != p.latencies {
					bad = append(bad, fmt.Sprintf("%d latencies, window %d", p.latencies, w.latencies))
				}
				// A histogram's buckets hold the window's exact
				// percentiles: p50 and p99 are at most its bucket's
				// bound (p.p50: the smallest bound with 50% below),
				// and above the bucket before it.
				if w.p50 > p.p50 || w.p50*4 < p.p50 || w.p99 > p.p99 || w.p99*4 < p.p99 {
					bad = append(bad, fmt.Sprintf("latency buckets p50 ≤%d p99 ≤%d, window %d %d", p.p50, p.p99, w.p50, w.p99))
				}
				if math.Abs(float64(w.waitNs-p.waitNs)) > 1e-6*float64(w.waitNs)+1 {
					bad = append(bad, fmt.Sprintf("credit wait %dns, window %dns", p.waitNs, w.waitNs))
				}
				return bad
			})
			compare(t, "opentelemetry", win, otelFacts(t, recs, world), func(w, o facts) []string {
				var bad []string
				if w.failed == 0 && w.bytes != o.bytes {
					bad = append(bad, fmt.Sprintf("bytes %d, window %d", o.bytes, w.bytes))
				}
				if w.latencies != o.latencies || w.p50 != o.p50 || w.p99 != o.p99 {
					bad = append(bad, fmt.Sprintf("%d latencies p50 %d p99 %d, window %d %d %d", o.latencies, o.p50, o.p99, w.latencies, w.p50, w.p99))
				}
				if w.waitNs > o.waitNs {
					// Waits are counted per step; a link's steps may
					// wait at once, and then count that time twice.
					bad = append(bad, fmt.Sprintf("credit wait %dns, window %dns", o.waitNs, w.waitNs))
				}
				return bad
			})
			compare(t, "analyzer", win, analyzerFacts(t, recs, world), func(w, a facts) []string {
				var bad []string
				if w.bytes != a.bytes {
					bad = append(bad, fmt.Sprintf("bytes %d, window %d", a.bytes, w.bytes))
				}
				if a.latencies > 0 && (w.latencies != a.latencies || !within1(a.p50, w.p50) || !within1(a.p99, w.p99)) {
					bad = append(bad, fmt.Sprintf("%d latencies p50 %d p99 %d, window %d %d %d", a.latencies, a.p50, a.p99, w.latencies, w.p50, w.p99))
				}
				if w.waitNs != a.waitNs {
					bad = append(bad, fmt.Sprintf("credit wait %dns, window %dns", a.waitNs, w.waitNs))
				}
				return bad
			})
		})
	}
}

func within1(got, exact int64) bool {
	return got >= exact && float64(got-exact) <= 0.01*float64(exact)+1
}

// compare checks view's facts against the window's, link by link: a link
// one of them has and the other not is an error too.
func compare(t *testing.T, view string, win, got map[link]facts, check func(w, v facts) []string) {
	t.Helper()
	keys := make([]link, 0, len(win))
	for l := range win {
		keys = append(keys, l)
	}
	for l := range got {
		if _, ok := win[l]; !ok {
			t.Errorf("%s reports link %v, the window does not", view, l)
		}
	}
	slices.SortFunc(keys, func(a, b link) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.peer, b.peer), cmp.Compare(a.ch, b.ch), cmp.Compare(a.dir, b.dir))
	})
	for _, l := range keys {
		v, ok := got[l]
		if !ok {
			t.Errorf("%s has no link %v", view, l)
			continue
		}
		for _, msg := range check(win[l], v) {
			t.Errorf("%s, link %v: %s", view, l, msg)
		}
	}
}

// localJob runs a 3-rank job over TCP on two channels and returns its
// records.
func localJob(t *testing.T) ([]flowtel.Record, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	col := flowtel.NewCollector()
	sink := flowteltest.NewMemorySink()
	col.AddSink(sink)
	col.Start()
	const n = 3
	comms, err := collective.NewLocal(ctx, n, collective.WithCollector(col), collective.WithTransport("tcp"),
		collective.WithChannels(2), collective.WithChunkSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, n)
	for _, c := range comms {
		go func() {
			buf := make([]float32, 1<<18)
			var err error
			for i := 0; i < 4 && err == nil; i++ {
				err = collective.AllReduce(ctx, c, buf, buf, collective.Sum)
			}
			if err == nil {
				err = collective.Broadcast(ctx, c, buf[:1<<12], buf[:1<<12], 0)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range comms {
		c.Close()
	}
	if err := col.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	return sink.Records(), n
}

// corpus returns the records of a stored run, every rank's in its order,
// ranks interleaved in time order.
func corpus(name string) func(t *testing.T) ([]flowtel.Record, int) {
	return func(t *testing.T) ([]flowtel.Record, int) {
		dir := filepath.Join("..", "..", "testdata", "scenarios", name)
		files, err := arrow.ListFiles(dir)
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v", dir, err)
		}
		var all []flowtel.Record
		for _, f := range files {
			recs, err := arrow.ReadAll(f)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, recs...)
		}
		slices.SortStableFunc(all, func(a, b flowtel.Record) int { return cmp.Compare(a.TsNs, b.TsNs) })
		return all, len(files)
	}
}

func window(recs []flowtel.Record) map[link]facts {
	w := flowtel.NewWindow(flowtel.WindowConfig{N: flowtel.MaxWindowN, T: 24 * time.Hour})
	w.Update(recs)
	out := map[link]facts{}
	// One link per path in the window; these jobs use one path.
	for _, s := range w.Snapshot() {
		if s.Completions == 0 && s.CreditWaitNs == 0 {
			continue
		}
		k := link{s.Key.Rank, s.Key.Peer, s.Key.Channel, s.Key.Dir}
		f := out[k]
		f.bytes += s.Bytes
		f.failed += s.Failed
		f.latencies += s.LatencySamples
		f.p50, f.p99 = s.LatP50Ns, s.LatP99Ns
		f.waitNs += s.CreditWaitNs
		out[k] = f
	}
	return out
}

func promFacts(t *testing.T, recs []flowtel.Record, world int) map[link]facts {
	c := prom.New(prom.WithWorldSize(world))
	c.Consume(context.Background(), recs)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[link]facts{}
	key := func(m *dto.Metric, dir flowtel.Dir) link {
		lv := map[string]string{}
		for _, p := range m.Label {
			lv[p.GetName()] = p.GetValue()
		}
		var l link
		fmt.Sscan(lv["rank"], &l.rank)
		fmt.Sscan(lv["peer"], &l.peer)
		fmt.Sscan(lv["channel"], &l.ch)
		l.dir = dir
		if lv["direction"] == "recv" {
			l.dir = flowtel.DirRecv
		}
		return l
	}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			switch mf.GetName() {
			case "vccl_link_bytes_total":
				k := key(m, flowtel.DirSend)
				f := out[k]
				f.bytes += uint64(m.GetCounter().GetValue())
				out[k] = f
			case "vccl_link_wr_latency_seconds":
				k := key(m, flowtel.DirSend)
				f := out[k]
				h := m.GetHistogram()
				f.latencies += int(h.GetSampleCount())
				f.p50, f.p99 = bucketOf(h, 50), bucketOf(h, 99)
				out[k] = f
			case "vccl_link_credit_wait_seconds_total":
				k := key(m, flowtel.DirSend)
				if v := m.GetCounter().GetValue(); v > 0 {
					f := out[k]
					f.waitNs += int64(math.Round(v * 1e9))
					out[k] = f
				}
			}
		}
	}
	return out
}

// bucketOf returns, in ns, the upper bound of the first bucket of h holding
// at least p% of its samples.
func bucketOf(h *dto.Histogram, p int) int64 {
	need := (uint64(p)*h.GetSampleCount() + 99) / 100
	for _, b := range h.Bucket {
		if b.GetCumulativeCount() >= need {
			return int64(math.Round(b.GetUpperBound() * 1e9))
		}
	}
	return math.MaxInt64
}

// keptSpans is an in-memory span exporter whose Shutdown keeps the spans
// (tracetest's forgets them).
type keptSpans struct{ *tracetest.InMemoryExporter }

func (keptSpans) Shutdown(context.Context) error { return nil }

func otelFacts(t *testing.T, recs []flowtel.Record, world int) map[link]facts {
	mem := keptSpans{tracetest.NewInMemoryExporter()}
	e, err := otel.New(context.Background(), otel.WithSpanExporter(mem), otel.WithWorldSize(world), otel.WithWREvents(1),
		otel.WithMaxEventsPerStep(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	e.Consume(context.Background(), recs)
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Unattributed > 0 || st.EventsCapped > 0 {
		t.Fatalf("otel: %d records with no collective, %d events capped: their bytes are in no span", st.Unattributed, st.EventsCapped)
	}
	out := map[link]facts{}
	type wrKey struct {
		rank int32
		qp   int64
		wr   int64
	}
	posts := map[wrKey]time.Time{}
	lats := map[link][]int64{}
	for _, s := range mem.GetSpans() {
		var rank, peer, ch int64
		var send, recv, wait int64
		for _, kv := range s.Attributes {
			switch kv.Key {
			case "vccl.rank":
				rank = kv.Value.AsInt64()
			case "vccl.peer":
				peer = kv.Value.AsInt64()
			case "vccl.channel":
				ch = kv.Value.AsInt64()
			case "vccl.send_bytes":
				send = kv.Value.AsInt64()
			case "vccl.recv_bytes":
				recv = kv.Value.AsInt64()
			case "vccl.credit_wait_ns":
				wait = kv.Value.AsInt64()
			}
		}
		if !strings.HasSuffix(s.Name, ".step") {
			continue
		}
		sk := link{int32(rank), int32(peer), uint16(ch), flowtel.DirSend}
		rk := sk
		rk.dir = flowtel.DirRecv
		if send > 0 || wait > 0 {
			f := out[sk]
			f.bytes += uint64(send)
			f.waitNs += wait
			out[sk] = f
		}
		if recv > 0 {
			f := out[rk]
			f.bytes += uint64(recv)
			out[rk] = f
		}
		for _, ev := range s.Events {
			var qp, wr int64
			dir := flowtel.DirSend
			for _, kv := range ev.Attributes {
				switch kv.Key {
				case "vccl.qp":
					qp = kv.Value.AsInt64()
				case "vccl.wr_id":
					wr = kv.Value.AsInt64()
				case "vccl.dir":
					if kv.Value.AsString() == "recv" {
						dir = flowtel.DirRecv
					}
				}
			}
			k := wrKey{int32(rank), qp, wr}
			switch ev.Name {
			case "wr_post":
				posts[k] = ev.Time
			case "wc":
				if p, ok := posts[k]; ok {
					l := link{int32(rank), int32(peer), uint16(ch), dir}
					lats[l] = append(lats[l], ev.Time.Sub(p).Nanoseconds())
					delete(posts, k)
				}
			}
		}
	}
	for l, v := range lats {
		slices.Sort(v)
		f := out[l]
		f.latencies, f.p50, f.p99 = len(v), nearestRank(v, 50), nearestRank(v, 99)
		out[l] = f
	}
	return out
}

func nearestRank(sorted []int64, p int) int64 {
	return sorted[max((p*len(sorted)+99)/100, 1)-1]
}

func analyzerFacts(t *testing.T, recs []flowtel.Record, world int) map[link]facts {
	a, err := analyzer.New(analyzer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		a.SetWorldSize(r.Comm, world)
		break
	}
	a.Add(recs)
	rep := a.Finish()
	out := map[link]facts{}
	for _, ls := range rep.Links {
		// A link src -> dst: the sender's sends, the receiver's receives.
		if ls.SentBytes > 0 || ls.CreditWaitNs > 0 || ls.LatSamples > 0 {
			out[link{ls.Link.Rank, ls.Link.Peer, uint16(ls.Link.Channel), flowtel.DirSend}] = facts{
				bytes: ls.SentBytes, latencies: int(ls.LatSamples), p50: ls.LatP50Ns, p99: ls.LatP99Ns, waitNs: ls.CreditWaitNs}
		}
		if ls.LandedBytes > 0 {
			out[link{ls.Link.Peer, ls.Link.Rank, uint16(ls.Link.Channel), flowtel.DirRecv}] = facts{bytes: ls.LandedBytes}
		}
	}
	return out
}
