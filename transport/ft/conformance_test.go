package ft

import (
	"fmt"
	"testing"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// kill makes q die as a crashed process would: every connection is reset
// (SO_LINGER 0) and nothing else is said; its goroutines stop probing.
func kill(qp transport.QP) {
	q := qp.(*QP)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, pa := range q.paths {
		if pa != nil {
			pa.conn.SetLinger(0)
		}
	}
	q.die(fmt.Errorf("%w: killed by the test", transport.ErrPeerDead), 1)
}

func TestConformance(t *testing.T) {
	transporttest.RunIPs(t, transporttest.Factory{Backend: Backend{}, Kill: kill})
}
