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
