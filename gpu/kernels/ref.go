package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vccl-go/vccl/collective"
)

// Reference computes on the host what an all-reduce of the given per-rank
// inputs must produce: ranks folded left to right with op, then, for avg, a
// division by the number of ranks. GPU tests compare against it; a unit test
// checks it against the host collective library.
func Reference(dt collective.Datatype, op collective.ReduceOp, inputs [][]byte) []byte {
	if len(inputs) == 0 {
		return nil
	}
	out := append([]byte(nil), inputs[0]...)
	for _, in := range inputs[1:] {
		if len(in) != len(out) {
			panic(fmt.Sprintf("kernels: Reference: inputs of %d and %d bytes", len(out), len(in)))
		}
		reduceHost(dt, op, out, out, in)
	}
	if op == collective.Avg {
		scaleHost(dt, out, len(inputs))
	}
	return out
}

var ne = binary.NativeEndian

func reduceHost(dt collective.Datatype, op collective.ReduceOp, dst, a, b []byte) {
	sz := dt.Size()
	for i := 0; i+sz <= len(dst); i += sz {
		x, y, d := a[i:i+sz], b[i:i+sz], dst[i:i+sz]
		switch dt {
		case collective.Int8:
			d[0] = byte(refInt(op, int64(int8(x[0])), int64(int8(y[0]))))
		case collective.Uint8:
			d[0] = byte(refUint(op, uint64(x[0]), uint64(y[0])))
		case collective.Int32:
			ne.PutUint32(d, uint32(refInt(op, int64(int32(ne.Uint32(x))), int64(int32(ne.Uint32(y))))))
		case collective.Uint32:
			ne.PutUint32(d, uint32(refUint(op, uint64(ne.Uint32(x)), uint64(ne.Uint32(y)))))
		case collective.Int64:
			ne.PutUint64(d, uint64(refInt(op, int64(ne.Uint64(x)), int64(ne.Uint64(y)))))
		case collective.Uint64:
			ne.PutUint64(d, refUint(op, ne.Uint64(x), ne.Uint64(y)))
		case collective.Float32:
			r := refFloat(op, math.Float32frombits(ne.Uint32(x)), math.Float32frombits(ne.Uint32(y)))
			ne.PutUint32(d, math.Float32bits(r))
		case collective.Float64:
			r := refFloat(op, math.Float64frombits(ne.Uint64(x)), math.Float64frombits(ne.Uint64(y)))
			ne.PutUint64(d, math.Float64bits(r))
		case collective.Float16:
			r := refFloat(op, collective.Half(ne.Uint16(x)).Float32(), collective.Half(ne.Uint16(y)).Float32())
			ne.PutUint16(d, uint16(collective.HalfFrom(r)))
		case collective.BFloat16:
			r := refFloat(op, collective.BFloat(ne.Uint16(x)).Float32(), collective.BFloat(ne.Uint16(y)).Float32())
			ne.PutUint16(d, uint16(collective.BFloatFrom(r)))
		}
	}
}

func refInt(op collective.ReduceOp, x, y int64) int64 {
	switch op {
	case collective.Prod:
		return x * y
	case collective.Min:
		return min(x, y)
	case collective.Max:
		return max(x, y)
	}
	return x + y
}

func refUint(op collective.ReduceOp, x, y uint64) uint64 {
	switch op {
	case collective.Prod:
		return x * y
	case collective.Min:
		return min(x, y)
	case collective.Max:
		return max(x, y)
	}
	return x + y
}

func refFloat[F float32 | float64](op collective.ReduceOp, x, y F) F {
	switch op {
	case collective.Sum, collective.Avg:
		return x + y
	case collective.Prod:
		return x * y
	}
	if x != x {
		return x
	}
	if y != y {
		return y
	}
	if x == y {
		if (op == collective.Min) == math.Signbit(float64(x)) {
			return x
		}
		return y
	}
	if (x < y) == (op == collective.Min) {
		return x
	}
	return y
}

// scaleHost divides every element by n, as the scale kernels do.
func scaleHost(dt collective.Datatype, buf []byte, n int) {
	sz := dt.Size()
	d := float64(n)
	for i := 0; i+sz <= len(buf); i += sz {
		e := buf[i : i+sz]
		switch dt {
		case collective.Int8:
			e[0] = byte(int8(int64(int8(e[0])) / int64(n)))
		case collective.Uint8:
			e[0] = e[0] / byte(n)
		case collective.Int32:
			ne.PutUint32(e, uint32(int32(int64(int32(ne.Uint32(e)))/int64(n))))
		case collective.Uint32:
			ne.PutUint32(e, ne.Uint32(e)/uint32(n))
		case collective.Int64:
			ne.PutUint64(e, uint64(int64(ne.Uint64(e))/int64(n)))
		case collective.Uint64:
			ne.PutUint64(e, ne.Uint64(e)/uint64(n))
		case collective.Float32:
			ne.PutUint32(e, math.Float32bits(float32(float64(math.Float32frombits(ne.Uint32(e)))/d)))
		case collective.Float64:
			ne.PutUint64(e, math.Float64bits(math.Float64frombits(ne.Uint64(e))/d))
		case collective.Float16:
			ne.PutUint16(e, uint16(collective.HalfFrom(float32(float64(collective.Half(ne.Uint16(e)).Float32())/d))))
		case collective.BFloat16:
			ne.PutUint16(e, uint16(collective.BFloatFrom(float32(float64(collective.BFloat(ne.Uint16(e)).Float32())/d))))
		}
	}
}

// Equal compares two results element by element, treating any two NaNs of
// a float type as equal (NaN payloads are not part of the contract). It
// returns the first differing element index, or -1.
func Equal(dt collective.Datatype, got, want []byte) int {
	if len(got) != len(want) {
		return 0
	}
	sz := dt.Size()
	for i := 0; i+sz <= len(got); i += sz {
		g, w := got[i:i+sz], want[i:i+sz]
		if string(g) == string(w) {
			continue
		}
		if isNaN(dt, g) && isNaN(dt, w) {
			continue
		}
		return i / sz
	}
	return -1
}

func isNaN(dt collective.Datatype, e []byte) bool {
	switch dt {
	case collective.Float16:
		v := ne.Uint16(e)
		return v&0x7c00 == 0x7c00 && v&0x3ff != 0
	case collective.BFloat16:
		v := ne.Uint16(e)
		return v&0x7f80 == 0x7f80 && v&0x7f != 0
	case collective.Float32:
		f := math.Float32frombits(ne.Uint32(e))
		return f != f
	case collective.Float64:
		f := math.Float64frombits(ne.Uint64(e))
		return f != f
	}
	return false
}

// Fill writes pseudo-random elements of dt into buf from seed: integers over
// their whole range, floats of mixed sign and magnitude with a few zeros of
// both signs, infinities and NaNs, so min/max, rounding and wrap-around are
// all exercised.
func Fill(dt collective.Datatype, buf []byte, seed uint64) {
	s := seed*0x9E3779B97F4A7C15 + 1
	next := func() uint64 { // splitmix64
		s += 0x9E3779B97F4A7C15
		z := s
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		return z ^ z>>31
	}
	sz := dt.Size()
	for i := 0; i+sz <= len(buf); i += sz {
		r := next()
		e := buf[i : i+sz]
		special := r>>56 == 0 // about 1 in 256
		switch dt {
		case collective.Float32, collective.Float16, collective.BFloat16, collective.Float64:
			v := float64(int64(r>>11)-1<<52) / float64(1<<44) // about ±256
			if r&3 == 0 {
				v /= 1 << 20
			}
			if special {
				switch r >> 48 & 7 {
				case 0:
					v = 0
				case 1:
					v = math.Copysign(0, -1)
				case 2:
					v = math.Inf(1)
				case 3:
					v = math.Inf(-1)
				case 4:
					v = math.NaN()
				}
			}
			switch dt {
			case collective.Float32:
				ne.PutUint32(e, math.Float32bits(float32(v)))
			case collective.Float64:
				ne.PutUint64(e, math.Float64bits(v))
			case collective.Float16:
				ne.PutUint16(e, uint16(collective.HalfFrom(float32(v))))
			case collective.BFloat16:
				ne.PutUint16(e, uint16(collective.BFloatFrom(float32(v))))
			}
		default:
			for j := range e {
				e[j] = byte(r >> (8 * j))
			}
		}
	}
}
