package analyzer

import (
	"context"
	"path/filepath"
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
	files, _ := filepath.Glob(filepath.Join(dir, "*.arrow"))
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
