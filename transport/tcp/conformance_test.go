package tcp

import (
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
	transporttest.RunIPs(t, transporttest.Factory{Backend: Backend{}, Kill: kill})
}
