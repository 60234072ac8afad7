package arrow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	arrowgo "github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/vccl-go/vccl/flowtel"
)

// genRecords returns n records whose every field varies, numbered from
// first: record i has TsNs first+i.
func genRecords(first, n int) []flowtel.Record {
	recs := make([]flowtel.Record, n)
	for j := range recs {
		i := first + j
		recs[j] = flowtel.Record{
			TsNs:    int64(first + j),
			CollSeq: uint64(i / 7),
			WrID:    uint64(i)<<1 | uint64(i&1),
			Bytes:   uint64(i) * 4099,
			Rank:    int32(i % 3),
			Peer:    int32(i%5) - 1,
			QP:      uint32(i % 11),
			Comm:    0xdeadbeef,
			Depth:   uint32(i % 13),
			Step:    uint32(i % 17),
			Channel: uint16(i % 4),
			Kind:    flowtel.Kind(i%11 + 1),
			Status:  flowtel.Status(i % 4),
			Op:      flowtel.Op(i % 5),
			Algo:    flowtel.Algorithm(i % 6),
			Dtype:   flowtel.Datatype(i % 9),
			Path:    flowtel.Path(i % 2),
		}
	}
	return recs
}

func testMeta() Meta {
	return Meta{Rank: 1, WorldSize: 4, CommUID: "0123456789abcdef0123456789abcdef", CommID: 0xdeadbeef,
		Host: "node7", PID: 4242, ClockOffsetNs: -1234, ClockErrorNs: 56, WallUnixNs: 1700000000000000000, WallTsNs: 99}
}

func newTestSink(t testing.TB, opts ...Option) *Sink {
	t.Helper()
	s, err := New(testMeta(), append([]Option{WithDir(t.TempDir())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func consumeAll(t testing.TB, s *Sink, recs []flowtel.Record, chunk int) {
	t.Helper()
	ctx := testCtx(t)
	for len(recs) > 0 {
		k := min(chunk, len(recs))
		if err := s.Consume(ctx, recs[:k]); err != nil {
			t.Fatal(err)
		}
		recs = recs[k:]
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"default", nil},
		{"file", []Option{WithFormat(FormatFile)}},
		{"stream", []Option{WithFormat(FormatStream)}},
		{"parquet", []Option{WithFormat(FormatParquet)}},
		{"lz4", []Option{WithCompression(CompressionLZ4), WithFormat(FormatFile)}},
		{"zstd-parquet", []Option{WithCompression(CompressionZstd), WithFormat(FormatParquet)}},
		{"zstd-stream", []Option{WithCompression(CompressionZstd), WithFormat(FormatStream)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSink(t, append([]Option{WithBatchRows(1000)}, tc.opts...)...)
			want := genRecords(1, 4321)
			consumeAll(t, s, want, 333)
			if err := s.Shutdown(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			files := s.Files()
			if len(files) != 1 || !strings.HasSuffix(files[0], s.Format().Ext()) {
				t.Fatalf("files %v, want one %s file", files, s.Format().Ext())
			}
			if base := filepath.Base(files[0]); base != "vccl-deadbeef-rank1-000"+s.Format().Ext() {
				t.Errorf("file name %s", base)
			}
			st := s.Stats()
			if st.Records != uint64(len(want)) || st.Batches != 5 || st.Dropped != 0 || st.Err != nil || st.Files != 1 {
				t.Errorf("stats %+v", st)
			}
			if fi, _ := os.Stat(files[0]); fi.Size() != int64(st.Bytes) {
				t.Errorf("file has %d bytes, stats say %d", fi.Size(), st.Bytes)
			}
			r, err := Open(s.Dir())
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var got []flowtel.Record
			for {
				recs, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) > 1000 {
					t.Fatalf("a batch of %d records, want at most 1000", len(recs))
				}
				got = append(got, recs...)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("read %d records, wrote %d; first difference at %d", len(got), len(want), firstDiff(got, want))
			}
			info := r.File()
			if !info.Finished || info.Truncated || info.Batches != 5 || info.Records != int64(len(want)) || info.Format != s.Format() {
				t.Errorf("file info %+v", info)
			}
			m := info.Meta
			w := testMeta()
			if m.SchemaVersion != flowtel.SchemaVersion || m.Rank != w.Rank || m.WorldSize != w.WorldSize || m.CommUID != w.CommUID ||
				m.CommID != w.CommID || m.Host != w.Host || m.PID != w.PID || m.ClockOffsetNs != w.ClockOffsetNs ||
				m.ClockErrorNs != w.ClockErrorNs || m.WallUnixNs != w.WallUnixNs || m.WallTsNs != w.WallTsNs || m.Segment != 0 {
				t.Errorf("meta %+v, want %+v", m, w)
			}
			if m.KindName(flowtel.KindWC) != "wc" || m.StatusName(flowtel.StatusRetransmitted) != "retransmitted" || m.KindName(200) != "kind(200)" {
				t.Errorf("name tables %v %v", m.KindNames, m.StatusNames)
			}
		})
	}
}

func firstDiff(a, b []flowtel.Record) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// The Arrow schema is exactly schema v1 and the derived columns: names,
// order and types, and what the metadata holds, as any Arrow library sees
// it.
func TestSchema(t *testing.T) {
	t.Parallel()
	s := newTestSink(t, WithFormat(FormatFile))
	consumeAll(t, s, genRecords(1, 10), 10)
	if err := s.Shutdown(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(s.Files()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fr, err := ipc.NewFileReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	want := "ts_ns:int64 kind:uint8 status:uint8 op:uint8 algo:uint8 dtype:uint8 path:uint8 channel:uint16 rank:int32 peer:int32 qp:uint32 comm:uint32 coll_seq:uint64 wr_id:uint64 bytes:uint64 depth:uint32 step:uint32" +
		" time:timestamp[ns, tz=UTC] job_id:utf8 kind_name:dictionary<values=utf8, indices=uint8, ordered=false>" +
		" status_name:dictionary<values=utf8, indices=uint8, ordered=false> op_name:dictionary<values=utf8, indices=uint8, ordered=false>" +
		" algo_name:dictionary<values=utf8, indices=uint8, ordered=false> dtype_name:dictionary<values=utf8, indices=uint8, ordered=false>" +
		" path_name:dictionary<values=utf8, indices=uint8, ordered=false>"
	var got []string
	for _, fl := range fr.Schema().Fields() {
		got = append(got, fl.Name+":"+fl.Type.String())
	}
	if g := strings.Join(got, " "); g != want {
		t.Errorf("columns\n got %s\nwant %s", g, want)
	}
	md := fr.Schema().Metadata()
	for k, v := range map[string]string{
		KeySchemaVersion: "1", KeyRank: "1", KeyWorldSize: "4", KeyCommUID: testMeta().CommUID,
		KeyCommID: "3735928559", KeyJobID: "deadbeef", KeyHost: "node7", KeyClockOffset: "-1234", KeyClockError: "56", KeySegment: "0",
		KeyKindNames:   `["invalid","coll_begin","coll_end","wr_post","wc","credit_wait","credit_grant","failover","failback","link_down","link_up","lost","heartbeat"]`,
		KeyStatusNames: `["ok","error","flushed","retransmitted"]`,
	} {
		i := md.FindKey(k)
		if i < 0 {
			t.Errorf("metadata has no %s", k)
			continue
		}
		if md.Values()[i] != v {
			t.Errorf("metadata %s = %s, want %s", k, md.Values()[i], v)
		}
	}
}

func TestRotation(t *testing.T) {
	// 100-row batches are about 8.9 KB (the v1 columns and the derived
	// ones); rotate past 20 KB: 3 batches a file.
	s := newTestSink(t, WithBatchRows(100), WithMaxFileBytes(20<<10))
	want := genRecords(1, 1050)
	consumeAll(t, s, want, 64)
	if err := s.Shutdown(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	files := s.Files()
	if len(files) < 3 {
		t.Fatalf("files %v: want rotation", files)
	}
	for i, f := range files {
		if !strings.HasSuffix(f, fmt.Sprintf("-%03d.arrows", i)) {
			t.Errorf("file %d is %s", i, f)
		}
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if i < len(files)-1 && (fi.Size() < 20<<10 || fi.Size() > 40<<10) {
			t.Errorf("%s: %d bytes, want about 20 KiB", f, fi.Size())
		}
	}
	r, err := Open(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []flowtel.Record
	for {
		recs, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, recs...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("read %d records back, want %d (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
	infos := r.Files()
	if len(infos) != len(files) {
		t.Fatalf("%d file infos for %d files", len(infos), len(files))
	}
	for i, fi := range infos {
		if fi.Meta.Segment != i || !fi.Finished || fi.Path != files[i] {
			t.Errorf("file %d: %+v", i, fi)
		}
	}
}

// A partly filled batch is written when the flush ticker fires, without
// Flush or Shutdown.
func TestFlushOnTime(t *testing.T) {
	tick := make(chan time.Time)
	written := make(chan struct{}, 16)
	s := newTestSink(t, WithBatchRows(1000), func(c *config) {
		c.tick = tick
		c.onWrite = func() { written <- struct{}{} }
	})
	defer s.Shutdown(testCtx(t))
	consumeAll(t, s, genRecords(1, 10), 10)
	deadline := time.After(20 * time.Second)
	select {
	case tick <- time.Now():
	case <-deadline:
		t.Fatal("the writer did not take the tick")
	}
	select {
	case <-written:
	case <-deadline:
		t.Fatal("no batch written after a tick")
	}
	got := readUnfinished(t, s.Files()[0])
	if len(got) != 10 {
		t.Fatalf("%d records on disk after the tick, want 10", len(got))
	}
	// A full batch needs no tick.
	consumeAll(t, s, genRecords(11, 1000), 1000)
	select {
	case <-written:
	case <-deadline:
		t.Fatal("no batch written when one filled up")
	}
	if got := readUnfinished(t, s.Files()[0]); len(got) != 1010 {
		t.Fatalf("%d records on disk, want 1010", len(got))
	}
}

// readUnfinished reads a file the sink still writes.
func readUnfinished(t *testing.T, path string) []flowtel.Record {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var all []flowtel.Record
	for {
		recs, err := r.Next()
		if err == io.EOF {
			if r.File().Finished {
				t.Errorf("%s reads as finished", path)
			}
			return all
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
	}
}

func TestFlush(t *testing.T) {
	for _, f := range []Format{FormatFile, FormatStream} {
		t.Run(f.String(), func(t *testing.T) {
			s := newTestSink(t, WithFormat(f))
			defer s.Shutdown(testCtx(t))
			want := genRecords(1, 777)
			consumeAll(t, s, want, 100)
			if err := s.Flush(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			if got := readUnfinished(t, s.Files()[0]); !slices.Equal(got, want) {
				t.Fatalf("after Flush: %d records on disk, want %d", len(got), len(want))
			}
		})
	}
}

// A sink that got nothing leaves a valid empty trace with its metadata.
func TestEmpty(t *testing.T) {
	t.Parallel()
	for _, f := range []Format{FormatFile, FormatStream} {
		s := newTestSink(t, WithFormat(f))
		if err := s.Shutdown(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		r, err := Open(s.Files()[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("%s: Next = %v, want EOF", f, err)
		}
		if fi := r.File(); !fi.Finished || fi.Meta.Rank != 1 {
			t.Errorf("%s: %+v", f, fi)
		}
	}
}

// With the writer stuck, Consume waits once every batch is queued, and
// gives up with ctx; nothing is lost silently.
func TestConsumeWaitsForTheWriter(t *testing.T) {
	release := make(chan struct{})
	s := newTestSink(t, WithBatchRows(10), WithQueuedBatches(1), func(c *config) {
		c.onWrite = func() { <-release }
	})
	// Batch 1 is written (the writer then blocks in onWrite), batch 2
	// queues, batch 3 fills: the fourth needs a free batch.
	consumeAll(t, s, genRecords(1, 20), 10)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := s.Consume(ctx, genRecords(21, 30))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Consume with a stuck writer: %v, want the context's deadline", err)
	}
	close(release)
	if err := s.Shutdown(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Records+st.Dropped != 50 || st.Dropped == 0 {
		t.Fatalf("stats %+v: want 50 records written or dropped", st)
	}
	got, err := ReadAll(s.Dir())
	if err != nil || uint64(len(got)) != st.Records {
		t.Fatalf("read %d records (%v), stats say %d", len(got), err, st.Records)
	}
}

// Through a real collector: every record recorded arrives in the file.
func TestWithCollector(t *testing.T) {
	s := newTestSink(t, WithBatchRows(5000))
	col := flowtel.NewCollector(flowtel.WithRingCapacity(1 << 16))
	col.AddSink(s)
	col.Start()
	rec := col.NewRecorder()
	const n = 50000
	want := genRecords(1, n)
	for i := range want {
		r := want[i]
		rec.Record(&r)
	}
	if err := col.Shutdown(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if st := col.Stats(); st.RingDropped != 0 || st.Sinks[0].DroppedRecords != 0 {
		t.Fatalf("collector dropped records: %+v", st)
	}
	got, err := ReadAll(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("read %d records, want %d (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
}

func TestWriteErrorIsCountedAndReturned(t *testing.T) {
	s := newTestSink(t, WithBatchRows(10))
	// Break the file under the writer.
	s.seg.f.Close()
	// The batch fills and the write fails on the writer goroutine, which
	// may be done before this Consume returns: then it returns the error.
	if err := s.Consume(testCtx(t), genRecords(1, 10)); err != nil && !strings.Contains(err.Error(), s.Files()[0]) {
		t.Fatalf("Consume of the batch that fails: %v, want nil or an error naming the file", err)
	}
	err := s.Flush(testCtx(t))
	if err == nil || !strings.Contains(err.Error(), s.Files()[0]) {
		t.Fatalf("Flush after a failed write: %v, want an error naming the file", err)
	}
	if err := s.Consume(testCtx(t), genRecords(11, 5)); err == nil {
		t.Fatal("Consume after a failed write returned no error")
	}
	s.Shutdown(testCtx(t))
	if st := s.Stats(); st.Dropped != 15 || st.Records != 0 || st.Err == nil {
		t.Fatalf("stats %+v", st)
	}
}

func TestConfig(t *testing.T) {
	env := map[string]string{EnvDir: t.TempDir(), EnvFormat: "stream", EnvRotate: "1M"}
	fromEnv := func() []Option {
		t.Helper()
		opts, err := OptionsFromEnv(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		return append([]Option{WithDir(env[EnvDir])}, opts...)
	}
	s, err := New(testMeta(), fromEnv()...)
	if err != nil {
		t.Fatal(err)
	}
	if s.Format() != FormatStream || s.cfg.maxFileBytes != 1<<20 || s.Dir() != env[EnvDir] {
		t.Errorf("config from env: %+v", s.cfg)
	}
	s.Shutdown(testCtx(t))
	// Options after the environment's win.
	s, err = New(testMeta(), append(fromEnv(), WithFormat(FormatFile), WithMaxFileBytes(0))...)
	if err != nil {
		t.Fatal(err)
	}
	if s.Format() != FormatFile || s.cfg.maxFileBytes != 0 {
		t.Errorf("options did not win: %+v", s.cfg)
	}
	s.Shutdown(testCtx(t))

	t.Setenv(EnvDir, t.TempDir()) // the sink reads no environment
	if _, err := New(testMeta()); err == nil || !strings.Contains(err.Error(), EnvDir) {
		t.Errorf("no directory: %v", err)
	}
	for _, name := range []string{EnvFormat, EnvTraceFormat} {
		bad := map[string]string{name: "orc"}
		if _, err := OptionsFromEnv(func(k string) string { return bad[k] }); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("bad format in %s: %v", name, err)
		}
	}
	bad := map[string]string{EnvRotate: "huge"}
	if _, err := OptionsFromEnv(func(k string) string { return bad[k] }); err == nil || !strings.Contains(err.Error(), EnvRotate) {
		t.Errorf("bad rotation size: %v", err)
	}
	for in, want := range map[string]int64{"0": 0, "512K": 512 << 10, "64m": 64 << 20, "1GiB": 1 << 30, "2G": 2 << 30, "123": 123} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "1X", "99999999999T"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

// writeRaw writes batches of recs under schema s with the Arrow library
// directly, to make traces the sink would not.
func writeRaw(t testing.TB, path string, s *arrowgo.Schema, stream bool, recs ...[]flowtel.Record) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var w interface {
		Write(arrowgo.RecordBatch) error
		Close() error
	}
	if stream {
		w = ipc.NewWriter(f, ipc.WithSchema(s), ipc.WithAllocator(memory.DefaultAllocator))
	} else {
		if w, err = ipc.NewFileWriter(f, ipc.WithSchema(s)); err != nil {
			t.Fatal(err)
		}
	}
	for _, batch := range recs {
		b := newColBatch(len(batch))
		b.append(batch)
		rb := b.record(s, 0)
		if err := w.Write(rb); err != nil {
			t.Fatal(err)
		}
		rb.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
