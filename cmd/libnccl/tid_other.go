//go:build !linux

package main

import "os"

func gettid() int { return os.Getpid() }
