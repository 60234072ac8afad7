package arrow

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// What the vector writer keeps reaches the file as one stream of bytes,
// at the offset asked, from any byte on: more parts than a vectored write
// takes, short writes copied (their buffer reused at once by the caller),
// long ones shared.
func TestVectorWriterAt(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name  string
		parts int
		skip  int
	}{
		{"one part", 1, 0},
		{"small and large", 40, 8},
		{"beyond one vectored write", 3000, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v vectorWriter
			var want bytes.Buffer
			scratch := make([]byte, 4)
			for i := range tc.parts {
				var p []byte
				if i%3 == 0 {
					p = scratch // reused, as the IPC writer reuses its words
				} else {
					p = make([]byte, 1+rng.IntN(2*vectorCopyMax))
				}
				for j := range p {
					p[j] = byte(rng.Uint32())
				}
				want.Write(p)
				if n, err := v.Write(p); n != len(p) || err != nil {
					t.Fatalf("Write: %d, %v", n, err)
				}
			}
			if v.n != want.Len() {
				t.Fatalf("n = %d, want %d", v.n, want.Len())
			}
			f, err := os.Create(filepath.Join(t.TempDir(), "v"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			const at = 100
			if err := writeVectorAt(f, v.from(tc.skip), at+int64(tc.skip)); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(v.head(tc.skip), at); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[at:], want.Bytes()) {
				t.Fatalf("the file holds %d bytes from %d that differ from the %d written", len(got)-at, at, want.Len())
			}
			v.reset()
			if v.n != 0 || len(v.parts) != 0 {
				t.Fatalf("after reset: %d bytes in %d parts", v.n, len(v.parts))
			}
		})
	}
}
