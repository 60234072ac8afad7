package launch

import (
	"bytes"
	"io"
	"sync"
)

// maxLine bounds how much of one line is held back waiting for its newline;
// a longer line is written in pieces of this size, each on its own line.
const maxLine = 64 << 10

// lockedWriter serialises writes to w, so that lines from different ranks
// never interleave within a line. The stdout and stderr writers share one
// mutex: the two are often the same terminal, file or buffer.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func newLockedWriter(mu *sync.Mutex, w io.Writer) *lockedWriter {
	if mu == nil {
		mu = new(sync.Mutex)
	}
	return &lockedWriter{mu: mu, w: w}
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// prefixWriter puts prefix before every line written to it. It holds a partial
// line back until its newline arrives (or Flush), so a line written in several
// pieces comes out whole and with one prefix. Complete lines are written to
// the destination in one locked write.
type prefixWriter struct {
	dst    *lockedWriter
	prefix []byte

	mu      sync.Mutex
	partial []byte
	out     []byte
}

func newPrefixWriter(dst *lockedWriter, prefix string) *prefixWriter {
	return &prefixWriter{dst: dst, prefix: []byte(prefix)}
}

// Write never fails because of the rank's output: a destination error is
// returned, but what was consumed stays consumed.
func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	w.out = w.out[:0]
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.partial = append(w.partial, p...)
			for len(w.partial) >= maxLine {
				w.emit(w.partial[:maxLine])
				w.partial = append(w.partial[:0], w.partial[maxLine:]...)
			}
			break
		}
		if len(w.partial) > 0 {
			w.partial = append(w.partial, p[:i]...)
			w.emit(w.partial)
			w.partial = w.partial[:0]
		} else {
			w.emit(p[:i])
		}
		p = p[i+1:]
	}
	if len(w.out) == 0 {
		return n, nil
	}
	_, err := w.dst.Write(w.out)
	return n, err
}

func (w *prefixWriter) emit(line []byte) {
	w.out = append(w.out, w.prefix...)
	w.out = append(w.out, line...)
	w.out = append(w.out, '\n')
}

// Flush writes a held-back partial line, ending it with a newline so that the
// next rank's line starts on a line of its own.
func (w *prefixWriter) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) == 0 {
		return nil
	}
	w.out = w.out[:0]
	w.emit(w.partial)
	w.partial = w.partial[:0]
	_, err := w.dst.Write(w.out)
	return err
}
