package launch

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

func TestPrefixWriter(t *testing.T) {
	var b bytes.Buffer
	dst := newLockedWriter(nil, &b)
	w := newPrefixWriter(dst, "[7] ")
	for _, p := range []string{"a", "b\nc\n", "", "\n", "d\ne", "f"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if got, want := b.String(), "[7] ab\n[7] c\n[7] \n[7] d\n"; got != want {
		t.Fatalf("before flush: %q, want %q", got, want)
	}
	w.Flush()
	w.Flush()
	if got, want := b.String(), "[7] ab\n[7] c\n[7] \n[7] d\n[7] ef\n"; got != want {
		t.Fatalf("after flush: %q, want %q", got, want)
	}
}

// A rank's status line (a progress bar redrawn after carriage returns) is
// shown on the bottom line, erased before every line of output and drawn
// again after it, and never becomes output itself unless a newline ends it.
func TestStatusLineStaysBelowOutput(t *testing.T) {
	var b bytes.Buffer
	var mu sync.Mutex
	outW, errW := newLockedWriter(&mu, &b), newLockedWriter(&mu, &b)
	st := newStatusLine(&b, 2)
	outW.st, errW.st = st, st
	out := newPrefixWriter(outW, "[0] ")
	bar := newPrefixWriter(errW, "[0] ")
	bar.status = func(text string) { errW.setStatus(0, text) }
	bar1 := newPrefixWriter(errW, "[1] ")
	bar1.status = func(text string) { errW.setStatus(1, text) }
	const erase = "\r\x1b[K"
	steps := []struct {
		w    *prefixWriter
		in   string
		want string // what reaches the terminal
	}{
		{bar, erase + "bar 10%", "[0] bar 10%"},
		{bar, erase + "bar 50%", erase + "[0] bar 50%"},
		{bar1, erase + "b1", erase + "[0] bar 50%  [1] b1"},
		{out, "a table line\n", erase + "[0] a table line\n[0] bar 50%  [1] b1"},
		{bar1, erase, erase + "[0] bar 50%"},
		{bar, erase, erase},
		{out, "last\n", "[0] last\n"},
		{bar, erase + "bar 90%\nerror: x\n", "[0] bar 90%\n[0] error: x\n"},
		{bar, erase + "bar 99%", "[0] bar 99%"},
	}
	for i, s := range steps {
		b.Reset()
		s.w.Write([]byte(s.in))
		if b.String() != s.want {
			t.Fatalf("step %d: writing %q showed %q, want %q", i, s.in, b.String(), s.want)
		}
	}
	b.Reset()
	bar.Flush() // the rank ended with its bar up
	if b.String() != erase {
		t.Fatalf("flush showed %q, want the bar erased", b.String())
	}
}

func TestPrefixWriterLongLine(t *testing.T) {
	var b bytes.Buffer
	w := newPrefixWriter(newLockedWriter(nil, &b), "> ")
	w.Write(bytes.Repeat([]byte("x"), maxLine+10))
	w.Write([]byte("y\n"))
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 || len(lines[0]) != 2+maxLine || lines[1] != "> "+strings.Repeat("x", 10)+"y" {
		t.Fatalf("got %d lines of lengths %d…", len(lines), len(lines[0]))
	}
}

// Lines written concurrently by several ranks never mix within a line.
func TestPrefixWritersDoNotInterleave(t *testing.T) {
	var b bytes.Buffer
	dst := newLockedWriter(nil, &b)
	var wg sync.WaitGroup
	for r := range 4 {
		w := newPrefixWriter(dst, string(rune('A'+r))+" ")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				w.Write([]byte("012345"))
				w.Write([]byte("6789\n"))
			}
		}()
	}
	wg.Wait()
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if len(l) != 12 || l[2:] != "0123456789" {
			t.Fatalf("mixed line %q", l)
		}
	}
}
