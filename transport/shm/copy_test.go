//go:build linux

package shm

import (
	"bytes"
	"testing"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// TestCopyStream: every alignment of the destination and every length
// around the 64-byte body copies exactly src and nothing past it.
func TestCopyStream(t *testing.T) {
	src := patternOf(1000, 3)
	for off := 0; off < 32; off++ {
		for _, n := range []int{0, 1, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129, 500, 1000 - 32} {
			dst := bytes.Repeat([]byte{0xee}, 1100)
			copyStream(dst[off:], src[off:off+n])
			if !bytes.Equal(dst[off:off+n], src[off:off+n]) {
				t.Fatalf("offset %d, %d bytes: copy differs", off, n)
			}
			for i, c := range dst {
				if (i < off || i >= off+n) && c != 0xee {
					t.Fatalf("offset %d, %d bytes: byte %d outside the copy written", off, n, i)
				}
			}
		}
	}
}

// TestCopyTeeWhole: lengths around its piece and its largest cached tee
// copy exactly src and nothing past it.
func TestCopyTeeWhole(t *testing.T) {
	src := patternOf(cachedMax+100, 5)
	for _, n := range []int{0, 1, cachedPiece - 1, cachedPiece, cachedPiece + 1, cachedMax, cachedMax + 100} {
		dst := bytes.Repeat([]byte{0xee}, len(src)+10)
		copyTeeWhole(dst, src[:n])
		if !bytes.Equal(dst[:n], src[:n]) {
			t.Fatalf("%d bytes: copy differs", n)
		}
		copyTeeWhole(nil, src[:n]) // no tee: nothing to copy
		for i := n; i < len(dst); i++ {
			if dst[i] != 0xee {
				t.Fatalf("%d bytes: byte %d past the copy written", n, i)
			}
		}
	}
}

// TestStreamReceive: a receive flagged Stream gets a multi-record message
// intact, at an unaligned offset too (its records are copied past the
// caches).
func TestStreamReceive(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
	a := p.A.(*QP)
	a.mu.Lock()
	a.cmaOff = true // through the ring whatever the placement
	a.mu.Unlock()
	msg := patternOf(3*chunkMax+4099, 9)
	for _, off := range []int{0, 5} {
		dst := make([]byte, len(msg)+off)
		if err := p.B.PostRecv(transport.WR{ID: 1, Buf: dst[off:], Stream: true}); err != nil {
			t.Fatal(err)
		}
		if err := p.A.PostSend(transport.WR{ID: 2, Buf: msg}); err != nil {
			t.Fatal(err)
		}
		sc := transporttest.WaitN(t, p.A, p.NotA, 1)[0]
		rc := transporttest.WaitN(t, p.B, p.NotB, 1)[0]
		if sc.Status != flowtel.StatusOK || rc.Status != flowtel.StatusOK || !bytes.Equal(dst[off:], msg) {
			t.Fatalf("offset %d: send %v (%v), recv %v (%v), data equal %v", off, sc.Status, sc.Err, rc.Status, rc.Err, bytes.Equal(dst[off:], msg))
		}
	}
}
