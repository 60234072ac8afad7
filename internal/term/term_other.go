//go:build !linux

package term

import "os"

// IsTerminal reports whether f is a character device (a terminal, mostly).
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
