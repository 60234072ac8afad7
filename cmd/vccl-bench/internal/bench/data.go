package bench

import (
	"encoding/binary"
	"math"

	"github.com/vccl-go/vccl/collective"
)

// Inputs and the reference. Every rank's input is a function of its rank and
// the element's index, so each rank can compute what every other rank sent
// and therefore the exact expected result, independently of the library:
// in float64 for floating-point types and in the element's own wrapping
// integer arithmetic for integers. Values are small integers (±1 and ±2 for
// products), exact in every datatype, so the only rounding is Avg's division.

// sentinel fills receive buffers before a checked call, so an element the
// library forgot to write counts as wrong. 0x7B7B… is no value any input or
// reduction here can produce, in any datatype.
const sentinel = 0x7B

var ne = binary.NativeEndian

func signed(dt collective.Datatype) bool {
	switch dt {
	case collective.Uint8, collective.Uint32, collective.Uint64:
		return false
	}
	return true
}

// value is rank p's input element j.
func (s *setup) value(p, j int) int64 {
	h := uint64(p)*131 + uint64(j)*7
	if !s.cfg.Coll.Reduces() {
		// No reduction: a wide range, so that a misplaced block shows.
		v := int64(h % 251)
		if signed(s.dt) {
			v -= 125
		}
		return v
	}
	if s.cfg.Op == collective.Prod {
		if !signed(s.dt) {
			return [...]int64{1, 2, 1, 3, 1, 1}[h%6]
		}
		return [...]int64{1, -1, 1, 2, -1, 1, 1, -2}[h%8]
	}
	v := int64(h % 9)
	if signed(s.dt) {
		v -= 4
	}
	return v
}

// put stores v as element i of b.
func put(dt collective.Datatype, b []byte, i int, v float64) {
	switch dt {
	case collective.Int8, collective.Uint8:
		b[i] = byte(int64(v))
	case collective.Int32, collective.Uint32:
		ne.PutUint32(b[4*i:], uint32(int64(v)))
	case collective.Int64, collective.Uint64:
		ne.PutUint64(b[8*i:], uint64(int64(v)))
	case collective.Float16:
		ne.PutUint16(b[2*i:], uint16(collective.HalfFrom(float32(v))))
	case collective.BFloat16:
		ne.PutUint16(b[2*i:], uint16(collective.BFloatFrom(float32(v))))
	case collective.Float32:
		ne.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case collective.Float64:
		ne.PutUint64(b[8*i:], math.Float64bits(v))
	}
}

// getInt reads integer element i of b, sign- or zero-extended.
func getInt(dt collective.Datatype, b []byte, i int) int64 {
	switch dt {
	case collective.Int8:
		return int64(int8(b[i]))
	case collective.Uint8:
		return int64(b[i])
	case collective.Int32:
		return int64(int32(ne.Uint32(b[4*i:])))
	case collective.Uint32:
		return int64(ne.Uint32(b[4*i:]))
	default: // 64-bit: the bit pattern
		return int64(ne.Uint64(b[8*i:]))
	}
}

// getFloat reads floating-point element i of b.
func getFloat(dt collective.Datatype, b []byte, i int) float64 {
	switch dt {
	case collective.Float16:
		return float64(collective.Half(ne.Uint16(b[2*i:])).Float32())
	case collective.BFloat16:
		return float64(collective.BFloat(ne.Uint16(b[2*i:])).Float32())
	case collective.Float32:
		return float64(math.Float32frombits(ne.Uint32(b[4*i:])))
	default:
		return math.Float64frombits(ne.Uint64(b[8*i:]))
	}
}

// wrap reduces x to dt's width, sign- or zero-extended back to int64.
func wrap(dt collective.Datatype, x int64) int64 {
	switch dt {
	case collective.Int8:
		return int64(int8(x))
	case collective.Uint8:
		return int64(uint8(x))
	case collective.Int32:
		return int64(int32(x))
	case collective.Uint32:
		return int64(uint32(x))
	}
	return x
}

// fill writes this rank's inputs for call cl, and the sentinel into what it
// will check.
func (s *setup) fill(l Layout, cl call) {
	for i := range cl.out {
		cl.out[i] = sentinel
	}
	if s.cfg.Coll == Broadcast && s.rank != s.cfg.Root {
		return
	}
	in := cl.send.Data
	p := s.rank
	for j := range len(in) / s.es {
		put(s.dt, in, j, float64(s.value(p, j)))
	}
}

// source says where output element j of rank r comes from: rank src's input
// element idx, or (src < 0) the reduction over every rank of element idx.
func (s *setup) source(l Layout, j int) (src, idx int) {
	r, n, c := s.rank, s.n, l.Count
	switch s.cfg.Coll {
	case AllReduce, Reduce:
		return -1, j
	case ReduceScatter:
		return -1, r*c + j
	case AllGather:
		return j / c, j % c
	case Broadcast:
		return s.cfg.Root, j
	case AllToAll:
		return j / c, r*c + j%c
	case SendRecv:
		return (r + n - 1) % n, j
	}
	return 0, j
}

// tolerance is the relative error allowed for floating-point results:
// about one unit in the last place of the datatype (only Avg rounds).
func tolerance(dt collective.Datatype) float64 {
	switch dt {
	case collective.Float16:
		return 0x1p-10
	case collective.BFloat16:
		return 0x1p-7
	case collective.Float32:
		return 0x1p-22
	}
	return 0x1p-50
}

// refFloat is the float64 reduction of every rank's element idx.
func (s *setup) refFloat(idx int) float64 {
	acc := float64(s.value(0, idx))
	for p := 1; p < s.n; p++ {
		v := float64(s.value(p, idx))
		switch s.cfg.Op {
		case collective.Sum, collective.Avg:
			acc += v
		case collective.Prod:
			acc *= v
		case collective.Min:
			acc = math.Min(acc, v)
		case collective.Max:
			acc = math.Max(acc, v)
		}
	}
	if s.cfg.Op == collective.Avg {
		acc /= float64(s.n)
	}
	return acc
}

// refInt is the reduction of every rank's element idx in dt's wrapping
// arithmetic; Avg divides the wrapped sum, truncating toward zero.
func (s *setup) refInt(idx int) int64 {
	acc := s.value(0, idx)
	for p := 1; p < s.n; p++ {
		v := s.value(p, idx)
		switch s.cfg.Op {
		case collective.Sum, collective.Avg:
			acc += v
		case collective.Prod:
			acc *= v
		case collective.Min:
			acc = min(acc, v)
		case collective.Max:
			acc = max(acc, v)
		}
	}
	acc = wrap(s.dt, acc)
	if s.cfg.Op == collective.Avg {
		if signed(s.dt) {
			acc /= int64(s.n)
		} else {
			acc = int64(uint64(acc) / uint64(s.n))
		}
	}
	return acc
}

// wrong counts the elements of out that differ from the reference.
func (s *setup) wrong(l Layout, out []byte) int64 {
	var bad int64
	isFloat := s.dt.IsFloat()
	tol := tolerance(s.dt)
	for j := range len(out) / s.es {
		src, idx := s.source(l, j)
		if isFloat {
			var want float64
			if src < 0 {
				want = s.refFloat(idx)
			} else {
				want = float64(s.value(src, idx))
			}
			got := getFloat(s.dt, out, j)
			if got != want && math.Abs(got-want) > tol*max(1, math.Abs(want)) || math.IsNaN(got) {
				bad++
			}
			continue
		}
		var want int64
		if src < 0 {
			want = s.refInt(idx)
		} else {
			want = wrap(s.dt, s.value(src, idx))
		}
		if getInt(s.dt, out, j) != want {
			bad++
		}
	}
	return bad
}
