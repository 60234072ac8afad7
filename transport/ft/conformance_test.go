package ft

import (
	"fmt"
	"testing"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/tcp"
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

// BenchmarkPingPong: a 1 KiB message there and back, both completions
// polled, with the tcp backend and with this one (loopback).
func BenchmarkPingPong(b *testing.B) {
	for _, c := range []struct {
		name string
		be   transport.Backend
	}{{"tcp", tcp.Backend{}}, {"ft", Backend{}}} {
		b.Run(c.name, func(b *testing.B) {
			p := transporttest.Connect(b, transporttest.Factory{Backend: c.be})
			msg := make([]byte, 1024)
			bufA, bufB := make([]byte, 1024), make([]byte, 1024)
			wcs := make([]transport.WC, 8)
			wait := func(q transport.QP, n int) {
				for got := 0; got < n; {
					got += q.Poll(wcs)
				}
			}
			b.ResetTimer()
			for range b.N {
				p.B.PostRecv(transport.WR{ID: 1, Buf: bufB})
				p.A.PostRecv(transport.WR{ID: 2, Buf: bufA})
				p.A.PostSend(transport.WR{ID: 3, Buf: msg})
				wait(p.B, 1) // B's receive
				p.B.PostSend(transport.WR{ID: 4, Buf: msg})
				wait(p.A, 2) // A's send and receive
				wait(p.B, 1) // B's send
			}
		})
	}
}
