package shm

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Shared host buffers. A single-copy read (process_vm_readv) pins every
// page it reads, under the peer's mm lock; at 16 ranks on 16 cores, with
// every rank reading every peer at once, a C model of the direct
// all-reduce reached 61% of the memory bound with it and 103% copying
// from a shared mapping instead (decision 0053). Buffers from
// AllocShared live in a memfd mapped shared; a receiver whose single-copy
// read falls in one maps the same file once (through /proc/PID/fd, which
// asks for the same permission as process_vm_readv) and from then on
// copies, or reduces, straight from that mapping.
//
// A region is never unmapped while its process lives (FreeShared keeps it
// for the next AllocShared), so a peer's mapping of it never goes stale.

// hostPrefix names the memfds of shared buffers; the peer finds them by it
// in /proc/PID/maps.
const hostPrefix = "vccl-host-"

var hostPool struct {
	mu   sync.Mutex
	n    int      // regions made, for their names
	free [][]byte // whole regions FreeShared gave back
}

// AllocShared returns n bytes of zeroed memory that the shm transport's
// peers on this host read without a system call: pass it (or a part of
// it) to collectives as their buffers. The memory is never returned to
// the system; FreeShared lets a later AllocShared reuse it.
func AllocShared(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("shm: AllocShared(%d): the size must be positive", n)
	}
	size := (n + pageSize - 1) &^ (pageSize - 1)
	hostPool.mu.Lock()
	// The smallest freed region that fits, the last freed of equals: a
	// small buffer does not take a large one a later call could use.
	best := -1
	for i := len(hostPool.free) - 1; i >= 0; i-- {
		if c := cap(hostPool.free[i]); c >= n && (best < 0 || c < cap(hostPool.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := hostPool.free[best]
		hostPool.free = slices.Delete(hostPool.free, best, best+1)
		hostPool.mu.Unlock()
		clear(b[:n])
		return b[:n:n], nil
	}
	hostPool.n++
	// The pid makes the name unique on the host: a peer looking for this
	// process's file among its descriptors may also find a file of a third
	// process that this one holds open while it maps it (mapPeerFile).
	name := fmt.Sprintf("%s%d-%d", hostPrefix, os.Getpid(), hostPool.n)
	hostPool.mu.Unlock()
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("shm: AllocShared(%d): memfd_create: %w", n, err)
	}
	// The descriptor stays open: peers open the file through it.
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: AllocShared(%d): ftruncate: %w", n, err)
	}
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: AllocShared(%d): mmap: %w", n, err)
	}
	return b[:n:n], nil
}

// FreeShared gives back a buffer AllocShared returned (whole, as it
// returned it), for a later AllocShared of at most its size. The caller
// must not use it after.
func FreeShared(b []byte) {
	if cap(b) == 0 {
		return
	}
	hostPool.mu.Lock()
	hostPool.free = append(hostPool.free, b[:cap(b)])
	hostPool.mu.Unlock()
}

// peerSpan is a mapping of the peer's address space: shared (local is this
// process's mapping of the same memory) or not (local nil: reads there go
// by process_vm_readv).
type peerSpan struct {
	start, end uint64
	local      []byte
}

// peerMem is a receiver's knowledge of which of a peer's addresses lie in
// its shared buffers. Spans are only added; a shared one never goes stale
// (its region is never unmapped), and one found not shared at worst sends
// a read by the system call.
type peerMem struct {
	pid   int
	spans atomic.Pointer[[]peerSpan] // sorted by start
	blind atomic.Bool                // the peer's maps cannot be read: no lookups
	mu    sync.Mutex                 // serialises lookups that add spans
}

// view returns the n bytes at the peer's addr as this process maps them,
// or nil where they are not in one of the peer's shared buffers.
func (m *peerMem) view(addr uint64, n int) []byte {
	if m.blind.Load() {
		return nil
	}
	if s := m.find(addr); s != nil {
		return s.view(addr, n)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.find(addr); s != nil {
		return s.view(addr, n)
	}
	span := m.lookup(addr)
	var spans []peerSpan
	if old := m.spans.Load(); old != nil {
		spans = *old
	}
	spans = insertSpan(spans, span)
	m.spans.Store(&spans)
	return span.view(addr, n)
}

// view returns the n bytes at addr of a shared span as mapped here, or nil.
func (s *peerSpan) view(addr uint64, n int) []byte {
	if s.local == nil || addr+uint64(n) > s.end {
		return nil
	}
	return s.local[addr-s.start : addr-s.start+uint64(n)]
}

// insertSpan returns a new list of spans: spans without those s overlaps,
// and s, in order of start. Only spans not shared can overlap a new one
// (a mapping the peer changed since: its heap grew, say; shared ones are
// never unmapped), and dropping them keeps the spans disjoint, which find's
// binary search needs.
func insertSpan(spans []peerSpan, s peerSpan) []peerSpan {
	out := make([]peerSpan, 0, len(spans)+1)
	for _, o := range spans {
		if o.end <= s.start || o.start >= s.end {
			out = append(out, o)
		}
	}
	i, _ := slices.BinarySearchFunc(out, s.start, func(o peerSpan, a uint64) int { return cmp.Compare(o.start, a) })
	return slices.Insert(out, i, s)
}

// find returns the known span holding addr, or nil.
func (m *peerMem) find(addr uint64) *peerSpan {
	p := m.spans.Load()
	if p == nil {
		return nil
	}
	spans := *p
	i, _ := slices.BinarySearchFunc(spans, addr, func(s peerSpan, a uint64) int {
		switch {
		case s.end <= a:
			return -1
		case s.start > a:
			return 1
		}
		return 0
	})
	if i < len(spans) && spans[i].start <= addr && addr < spans[i].end {
		return &spans[i]
	}
	return nil
}

// lookup finds the peer's mapping holding addr in /proc/PID/maps and, if
// it is one of the peer's shared buffers, maps the same memory here. A
// mapping that cannot be read or mapped is a span not shared: reads there
// keep to process_vm_readv, which says what is wrong if anything is.
func (m *peerMem) lookup(addr uint64) peerSpan {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", m.pid))
	if err != nil {
		// /proc mounted hidepid, say: every read goes by the system
		// call, without a lookup each.
		m.blind.Store(true)
		return peerSpan{start: addr, end: addr + 1}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		start, end, off, ino, shared, name, ok := parseMapsLine(sc.Bytes())
		if !ok || addr < start || addr >= end {
			continue
		}
		span := peerSpan{start: start, end: end}
		if shared && strings.HasPrefix(name, "/memfd:"+hostPrefix) {
			span.local = m.mapPeerFile(name, ino, off, int(end-start))
		}
		return span
	}
	return peerSpan{start: addr, end: addr + 1}
}

// mapPeerFile maps length bytes at off of the peer's memfd named name, of
// inode ino (as /proc/PID/maps shows them), found among the peer's open
// descriptors; nil if it cannot. The inode is checked as well as the name:
// the peer may hold another process's file open for a moment while it maps
// it, and a name says nothing about which file that is.
func (m *peerMem) mapPeerFile(name string, ino, off uint64, length int) []byte {
	dir := fmt.Sprintf("/proc/%d/fd", m.pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range ents {
		p := dir + "/" + e.Name()
		if target, err := os.Readlink(p); err != nil || target != name {
			continue
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Ino != ino {
			unix.Close(fd)
			continue
		}
		b, err := unix.Mmap(fd, int64(off), length, unix.PROT_READ, unix.MAP_SHARED)
		unix.Close(fd) // the mapping keeps the file
		if err != nil {
			return nil
		}
		return b
	}
	return nil
}

// parseMapsLine reads one line of /proc/PID/maps: "start-end perms offset
// dev inode [path]".
func parseMapsLine(line []byte) (start, end, off, ino uint64, shared bool, name string, ok bool) {
	f := bytes.Fields(line)
	if len(f) < 5 {
		return 0, 0, 0, 0, false, "", false
	}
	lo, hi, found := bytes.Cut(f[0], []byte("-"))
	if !found || len(f[1]) < 4 {
		return 0, 0, 0, 0, false, "", false
	}
	var err1, err2, err3, err4 error
	start, err1 = strconv.ParseUint(string(lo), 16, 64)
	end, err2 = strconv.ParseUint(string(hi), 16, 64)
	off, err3 = strconv.ParseUint(string(f[2]), 16, 64)
	ino, err4 = strconv.ParseUint(string(f[4]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || end <= start {
		return 0, 0, 0, 0, false, "", false
	}
	if len(f) > 5 {
		name = string(bytes.Join(f[5:], []byte(" ")))
	}
	return start, end, off, ino, f[1][3] == 's', name, true
}
