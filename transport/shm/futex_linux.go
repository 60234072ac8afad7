package shm

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futexes on words of the shared mapping. The operations leave out
// FUTEX_PRIVATE_FLAG: the waiter and the waker are different processes, so
// the kernel must key the futex by the shared page, not by the address space.
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *w == val, at most d. It returns early when woken,
// when *w has already changed, or on a signal; callers re-check their
// condition in any case.
func futexWait(w *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes up to n waiters on w.
func futexWake(w *atomic.Uint32, n int) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, uintptr(n), 0, 0, 0)
}
