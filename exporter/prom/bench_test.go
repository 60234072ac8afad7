package prom

import (
	"context"
	"testing"
)

// BenchmarkConsume measures records per second through the collector: an
// 8-rank ring all-reduce (14 steps, 4 records each) per iteration.
func BenchmarkConsume(b *testing.B) {
	c := New(WithWorldSize(8))
	j := ringJob{comm: 1, ranks: 8, seq: 1, bytes: 64 << 20, base: 1000, stepNs: 1000}
	recs := j.records(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for k := range recs {
			recs[k].CollSeq = uint64(i + 1)
			recs[k].WrID += 1 << 20 // later WRs on the same QPs
		}
		c.Consume(context.Background(), recs)
	}
	b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
}
