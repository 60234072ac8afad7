//go:build !linux

package collective

import "runtime"

// osYield yields the processor; elsewhere than Linux only to other
// goroutines.
func osYield() { runtime.Gosched() }
