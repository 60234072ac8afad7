//go:build !linux

package arrow

import "os"

// dropBehind keeps written pages cached where Linux's writeback and
// fadvise calls are not available.
type dropBehind struct{}

func (*dropBehind) wrote(*os.File, int64) {}
