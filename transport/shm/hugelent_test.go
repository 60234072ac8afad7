//go:build linux

package shm

import (
	"testing"

	"github.com/vccl-go/vccl/internal/hugepages"
)

// TestAdviseSingleCopy: a buffer is collapsed the second time it is
// seen, and asked again once every hugeRecheck times after (its
// addresses may hold other memory by then); small buffers never.
func TestAdviseSingleCopy(t *testing.T) {
	hugeLent.mu.Lock()
	hugeLent.seen, hugeLent.done, hugeLent.ns, hugeLent.nd = [hugeSpans]span{}, [hugeSpans]collapsed{}, 0, 0
	hugeLent.mu.Unlock()

	b, unmap, err := hugepages.Map(16 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer unmap()
	kb := func() int {
		t.Helper()
		n, err := hugepages.KB(b)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	small := make([]byte, hugeMin-1)
	before := kb()
	steps := []struct {
		name string
		buf  []byte
		want bool
	}{
		{"first sight", b, false},
		{"small", small, false},
		{"small again", small, false},
		{"second sight", b, true},
		{"third sight", b, false},
		{"a part of it", b[4<<20 : 12<<20], false},
	}
	for _, st := range steps {
		if got := AdviseSingleCopy(st.buf); got != st.want {
			t.Fatalf("%s: collapsed %v, want %v", st.name, got, st.want)
		}
		if st.name == "first sight" && kb() != before {
			t.Fatalf("first sight changed the mapping's huge pages: %d kB -> %d", before, kb())
		}
	}
	asked := 0
	for range hugeRecheck {
		if AdviseSingleCopy(b) {
			asked++
		}
	}
	if asked != 1 {
		t.Fatalf("%d collapses asked in %d sightings of a collapsed buffer, want 1", asked, hugeRecheck)
	}
	if AdviseSingleCopy(make([]byte, 8<<20)) {
		t.Fatal("a new buffer was collapsed at first sight")
	}
	for i := range b {
		if b[i] != byte(i) {
			t.Fatalf("byte %d changed in the collapse: %d", i, b[i])
		}
	}
	if ok, why := hugepages.Collapses(); !ok {
		t.Skip(why)
	}
	// 7 whole huge pages lie in 16 MiB wherever it starts.
	if after := kb(); after < before+7*hugepages.Page>>10 {
		t.Fatalf("the buffer was not collapsed: AnonHugePages %d kB -> %d", before, after)
	}
}
