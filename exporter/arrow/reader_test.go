package arrow

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	arrowgo "github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/vccl-go/vccl/flowtel"
)

// schemaWith returns the trace schema with metadata key k set to v (removed
// when v is empty) and the fields changed by edit.
func schemaWith(k, v string, edit func([]arrowgo.Field) []arrowgo.Field) *arrowgo.Schema {
	s := schemaFor(testMeta())
	md := s.Metadata()
	var keys, vals []string
	for i, key := range md.Keys() {
		if key != k {
			keys, vals = append(keys, key), append(vals, md.Values()[i])
		}
	}
	if v != "" {
		keys, vals = append(keys, k), append(vals, v)
	}
	nmd := arrowgo.NewMetadata(keys, vals)
	fields := slices.Clone(s.Fields())
	if edit != nil {
		fields = edit(fields)
	}
	return arrowgo.NewSchema(fields, &nmd)
}

func TestReaderRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	recs := genRecords(1, 10)
	for _, tc := range []struct {
		name   string
		schema *arrowgo.Schema
		is     error
		want   string
	}{
		{"version2", schemaWith(KeySchemaVersion, "2", nil), ErrSchemaVersion, "version 2"},
		{"noversion", schemaWith(KeySchemaVersion, "", nil), ErrNotTrace, "no vccl.schema_version"},
		{"badversion", schemaWith(KeySchemaVersion, "one", nil), ErrNotTrace, `"one"`},
		{"badrank", schemaWith(KeyRank, "r1", nil), ErrNotTrace, "vccl.rank"},
		{"badnames", schemaWith(KeyKindNames, "{", nil), ErrNotTrace, "vccl.kind_names"},
		{"nocolumn", schemaWith("", "", func(f []arrowgo.Field) []arrowgo.Field { return f[:nCols-1] }), ErrNotTrace, `no column "step"`},
		{"wrongtype", schemaWith("", "", func(f []arrowgo.Field) []arrowgo.Field {
			f[colKind].Type = arrowgo.PrimitiveTypes.Int64
			return f
		}), ErrNotTrace, `column "kind" has type int64, want uint8`},
	} {
		for _, stream := range []bool{false, true} {
			path := filepath.Join(dir, tc.name+".arrow")
			if stream {
				path += "s"
			}
			if tc.name == "wrongtype" || tc.name == "nocolumn" {
				// The batch must match the schema: write no batch.
				writeRaw(t, path, tc.schema, stream)
			} else {
				writeRaw(t, path, tc.schema, stream, recs)
			}
			_, err := Open(path)
			if err == nil {
				t.Errorf("%s: opened", path)
				continue
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v; want %v naming the file and saying %s", path, err, tc.is, tc.want)
			}
		}
	}

	for name, data := range map[string]string{
		"text.arrow":    "hello, this is not Arrow at all",
		"short.arrow":   "ARX",
		"magic.arrow":   "ARROW1\x00\x00garbage garbage garbage garbage",
		"stream.arrows": "\xff\xff\xff\xff\x08\x00\x00\x00garbage!",
	} {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(data), 0o644)
		_, err := Open(path)
		if err == nil || !errors.Is(err, ErrNotTrace) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want ErrNotTrace naming the file", name, err)
		}
	}
	if _, err := Open(filepath.Join(dir, "missing.arrow")); err == nil {
		t.Error("opened a missing file")
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no trace files") {
		t.Errorf("empty directory: %v", err)
	}
}

// A directory with a bad file among good ones: the good ones read, then an
// error names the bad one.
func TestReaderErrorNamesTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeRaw(t, filepath.Join(dir, "a.arrow"), schemaFor(testMeta()), false, genRecords(1, 5))
	writeRaw(t, filepath.Join(dir, "b.arrow"), schemaWith(KeySchemaVersion, "9", nil), false, genRecords(6, 5))
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := r.Next()
	if err != nil || len(recs) != 5 {
		t.Fatalf("first file: %d records, %v", len(recs), err)
	}
	_, err = r.Next()
	if !errors.Is(err, ErrSchemaVersion) || !strings.Contains(err.Error(), "b.arrow") {
		t.Fatalf("second file: %v", err)
	}
	if _, err2 := r.Next(); err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("error not sticky: %v", err2)
	}
}

// Cut a trace at every length: what remains reads without error as the
// batches that are complete, and the cut shows as an unfinished file.
func TestReaderEveryCut(t *testing.T) {
	t.Parallel()
	for _, f := range []Format{FormatFile, FormatStream} {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			s := newTestSink(t, WithFormat(f), WithBatchRows(8))
			want := genRecords(1, 30) // batches of 8, 8, 8, 6
			consumeAll(t, s, want, 30)
			if err := s.Shutdown(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			full, err := os.ReadFile(s.Files()[0])
			if err != nil {
				t.Fatal(err)
			}
			counts := map[int]int{}
			step := 1
			if testing.Short() {
				step = 7
			}
			for cut := 0; cut <= len(full); cut += step {
				data := full[:cut]
				r, err := NewReaderAt("cut", strings.NewReader(string(data)), int64(cut))
				if err != nil {
					t.Fatalf("cut at %d of %d: %v", cut, len(full), err)
				}
				var got []flowtel.Record
				for {
					recs, err := r.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatalf("cut at %d of %d: %v", cut, len(full), err)
					}
					got = append(got, recs...)
				}
				if !slices.Equal(got, want[:len(got)]) || (len(got) != len(want) && len(got)%8 != 0) {
					t.Fatalf("cut at %d: %d records, not a prefix of whole batches", cut, len(got))
				}
				fi := r.File()
				if fi.Finished != (cut == len(full)) {
					t.Fatalf("cut at %d of %d: Finished %v", cut, len(full), fi.Finished)
				}
				counts[len(got)]++
			}
			for _, n := range []int{0, 8, 16, 24, 30} {
				if counts[n] == 0 {
					t.Errorf("no cut read %d records: %v", n, counts)
				}
			}
		})
	}
}

func TestRepair(t *testing.T) {
	t.Parallel()
	for _, f := range []Format{FormatFile, FormatStream} {
		t.Run(f.String(), func(t *testing.T) {
			s := newTestSink(t, WithFormat(f), WithBatchRows(100))
			want := genRecords(1, 350)
			consumeAll(t, s, want, 350)
			if err := s.Shutdown(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			path := s.Files()[0]
			full, _ := os.ReadFile(path)
			// Cut inside the last batch (and before any footer): 1000
			// bytes before the end of the stream is inside the 50-row
			// batch's body.
			streamEnd := int64(len(full)) - int64(len(eosMarker))
			if f == FormatFile {
				var ok bool
				if streamEnd, ok = findFooter(bytes.NewReader(full), int64(len(full))); !ok {
					t.Fatal("no footer")
				}
			}
			if err := os.WriteFile(path, full[:streamEnd-1000], 0o600); err != nil {
				t.Fatal(err)
			}
			os.Chmod(path, 0o600)
			info, err := Repair(path)
			if err != nil {
				t.Fatal(err)
			}
			if !info.Finished || info.Records != 300 || info.Batches != 3 {
				t.Errorf("repair: %+v", info)
			}
			if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
				t.Errorf("repaired file mode %v, want the original 0600", st.Mode().Perm())
			}
			// Any Arrow reader now takes it: the library's own, strictly.
			fh, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			rows := int64(0)
			if f == FormatFile {
				fr, err := ipc.NewFileReader(fh)
				if err != nil {
					t.Fatalf("the Arrow file reader refuses the repaired file: %v", err)
				}
				for i := range fr.NumRecords() {
					rb, err := fr.RecordBatch(i)
					if err != nil {
						t.Fatal(err)
					}
					rows += rb.NumRows()
				}
				fr.Close()
			} else {
				sr, err := ipc.NewReader(fh)
				if err != nil {
					t.Fatal(err)
				}
				for sr.Next() {
					rows += sr.RecordBatch().NumRows()
				}
				if sr.Err() != nil {
					t.Fatalf("the Arrow stream reader: %v", sr.Err())
				}
				sr.Release()
			}
			if rows != 300 {
				t.Fatalf("repaired file has %d rows, want 300", rows)
			}
			got, err := ReadAll(path)
			if err != nil || !slices.Equal(got, want[:300]) {
				t.Fatalf("repaired file reads %d records (%v)", len(got), err)
			}
			// Repairing a finished file does nothing.
			before, _ := os.ReadFile(path)
			if _, err := Repair(path); err != nil {
				t.Fatal(err)
			}
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Error("Repair changed a finished file")
			}
			if matches, _ := filepath.Glob(path + ".repair-*"); len(matches) != 0 {
				t.Errorf("left behind %v", matches)
			}
		})
	}
}

// Nulls (which the sink never writes, but another tool might) read as zero.
func TestReaderNulls(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nulls.arrow")
	s := schemaFor(testMeta())
	recs := genRecords(1, 20)
	b := newColBatch(20)
	b.append(recs)
	rb := b.record(s, 0)
	defer rb.Release()
	// Null out every odd row of "bytes".
	bitmap := make([]byte, 8)
	for i := 0; i < 20; i += 2 {
		bitmap[i/8] |= 1 << (i % 8)
	}
	vals := rb.Column(colBytes).Data().Buffers()[1]
	data := array.NewData(arrowgo.PrimitiveTypes.Uint64, 20, []*memory.Buffer{memory.NewBufferBytes(bitmap), vals}, nil, 10, 0)
	nb := array.MakeFromData(data)
	data.Release()
	defer nb.Release()
	cols := slices.Clone(rb.Columns())
	cols[colBytes] = nb
	withNulls := array.NewRecordBatch(s, cols, 20)
	defer withNulls.Release()
	fh, _ := os.Create(path)
	w, _ := ipc.NewFileWriter(fh, ipc.WithSchema(s))
	if err := w.Write(withNulls); err != nil {
		t.Fatal(err)
	}
	w.Close()
	fh.Close()
	got, err := ReadAll(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		want := recs[i]
		if i%2 == 1 {
			want.Bytes = 0
		}
		if r != want {
			t.Fatalf("record %d: %v, want %v", i, r, want)
		}
	}
}
