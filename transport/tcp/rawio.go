package tcp

import (
	"syscall"
	"unsafe"
)

// Non-blocking socket I/O on a descriptor the caller holds through
// syscall.RawConn.Control (so it cannot be closed underneath). These let the
// goroutine that posts a WR, or polls for completions, move the bytes itself
// instead of waking the QP's writer or reader goroutine.
//
// They are raw system calls, which the Go scheduler does not see. On
// loopback a large writev is long (the kernel copies the bytes and runs the
// receiver's TCP input in it), and a rank bound to one CPU (GOMAXPROCS=1)
// that spends that long in a scheduler-visible call has its P taken away by
// sysmon, which then keeps waking at its shortest period on the rank's CPU
// instead of backing off, each wake a context switch there. The descriptor
// is non-blocking, so the calls never wait for anything but their copy, as
// a raw call must.

// readNB reads what the socket has, up to len(p). It returns
// syscall.EAGAIN when nothing is there and io.EOF-like (0, nil) at the
// peer's orderly close.
func readNB(fd int, p []byte) (int, error) {
	for {
		var ptr unsafe.Pointer
		if len(p) > 0 {
			ptr = unsafe.Pointer(&p[0])
		}
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(ptr), uintptr(len(p)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	}
}

// writevNB writes as much of iov as the socket takes without blocking, using
// vec as the iovec array (it must hold len(iov) entries). It returns the
// bytes written, and syscall.EAGAIN when the socket took nothing.
func writevNB(fd int, iov [][]byte, vec []syscall.Iovec) (int, error) {
	vec = vec[:0]
	for _, b := range iov {
		if len(b) == 0 {
			continue
		}
		v := syscall.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		vec = append(vec, v)
	}
	if len(vec) == 0 {
		return 0, nil
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&vec[0])), uintptr(len(vec)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	}
}
