package tcp

import (
	"net"
	"testing"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// kill severs q's connection as a crashed process would: the socket is reset
// (SO_LINGER 0) and closed underneath the QP, without the QP's own Close.
func kill(q transport.QP) {
	q.(*QP).sock.close(true)
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Factory{Backend: Backend{}, Kill: kill})
}

func TestConformanceIPv6(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	ln.Close()
	transporttest.Run(t, transporttest.Factory{Backend: Backend{}, ListenAddr: "[::1]:0", Kill: kill})
}
