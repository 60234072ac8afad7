package transport

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// MR is a registered memory region. Registering a buffer once and posting
// WRs that point into it lets a backend prepare the memory ahead of the data
// path (a backend may pin it, map it for a peer, or hand out a remote key);
// a WR whose MR is set must lie inside that region.
type MR struct {
	Key  uint32
	base uintptr
	buf  []byte
}

var mrKeys atomic.Uint32

// Register registers buf. The region must stay alive while any WR uses it.
func Register(buf []byte) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("transport: cannot register an empty buffer")
	}
	return &MR{Key: mrKeys.Add(1), base: uintptr(unsafe.Pointer(unsafe.SliceData(buf))), buf: buf}, nil
}

// Bytes returns the registered buffer.
func (m *MR) Bytes() []byte { return m.buf }

// Contains reports whether b lies inside the region.
func (m *MR) Contains(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= m.base && p+uintptr(len(b)) <= m.base+uintptr(len(m.buf))
}

// MaxMessage bounds a WR's length in every backend: the stream backends
// carry it in a 64-bit length field, where a larger value is a corrupt or
// hostile stream, not a message.
const MaxMessage = 1 << 38 // 256 GiB

// checkWR validates a WR against its memory region, its tee's length and
// MaxMessage.
func checkWR(wr *WR) error {
	if wr.MR != nil && !wr.MR.Contains(wr.Buf) {
		return fmt.Errorf("%w: WR %d (%d bytes) is not inside region %d", ErrMRMismatch, wr.ID, len(wr.Buf), wr.MR.Key)
	}
	if wr.Tee != nil && len(wr.Tee) != len(wr.Buf) {
		return fmt.Errorf("transport: WR %d has a tee of %d bytes for a buffer of %d", wr.ID, len(wr.Tee), len(wr.Buf))
	}
	// uint64: MaxMessage is past a 32-bit int.
	if uint64(len(wr.Buf)) > MaxMessage {
		return fmt.Errorf("transport: WR %d of %d bytes exceeds the maximum message of %d bytes", wr.ID, len(wr.Buf), uint64(MaxMessage))
	}
	return nil
}
