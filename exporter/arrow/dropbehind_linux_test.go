package arrow

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// dropBehind starts writeback a chunk at a time and drops the chunk
// before; what it drops is still the file's, read back from the disk.
func TestDropBehind(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "trace"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := bytes.Repeat([]byte("vccl"), 4096)
	if _, err := f.Write(head); err != nil {
		t.Fatal(err)
	}
	var d dropBehind
	for _, tc := range []struct {
		end              int64
		started, dropped int64
	}{
		{int64(len(head)), 0, 0},                                    // less than a chunk: nothing yet
		{dropBehindChunk, dropBehindChunk, 0},                       // writeback of the first chunk
		{dropBehindChunk + 1, dropBehindChunk, 0},                   // not a chunk more
		{3 * dropBehindChunk, 3 * dropBehindChunk, dropBehindChunk}, // the first chunk dropped
		{4 * dropBehindChunk, 4 * dropBehindChunk, 3 * dropBehindChunk},
	} {
		// The file grows as a hole: the calls only need its size.
		if err := f.Truncate(tc.end); err != nil {
			t.Fatal(err)
		}
		d.wrote(f, tc.end)
		if d.started != tc.started || d.dropped != tc.dropped {
			t.Errorf("after %d bytes: writeback started to %d, dropped to %d; want %d and %d", tc.end, d.started, d.dropped, tc.started, tc.dropped)
		}
	}
	got := make([]byte, len(head))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, head) {
		t.Errorf("the dropped head reads back %q…, %v", got[:8], err)
	}
}
