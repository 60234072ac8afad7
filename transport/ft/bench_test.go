package ft

import (
	"testing"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/tcp"
	"github.com/vccl-go/vccl/transport/transporttest"
)

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
