package telemetry

import (
	"context"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
)

// BenchmarkExporters measures what the exporters a job has in production
// (an Arrow trace, the live endpoint's window and records, Prometheus
// metrics) cost a rank per record, as vccl-bench --telemetry alternate
// --exporters times them: one P, as a rank bound to one core runs, whose
// producer writes the records of 1 KiB mailbox all-reduces (6 a call) and
// settles every 2000 calls (the collector's Flush, then the trace's), as
// vccl-bench's blocks of bench/compare.sh's -n 20000 do. "none"
// is the records alone (a collector without sinks); the difference is the
// exporters' ns/record.
func BenchmarkExporters(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  func(dir string) Config
	}{
		{"none", nil},
		{"trace", func(dir string) Config { return Config{Dir: dir} }},
		{"live", func(string) Config { return Config{Live: true} }},
		{"all", func(dir string) Config { return Config{Dir: dir, Live: true} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			// Here: the testing package sets GOMAXPROCS (-cpu) before
			// every run of a benchmark function.
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			ctx := context.Background()
			col := flowtel.NewCollector()
			comms, err := collective.NewLocal(ctx, 1, collective.WithTelemetry(true), collective.WithTelemetryAttachers(false), collective.WithCollector(col))
			if err != nil {
				b.Fatal(err)
			}
			comm := comms[0]
			defer comm.Close()
			settle := col.Flush
			var ex *Exporters
			if tc.cfg != nil {
				ex, err = Attach(ctx, comm, tc.cfg(b.TempDir()))
				if err != nil {
					b.Fatal(err)
				}
				if ex.Arrow != nil {
					settle = func(ctx context.Context) error {
						if err := col.Flush(ctx); err != nil {
							return err
						}
						return ex.Arrow.Flush(ctx)
					}
				}
			}
			col.Start()
			rec := col.NewRecorder()
			call := mailboxCall(comm.ID())
			const perSettle = 2000
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := range b.N {
				ts := int64(i+1) * 1000
				for k := range call {
					r := call[k]
					r.TsNs = ts + int64(k/3)*200
					r.CollSeq = uint64(i + 1)
					if r.WrID != 0 {
						r.WrID += 2 * uint64(i)
					}
					rec.Record(&r)
				}
				if i%perSettle == perSettle-1 {
					if err := settle(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := settle(ctx); err != nil {
				b.Fatal(err)
			}
			cpu := cpuTime() - cpu0
			b.StopTimer()
			st := col.Stats()
			lost := st.RingDropped
			for _, s := range st.Sinks {
				lost += s.DroppedRecords
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(call)), "ns/record")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*len(call)), "cpu-ns/record")
			b.ReportMetric(float64(lost), "lost")
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := col.Shutdown(sctx); err != nil {
				b.Fatal(err)
			}
			if err := ex.Close(sctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// cpuTime is the process's CPU time, user and system: on a loaded machine
// it says what the exporters cost a core better than the wall clock.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mailboxCall returns the records a rank of two writes for a 1 KiB
// all-reduce by mailbox, without times and sequence numbers.
func mailboxCall(comm uint32) []flowtel.Record {
	base := flowtel.Record{Rank: 0, Comm: comm, Bytes: 1024, Op: flowtel.OpAllReduce, Algo: flowtel.AlgoDirect, Dtype: flowtel.Float32}
	r := func(kind flowtel.Kind, peer int32, qp uint32, wr uint64, depth uint32, step uint32) flowtel.Record {
		x := base
		x.Kind, x.Peer, x.QP, x.WrID, x.Depth, x.Step = kind, peer, qp, wr, depth, step
		return x
	}
	return []flowtel.Record{
		r(flowtel.KindCollBegin, -1, 0, 0, 0, 1),
		r(flowtel.KindWRPost, 1, 2, 1, 1, 0),
		r(flowtel.KindWRPost, 1, 2, 2, 2, 0),
		r(flowtel.KindWC, 1, 2, 1, 1, 0),
		r(flowtel.KindWC, 1, 2, 2, 0, 0),
		r(flowtel.KindCollEnd, -1, 0, 0, 0, 1),
	}
}
