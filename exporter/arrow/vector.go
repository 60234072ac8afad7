package arrow

// vectorWriter keeps what the IPC stream writer writes for one commit
// without copying the batch's column buffers into a staging buffer: the
// writer hands them over as they are, and they stay unchanged until the
// commit, which writes them to the file in one vectored write. Copying
// them first cost a pass over every byte of the trace (the profile's
// largest memmove) before the write's own. Short writes are copied: the
// IPC writer reuses a small scratch for a message's continuation and
// length words.
type vectorWriter struct {
	parts [][]byte
	n     int
}

// vectorCopyMax is the largest write vectorWriter copies.
const vectorCopyMax = 256

func (v *vectorWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(p) <= vectorCopyMax {
		p = append([]byte(nil), p...)
	}
	v.parts = append(v.parts, p)
	v.n += len(p)
	return len(p), nil
}

// from returns the parts from byte off on, sharing their memory.
func (v *vectorWriter) from(off int) [][]byte {
	for i, p := range v.parts {
		if off < len(p) {
			out := append([][]byte{p[off:]}, v.parts[i+1:]...)
			return out
		}
		off -= len(p)
	}
	return nil
}

// head returns the first n bytes, copied.
func (v *vectorWriter) head(n int) []byte {
	out := make([]byte, 0, n)
	for _, p := range v.parts {
		if len(out) == n {
			break
		}
		out = append(out, p[:min(len(p), n-len(out))]...)
	}
	return out
}

// reset forgets the parts, and with them the batch's buffers.
func (v *vectorWriter) reset() {
	clear(v.parts)
	v.parts, v.n = v.parts[:0], 0
}
