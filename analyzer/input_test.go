package analyzer

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/flowtel"
)

// copyScenario copies a corpus scenario's trace files into a fresh
// directory and returns it with the files' new paths.
func copyScenario(t testing.TB, name string) (string, []string) {
	t.Helper()
	src, err := arrow.ListFiles(filepath.Join(corpusDir, name))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var out []string
	for _, f := range src {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return dir, out
}

func hasWarning(r *Report, parts ...string) bool {
	for _, w := range r.Warnings {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(w, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// A file cut short (a killed writer) is read up to its last complete batch,
// with a warning; the job is still diagnosed.
func TestInputTruncated(t *testing.T) {
	t.Parallel()
	dir, files := copyScenario(t, "straggler-4r")
	b, _ := os.ReadFile(files[1])
	if err := os.WriteFile(files[1], b[:len(b)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := AnalyzeFiles(context.Background(), []string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasWarning(r, filepath.Base(files[1])) {
		t.Errorf("no warning naming the cut file: %q", r.Warnings)
	}
	want(t, r, "straggler 3 -1")
}

// Garbage, an empty file, a file of an unknown schema version and a file of
// another job: each a warning naming it, the rest analysed.
func TestInputBadFiles(t *testing.T) {
	t.Parallel()
	dir, files := copyScenario(t, "straggler-4r")
	garbage := filepath.Join(dir, "vccl-garbage-rank9-000.arrow")
	os.WriteFile(garbage, bytes.Repeat([]byte("not a trace "), 100), 0o644)
	empty := filepath.Join(dir, "vccl-empty-rank8-000.arrow")
	os.WriteFile(empty, nil, 0o644)
	// Another schema version: the metadata's version string, patched.
	b, _ := os.ReadFile(files[0])
	future := filepath.Join(dir, "vccl-future-rank7-000.arrow")
	key := []byte(arrow.KeySchemaVersion)
	i := bytes.Index(b, key)
	if i < 0 {
		t.Fatal("no schema version key in the trace")
	}
	// The value, a flatbuffer string "1", lies just before the key.
	patched := bytes.Clone(b)
	j := bytes.LastIndex(patched[:i], []byte{1, 0, 0, 0, '1', 0})
	if j < 0 || j < i-64 {
		t.Fatal("no schema version value before its key")
	}
	patched[j+4] = '9'
	os.WriteFile(future, patched, 0o644)
	// Another job's rank 0.
	_, others := copyScenario(t, "clean-4r")
	foreign := filepath.Join(dir, "vccl-zzzz-"+filepath.Base(others[0]))
	ob, _ := os.ReadFile(others[0])
	os.WriteFile(foreign, ob, 0o644)

	r, err := AnalyzeFiles(context.Background(), []string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{garbage, empty, future, foreign} {
		if !hasWarning(r, filepath.Base(f)) {
			t.Errorf("no warning naming %s: %q", filepath.Base(f), r.Warnings)
		}
	}
	if !hasWarning(r, filepath.Base(future), "version") {
		t.Errorf("the unknown version is not said: %q", r.Warnings)
	}
	if !hasWarning(r, filepath.Base(foreign), "another job") {
		t.Errorf("the other job is not said: %q", r.Warnings)
	}
	want(t, r, "straggler 3 -1")
}

func TestInputMissingRank(t *testing.T) {
	t.Parallel()
	dir, files := copyScenario(t, "tbf-start-4r")
	os.Remove(files[3])
	r, err := AnalyzeFiles(context.Background(), []string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasWarning(r, "no trace of rank(s) [3]") {
		t.Errorf("warnings %q", r.Warnings)
	}
	want(t, r, "slow_link 1 2")
}

func TestInputErrors(t *testing.T) {
	t.Parallel()
	if _, err := AnalyzeFiles(context.Background(), []string{filepath.Join(t.TempDir(), "nope")}, Options{}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing path: %v", err)
	}
	if _, err := AnalyzeFiles(context.Background(), []string{t.TempDir()}, Options{}); err == nil || !strings.Contains(err.Error(), "no trace files") {
		t.Errorf("empty directory: %v", err)
	}
	g := filepath.Join(t.TempDir(), "x.arrow")
	os.WriteFile(g, []byte("garbage"), 0o644)
	if _, err := AnalyzeFiles(context.Background(), []string{g}, Options{}); err == nil || !strings.Contains(err.Error(), "x.arrow") {
		t.Errorf("only garbage: %v", err)
	}
	if _, err := AnalyzeFiles(context.Background(), []string{g}, Options{SlowLink: SlowLinkOptions{Ratio: 3}}); err == nil || !strings.Contains(err.Error(), "slow_link.ratio") {
		t.Errorf("bad option: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := AnalyzeFiles(ctx, []string{filepath.Join(corpusDir, "clean-4r")}, Options{}); err == nil {
		t.Error("cancelled context: no error")
	}
}

func TestOptionsSet(t *testing.T) {
	t.Parallel()
	var o Options
	for _, kv := range [][2]string{{"straggler.min_late", "5ms"}, {"slow_link.ratio", "0.3"}, {"hol.min_blocked", "4"}, {"backpressure.min_backlog", "1MiB"}} {
		if err := o.Set(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if o.Straggler.MinLate != 5e6 || o.SlowLink.Ratio != 0.3 || o.HOL.MinBlocked != 4 || o.Backpressure.MinBacklog != 1<<20 {
		t.Errorf("%+v", o)
	}
	if err := o.Set("nope", "1"); err == nil || !strings.Contains(err.Error(), "straggler.min_late") {
		t.Errorf("unknown option: %v", err)
	}
	if err := o.Set("slow_link.ratio", "x"); err == nil {
		t.Error("bad value accepted")
	}
	if len(OptionNames()) < 30 {
		t.Errorf("OptionNames: %v", OptionNames())
	}
}

// recordsOf reads data as consecutive 64-byte records.
func recordsOf(data []byte) []flowtel.Record {
	n := len(data) / flowtel.RecordSize
	recs := make([]flowtel.Record, n)
	if n > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&recs[0])), n*flowtel.RecordSize), data)
	}
	return recs
}

// FuzzAnalyze feeds the detectors arbitrary records, whole and through a
// sliding window: no panic, and memory bounded by the input.
func FuzzAnalyze(f *testing.F) {
	s := newSynth(3)
	for range 3 {
		s.allReduce(256 << 10)
	}
	recs := s.merged()
	f.Add(unsafe.Slice((*byte)(unsafe.Pointer(&recs[0])), len(recs)*flowtel.RecordSize)[:64*min(len(recs), 200)])
	var one [64]byte
	binary.LittleEndian.PutUint64(one[:], 1)
	f.Add(one[:])
	f.Fuzz(func(t *testing.T, data []byte) {
		recs := recordsOf(data)
		a, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(recs); i += 7 {
			j := min(i+7, len(recs))
			a.Add(recs[i:j])
			a.Advance(recs[j-1].TsNs)
		}
		r := a.Finish()
		var sb strings.Builder
		r.WriteText(&sb, true)
		r.WriteJSON(&sb)
		r.WriteHTML(&sb)
		lv, _ := NewLive(Options{}, 0)
		for i := 0; i < len(recs); i += 5 {
			j := min(i+5, len(recs))
			lv.Add(recs[i:j])
			lv.Update(recs[j-1].TsNs)
		}
	})
}

// FuzzAnalyzeFile analyses arbitrary bytes as a trace file beside a good
// one: an error or warning naming it, never a panic.
func FuzzAnalyzeFile(f *testing.F) {
	for _, name := range []string{"hol-2r", "straggler-4r"} {
		files, _ := arrow.ListFiles(filepath.Join(corpusDir, name))
		b, _ := os.ReadFile(files[0])
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte("ARROW1\x00\x00"))
	good, _ := arrow.ListFiles(filepath.Join(corpusDir, "hol-2r"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, "fuzz.arrow")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := AnalyzeFiles(context.Background(), []string{p, good[1]}, Options{})
		if err != nil {
			t.Fatalf("a good file beside: %v", err)
		}
		_ = r
	})
}

// A million calls that one rank begins and its peer never joins: the
// analyzer keeps a bounded number open and expires the oldest in constant
// time, so the whole trace takes time linear in its length (it took the
// square before: every new call scanned every open one) and memory that
// does not grow with it.
func TestMillionUnfinishedCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("a million records")
	}
	const n = 1_000_000
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	a.SetWorldSize(1, 2)
	batch := make([]flowtel.Record, 0, 4096)
	start := time.Now()
	var ms runtime.MemStats
	var peak uint64
	for i := range n {
		batch = append(batch, flowtel.Record{TsNs: int64(i+1) * 1000, Kind: flowtel.KindCollBegin, Comm: 1, Rank: 0, Peer: -1,
			CollSeq: uint64(i + 1), Op: flowtel.OpAllReduce, Step: 1, Bytes: 1 << 20})
		if len(batch) == cap(batch) {
			a.Add(batch)
			a.Advance(batch[len(batch)-1].TsNs)
			batch = batch[:0]
			if i%(n/8) < cap(batch) {
				runtime.GC()
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
	}
	a.Add(batch)
	r := a.Finish()
	took := time.Since(start)
	t.Logf("%d unfinished calls in %v, heap at most %d MiB; %d findings", n, took, peak>>20, len(r.Findings))
	// Linear is about a second here; the square was minutes.
	if took > 60*time.Second {
		t.Errorf("a million unfinished calls took %v", took)
	}
	if peak > 200<<20 {
		t.Errorf("heap reached %d MiB", peak>>20)
	}
}

// TestMemoryFlatInTraceLength feeds a healthy job ten times longer than
// another and asserts the analyzer's heap did not grow with it: what it
// keeps per link, call and chart is bounded.
func TestMemoryFlatInTraceLength(t *testing.T) {
	if testing.Short() {
		t.Skip("millions of records")
	}
	heapAfter := func(colls int) (uint64, int) {
		s := newSynth(4)
		a, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		a.SetWorldSize(s.comm, 4)
		n := 0
		var ms runtime.MemStats
		var peak uint64
		for done := 0; done < colls; done += 50 {
			for range 50 {
				s.allReduce(1 << 20)
			}
			recs := s.merged()
			n += len(recs)
			a.Add(recs)
			a.Advance(recs[len(recs)-1].TsNs)
			for r := range s.recs {
				s.recs[r] = s.recs[r][:0]
			}
			if done%(colls/5) == 0 {
				runtime.GC()
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
		if r := a.Finish(); len(r.Findings) != 0 {
			t.Errorf("%d collectives of a healthy job: %d findings, first %s", colls, len(r.Findings), r.Findings[0].Summary)
		}
		return peak, n
	}
	short, nShort := heapAfter(500)
	long, nLong := heapAfter(5000)
	t.Logf("%d records: heap at most %d MiB; %d records: %d MiB", nShort, short>>20, nLong, long>>20)
	if long > short+short/2+8<<20 {
		t.Errorf("heap grew with the trace: %d MiB for %d records, %d MiB for %d", short>>20, nShort, long>>20, nLong)
	}
}
