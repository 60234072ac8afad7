package arrow

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropBehindChunk is how much of a trace the sink writes before it starts
// the chunk's writeback and hands the chunk before it back to the kernel.
const dropBehindChunk = 32 << 20

// dropBehind hands a trace file's written pages back to the kernel a
// chunk behind its end. A trace is written once and read later, from the
// disk; kept in the page cache it takes a fresh page for every 4 KiB,
// which on a VM that backs its memory lazily costs the writing core 2-5
// times the copy itself (0.7-1.5 ns a byte against 0.3 measured on the
// 2-core VM, some 100 ns a record), and grows the cache by the trace.
// Dropped pages are reused for the next chunk instead.
type dropBehind struct {
	started int64 // writeback started up to here
	dropped int64 // pages handed back up to here
}

// wrote notes that f holds end bytes. Every dropBehindChunk it starts the
// writeback of the new chunk, without waiting, and drops the chunk whose
// writeback it started the time before: its pages are clean by now, and
// any that are not stay cached (fadvise skips dirty pages), which costs
// nothing but the memory. Errors are ignored: this is advice.
func (d *dropBehind) wrote(f *os.File, end int64) {
	if end-d.started < dropBehindChunk {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SyncFileRange(int(fd), d.started, end-d.started, unix.SYNC_FILE_RANGE_WRITE)
		if d.started > d.dropped {
			_ = unix.Fadvise(int(fd), d.dropped, d.started-d.dropped, unix.FADV_DONTNEED)
		}
	})
	d.dropped, d.started = d.started, end
}
