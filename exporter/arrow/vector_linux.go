package arrow

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// writeVectorAt writes parts to f at off, in as few system calls as the
// kernel takes (pwritev, at most iovMax parts a call).
func writeVectorAt(f *os.File, parts [][]byte, off int64) error {
	const iovMax = 1024
	fd := int(f.Fd())
	for len(parts) > 0 {
		batch := parts[:min(len(parts), iovMax)]
		n, err := unix.Pwritev(fd, batch, off)
		if err != nil {
			return &os.PathError{Op: "pwritev", Path: f.Name(), Err: err}
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		off += int64(n)
		// Drop what was written, a part cut short kept from its rest.
		for n > 0 && len(parts) > 0 {
			if n < len(parts[0]) {
				parts[0] = parts[0][n:]
				n = 0
				break
			}
			n -= len(parts[0])
			parts = parts[1:]
		}
	}
	return nil
}
