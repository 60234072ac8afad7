package tcp

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

var zeroTimeout unix.Timespec

// ready reports whether the socket has bytes (or an error, or the peer's
// close) to read, and, when out is set, whether it has room to write, in one
// system call. poll does not take the socket's lock, as a read does: a
// spinning owner that read an empty socket over and over would contend for
// that lock with the peer's send delivering into it.
func ready(fd int, out bool) (in, room bool) {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	if out {
		pfd.Events |= unix.POLLOUT
	}
	n, _, e := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&zeroTimeout)), 0, 0, 0)
	if e != 0 {
		return true, out // let the read and the write find out
	}
	if n == 0 {
		return false, false
	}
	const bad = unix.POLLERR | unix.POLLHUP
	return pfd.Revents&(unix.POLLIN|bad) != 0, out && pfd.Revents&(unix.POLLOUT|bad) != 0
}
