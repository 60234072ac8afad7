package analyzer

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/flowtel"
)

// benchRecords is a ring all-reduce job of 8 ranks, in time order.
func benchRecords(b *testing.B, colls int) []flowtel.Record {
	b.Helper()
	s := newSynth(8)
	s.chunk = 128 << 10
	for range colls {
		s.allReduce(8 << 20)
	}
	return s.merged()
}

// BenchmarkAnalyze measures the detectors alone on one core: records in
// memory, in time order, fed in batches as AnalyzeFiles does.
func BenchmarkAnalyze(b *testing.B) {
	recs := benchRecords(b, 200)
	b.SetBytes(int64(len(recs)) * flowtel.RecordSize)
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		a, err := New(Options{})
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < len(recs); i += 65536 {
			j := min(i+65536, len(recs))
			a.Add(recs[i:j])
			a.Advance(recs[j-1].TsNs)
		}
		a.Finish()
	}
	b.ReportMetric(float64(len(recs)*b.N)/b.Elapsed().Seconds(), "records/s")
	// The machine is shared: CPU time is the steadier measure.
	b.ReportMetric(float64(len(recs)*b.N)/(cpuTime()-cpu0).Seconds(), "records/cpu-s")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAnalyzeFiles measures the whole offline path: every rank's
// Arrow file read, merged and analysed.
func BenchmarkAnalyzeFiles(b *testing.B) {
	s := newSynth(8)
	s.chunk = 128 << 10
	for range 200 {
		s.allReduce(8 << 20)
	}
	s.merged() // sorts each rank's records
	dir := b.TempDir()
	n := 0
	for r := range s.n {
		sink, err := arrow.New(arrow.Meta{Rank: r, WorldSize: s.n, CommUID: "benchjob0", CommID: s.comm}, arrow.WithDir(dir))
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < len(s.recs[r]); i += 8192 {
			if err := sink.Consume(context.Background(), s.recs[r][i:min(i+8192, len(s.recs[r]))]); err != nil {
				b.Fatal(err)
			}
		}
		if err := sink.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
		n += len(s.recs[r])
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.arrow*"))
	b.SetBytes(int64(n) * flowtel.RecordSize)
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		r, err := AnalyzeFiles(context.Background(), files, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if r.Job.Records != uint64(n) {
			b.Fatalf("analysed %d records, want %d", r.Job.Records, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(n*b.N)/(cpuTime()-cpu0).Seconds(), "records/cpu-s")
}

// TestLargeTrace writes a trace set of VCCL_ANALYZER_BIG records (8 ranks,
// 8 MiB ring all-reduces), analyses it with AnalyzeFiles and reports the
// time, the rate and the peak memory of the analysis. Skipped unless set.
func TestLargeTrace(t *testing.T) {
	want, _ := strconv.Atoi(os.Getenv("VCCL_ANALYZER_BIG"))
	if want <= 0 {
		t.Skip("VCCL_ANALYZER_BIG (records) not set")
	}
	dir := os.Getenv("VCCL_ANALYZER_BIG_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.arrow*"))
	total := 0
	if len(files) == 0 {
		s := newSynth(8)
		s.chunk = 128 << 10
		sinks := make([]*arrow.Sink, s.n)
		for r := range s.n {
			var err error
			sinks[r], err = arrow.New(arrow.Meta{Rank: r, WorldSize: s.n, CommUID: "bigjob000", CommID: s.comm}, arrow.WithDir(dir))
			if err != nil {
				t.Fatal(err)
			}
		}
		for total < want {
			for range 20 {
				s.allReduce(8 << 20)
			}
			for r := range s.n {
				slices.SortStableFunc(s.recs[r], func(a, b flowtel.Record) int { return cmp.Compare(a.TsNs, b.TsNs) })
				for i := 0; i < len(s.recs[r]); i += 8192 {
					if err := sinks[r].Consume(context.Background(), s.recs[r][i:min(i+8192, len(s.recs[r]))]); err != nil {
						t.Fatal(err)
					}
				}
				total += len(s.recs[r])
				s.recs[r] = s.recs[r][:0]
			}
		}
		for _, k := range sinks {
			if err := k.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		files, _ = filepath.Glob(filepath.Join(dir, "*.arrow*"))
	}
	runtime.GC()
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // reset the peak RSS
	cpu0, start := cpuTime(), time.Now()
	r, err := AnalyzeFiles(context.Background(), files, Options{})
	if err != nil {
		t.Fatal(err)
	}
	el, cpu := time.Since(start), cpuTime()-cpu0
	status, _ := os.ReadFile("/proc/self/status")
	var hwm string
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM") {
			hwm = strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:"))
		}
	}
	t.Logf("%d records in %d files: %v wall (%.1f M records/s), %v CPU, peak RSS %s, %d findings",
		r.Job.Records, len(files), el, float64(r.Job.Records)/el.Seconds()/1e6, cpu, hwm, len(r.Findings))
}
