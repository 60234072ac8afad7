//go:build linux

package fault

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/vccl-go/vccl/flowtel"
)

// The test network: each rank is a network namespace with three veth
// interfaces, nic0 on one bridge (rail 0, the primary), nic1 on another (rail
// 1, the backup) and mgmt on a third (bootstrap only). Addresses come from
// 10.99.0.0/16 and exist only inside the namespaces; the host has none on
// the bridges, so nothing leaves them. Names carry the creating process's
// id, so a run cleans up what an earlier, killed run left behind.

const (
	nsPrefix = "vccl-ft-"
	brPrefix = "vfb" // + pid (5 base-36 digits) + net + rail
	vhPrefix = "vfh" // + pid + net + rank + rail
	rails    = 3     // nic0, nic1, mgmt
)

var railNames = [rails]string{"nic0", "nic1", "mgmt"}

// network is one test network of n ranks.
type network struct {
	t       testing.TB
	id      string // pid in base 36, 5 digits, + the network's number
	n       int
	ns      []string
	bridges []string
	fastARP bool
}

var netCount atomic.Int32

func pid36() string { return fmt.Sprintf("%05s", strconv.FormatInt(int64(os.Getpid()), 36)) }

// canNetns skips t unless namespaces, veths and bridges can be made here.
func canNetns(t testing.TB) {
	t.Helper()
	if os.Getenv("VCCL_FAULT_SKIP") != "" {
		t.Skip("VCCL_FAULT_SKIP is set")
	}
	if os.Geteuid() != 0 {
		t.Skip("network namespace tests need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network namespace tests need iproute2 (ip)")
	}
}

// run runs ip (or another command) and fails t with its output on error.
func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// newNetwork builds the network; t.Cleanup tears it down, also when the
// test fails.
func newNetwork(t testing.TB, n int) *network {
	t.Helper()
	return newNetworkARP(t, n, os.Getenv("VCCL_FAULT_KERNEL_ARP") == "")
}

// newNetworkARP is newNetwork; fastARP sets the rails' address resolution
// retry to 100 ms instead of the kernel's 1 s (VCCL_FAULT_KERNEL_ARP=1 keeps
// the kernel's; see docs/fault-tolerance.md).
func newNetworkARP(t testing.TB, n int, fastARP bool) *network {
	t.Helper()
	canNetns(t)
	if n > 9 {
		t.Fatalf("at most 9 ranks")
	}
	sweepStale(t)
	k := netCount.Add(1)
	nw := &network{t: t, id: pid36() + strconv.FormatInt(int64(k%36), 36), n: n, fastARP: fastARP}
	t.Cleanup(nw.teardown)
	for r := range rails {
		br := fmt.Sprintf("%s%s%d", brPrefix, nw.id, r)
		run(t, "ip", "link", "add", "name", br, "type", "bridge", "forward_delay", "0")
		nw.bridges = append(nw.bridges, br)
		run(t, "ip", "link", "set", br, "up")
	}
	for rank := range n {
		ns := fmt.Sprintf("%s%s-r%d", nsPrefix, nw.id, rank)
		run(t, "ip", "netns", "add", ns)
		nw.ns = append(nw.ns, ns)
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
		for r := range rails {
			host := fmt.Sprintf("%s%s%d%d", vhPrefix, nw.id, rank, r)
			run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", railNames[r], "netns", ns)
			run(t, "ip", "link", "set", host, "master", nw.bridges[r], "up")
			run(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("%s/24", nw.addr(rank, r)), "dev", railNames[r])
			run(t, "ip", "-n", ns, "link", "set", railNames[r], "up")
			if nw.fastARP {
				run(t, "ip", "netns", "exec", ns, "sh", "-c",
					fmt.Sprintf("echo 100 > /proc/sys/net/ipv4/neigh/%s/retrans_time_ms", railNames[r]))
			}
		}
	}
	return nw
}

// addr returns rank's address on rail r.
func (nw *network) addr(rank, r int) string { return fmt.Sprintf("10.99.%d.%d", r, rank+1) }

func (nw *network) teardown() {
	for _, ns := range nw.ns {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			nw.t.Logf("ip netns del %s: %v %s", ns, err, out)
		}
	}
	for _, br := range nw.bridges {
		if out, err := exec.Command("ip", "link", "del", br).CombinedOutput(); err != nil {
			nw.t.Logf("ip link del %s: %v %s", br, err, out)
		}
	}
}

// setLink takes rank's interface on rail r down or up, and returns the
// monotonic time just before the change was requested (by netlink from this
// process; by an ip command where that fails).
func (nw *network) setLink(rank, r int, up bool) int64 {
	state := "down"
	if up {
		state = "up"
	}
	ts, err := linkSet(nw.ns[rank], railNames[r], up)
	if err != nil {
		nw.t.Logf("netlink: %v; using ip", err)
		ts = flowtel.Monotonic()
		run(nw.t, "ip", "-n", nw.ns[rank], "link", "set", railNames[r], state)
	}
	return ts
}

// shape limits the rate rank's interface on rail r sends at (tc tbf);
// rate "" removes the limit.
func (nw *network) shape(rank, r int, rate string) {
	if rate == "" {
		exec.Command("ip", "netns", "exec", nw.ns[rank], "tc", "qdisc", "del", "dev", railNames[r], "root").Run()
		return
	}
	out, err := exec.Command("ip", "netns", "exec", nw.ns[rank], "tc", "qdisc", "replace", "dev", railNames[r], "root",
		"tbf", "rate", rate, "burst", "256kb", "latency", "50ms").CombinedOutput()
	if err != nil {
		nw.t.Skipf("no tc tbf here: %v: %s", err, out)
	}
}

// sweepStale removes the namespaces and links of runs whose process is gone.
func sweepStale(t testing.TB) {
	alive := func(p36 string) bool {
		pid, err := strconv.ParseInt(strings.TrimLeft(p36, "0"), 36, 64)
		if err != nil || pid <= 0 {
			return true // not ours to judge
		}
		return syscall.Kill(int(pid), 0) != syscall.ESRCH
	}
	entries, _ := filepath.Glob("/run/netns/" + nsPrefix + "*")
	for _, e := range entries {
		name := filepath.Base(e)
		rest := strings.TrimPrefix(name, nsPrefix)
		if len(rest) >= 5 && !alive(rest[:5]) {
			exec.Command("ip", "netns", "del", name).Run()
		}
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return
	}
	for _, line := range bytes.Split(out, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		for _, p := range []string{brPrefix, vhPrefix} {
			if strings.HasPrefix(name, p) && len(name) >= len(p)+5 && !alive(name[len(p):len(p)+5]) {
				exec.Command("ip", "link", "del", name).Run()
			}
		}
	}
}
