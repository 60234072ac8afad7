package prom

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/syncbuf"
	"github.com/vccl-go/vccl/internal/testproc"
)

// envPrometheus names the Prometheus server binary the server test runs;
// without it the test looks for prometheus on PATH (Debian's package, which
// .ci/setup.d/41-prometheus.sh installs).
const envPrometheus = "VCCL_PROMETHEUS"

func prometheusBinary(t *testing.T) string {
	return testproc.Binary(t, "prometheus", envPrometheus, "apt-get install prometheus, or bash .ci/setup.d/41-prometheus.sh")
}

type promServer struct {
	url  string
	logs *syncbuf.Buffer
}

// startPrometheus runs a Prometheus server on 127.0.0.1 scraping target
// every second, with its own storage.
func startPrometheus(t *testing.T, target string) *promServer {
	t.Helper()
	bin := prometheusBinary(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: vccl
    static_configs:
      - targets: ['%s']
`, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testproc.FreePort(t))
	s := &promServer{url: "http://" + addr}
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=1h")
	s.logs = testproc.Start(t, cmd, func() error {
		resp, err := http.Get(s.url + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	})
	return s
}

type sample struct {
	labels map[string]string
	value  float64
}

// query runs an instant query through the HTTP API.
func (s *promServer) query(t *testing.T, q string) []sample {
	t.Helper()
	resp, err := http.Get(s.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	if r.Status != "success" {
		t.Fatalf("query %s: %s", q, r.Error)
	}
	var out []sample
	for _, x := range r.Data.Result {
		str, _ := x.Value[1].(string)
		v, _ := strconv.ParseFloat(str, 64)
		out = append(out, sample{x.Metric, v})
	}
	return out
}

// waitValue polls the query until its single result is want (or, with
// atLeast, at least want).
func (s *promServer) waitValue(t *testing.T, q string, want float64, atLeast bool) sample {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var got []sample
	for {
		got = s.query(t, q)
		if len(got) == 1 && (got[0].value == want || atLeast && got[0].value >= want) {
			return got[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("query %s: %v after 30s, want %v", q, got, want)
		}
		<-tick.C
	}
}

// job is two ranks in this process with telemetry on, their metrics served
// on 127.0.0.1 as a rank's live endpoint serves them.
type job struct {
	col     *flowtel.Collector
	metrics *Collector
	comms   []*collective.Comm
	addr    string
}

func startJob(ctx context.Context, t *testing.T) *job {
	t.Helper()
	j := &job{col: flowtel.NewCollector(flowtel.WithMaxIdle(time.Millisecond)), metrics: New()}
	j.col.AddSink(j.metrics)
	j.col.Start()
	t.Cleanup(func() { j.col.Shutdown(context.WithoutCancel(ctx)) })
	comms, err := collective.NewLocal(ctx, 2, collective.WithCollector(j.col), collective.WithTransport("loop"))
	if err != nil {
		t.Fatal(err)
	}
	j.comms = comms
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	for _, c := range comms {
		j.metrics.AddComm(c)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", j.metrics.Handler())
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	j.addr = l.Addr().String()
	return j
}

// faults feeds the collector a failover and lost records, as the
// fault-tolerant links and the flowtel collector report them.
func (j *job) faults(ctx context.Context) {
	j.metrics.Consume(ctx, []flowtel.Record{
		{TsNs: flowtel.Monotonic(), Kind: flowtel.KindFailover, Comm: j.comms[0].ID(), Rank: 0, Peer: 1, Path: 1},
		{TsNs: flowtel.Monotonic(), Kind: flowtel.KindLost, Rank: 0, Peer: -1, Bytes: 5},
	})
}

// promtool names the binary that lints the exposition; Debian's prometheus
// package installs it with the server.
func promtool(t *testing.T) string {
	return testproc.Binary(t, "promtool", "VCCL_PROMTOOL", "apt-get install prometheus, which includes promtool, or bash .ci/setup.d/41-prometheus.sh")
}

// A job's /metrics passes promtool's lint (base units, counter names,
// help texts) before its first call, while it runs, and after faults.
func TestPromtoolChecksJobMetrics(t *testing.T) {
	bin := promtool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j := startJob(ctx, t)
	check := func(when string) string {
		t.Helper()
		resp, err := http.Get("http://" + j.addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, bin, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: promtool check metrics: %v\n%s", when, err, out)
		}
		return string(body)
	}
	body := check("before the first call")
	if !strings.Contains(body, "vccl_telemetry_lost_records_total 0") {
		t.Error("no lost-records counter at 0 before the first call")
	}
	runAllReduces(ctx, t, j.comms, 3, 1<<16)
	if err := j.col.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	body = check("after all-reduces")
	// The failure counters are there at 0 before any failure.
	for _, want := range []string{
		`vccl_collectives_total{algorithm="ring",collective="allreduce",comm="%08x",message_size="256KiB",rank="0",status="error"} 0`,
		`vccl_link_failovers_total{channel="0",comm="%08x",path="0",peer="1",rank="0"} 0`,
		`vccl_link_down_total{channel="0",comm="%08x",path="0",peer="1",rank="0"} 0`,
		`vccl_link_wrs_total{channel="0",comm="%08x",direction="send",path="0",peer="1",rank="0",status="error"} 0`,
	} {
		if want = fmt.Sprintf(want, j.comms[0].ID()); !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	j.faults(ctx)
	check("after a failover and lost records")
}

func TestPrometheusScrapesJob(t *testing.T) {
	prometheusBinary(t) // skip (or fail in CI) before starting the job
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	j := startJob(ctx, t)
	comms, col := j.comms, j.col

	prom := startPrometheus(t, j.addr)
	prom.waitValue(t, `up{job="vccl"}`, 1, false)

	// Calls while Prometheus scrapes: the counts it sees follow the job.
	const count = 1 << 16 // 256 KiB of float32: the ring
	for round := 1; round <= 2; round++ {
		runAllReduces(ctx, t, comms, 5, count)
		if err := col.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		prom.waitValue(t, `sum(vccl_collectives_total{job="vccl",collective="allreduce",status="ok"})`, float64(2*5*round), false)
	}

	// Per rank: ten all-reduces of 256 KiB, timed and with bandwidths.
	for r := range 2 {
		sel := fmt.Sprintf(`{job="vccl",rank="%d",collective="allreduce",message_size="256KiB"}`, r)
		for _, m := range []string{"vccl_collective_exec_time_seconds_count", "vccl_bus_bandwidth_bytes_per_second_count", "vccl_algorithm_bandwidth_bytes_per_second_count"} {
			got := prom.waitValue(t, m+sel, 10, false)
			if got.labels["algorithm"] == "" || got.labels["comm"] != flowtel.JobID(comms[0].ID()) {
				t.Errorf("%s labels %v", m, got.labels)
			}
		}
		if s := prom.waitValue(t, "vccl_collective_bytes_total"+sel, 10*4*count, false); s.value != 10*4*count {
			t.Errorf("bytes %v", s.value)
		}
		// busbw = algbw * 2(n-1)/n = algbw for two ranks.
		bus := prom.query(t, "vccl_bus_bandwidth_bytes_per_second_sum"+sel)
		alg := prom.query(t, "vccl_algorithm_bandwidth_bytes_per_second_sum"+sel)
		if len(bus) != 1 || len(alg) != 1 || bus[0].value <= 0 || !near(bus[0].value, alg[0].value) {
			t.Errorf("rank %d: busbw sum %v, algbw sum %v", r, bus, alg)
		}
		// Every byte of a ring all-reduce goes to the one peer and back.
		linkSel := fmt.Sprintf(`job="vccl",rank="%d",peer="%d",channel="0",path="0"`, r, 1-r)
		link := "{" + linkSel + "}"
		sent := prom.waitValue(t, `sum(vccl_link_bytes_total{`+linkSel+`,direction="send"})`, 10*4*count, true)
		recv := prom.waitValue(t, `sum(vccl_link_bytes_total{`+linkSel+`,direction="recv"})`, 10*4*count, true)
		if sent.value != recv.value {
			t.Errorf("rank %d sent %v, received %v", r, sent.value, recv.value)
		}
		prom.waitValue(t, `sum(vccl_link_wr_latency_seconds_count`+link+`)`, 1, true)
		if q := prom.query(t, `histogram_quantile(0.5, sum by (le) (vccl_link_wr_latency_seconds_bucket`+link+`))`); len(q) != 1 || !(q[0].value > 0) {
			t.Errorf("rank %d: median WR latency %v", r, q)
		}
		prom.waitValue(t, `vccl_link_backlog_wrs`+link, 0, false)
	}

	// The dashboard's fault panels have series at 0 before any fault.
	prom.waitValue(t, `vccl_link_failovers_total{job="vccl",rank="0",peer="1",path="0"}`, 0, false)
	j.faults(ctx)
	prom.waitValue(t, `vccl_link_failovers_total{job="vccl",rank="0",peer="1",path="1"}`, 1, false)
	prom.waitValue(t, `vccl_telemetry_lost_records_total{job="vccl"}`, 5, false)

	// Every query of the Grafana dashboard, its variables' included,
	// returns series: the failure panels show 0, not "No data".
	vars := strings.NewReplacer(`"$job"`, `"vccl"`, `"$comm"`, `".*"`, `"$rank"`, `".*"`, `"$collective"`, `".*"`,
		`"$peer"`, `".*"`, "$__rate_interval", "5s")
	for _, e := range append(dashboardExprs(t), dashboardVariableSelectors(t)...) {
		q := vars.Replace(e)
		if strings.Contains(q, "$") {
			t.Fatalf("unsubstituted variable in %s", q)
		}
		prom.waitNonEmpty(t, q)
	}
}

// waitNonEmpty polls the query until it returns a result.
func (s *promServer) waitNonEmpty(t *testing.T, q string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for len(s.query(t, q)) == 0 {
		if time.Now().After(deadline) {
			t.Errorf("query returns nothing after 30s: %s", q)
			return
		}
		<-tick.C
	}
}
