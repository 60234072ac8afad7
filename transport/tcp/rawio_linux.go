package tcp

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

var zeroTimeout unix.Timespec

// readable reports whether the socket has bytes (or an error, or the peer's
// close) to read. poll does not take the socket's lock, as a read does: a
// spinning owner that read an empty socket over and over would contend for
// that lock with the peer's send delivering into it.
func readable(fd int) bool {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	n, _, e := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&zeroTimeout)), 0, 0, 0)
	return e != 0 || n > 0 // on an error, let the read find out
}
