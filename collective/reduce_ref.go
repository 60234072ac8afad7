package collective

import (
	"encoding/binary"
	"math"
)

// reduceRef is the scalar reference for reduceInto: one element at a time,
// decoded with encoding/binary in native byte order, with the semantics
// spelled out in refOp rather than left to builtins.
// Tests compare every kernel against it, and so do the library's -c checks.
func reduceRef(dt Datatype, op ReduceOp, dst, a, b []byte) {
	checkReduce(dt, op, dst, a, b)
	ne := binary.NativeEndian
	sz := dt.Size()
	for i := 0; i < len(dst); i += sz {
		x, y, d := a[i:i+sz], b[i:i+sz], dst[i:i+sz]
		switch dt {
		case Int8:
			d[0] = byte(refOp(op, int64(int8(x[0])), int64(int8(y[0]))))
		case Uint8:
			d[0] = byte(refOp(op, uint64(x[0]), uint64(y[0])))
		case Int32:
			ne.PutUint32(d, uint32(refOp(op, int64(int32(ne.Uint32(x))), int64(int32(ne.Uint32(y))))))
		case Uint32:
			ne.PutUint32(d, uint32(refOp(op, uint64(ne.Uint32(x)), uint64(ne.Uint32(y)))))
		case Int64:
			ne.PutUint64(d, uint64(refOp(op, int64(ne.Uint64(x)), int64(ne.Uint64(y)))))
		case Uint64:
			ne.PutUint64(d, refOp(op, ne.Uint64(x), ne.Uint64(y)))
		case Float32:
			r := refOp(op, math.Float32frombits(ne.Uint32(x)), math.Float32frombits(ne.Uint32(y)))
			ne.PutUint32(d, math.Float32bits(r))
		case Float64:
			r := refOp(op, math.Float64frombits(ne.Uint64(x)), math.Float64frombits(ne.Uint64(y)))
			ne.PutUint64(d, math.Float64bits(r))
		case Float16:
			r := refOp(op, Half(ne.Uint16(x)).Float32(), Half(ne.Uint16(y)).Float32())
			ne.PutUint16(d, uint16(HalfFrom(r)))
		case BFloat16:
			r := refOp(op, BFloat(ne.Uint16(x)).Float32(), BFloat(ne.Uint16(y)).Float32())
			ne.PutUint16(d, uint16(BFloatFrom(r)))
		}
	}
}

// refOp computes x op y in T's own arithmetic. Integers come widened to 64
// bits (signed ones sign-extended, unsigned ones zero-extended) and the
// caller truncates to the element width, which wraps Sum and Prod correctly.
// For floats, Min and Max return NaN if either operand is NaN, and order -0
// below +0; for integers those cases cannot arise.
func refOp[T int64 | uint64 | float32 | float64](op ReduceOp, x, y T) T {
	switch op {
	case Sum, Avg:
		return x + y
	case Prod:
		return x * y
	}
	if x != x {
		return x
	}
	if y != y {
		return y
	}
	if x == y { // equal, or zeros of either sign
		xneg := math.Signbit(float64(x))
		if (op == Min) == xneg {
			return x
		}
		return y
	}
	if (x < y) == (op == Min) {
		return x
	}
	return y
}
