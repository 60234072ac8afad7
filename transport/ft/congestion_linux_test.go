package ft

import (
	"net"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/tcp"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// pathSockopts calls get with the descriptor of every path of both ends of
// a pair that is up, and fails when none is.
func pathSockopts(t *testing.T, qps []transport.QP, get func(fd int, path, rank int)) {
	t.Helper()
	checked := 0
	for _, qp := range qps {
		q := qp.(*QP)
		q.mu.Lock()
		paths := q.paths
		q.mu.Unlock()
		for _, pa := range paths {
			if pa == nil {
				continue
			}
			rc, err := pa.conn.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			if err := rc.Control(func(fd uintptr) { get(int(fd), pa.idx, int(qp.Info().Rank)) }); err != nil {
				t.Fatal(err)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no path up to check")
	}
}

// A pair's paths on loopback use reno, as the tcp backend's connections do
// (tcp.SetupConn says why), and a congestion control the backend names.
func TestPathsUseReno(t *testing.T) {
	t.Setenv(tcp.EnvCongestion, "cubic") // the backend reads no environment
	p, _ := newPair(t, Params{})
	pathSockopts(t, []transport.QP{p.A, p.B}, func(fd, path, rank int) {
		name, err := unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		if err != nil {
			t.Fatalf("TCP_CONGESTION of path %d: %v", path, err)
		}
		if name = strings.TrimRight(name, "\x00"); name != "reno" {
			t.Errorf("path %d of rank %d: congestion control %q, want reno", path, rank, name)
		}
	})
}

// Every path gets the socket buffer the backend is given, read back with
// getsockopt (the kernel doubles it), and without one the same buffer as a
// connection that tcp.SetupConn sets up with its defaults: one rule for both
// transports.
func TestPathsSockBuf(t *testing.T) {
	t.Setenv(tcp.EnvSockBuf, "-1") // the backend reads no environment
	lo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Close()
	c, err := net.Dial("tcp", lo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := tcp.SetupConn(c.(*net.TCPConn), "", 0); err != nil {
		t.Fatal(err)
	}
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	opts := []struct {
		name string
		opt  int
	}{{"SO_SNDBUF", unix.SO_SNDBUF}, {"SO_RCVBUF", unix.SO_RCVBUF}}
	tcpDefault := make([]int, len(opts))
	for i, o := range opts {
		var gerr error
		if err := rc.Control(func(fd uintptr) { tcpDefault[i], gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, o.opt) }); err != nil || gerr != nil {
			t.Fatal(err, gerr)
		}
	}
	for _, tc := range []struct {
		name    string
		sockBuf int
		want    []int
	}{
		{"set", 100000, []int{2 * 100000, 2 * 100000}},
		{"default", 0, tcpDefault},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &faults{}
			p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{Params: scaledParams(t, Params{}), SockBuf: tc.sockBuf, faults: f}})
			pathSockopts(t, []transport.QP{p.A, p.B}, func(fd, path, rank int) {
				for i, opt := range opts {
					want := tc.want[i]
					n, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, opt.opt)
					if err != nil {
						t.Fatalf("%s of path %d: %v", opt.name, path, err)
					}
					// Autotuning may grow a buffer it owns once data has
					// flowed; only a set buffer stays exact.
					if n != want && (tc.sockBuf != 0 || n < want) {
						t.Errorf("path %d of rank %d: %s %d, want %d", path, rank, opt.name, n, want)
					}
				}
			})
		})
	}
}
