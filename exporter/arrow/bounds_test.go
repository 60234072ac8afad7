package arrow

import (
	"bytes"
	"io"
	"math/rand"
	"os"
	"testing"

	"github.com/vccl-go/vccl/internal/bounded"
)

// A Parquet trace whose stored Arrow schema (ARROW:schema, base64 in the
// footer) is corrupted in any of its characters is refused or read within
// 5 s and 200 MB: unverified, a corrupted vector length in it made
// pqarrow allocate until the process died.
func TestHostileParquetSchema(t *testing.T) {
	t.Parallel()
	bounded.Check(t, bounded.Issue31, func(t *testing.T) {
		s, err := New(testMeta(), WithDir(t.TempDir()), WithFormat(FormatParquet), WithBatchRows(10))
		if err != nil {
			t.Fatal(err)
		}
		consumeAll(t, s, genRecords(1, 30), 30)
		if err := s.Shutdown(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(s.Files()[0])
		if err != nil {
			t.Fatal(err)
		}
		// The last footer's copy of the schema: the value after the key.
		key := []byte("ARROW:schema")
		at := bytes.LastIndex(data, key)
		if at < 0 {
			t.Fatal("no ARROW:schema in the footer")
		}
		start := at + len(key) + 4 // thrift: the value's field header and length
		const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
		rng := rand.New(rand.NewSource(1))
		refused := 0
		for range 400 {
			d := bytes.Clone(data)
			for range 1 + rng.Intn(3) {
				i := start + rng.Intn(2000)
				if i < len(d)-8 && bytes.IndexByte([]byte(b64), d[i]) >= 0 {
					d[i] = b64[rng.Intn(len(b64))]
				}
			}
			r, err := NewReaderAt("hostile.parquet", bytes.NewReader(d), int64(len(d)))
			if err != nil {
				refused++
				continue
			}
			for {
				if _, err := r.Next(); err != nil {
					if err != io.EOF {
						refused++
					}
					break
				}
			}
			r.Close()
		}
		t.Logf("%d of 400 corrupted schemas refused", refused)
	})
}
