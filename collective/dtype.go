package collective

import (
	"fmt"
	"unsafe"

	"github.com/vccl-go/vccl/flowtel"
)

// Datatype is the element type of a buffer, as telemetry records and the
// wire name it (flowtel.Datatype).
type Datatype = flowtel.Datatype

// Datatypes.
const (
	Int8     = flowtel.Int8
	Uint8    = flowtel.Uint8
	Int32    = flowtel.Int32
	Uint32   = flowtel.Uint32
	Int64    = flowtel.Int64
	Uint64   = flowtel.Uint64
	Float16  = flowtel.Float16
	BFloat16 = flowtel.BFloat16
	Float32  = flowtel.Float32
	Float64  = flowtel.Float64
)

// Datatypes lists every supported datatype.
func Datatypes() []Datatype { return flowtel.Datatypes() }

// ParseDatatype returns the datatype named s ("float32", "bf16", "half", …).
func ParseDatatype(s string) (Datatype, error) { return flowtel.ParseDatatype(s) }

// Half is an IEEE 754 binary16 value, stored as its bits.
type Half uint16

// BFloat is a bfloat16 value (the upper half of a float32), stored as its bits.
type BFloat uint16

// Element is the set of Go element types the typed API accepts.
type Element interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64 | Half | BFloat
}

// DatatypeOf returns the Datatype of T.
func DatatypeOf[T Element]() Datatype {
	var z T
	switch any(z).(type) {
	case int8:
		return Int8
	case uint8:
		return Uint8
	case int32:
		return Int32
	case uint32:
		return Uint32
	case int64:
		return Int64
	case uint64:
		return Uint64
	case float32:
		return Float32
	case float64:
		return Float64
	case Half:
		return Float16
	case BFloat:
		return BFloat16
	}
	// A named type over a basic one: decide by kind of the underlying value.
	switch unsafe.Sizeof(z) {
	case 1:
		if isSigned(z) {
			return Int8
		}
		return Uint8
	case 4:
		if isFloat[T]() {
			return Float32
		}
		if isSigned(z) {
			return Int32
		}
		return Uint32
	case 8:
		if isFloat[T]() {
			return Float64
		}
		if isSigned(z) {
			return Int64
		}
		return Uint64
	}
	return 0
}

func isSigned[T Element](z T) bool {
	z--
	return z < 0
}

func isFloat[T Element]() bool {
	z := T(1)
	z /= 2
	return z != 0
}

// AsBytes views a typed slice as its bytes, without copying.
func AsBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// ReduceOp is a reduction.
type ReduceOp uint8

const (
	Sum ReduceOp = iota + 1
	Prod
	Min
	Max
	Avg
	reduceOpEnd
)

var reduceOpNames = [...]string{"", "sum", "prod", "min", "max", "avg"}

// ReduceOps lists every supported reduction.
func ReduceOps() []ReduceOp { return []ReduceOp{Sum, Prod, Min, Max, Avg} }

// Valid reports whether op is a known reduction.
func (op ReduceOp) Valid() bool { return op >= Sum && op < reduceOpEnd }

func (op ReduceOp) String() string {
	if !op.Valid() {
		return fmt.Sprintf("reduceop(%d)", uint8(op))
	}
	return reduceOpNames[op]
}

// ParseReduceOp returns the reduction named s.
func ParseReduceOp(s string) (ReduceOp, error) {
	for op := Sum; op < reduceOpEnd; op++ {
		if reduceOpNames[op] == s {
			return op, nil
		}
	}
	return 0, fmt.Errorf("collective: unknown reduction %q (want sum, prod, min, max or avg)", s)
}
