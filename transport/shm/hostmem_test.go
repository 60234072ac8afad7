//go:build linux

package shm

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vccl-go/vccl/transport"
)

// spanAt returns the receiver's knowledge of the peer's mapping at b's
// first byte: known, and mapped here or not.
func spanAt(q *QP, b []byte) (known, mapped bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cma == nil {
		return false, false
	}
	s := q.cma.mem.find(uint64(uintptr(unsafe.Pointer(&b[0]))))
	return s != nil, s != nil && s.local != nil
}

// A pulled message from a shared buffer is copied (or reduced) from the
// receiver's own mapping of it; one from ordinary memory still comes by
// process_vm_readv, and the receiver remembers that its mapping is not
// shared. Both arrive whole.
func TestSharedBufferPull(t *testing.T) {
	p, _, b := cmaPair(t)
	n := 3*pullPiece + 4096 // a reducing read in several pieces
	shared, err := AllocShared(n)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeShared(shared)
	copy(shared, patternOf(n, 3))
	exchange(t, p, shared, nil, true, "plain pull from a shared buffer")
	if known, mapped := spanAt(b, shared); !known || !mapped {
		t.Fatalf("after a pull from a shared buffer the receiver knows its span %v, mapped %v; want both", known, mapped)
	}
	exchange(t, p, shared, addBytes, true, "reducing pull from a shared buffer")
	heap := patternOf(n, 9)
	exchange(t, p, heap, nil, true, "plain pull from ordinary memory")
	if known, mapped := spanAt(b, heap); !known || mapped {
		t.Fatalf("after a pull from ordinary memory the receiver knows its span %v, mapped %v; want known, not mapped", known, mapped)
	}
	exchange(t, p, heap, addBytes, true, "reducing pull from ordinary memory")
	if _, in, fail, _ := cmaCounts(b); in != 4 || fail != 0 {
		t.Fatalf("receiver read %d single-copy messages (%d failed), want 4 (0)", in, fail)
	}
}

// The pool hands a freed buffer out again, zeroed, and never a smaller one.
func TestAllocSharedReuse(t *testing.T) {
	// An empty pool of its own: other tests (and -count runs) leave
	// freed buffers in the process's.
	hostPool.mu.Lock()
	saved := hostPool.free
	hostPool.free = nil
	hostPool.mu.Unlock()
	t.Cleanup(func() {
		hostPool.mu.Lock()
		hostPool.free = append(hostPool.free, saved...)
		hostPool.mu.Unlock()
	})
	a, err := AllocShared(10000)
	if err != nil {
		t.Fatal(err)
	}
	a[0], a[9999] = 1, 2
	FreeShared(a)
	big, err := AllocShared(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeShared(big)
	if &big[0] == &a[0] {
		t.Fatal("a freed 12 KiB region was handed out for 1 MiB")
	}
	again, err := AllocShared(10000)
	if err != nil {
		t.Fatal(err)
	}
	if &again[0] != &a[0] {
		t.Fatal("a freed buffer was not handed out again for its own size")
	}
	FreeShared(again)
	c, err := AllocShared(5000)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeShared(c)
	if &c[0] != &a[0] || len(c) != 5000 || c[0] != 0 {
		t.Fatalf("AllocShared(5000) after freeing a 10000-byte buffer: same region %v, len %d, first byte %d; want the region again, 5000, 0", &c[0] == &a[0], len(c), c[0])
	}
	if _, err := AllocShared(0); err == nil {
		t.Fatal("AllocShared(0) succeeded")
	}
}

func TestParseMapsLine(t *testing.T) {
	for _, c := range []struct {
		line                 string
		start, end, off, ino uint64
		shared               bool
		name                 string
		ok                   bool
	}{
		{"7f0000000000-7f0000100000 rw-s 00002000 00:01 1234 /memfd:vccl-host-77-3 (deleted)", 0x7f0000000000, 0x7f0000100000, 0x2000, 1234, true, "/memfd:vccl-host-77-3 (deleted)", true},
		{"00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/dbus-daemon", 0x400000, 0x452000, 0, 173521, false, "/usr/bin/dbus-daemon", true},
		{"c000000000-c004000000 rw-p 00000000 00:00 0", 0xc000000000, 0xc004000000, 0, 0, false, "", true},
		{"c000000000 rw-p 00000000 00:00 0", 0, 0, 0, 0, false, "", false},
		{"2000-1000 rw-p 00000000 00:00 0", 0, 0, 0, 0, false, "", false},
		{"zz-1000 rw-p 00000000 00:00 0", 0, 0, 0, 0, false, "", false},
		{"1000-2000 rw-p 00000000 00:00 x", 0, 0, 0, 0, false, "", false},
		{"", 0, 0, 0, 0, false, "", false},
	} {
		start, end, off, ino, shared, name, ok := parseMapsLine([]byte(c.line))
		if ok != c.ok || ok && (start != c.start || end != c.end || off != c.off || ino != c.ino || shared != c.shared || name != c.name) {
			t.Errorf("%q: got %#x-%#x off %#x ino %d shared %v %q ok %v", c.line, start, end, off, ino, shared, name, ok)
		}
	}
}

func FuzzParseMapsLine(f *testing.F) {
	f.Add([]byte("7f0000000000-7f0000100000 rw-s 00002000 00:01 1234 /memfd:vccl-host-77-3 (deleted)"))
	f.Add([]byte("1-2 r 0 0 0"))
	f.Fuzz(func(t *testing.T, line []byte) {
		if start, end, _, _, _, _, ok := parseMapsLine(line); ok && end <= start {
			t.Fatalf("%q: accepted an empty or reversed span %#x-%#x", line, start, end)
		}
	})
}

// A peer may hold a third process's buffer open under the same name for a
// moment, while it maps it: the lookup takes the file whose inode the
// peer's mapping names, whichever descriptor comes first.
func TestSharedBufferFindsItsOwnFile(t *testing.T) {
	real, err := AllocShared(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeShared(real)
	copy(real, patternOf(len(real), 1))
	addr := uint64(uintptr(unsafe.Pointer(&real[0])))
	_, _, _, _, _, name, ok := parseMapsLine(mapsLineOf(t, addr))
	if !ok || !strings.HasPrefix(name, "/memfd:"+hostPrefix) {
		t.Fatalf("the buffer's mapping is %q, not a shared buffer's", name)
	}
	// The decoy: another file of that name, on a descriptor listed first.
	decoy, err := unix.MemfdCreate(strings.TrimSuffix(strings.TrimPrefix(name, "/memfd:"), " (deleted)"), unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(decoy)
	if _, err := unix.Write(decoy, patternOf(len(real), 9)); err != nil {
		t.Fatal(err)
	}
	if fd := fdListedBefore(t, name); fd >= 0 {
		if err := unix.Dup3(decoy, fd, unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
	}
	m := &peerMem{pid: os.Getpid()}
	v := m.view(addr, len(real))
	if v == nil || !bytes.Equal(v, real) {
		t.Fatalf("the view of a shared buffer holds its data: %v (nil: %v)", v != nil && bytes.Equal(v, real), v == nil)
	}
}

// mapsLineOf returns this process's /proc/self/maps line holding addr.
func mapsLineOf(t *testing.T, addr uint64) []byte {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(b) {
		if start, end, _, _, _, _, ok := parseMapsLine(line); ok && start <= addr && addr < end {
			return bytes.TrimSpace(line)
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return nil
}

// fdListedBefore returns a free descriptor number that /proc/self/fd lists
// before the one whose file is name, or -1 if there is none.
func fdListedBefore(t *testing.T, name string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	used, real := map[string]bool{}, ""
	for _, e := range ents {
		used[e.Name()] = true
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == name && real == "" {
			real = e.Name()
		}
	}
	for fd := 3; fd < 1000; fd++ {
		if s := strconv.Itoa(fd); !used[s] && s < real {
			return fd
		}
	}
	return -1
}

// Where the peer's maps cannot be read, reads go by the system call with
// no lookup each.
func TestSharedBufferBlindPeer(t *testing.T) {
	m := &peerMem{pid: 1 << 30} // no such process
	if v := m.view(0x1000, 8); v != nil || !m.blind.Load() {
		t.Fatalf("view of an unreadable peer: %v, blind %v; want nil, true", v, m.blind.Load())
	}
	if v := m.view(0x2000, 8); v != nil || len(*m.spans.Load()) != 1 {
		t.Fatalf("a blind peer's second view: %v after %d lookups, want nil after 1", v, len(*m.spans.Load()))
	}
}

// A span found later drops the stale ones it overlaps (the peer's heap
// grew over them), so the list stays disjoint and sorted for find.
func TestInsertSpanKeepsSpansDisjoint(t *testing.T) {
	local := make([]byte, 0x1000)
	spans := insertSpan(nil, peerSpan{start: 0x5000, end: 0x6000, local: local})
	spans = insertSpan(spans, peerSpan{start: 0x1000, end: 0x3000})
	spans = insertSpan(spans, peerSpan{start: 0x2000, end: 0x4000}) // the heap, grown
	want := []peerSpan{{start: 0x2000, end: 0x4000}, {start: 0x5000, end: 0x6000}}
	if len(spans) != len(want) {
		t.Fatalf("spans %v, want %v", spans, want)
	}
	for i, s := range spans {
		if s.start != want[i].start || s.end != want[i].end {
			t.Fatalf("spans %v, want %v", spans, want)
		}
	}
	m := &peerMem{}
	m.spans.Store(&spans)
	if s := m.find(0x3fff); s == nil || s.start != 0x2000 {
		t.Fatalf("find(0x3fff) = %v, want the grown span", s)
	}
	if v := m.find(0x5800).view(0x5800, 0x800); len(v) != 0x800 {
		t.Fatalf("view of the shared span's last 2 KiB: %d bytes", len(v))
	}
	if v := m.find(0x5800).view(0x5800, 0x801); v != nil {
		t.Fatal("a view past the shared span's end")
	}
}

// ReadLentStream reads a loan whole at any offset and length: from the
// reader's own mapping of a shared buffer (written past the caches, its
// unaligned head and tail copied plainly), and by process_vm_readv from
// ordinary memory, as ReadLent does.
func TestMailboxReadLentStream(t *testing.T) {
	p, _, _ := cmaPair(t)
	a, b := p.A.(transport.Mailboxer).Mailbox(), p.B.(transport.Mailboxer).Mailbox()
	if !b.ReadsPeer() {
		t.Fatal("b cannot read a")
	}
	n := max(3*MailboxSlot, 3*pullPiece) + 77 // reads by single copy past the caches go a piece at a time
	shared, err := AllocShared(n)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeShared(shared)
	copy(shared, patternOf(n, 5))
	for i, tc := range []struct {
		name string
		buf  []byte
	}{
		{"shared buffer", shared},
		{"ordinary memory", patternOf(n, 11)},
	} {
		k := uint32(2*i + 1)
		a.Lend(k, uintptr(unsafe.Pointer(&tc.buf[0])))
		a.Publish(k, 1<<31)
		for _, r := range []struct{ off, len, at int }{{0, n, 0}, {3, n - 3, 1}, {17, 100, 5}, {64, 4096, 0}, {5, pullPiece, 2}, {n - 9, 9, 3}} {
			got := make([]byte, r.len+r.at+7)
			if err := b.ReadLentStream(k, got[r.at:r.at+r.len], r.off); err != nil {
				t.Fatalf("%s: bytes %d-%d: %v", tc.name, r.off, r.off+r.len, err)
			}
			if !bytes.Equal(got[r.at:r.at+r.len], tc.buf[r.off:r.off+r.len]) {
				t.Fatalf("%s: bytes %d-%d read into offset %d differ", tc.name, r.off, r.off+r.len, r.at)
			}
			if slices.ContainsFunc(got[:r.at], func(c byte) bool { return c != 0 }) || slices.ContainsFunc(got[r.at+r.len:], func(c byte) bool { return c != 0 }) {
				t.Fatalf("%s: bytes %d-%d: the read wrote outside its destination", tc.name, r.off, r.off+r.len)
			}
		}
		span := b.(*Mailbox).rd.mem.find(uint64(uintptr(unsafe.Pointer(&tc.buf[0]))))
		if known, mapped := span != nil, span != nil && span.local != nil; !known || mapped != (i == 0) {
			t.Fatalf("%s: the reader knows its span %v, mapped here %v; want known, mapped %v", tc.name, known, mapped, i == 0)
		}
	}
}
