package shm

import (
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A single-copy read (process_vm_readv) walks and pins every page of the
// peer's that it reads and copies through this process's page tables.
// Heap memory, where transparent huge pages come only on request (the
// "madvise" setting, common), is in 4 KiB pages; in 2 MiB ones the same
// reads cost less: on the 16-core host buffers advised huge before their
// first touch ran 8 ranks' all-reduce by loans 1.1-1.25x faster, 16
// ranks' 1.1-1.2x, and on the 2-core VM 2 ranks' all-gather in place of
// 16 and 64 MiB 1.6-1.8x (decision 0064). The library cannot choose how
// its callers allocate, so it collapses a buffer read that way into huge
// pages (MADV_COLLAPSE) the second time it sees it: a program that uses
// the same buffers call after call (a training loop's, a benchmark's)
// pays the collapse, about a copy of the buffer, once, and one that
// passes a fresh buffer every call never pays it.

// hugeMin is the smallest buffer AdviseSingleCopy looks at: one that
// surely holds a whole 2 MiB page.
const hugeMin = 4 << 20

const hugePage = 2 << 20

// hugeSpans is how many ranges AdviseSingleCopy remembers of each kind,
// seen once and collapsed: a job's buffers of collectives above hugeMin
// (a data-parallel job's gradient buckets, say) are a few dozen at most.
const hugeSpans = 64

// hugeRecheck: a collapsed range is collapsed again every hugeRecheck
// times it is seen. The memory at its addresses may since have been
// unmapped and mapped again, or given back to the system and faulted in
// afresh, in small pages; a collapse of a range already in huge pages
// takes microseconds (3 us for 62 MiB on the 2-core VM, where the first
// took 106 ms).
const hugeRecheck = 64

type span struct{ a, e uintptr }

// collapsed is a range AdviseSingleCopy collapsed, and how often it was
// seen since.
type collapsed struct {
	span
	seen int
}

var hugeLent struct {
	mu   sync.Mutex
	seen [hugeSpans]span      // seen once
	done [hugeSpans]collapsed // collapsed, or tried
	ns   int                  // next slot of seen to reuse
	nd   int                  // next slot of done to reuse
}

// AdviseSingleCopy tells the shm transport that a call is about to read b
// by single copy, or lend it to peers that do: the second time it is told
// of the same buffer, b's whole 2 MiB pages are collapsed into huge pages
// (see above), and again every hugeRecheck times after; it reports
// whether it asked for a collapse this time (the call may have paid for
// one). It is advice: a kernel that cannot collapse them (older than 6.1,
// huge pages off, memory too fragmented) leaves them as they are (an
// AllocShared buffer, which peers map instead, is memory the collapse
// leaves alone unless the host gives shared memory huge pages). Safe for
// concurrent use; a collapse may take milliseconds.
func AdviseSingleCopy(b []byte) (asked bool) {
	if len(b) < hugeMin {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	s := span{(p + hugePage - 1) &^ (hugePage - 1), (p + uintptr(len(b))) &^ (hugePage - 1)}
	h := &hugeLent
	h.mu.Lock()
	if d := s.doneIn(h.done[:]); d != nil {
		d.seen++
		again := d.seen%hugeRecheck == 0
		h.mu.Unlock()
		if again {
			_ = unix.Madvise(b[s.a-p:s.e-p], unix.MADV_COLLAPSE)
		}
		return again
	}
	if !s.in(h.seen[:]) {
		h.seen[h.ns] = s
		h.ns = (h.ns + 1) % hugeSpans
		h.mu.Unlock()
		return false
	}
	h.done[h.nd] = collapsed{span: s}
	h.nd = (h.nd + 1) % hugeSpans
	h.mu.Unlock()
	_ = unix.Madvise(b[s.a-p:s.e-p], unix.MADV_COLLAPSE)
	return true
}

// doneIn returns the collapsed range of done that holds s, or nil.
func (s span) doneIn(done []collapsed) *collapsed {
	for i := range done {
		if t := &done[i]; t.holds(s) {
			return t
		}
	}
	return nil
}

// in reports whether s lies within one of spans.
func (s span) in(spans []span) bool {
	return slices.ContainsFunc(spans, func(t span) bool { return t.holds(s) })
}

// holds reports whether s lies within t (an empty t holds nothing).
func (t span) holds(s span) bool { return t.e > t.a && t.a <= s.a && s.e <= t.e }
