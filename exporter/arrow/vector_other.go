//go:build !linux

package arrow

import "os"

// writeVectorAt writes parts to f at off, a write call a part.
func writeVectorAt(f *os.File, parts [][]byte, off int64) error {
	for _, p := range parts {
		if _, err := f.WriteAt(p, off); err != nil {
			return err
		}
		off += int64(len(p))
	}
	return nil
}
