package arrow

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
)

// seedTraces returns small traces of every kind the sink writes, finished
// and cut.
func seedTraces(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, opts := range [][]Option{
		{WithFormat(FormatFile)},
		{WithFormat(FormatStream)},
		{WithFormat(FormatFile), WithCompression(CompressionLZ4)},
		{WithFormat(FormatStream), WithCompression(CompressionZstd)},
		{WithFormat(FormatParquet)},
		{WithFormat(FormatParquet), WithCompression(CompressionZstd)},
	} {
		s, err := New(testMeta(), append([]Option{WithDir(f.TempDir()), WithBatchRows(3)}, opts...)...)
		if err != nil {
			f.Fatal(err)
		}
		consumeAll(f, s, genRecords(1, 7), 7)
		if err := s.Shutdown(testCtx(f)); err != nil {
			f.Fatal(err)
		}
		data, err := os.ReadFile(s.Files()[0])
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, data, data[:len(data)*2/3], data[:len(data)/3])
	}
	return seeds
}

// FuzzReader feeds the reader arbitrary bytes (seeded with Arrow file,
// Arrow stream and Parquet traces, whole and cut): it must return records
// or an error that names the input, never panic, hang or allocate without
// bound.
func FuzzReader(f *testing.F) {
	for _, s := range seedTraces(f) {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add([]byte("ARROW1\x00\x00"))
	f.Add([]byte("\xff\xff\xff\xff\x00\x00\x00\x00"))
	f.Add([]byte("PAR1"))
	f.Add([]byte("PAR1\x00\x00\x00\x00PAR1"))
	defer func(m, b int64, a int) { maxMetadataBytes, maxBodyBytes, allocLimit = m, b, a }(maxMetadataBytes, maxBodyBytes, allocLimit)
	maxMetadataBytes, maxBodyBytes, allocLimit = 1<<20, 4<<20, 4<<20
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReaderAt("fuzz.arrow", bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.arrow") {
				t.Fatalf("error does not name the input: %v", err)
			}
			return
		}
		defer r.Close()
		total := 0
		for range 1 << 16 {
			recs, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				if !strings.Contains(err.Error(), "fuzz.arrow") || !errors.Is(err, ErrNotTrace) && !errors.Is(err, ErrSchemaVersion) {
					t.Fatalf("error does not name the input or say what is wrong: %v", err)
				}
				return
			}
			total += len(recs)
		}
		if fi := r.File(); fi.Records != int64(total) {
			t.Fatalf("FileInfo says %d records, Next returned %d", fi.Records, total)
		}
	})
}
