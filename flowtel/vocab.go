package flowtel

import (
	"fmt"
	"slices"
	"strings"
)

// The vocabulary of a Record's Op, Algo, Dtype and Path fields. It lives here,
// beside the record, so that every consumer (exporters, the analyzer,
// vccl-top) names a code the same way without importing the comm library;
// collective re-exports these types for its API.

// Op is a communication operation (Record.Op). Values are part of schema v1:
// append, never renumber.
type Op uint8

// Operations.
const (
	OpAllReduce Op = iota + 1
	OpAllGather
	OpReduceScatter
	OpBroadcast
	OpReduce
	OpAllToAll
	OpAllToAllv
	OpGather
	OpScatter
	OpSend
	OpRecv
	OpGroup // grouped sends and receives
	OpBarrier
	opEnd
)

var opNames = [...]string{"", "allreduce", "allgather", "reducescatter", "broadcast", "reduce",
	"alltoall", "alltoallv", "gather", "scatter", "send", "recv", "group", "barrier"}

// Valid reports whether o is a known operation.
func (o Op) Valid() bool { return o > 0 && o < opEnd }

func (o Op) String() string { return codeName(opNames[:], o, "op") }

// ParseOp returns the operation named s, as String prints it.
func ParseOp(s string) (Op, error) { return parseCode[Op](opNames[:], nil, s, "operation") }

// IsP2P reports whether o moves data between two ranks only (send, recv and
// grouped sends and receives), rather than across the communicator.
func (o Op) IsP2P() bool { return o == OpSend || o == OpRecv || o == OpGroup }

// Reduces reports whether o combines the ranks' data with a reduction.
func (o Op) Reduces() bool { return o == OpAllReduce || o == OpReduceScatter || o == OpReduce }

// Rooted reports whether o has a root rank.
func (o Op) Rooted() bool {
	return o == OpBroadcast || o == OpReduce || o == OpGather || o == OpScatter
}

// BusBWFactor is nccl-tests' bus bandwidth factor: busbw = algbw × factor,
// where algbw is the operation's payload (the larger buffer for all-gather,
// reduce-scatter and all-to-all) over its time, so busbw compares with the
// hardware's bandwidth whatever the operation and world size. A barrier
// moves no payload and a world of one rank moves nothing between ranks: both
// have factor 0 for the collectives that reduce or exchange, as nccl-tests
// prints; so does a world of no ranks.
func BusBWFactor(op Op, ranks int) float64 {
	if ranks <= 0 {
		return 0
	}
	n := float64(ranks)
	switch op {
	case OpAllReduce:
		return 2 * (n - 1) / n
	case OpAllGather, OpReduceScatter, OpAllToAll, OpAllToAllv, OpGather, OpScatter:
		return (n - 1) / n
	case OpBarrier:
		return 0
	}
	return 1
}

// Algorithm is how a collective moves its data (Record.Algo). Values are part
// of schema v1: append, never renumber.
type Algorithm uint8

// Algorithms.
const (
	AlgoAuto              Algorithm = iota // let the tuner choose
	AlgoRing                               // chunked, pipelined ring (chain for rooted operations)
	AlgoTree                               // binomial tree
	AlgoRecursiveDoubling                  // recursive doubling / halving
	AlgoDirect                             // every peer at once
	algoEnd
)

var algoNames = [...]string{"auto", "ring", "tree", "rd", "direct"}

func (a Algorithm) String() string { return codeName(algoNames[:], a, "algo") }

// ParseAlgorithm returns the algorithm named s (auto, ring, tree, rd or
// recursive-doubling, direct; empty is auto).
func ParseAlgorithm(s string) (Algorithm, error) {
	return parseCode(algoNames[:], algoAliases, s, "algorithm")
}

var algoAliases = map[string]Algorithm{"": AlgoAuto, "recursive-doubling": AlgoRecursiveDoubling}

// Datatype is the element type of a collective's buffers (Record.Dtype).
// Values are part of schema v1 and of the wire: append, never renumber.
type Datatype uint8

// Datatypes.
const (
	Int8 Datatype = iota + 1
	Uint8
	Int32
	Uint32
	Int64
	Uint64
	Float16
	BFloat16
	Float32
	Float64
	datatypeEnd
)

// DatatypeCount is one more than the largest Datatype code, for tables
// indexed by datatype.
const DatatypeCount = int(datatypeEnd)

var datatypeNames = [...]string{"", "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64"}
var datatypeSizes = [...]int{0, 1, 1, 4, 4, 8, 8, 2, 2, 4, 8}

// Datatypes lists every datatype.
func Datatypes() []Datatype {
	out := make([]Datatype, 0, datatypeEnd-1)
	for d := Int8; d < datatypeEnd; d++ {
		out = append(out, d)
	}
	return out
}

// Valid reports whether d is a known datatype.
func (d Datatype) Valid() bool { return d >= Int8 && d < datatypeEnd }

// Size returns the size of one element in bytes (0 for an unknown type).
func (d Datatype) Size() int {
	if !d.Valid() {
		return 0
	}
	return datatypeSizes[d]
}

func (d Datatype) String() string { return codeName(datatypeNames[:], d, "datatype") }

// IsFloat reports whether d is a floating-point type.
func (d Datatype) IsFloat() bool {
	return d == Float16 || d == BFloat16 || d == Float32 || d == Float64
}

// ParseDatatype returns the datatype named s: its String, or a name other
// tools use for it ("float", "half", "double", "bf16", "fp32", "int", …).
func ParseDatatype(s string) (Datatype, error) {
	return parseCode(datatypeNames[:], datatypeAliases, s, "datatype")
}

var datatypeAliases = map[string]Datatype{
	"half": Float16, "fp16": Float16, "f16": Float16, "bf16": BFloat16, "bfloat": BFloat16,
	"float": Float32, "fp32": Float32, "f32": Float32, "double": Float64, "fp64": Float64, "f64": Float64,
	"int": Int32, "i32": Int32, "char": Int8,
}

// Path is which of a link's connections a record is about (Record.Path).
type Path uint8

// Paths of a fault-tolerant link; a plain link has only the primary.
const (
	PathPrimary Path = 0
	PathBackup  Path = 1
)

var pathNames = [...]string{PathPrimary: "primary", PathBackup: "backup"}

func (p Path) String() string { return codeName(pathNames[:], p, "path") }

// codeName is the String of the vocabulary's codes: the code's name, or
// what(code) for a code with none, so that a code from a newer writer
// still prints.
func codeName[T ~uint8](names []string, c T, what string) string {
	if int(c) < len(names) && names[c] != "" {
		return names[c]
	}
	return fmt.Sprintf("%s(%d)", what, uint8(c))
}

// parseCode returns the code named s, as codeName prints it, or as one
// of its aliases.
func parseCode[T ~uint8](names []string, aliases map[string]T, s, what string) (T, error) {
	if c, ok := aliases[s]; ok {
		return c, nil
	}
	for c, n := range names {
		if n != "" && n == s {
			return T(c), nil
		}
	}
	return 0, fmt.Errorf("flowtel: unknown %s %q (want one of %s)", what, s, strings.Join(slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "" }), " "))
}
