package flowtel

import "math/bits"

// LatencyHist counts values (latencies in ns) in buckets under 1% wide, so
// that a percentile read from it is within 1% of the exact one, in memory
// that does not grow with the count: values below 256 exactly, then 128
// buckets per power of two. The zero value is ready to use.
type LatencyHist struct {
	counts   []uint64
	n        uint64
	min, max int64
}

func histIndex(v uint64) int {
	if v < 256 {
		return int(v)
	}
	e := bits.Len64(v) - 8
	return e<<7 + int(v>>uint(e))
}

// histUpper is the largest value of bucket i.
func histUpper(i int) int64 {
	if i < 256 {
		return int64(i)
	}
	e := i>>7 - 1
	m := i - e<<7
	return int64(m+1)<<uint(e) - 1
}

// Add counts v; a negative v counts as 0.
func (h *LatencyHist) Add(v int64) {
	v = max(v, 0)
	i := histIndex(uint64(v))
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]uint64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.n++
}

// Count returns how many values were added.
func (h *LatencyHist) Count() uint64 { return h.n }

// Max returns the largest value added.
func (h *LatencyHist) Max() int64 { return h.max }

// Percentile returns the p-th percentile by the nearest-rank method (as
// LinkStats' are), to within 1%: the smallest bucket holding at least p% of
// the values, as its largest value, bounded by the values seen. 0 when
// empty.
func (h *LatencyHist) Percentile(p int) int64 {
	if h.n == 0 {
		return 0
	}
	r := max((uint64(p)*h.n+99)/100, 1)
	var c uint64
	for i, k := range h.counts {
		if c += k; c >= r {
			return min(max(histUpper(i), h.min), h.max)
		}
	}
	return h.max
}
