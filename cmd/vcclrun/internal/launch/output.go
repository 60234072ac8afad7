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
// mutex: the two are often the same terminal, file or buffer. With a status
// line, every write erases it first and redraws it after, so it stays below
// the output.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
	st *statusLine // nil: no status line
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
	l.st.erase()
	defer l.st.draw()
	return l.w.Write(p)
}

// setStatus shows text as rank's status line ("" removes it).
func (l *lockedWriter) setStatus(rank int, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st.status[rank] == text {
		return
	}
	l.st.erase()
	l.st.status[rank] = text
	l.st.draw()
}

// statusLine is the bottom line of vcclrun's terminal: the ranks' status
// lines (a progress bar a rank redraws after carriage returns), side by
// side. Guarded by the writers' shared mutex.
type statusLine struct {
	w      io.Writer // the terminal (vcclrun's stderr)
	status []string  // by rank; "" for none
	shown  bool
	buf    []byte
}

func newStatusLine(w io.Writer, ranks int) *statusLine {
	return &statusLine{w: w, status: make([]string, ranks)}
}

func (s *statusLine) erase() {
	if s != nil && s.shown {
		io.WriteString(s.w, "\r\x1b[K")
		s.shown = false
	}
}

func (s *statusLine) draw() {
	if s == nil {
		return
	}
	s.buf = s.buf[:0]
	for _, t := range s.status {
		if t == "" {
			continue
		}
		if len(s.buf) > 0 {
			s.buf = append(s.buf, "  "...)
		}
		s.buf = append(s.buf, t...)
	}
	if len(s.buf) > 0 {
		s.w.Write(s.buf)
		s.shown = true
	}
}

// prefixWriter puts prefix before every line written to it. It holds a partial
// line back until its newline arrives (or Flush), so a line written in several
// pieces comes out whole and with one prefix. Complete lines are written to
// the destination in one locked write.
//
// With status set (the stderr of a rank under a status line), a partial
// line that has a carriage return is the rank's status line rather than
// output: what follows the last carriage return is shown on the status
// line until a newline makes it a line of output (as a terminal would show
// it: the text after the last carriage return).
type prefixWriter struct {
	dst    *lockedWriter
	prefix []byte
	status func(text string) // nil: no status line

	mu       sync.Mutex
	partial  []byte
	returned bool // partial followed a carriage return: a status line
	out      []byte
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
	statusWas := w.statusText()
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.partial = append(w.partial, p...)
			w.keepLastReturn()
			for len(w.partial) >= maxLine {
				w.emit(w.partial[:maxLine])
				w.partial = append(w.partial[:0], w.partial[maxLine:]...)
			}
			break
		}
		w.partial = append(w.partial, p[:i]...)
		w.keepLastReturn()
		w.emit(w.partial)
		w.partial, w.returned = w.partial[:0], false
		p = p[i+1:]
	}
	var err error
	if len(w.out) > 0 {
		_, err = w.dst.Write(w.out)
	}
	if st := w.statusText(); st != statusWas {
		w.status(st)
	}
	return n, err
}

// keepLastReturn drops what a carriage return in the partial line
// overwrites, when this writer shows status lines.
func (w *prefixWriter) keepLastReturn() {
	if w.status == nil {
		return
	}
	if i := bytes.LastIndexByte(w.partial, '\r'); i >= 0 {
		w.partial = append(w.partial[:0], w.partial[i+1:]...)
		w.returned = true
	}
}

// statusText is the status line the partial line makes ("" for none).
func (w *prefixWriter) statusText() string {
	if !w.returned {
		return ""
	}
	t := bytes.ReplaceAll(w.partial, []byte(eraseLine), nil)
	if len(t) == 0 {
		return ""
	}
	return string(w.prefix) + string(t)
}

// eraseLine is the terminal's erase-to-end-of-line sequence, which progress
// bars write after their carriage return.
const eraseLine = "\x1b[K"

func (w *prefixWriter) emit(line []byte) {
	w.out = append(w.out, w.prefix...)
	if w.status != nil {
		line = bytes.ReplaceAll(line, []byte(eraseLine), nil)
	}
	w.out = append(w.out, line...)
	w.out = append(w.out, '\n')
}

// Flush writes a held-back partial line, ending it with a newline so that the
// next rank's line starts on a line of its own.
func (w *prefixWriter) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.returned {
		// A status line is not output: a bar left behind by a rank
		// that ended goes with it.
		if w.statusText() != "" {
			w.status("")
		}
		w.partial, w.returned = w.partial[:0], false
		return nil
	}
	if len(w.partial) == 0 {
		return nil
	}
	w.out = w.out[:0]
	w.emit(w.partial)
	w.partial = w.partial[:0]
	_, err := w.dst.Write(w.out)
	return err
}
