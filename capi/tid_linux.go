package capi

import "syscall"

// gettid is the calling OS thread's id.
func gettid() int { return syscall.Gettid() }
