//go:build linux

// Package hugepages maps memory of its own and reads how much of a mapping
// the kernel backs with transparent huge pages: for the tests of code that
// asks for them (shm.AdviseSingleCopy).
package hugepages

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Page is the size of a huge page on the platforms this runs on.
const Page = 2 << 20

// Map returns n bytes of a private anonymous mapping of their own, between
// two inaccessible ones (so that the mapping the kernel reports is the
// buffer alone), every page written (faulted in, as a caller's filled
// buffer is), and what unmaps it.
func Map(n int) (b []byte, unmap func(), err error) {
	m, err := unix.Mmap(-1, 0, n+2*Page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, err
	}
	unmap = func() { _ = unix.Munmap(m) }
	if err := unix.Mprotect(m[:Page], unix.PROT_NONE); err != nil {
		unmap()
		return nil, nil, err
	}
	if err := unix.Mprotect(m[n+Page:], unix.PROT_NONE); err != nil {
		unmap()
		return nil, nil, err
	}
	b = m[Page : n+Page]
	for i := range b {
		b[i] = byte(i)
	}
	return b, unmap, nil
}

// KB returns the kilobytes of the mapping holding b's first byte that are
// in huge pages (AnonHugePages in /proc/self/smaps).
func KB(b []byte) (int, error) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		l := sc.Text()
		var a, e uintptr
		if n, _ := fmt.Sscanf(l, "%x-%x ", &a, &e); n == 2 {
			in = a <= p && p < e
			continue
		}
		var kb int
		if n, _ := fmt.Sscanf(l, "AnonHugePages: %d kB", &kb); n == 1 && in {
			return kb, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("hugepages: no mapping of %#x in /proc/self/smaps", p)
}

// Collapses reports whether this kernel collapses memory into huge pages
// on request (MADV_COLLAPSE), and if not, why.
func Collapses() (bool, string) {
	mode, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if strings.Contains(string(mode), "[never]") {
		return false, "transparent huge pages are off here ([never])"
	}
	b, unmap, err := Map(2 * Page)
	if err != nil {
		return false, err.Error()
	}
	defer unmap()
	p := uintptr(unsafe.Pointer(&b[0]))
	whole := b[(p+Page-1)&^(Page-1)-p:][:Page]
	if err := unix.Madvise(whole, unix.MADV_COLLAPSE); err != nil {
		return false, fmt.Sprintf("MADV_COLLAPSE: %v (a kernel before 6.1, or memory too fragmented)", err)
	}
	if kb, err := KB(b); err != nil || kb < Page>>10 {
		return false, fmt.Sprintf("MADV_COLLAPSE left no huge page (%d kB, %v)", kb, err)
	}
	return true, ""
}
