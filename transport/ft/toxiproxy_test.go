package ft

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// Connection resets and latency through toxiproxy
// (.ci/setup.d/50-toxiproxy.sh installs it): the primary path of a link
// goes through a proxy, the backup does not.

// toxiproxy is a toxiproxy-server this test started.
type toxiproxy struct {
	t   *testing.T
	api string
}

func toxiproxyBinary() string {
	if p := os.Getenv("TOXIPROXY_SERVER"); p != "" {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "vccl-tools", "toxiproxy-server")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, _ := exec.LookPath("toxiproxy-server")
	return p
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func startToxiproxy(t *testing.T) *toxiproxy {
	bin := toxiproxyBinary()
	if bin == "" {
		t.Skip("toxiproxy-server not installed (.ci/setup.d/50-toxiproxy.sh)")
	}
	port := freePort(t)
	var out bytes.Buffer
	args := []string{bin, "-host", "127.0.0.1", "-port", fmt.Sprint(port)}
	// The proxy stands in for the network, which a busy host does not
	// starve: at the default priority, under -race beside busy loops, it
	// went unscheduled for longer than DeadAfter and a path "with 10 ms of
	// latency" went down, rightly. As root it runs at nice -10.
	if nice, err := exec.LookPath("nice"); err == nil && os.Geteuid() == 0 {
		args = append([]string{nice, "-n", "-10"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	tp := &toxiproxy{t: t, api: fmt.Sprintf("http://127.0.0.1:%d", port)}
	stop := time.Now().Add(deadline)
	for {
		resp, err := http.Get(tp.api + "/version")
		if err == nil {
			resp.Body.Close()
			return tp
		}
		if time.Now().After(stop) {
			t.Fatalf("toxiproxy API not up: %v\n%s", err, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (tp *toxiproxy) call(method, path string, body any, want int) {
	tp.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, tp.api+path, r)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tp.t.Fatalf("toxiproxy %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		msg, _ := io.ReadAll(resp.Body)
		tp.t.Fatalf("toxiproxy %s %s: %s: %s", method, path, resp.Status, msg)
	}
}

// proxy creates a proxy to upstream and returns its listen address.
func (tp *toxiproxy) proxy(name, upstream string) string {
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(tp.t))
	tp.call("POST", "/proxies", map[string]any{"name": name, "listen": listen, "upstream": upstream, "enabled": true}, http.StatusCreated)
	return listen
}

// addToxics adds a toxic of type typ to both directions of proxy, named
// name-down and name-up.
func (tp *toxiproxy) addToxics(proxy, name, typ string, attrs map[string]any) {
	for _, stream := range []string{"downstream", "upstream"} {
		tp.call("POST", "/proxies/"+proxy+"/toxics", map[string]any{"name": name + "-" + strings.TrimSuffix(stream, "stream"), "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs}, http.StatusOK)
	}
}

// removeToxics removes what addToxics added.
func (tp *toxiproxy) removeToxics(proxy, name string) {
	for _, dir := range []string{"down", "up"} {
		tp.call("DELETE", "/proxies/"+proxy+"/toxics/"+name+"-"+dir, nil, http.StatusNoContent)
	}
}

// proxiedPair connects a link whose primary path goes through a toxiproxy
// proxy named "primary".
func proxiedPair(t *testing.T, tp *toxiproxy, prm Params) *transporttest.Pair {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	b := Backend{Params: prm}
	ln, err := b.Listen(ctx, transport.ListenConfig{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addrs := strings.Split(ln.Addr(), ",")
	via := tp.proxy("primary", addrs[0]) + "," + addrs[1]
	p := &transporttest.Pair{NotA: transport.NewNotifier(), NotB: transport.NewNotifier()}
	p.RingA, _ = flowtel.NewRing(1 << 16)
	p.RingB, _ = flowtel.NewRing(1 << 16)
	cfgA := transport.Config{Rank: 0, Peer: 1, QPID: 1, Token: "tok", Recorder: flowtel.NewRecorder(p.RingA, nil), Notifier: p.NotA}
	cfgB := transport.Config{Rank: 1, Peer: 0, QPID: 2, Token: "tok", Recorder: flowtel.NewRecorder(p.RingB, nil), Notifier: p.NotB}
	accepted := make(chan transport.QP, 1)
	go func() {
		q, err := ln.Accept(ctx, "k", cfgB)
		if err != nil {
			t.Error(err)
		}
		accepted <- q
	}()
	if p.A, err = b.Dial(ctx, via, "k", cfgA); err != nil {
		t.Fatal(err)
	}
	if p.B = <-accepted; p.B == nil {
		t.FailNow()
	}
	t.Cleanup(func() {
		p.A.Close()
		p.B.Close()
	})
	return p
}

// A primary path that the proxy resets, or blackholes, fails over to the
// backup while traffic runs; a reset path fails back once it heals.
func TestToxiproxyFailover(t *testing.T) {
	for _, tc := range []struct {
		name     string
		prm      Params
		msgs     int
		size     int
		toxic    string
		within   time.Duration // of the failover
		failback bool
	}{
		// Every connection through the proxy is reset, new ones too.
		{"reset", Params{}, 3000, 64 << 10, "reset_peer", 2 * time.Second, true},
		// A proxy that stops forwarding still acknowledges at the TCP
		// level, so the path is declared down after the link timeout, not
		// DeadAfter.
		{"blackhole", Params{LinkTimeout: 300 * time.Millisecond, Progress: 300 * time.Millisecond},
			2000, 16 << 10, "timeout", 3 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := startToxiproxy(t)
			p := proxiedPair(t, tp, tc.prm)
			tr := startTraffic(p, tc.msgs, tc.size)
			tr.waitProgress(t, 100)
			tp.addToxics("primary", tc.name, tc.toxic, map[string]any{"timeout": 0})
			took := waitFor(t, "failover", tc.within, func() bool { return stats(p.A).OnBackup && stats(p.B).OnBackup })
			t.Logf("both ends on the backup %v after the %s began", took, tc.name)
			tr.waitProgress(t, 200)
			tp.removeToxics("primary", tc.name)
			if tc.failback {
				took = waitFor(t, "fail-back", 2*time.Second, func() bool { return stats(p.A).Failbacks >= 1 && stats(p.B).Failbacks >= 1 && !stats(p.A).OnBackup })
				t.Logf("fail-back %v after the %s stopped", took, tc.name)
			}
			tr.wait(t)
			t.Logf("rank 0: %+v", stats(p.A))
		})
	}
}

func TestToxiproxyLatency(t *testing.T) {
	tp := startToxiproxy(t)
	p := proxiedPair(t, tp, Params{})
	tr := startTraffic(p, 2000, 64<<10)
	tr.waitProgress(t, 100)
	// 10 ms each way: slower, not dead. (At 20 ± 5 ms, up to 50 ms a
	// round trip against DeadAfter's 60, the test now and then saw a path
	// go down while the suite's other packages loaded the 2 cores the
	// proxy shares with them.)
	tp.addToxics("primary", "lat", "latency", map[string]any{"latency": 10, "jitter": 3})
	tr.wait(t)
	for _, q := range []transport.QP{p.A, p.B} {
		if s := stats(q); s.LinkDowns != 0 {
			t.Errorf("rank %d: %+v: 10 ms of latency took a path down", q.Info().Rank, s)
		}
	}
}
