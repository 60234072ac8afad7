package source

import (
	"testing"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
)

// collRecords: n all-reduces of 1 MB on 4 ranks, one every 10ms; rank r
// arrives r×100µs after rank 0 and every rank ends 1ms after the last
// arrival.
func collRecords(n int) []flowtel.Record {
	var recs []flowtel.Record
	for i := range n {
		t0 := int64(1e9) + int64(i)*10_000_000
		for r := range int32(4) {
			b := flowtel.Record{TsNs: t0 + int64(r)*100_000, Kind: flowtel.KindCollBegin, Rank: r, Peer: -1, Comm: 7,
				CollSeq: uint64(i + 1), Step: 1, Bytes: 1e6, Op: collective.OpAllReduce}
			e := b
			e.Kind, e.TsNs = flowtel.KindCollEnd, t0+300_000+1_000_000
			recs = append(recs, b, e)
		}
	}
	return recs
}

func TestCollTracker(t *testing.T) {
	tr := newCollTracker(int64(1e9), 4)
	recs := collRecords(200)
	for i := range recs {
		tr.add(&recs[i])
	}
	cs := tr.colls(recs[len(recs)-1].TsNs)
	if len(cs) != 1 || cs[0].Op != "allreduce" {
		t.Fatalf("colls = %+v", cs)
	}
	c := cs[0]
	if c.Calls != 200 {
		t.Errorf("calls %d, want 200", c.Calls)
	}
	if c.PerSec < 95 || c.PerSec > 105 {
		t.Errorf("per second %.1f, want 100", c.PerSec)
	}
	if c.SkewNs != 300_000 {
		t.Errorf("skew %d, want 300µs", c.SkewNs)
	}
	// Times: 1.3ms, 1.2ms, 1.1ms, 1.0ms; mean 1.15ms.
	if c.AvgTimeNs != 1_150_000 {
		t.Errorf("time %d, want 1.15ms", c.AvgTimeNs)
	}
	if c.BusBWBps <= c.AlgBWBps || c.BusBWBps/c.AlgBWBps < 1.49 || c.BusBWBps/c.AlgBWBps > 1.51 {
		t.Errorf("busbw %g, algbw %g: want the 2(n-1)/n = 1.5 factor", c.BusBWBps, c.AlgBWBps)
	}
}
