package flowtel

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestHistBuckets(t *testing.T) {
	for _, v := range []uint64{0, 1, 255, 256, 257, 511, 512, 1000, 1 << 20, 1<<40 + 12345, 1<<63 - 1} {
		i := histIndex(v)
		if up := histUpper(i); uint64(up) < v || (i > 0 && uint64(histUpper(i-1)) >= v) {
			t.Errorf("%d: bucket %d ends at %d (previous at %d)", v, i, up, histUpper(i-1))
		}
		if lo := uint64(histUpper(i-1)) + 1; v >= 256 && float64(histUpper(i))-float64(lo) > 0.01*float64(lo) {
			t.Errorf("%d: bucket %d..%d wider than 1%%", v, lo, histUpper(i))
		}
	}
}

func TestHistPercentileWithinOnePercent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h LatencyHist
	var vals []int64
	for range 10000 {
		v := int64(rng.ExpFloat64() * 50_000)
		h.Add(v)
		vals = append(vals, v)
	}
	slices.Sort(vals)
	for _, p := range []int{1, 50, 90, 99, 100} {
		exact := nearestRank(vals, p)
		got := h.Percentile(p)
		if d := got - exact; d < 0 || float64(d) > 0.01*float64(exact)+1 {
			t.Errorf("p%d = %d, exact %d", p, got, exact)
		}
	}
	if h.Count() != 10000 || h.Max() != vals[len(vals)-1] {
		t.Errorf("count %d max %d", h.Count(), h.Max())
	}
}
