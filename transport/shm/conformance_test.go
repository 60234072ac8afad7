//go:build linux

package shm

import (
	"bytes"
	"testing"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

var factory = transporttest.Factory{
	Backend: Backend{},
	// A crash: the socket closes and the mapping goes, with no flush and
	// no "closed" state left in the segment.
	Kill: func(q transport.QP) { q.(*QP).crash() },
}

// TestConformance runs the suite with large messages by single copy (the
// default) and again with every message through the ring.
func TestConformance(t *testing.T) {
	t.Run("cma", func(t *testing.T) { transporttest.Run(t, factory) })
	t.Run("ring", func(t *testing.T) {
		defer func(old int) { cmaMin = old }(cmaMin)
		cmaMin = 0
		transporttest.Run(t, factory)
	})
}

// TestCMAFallback makes single-copy reads fail: the message must arrive
// intact through the ring and the QP keep to the ring afterwards.
func TestCMAFallback(t *testing.T) {
	p := transporttest.Connect(t, factory)
	a, b := p.A.(*QP), p.B.(*QP)
	msg := bytes.Repeat([]byte("0123456789abcdef"), (cmaMin+4096)/16)
	exchange := func(what string) {
		t.Helper()
		dst := make([]byte, len(msg)+100)
		b.PostRecv(transport.WR{ID: 1, Buf: dst})
		a.PostSend(transport.WR{ID: 2, Buf: msg})
		sc := transporttest.WaitN(t, a, p.NotA, 1)[0]
		rc := transporttest.WaitN(t, b, p.NotB, 1)[0]
		if sc.Status != flowtel.StatusOK || rc.Status != flowtel.StatusOK || rc.Bytes != len(msg) || !bytes.Equal(dst[:rc.Bytes], msg) {
			t.Fatalf("%s: send %v (%v), recv %v %d bytes (%v)", what, sc.Status, sc.Err, rc.Status, rc.Bytes, rc.Err)
		}
	}
	exchange("single copy")
	if b.seg.in.cmaOK.Load() != 1 {
		t.Skip("single copy unavailable here")
	}
	cmaFault.Store(true)
	defer cmaFault.Store(false)
	exchange("after a failed read")
	a.mu.Lock()
	off, sent, fails := a.cmaOff, a.cmaSent, a.cmaFails
	a.mu.Unlock()
	if !off || sent != 2 || fails != 1 || b.seg.in.cmaOK.Load() != 0 {
		t.Fatalf("after a failed read: cmaOff %v, sent %d, failed %d, receiver ok %d", off, sent, fails, b.seg.in.cmaOK.Load())
	}
	exchange("on the ring")
}
