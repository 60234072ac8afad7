package collective

import "syscall"

// osYield gives the thread's core to any other runnable thread (sched_yield):
// on a loaded host the peer rank this driver waits for may be queued behind
// it on the same core. With nothing else runnable it returns at once.
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
