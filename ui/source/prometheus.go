package source

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vccl-go/vccl/ui"
)

// PromConfig configures a Prometheus source.
type PromConfig struct {
	// URL of the Prometheus server (http://host:9090).
	URL string
	// Selector narrows every query to one job's series, as a PromQL label
	// matcher list without braces: `job="vccl"` (default: none).
	Selector string
	// Range is the rate window (default 30s: two scrapes at least, at
	// Prometheus' usual 15s).
	Range time.Duration
	// Every is how often the queries run (default 1s).
	Every  time.Duration
	Client *http.Client
	Now    func() time.Time
}

// Prometheus reads a job's metrics (exporter/prom's names) from a
// Prometheus server that scrapes its ranks: one query per metric for the
// whole job, however many ranks it has. Ranks are those with series; a rank
// whose series went stale (Prometheus could not scrape it) is shown down.
type Prometheus struct {
	cfg    PromConfig
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	seq    atomic.Uint64

	mu    sync.Mutex
	frame ui.Frame
	ranks map[int]*ui.Rank
	err   string
}

// NewPrometheus starts querying. Close stops it.
func NewPrometheus(cfg PromConfig) (*Prometheus, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("source: Prometheus URL %q: want http://host:port", cfg.URL)
	}
	if cfg.Range <= 0 {
		cfg.Range = 30 * time.Second
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	p := &Prometheus{cfg: cfg, ranks: map[int]*ui.Rank{}}
	p.frame = ui.Frame{Source: "prometheus", Target: cfg.URL, Time: cfg.Now()}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.loop()
	return p, nil
}

// Close stops querying.
func (p *Prometheus) Close() error {
	p.cancel()
	p.wg.Wait()
	return nil
}

// Frame returns the latest state.
func (p *Prometheus) Frame() ui.Frame {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.frame
	f.Time = p.cfg.Now()
	f.Ranks = slices.Clone(f.Ranks)
	if p.err != "" {
		f.Notes = append(slices.Clone(f.Notes), "prometheus: "+p.err)
	}
	return f
}

func (p *Prometheus) loop() {
	defer p.wg.Done()
	for {
		ctx, cancel := context.WithTimeout(p.ctx, max(p.cfg.Every*2, 3*time.Second))
		err := p.poll(ctx)
		cancel()
		if p.ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		p.err = ""
		if err != nil {
			p.err = shortErr(err)
		}
		p.mu.Unlock()
		p.seq.Add(1)
		if !sleep(p.ctx, p.cfg.Every) {
			return
		}
	}
}

// maxPromBytes bounds one answer of the Prometheus server.
const maxPromBytes = 16 << 20

// sample is one series of an instant vector.
type sample struct {
	labels map[string]string
	value  float64
}

func (p *Prometheus) query(ctx context.Context, q string) ([]sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.URL+"/api/v1/query?"+url.Values{"query": {q}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPromBytes))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Error)
	}
	out := make([]sample, 0, len(r.Data.Result))
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			continue
		}
		out = append(out, sample{labels: s.Metric, value: v})
	}
	return out, nil
}

// The queries, with %[1]s the selector and %[2]s the range.
var promQueries = map[string]string{
	"ranks":     `count by (rank) ({__name__=~"vccl_link_bytes_total|vccl_collectives_total|vccl_link_backlog_wrs",%[1]s})`,
	"bw":        `sum by (rank, peer, channel, path, direction) (rate(vccl_link_bytes_total{%[1]s}[%[2]s]))`,
	"p50":       `histogram_quantile(0.5, sum by (rank, peer, channel, path, direction, le) (rate(vccl_link_wr_latency_seconds_bucket{%[1]s}[%[2]s])))`,
	"p99":       `histogram_quantile(0.99, sum by (rank, peer, channel, path, direction, le) (rate(vccl_link_wr_latency_seconds_bucket{%[1]s}[%[2]s])))`,
	"backlog":   `sum by (rank, peer, channel, path) (vccl_link_backlog_wrs{%[1]s})`,
	"credit":    `sum by (rank, peer, channel, path) (rate(vccl_link_credit_wait_seconds_total{%[1]s}[%[2]s]))`,
	"calls":     `max by (collective) (sum by (collective, rank) (vccl_collectives_total{%[1]s}))`,
	"persec":    `avg by (collective) (sum by (collective, rank) (rate(vccl_collectives_total{%[1]s}[%[2]s])))`,
	"busbw":     `sum by (collective) (rate(vccl_bus_bandwidth_bytes_per_second_sum{%[1]s}[%[2]s])) / sum by (collective) (rate(vccl_bus_bandwidth_bytes_per_second_count{%[1]s}[%[2]s]))`,
	"algbw":     `sum by (collective) (rate(vccl_algorithm_bandwidth_bytes_per_second_sum{%[1]s}[%[2]s])) / sum by (collective) (rate(vccl_algorithm_bandwidth_bytes_per_second_count{%[1]s}[%[2]s]))`,
	"time":      `sum by (collective) (rate(vccl_collective_exec_time_seconds_sum{%[1]s}[%[2]s])) / sum by (collective) (rate(vccl_collective_exec_time_seconds_count{%[1]s}[%[2]s]))`,
	"skew":      `max by (collective) (%[3]s) - min by (collective) (%[3]s)`,
	"rank_time": `sum by (collective, rank) (rate(vccl_collective_exec_time_seconds_sum{%[1]s}[%[2]s])) / sum by (collective, rank) (rate(vccl_collective_exec_time_seconds_count{%[1]s}[%[2]s]))`,
}

// PromQueries returns the PromQL the source runs, by name (for the docs
// and tests).
func (p *Prometheus) PromQueries() map[string]string {
	out := map[string]string{}
	rng := promDuration(p.cfg.Range)
	rankTime := fmt.Sprintf(promQueries["rank_time"], p.cfg.Selector, rng)
	for k, q := range promQueries {
		if k == "rank_time" {
			continue
		}
		out[k] = strings.ReplaceAll(fmt.Sprintf(q, p.cfg.Selector, rng, rankTime), ",}", "}")
		out[k] = strings.ReplaceAll(out[k], "{}", "")
	}
	return out
}

// promDuration formats a duration for PromQL: "30s", "1m30s" → "90s".
func promDuration(d time.Duration) string {
	return strconv.FormatInt(max(int64(d.Seconds()), 1), 10) + "s"
}

func (p *Prometheus) poll(ctx context.Context) error {
	qs := p.PromQueries()
	res := map[string][]sample{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for name, q := range qs {
		wg.Go(func() {
			s, err := p.query(ctx, q)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			res[name] = s
		})
	}
	wg.Wait()
	if _, ok := res["ranks"]; !ok {
		return firstErr
	}
	now := p.cfg.Now()
	f := ui.Frame{Source: "prometheus", Target: p.cfg.URL, Time: now, Seq: p.seq.Load() + 1}

	// Ranks: those with series now are up; those seen before, down.
	up := map[int]bool{}
	for _, s := range res["ranks"] {
		if r, err := strconv.Atoi(s.labels["rank"]); err == nil && r >= 0 && r < MaxRanks {
			up[r] = true
		}
	}
	p.mu.Lock()
	for r := range up {
		if rk := p.ranks[r]; rk == nil || !rk.Up {
			p.ranks[r] = &ui.Rank{Rank: r, Up: true, Since: now}
		}
	}
	for r, rk := range p.ranks {
		if !up[r] && rk.Up {
			rk.Up, rk.Since, rk.Err = false, now, "no series in Prometheus (scrape failing?)"
		}
	}
	for _, rk := range p.ranks {
		f.Ranks = append(f.Ranks, *rk)
		f.Size = max(f.Size, rk.Rank+1)
	}
	p.mu.Unlock()

	// Links, by (rank, peer, channel, path, direction).
	type lk struct {
		rank, peer, ch, path int
		dir                  string
	}
	links := map[lk]*ui.Link{}
	key := func(s sample, dir string) (lk, bool) {
		r, e1 := strconv.Atoi(s.labels["rank"])
		pe, e2 := strconv.Atoi(s.labels["peer"])
		ch, _ := strconv.Atoi(s.labels["channel"])
		pa, _ := strconv.Atoi(s.labels["path"])
		if dir == "" {
			dir = s.labels["direction"]
		}
		inRange := r >= 0 && r < MaxRanks && pe >= 0 && pe < MaxRanks
		return lk{r, pe, ch, pa, dir}, e1 == nil && e2 == nil && dir != "" && inRange
	}
	link := func(k lk) *ui.Link {
		l := links[k]
		if l == nil {
			l = &ui.Link{Rank: int32(k.rank), Peer: int32(k.peer), Channel: uint16(k.ch), Path: uint8(k.path), Dir: k.dir, WindowNs: int64(time.Second)}
			links[k] = l
		}
		return l
	}
	for _, s := range res["bw"] {
		if k, ok := key(s, ""); ok {
			link(k).BandwidthBps = s.value
		}
	}
	for _, s := range res["p50"] {
		if k, ok := key(s, ""); ok && !isNaN(s.value) {
			link(k).LatP50Ns = int64(s.value * 1e9)
		}
	}
	for _, s := range res["p99"] {
		if k, ok := key(s, ""); ok && !isNaN(s.value) {
			link(k).LatP99Ns = int64(s.value * 1e9)
		}
	}
	for _, s := range res["backlog"] {
		if k, ok := key(s, "send"); ok {
			link(k).Backlog = uint32(max(s.value, 0))
		}
	}
	for _, s := range res["credit"] {
		if k, ok := key(s, "send"); ok {
			// A share of each second: over a 1s "window".
			link(k).CreditWaitNs = int64(min(s.value, 1) * 1e9)
		}
	}
	for _, l := range links {
		if rk, ok := f.RankState(int(l.Rank)); ok && !rk.Up {
			continue
		}
		f.Links = append(f.Links, *l)
	}

	// Collectives.
	colls := map[string]*ui.Coll{}
	coll := func(s sample) *ui.Coll {
		op := s.labels["collective"]
		c := colls[op]
		if c == nil {
			c = &ui.Coll{Op: op, SkewEstimated: true}
			colls[op] = c
		}
		return c
	}
	for _, s := range res["calls"] {
		coll(s).Calls = uint64(s.value)
	}
	for _, s := range res["persec"] {
		coll(s).PerSec = s.value
	}
	for _, s := range res["busbw"] {
		if !isNaN(s.value) {
			coll(s).BusBWBps = s.value
		}
	}
	for _, s := range res["algbw"] {
		if !isNaN(s.value) {
			coll(s).AlgBWBps = s.value
		}
	}
	for _, s := range res["time"] {
		if !isNaN(s.value) {
			coll(s).AvgTimeNs = int64(s.value * 1e9)
		}
	}
	for _, s := range res["skew"] {
		if !isNaN(s.value) {
			coll(s).SkewNs = int64(s.value * 1e9)
		}
	}
	for _, c := range colls {
		if c.Op != "" {
			f.Colls = append(f.Colls, *c)
		}
	}
	if len(f.Colls) > 0 {
		f.Notes = append(f.Notes, fmt.Sprintf("rates over %s; ~skew: the spread of the ranks' mean execution times", promDuration(p.cfg.Range)))
	}
	f.Normalize()
	p.mu.Lock()
	p.frame = f
	p.mu.Unlock()
	return firstErr
}

func isNaN(v float64) bool { return v != v }
