package ft

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/tcp"
)

// A pair's paths on loopback use reno, as the tcp backend's connections do
// (tcp.SetCongestion says why).
func TestPathsUseReno(t *testing.T) {
	t.Setenv(tcp.EnvCongestion, "")
	p, _ := newPair(t, Params{})
	checked := 0
	for _, qp := range []transport.QP{p.A, p.B} {
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
			var name string
			var gerr error
			if err := rc.Control(func(fd uintptr) {
				name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
			}); err != nil || gerr != nil {
				t.Fatalf("TCP_CONGESTION of path %d: %v %v", pa.idx, err, gerr)
			}
			if name = strings.TrimRight(name, "\x00"); name != "reno" {
				t.Errorf("path %d of rank %d: congestion control %q, want reno", pa.idx, qp.Info().Rank, name)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no path up to check")
	}
}
