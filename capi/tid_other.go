//go:build !linux

package capi

import "os"

// gettid is the calling OS thread's id (the process's off Linux).
func gettid() int { return os.Getpid() }
