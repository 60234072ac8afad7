package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vccl-go/vccl/exporter/arrow"
)

// A stored job converts to Parquet and back with the same records, and the
// analysis of the Parquet traces is the analysis of the Arrow ones.
func TestConvertAndRepair(t *testing.T) {
	src := filepath.Join(corpus, "straggler-4r")
	pq, back := t.TempDir(), t.TempDir()
	if code, _, errOut := run(t, "convert", "-format", "parquet", "-o", pq, src); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, errOut)
	}
	if code, _, errOut := run(t, "export", "-format", "file", "-o", back, pq); code != 0 {
		t.Fatalf("export back: exit %d: %s", code, errOut)
	}
	want, err := arrow.ReadAll(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{pq, back} {
		got, err := arrow.ReadAll(dir)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: %d records (%v), want the %d of %s", dir, len(got), err, len(want), src)
		}
	}
	_, a, _ := run(t, "--json", src)
	_, b, _ := run(t, "--json", pq)
	if strings.Count(a, `"kind"`) != strings.Count(b, `"kind"`) || !strings.Contains(b, "straggler") {
		t.Errorf("the Parquet traces analyse otherwise:\n%s\nvs\n%s", b, a)
	}

	// A Parquet file with a torn tail, as a writer killed inside a flush
	// leaves it.
	files, _ := arrow.ListFiles(pq)
	data, _ := os.ReadFile(files[0])
	if err := os.WriteFile(files[0], append(data, "torn row group"...), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "repair", files[0])
	if code != 0 || !strings.Contains(out, "repaired") {
		t.Fatalf("repair: exit %d: %s%s", code, out, errOut)
	}
	if fixed, _ := os.ReadFile(files[0]); len(fixed) != len(data) {
		t.Errorf("repaired to %d bytes, want %d", len(fixed), len(data))
	}
	if code, _, _ := run(t, "convert", "-format", "orc", "-o", pq, src); code != 2 {
		t.Errorf("a bad format: exit %d, want 2", code)
	}
}
