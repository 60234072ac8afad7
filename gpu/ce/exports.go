package ce

import (
	"sync/atomic"
	"unsafe"
)

// The export table: memory a caller brings (Proc.Wrap) is not registered
// with every rank ahead of time, so a rank that posts such a buffer (a
// receive, an all-reduce input or output) names it by an export id, and
// publishes the id's CUDA IPC handle in its table in the mailbox. A peer
// that meets an id it has not mapped yet reads the entry once and maps the
// allocation (or, in the same process, uses its address). Entries are
// reused round robin: a rank exports each allocation once, so the table
// holds the exportSlots allocations it exported last, far more than one
// operation posts.

// exportSlots is the size of each rank's export table.
const exportSlots = 1024

// exportBase is the first export id: ids below it are registrations
// (Proc.Register), at or above it exports.
const exportBase = 1 << 30

// exportEntry is one exported allocation; id is written last and cleared
// first, so a reader that sees the same id before and after copying the
// rest has a consistent entry.
type exportEntry struct {
	id     uint64
	size   uint64
	base   uint64 // the address in the exporting process
	pid    uint64 // the exporting process
	handle [64]byte
}

// stateBytes is the size of a rank's state word (its own cache line).
const stateBytes = 64

// rank states in the mailbox.
const (
	stateRunning = 0
	stateClosed  = 1 // the rank has unmapped its peers' memory and events
)

func (m *mailbox) exportTable(rank int) []exportEntry {
	off := boxHeader + m.n*m.n*int(unsafe.Sizeof(pairBox{})) + rank*exportSlots*int(unsafe.Sizeof(exportEntry{}))
	return unsafe.Slice((*exportEntry)(unsafe.Pointer(&m.mem[off])), exportSlots)
}

func (m *mailbox) state(rank int) *uint64 {
	off := boxHeader + m.n*m.n*int(unsafe.Sizeof(pairBox{})) + m.n*exportSlots*int(unsafe.Sizeof(exportEntry{})) + rank*stateBytes
	return m.word(off)
}

// export publishes an allocation of rank under id.
func (m *mailbox) export(rank int, id uint64, size, base, pid uint64, handle [64]byte) {
	e := &m.exportTable(rank)[id%exportSlots]
	atomic.StoreUint64(&e.id, 0)
	atomic.StoreUint64(&e.size, size)
	atomic.StoreUint64(&e.base, base)
	atomic.StoreUint64(&e.pid, pid)
	for i := 0; i < len(handle); i += 8 {
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&e.handle[i])), *(*uint64)(unsafe.Pointer(&handle[i])))
	}
	atomic.StoreUint64(&e.id, id)
}

// exported reads rank's entry of id; ok is false when the table no longer
// (or not yet) holds it.
func (m *mailbox) exported(rank int, id uint64) (size, base, pid uint64, handle [64]byte, ok bool) {
	e := &m.exportTable(rank)[id%exportSlots]
	if atomic.LoadUint64(&e.id) != id {
		return 0, 0, 0, handle, false
	}
	size, base, pid = atomic.LoadUint64(&e.size), atomic.LoadUint64(&e.base), atomic.LoadUint64(&e.pid)
	for i := 0; i < len(handle); i += 8 {
		*(*uint64)(unsafe.Pointer(&handle[i])) = atomic.LoadUint64((*uint64)(unsafe.Pointer(&e.handle[i])))
	}
	return size, base, pid, handle, atomic.LoadUint64(&e.id) == id
}
