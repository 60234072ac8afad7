package collective

import "fmt"

// Op is a communication operation. Values appear in telemetry records
// (Record.Op): append, never renumber.
type Op uint8

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

func (o Op) String() string {
	if o == 0 || o >= opEnd {
		return fmt.Sprintf("op(%d)", uint8(o))
	}
	return opNames[o]
}

// ParseOp returns the operation named s.
func ParseOp(s string) (Op, error) {
	for o := OpAllReduce; o < opEnd; o++ {
		if opNames[o] == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("collective: unknown operation %q", s)
}

// Algorithm is how a collective moves its data. Values appear in telemetry
// records (Record.Algo): append, never renumber.
type Algorithm uint8

const (
	AlgoAuto              Algorithm = iota // let the tuner choose
	AlgoRing                               // chunked, pipelined ring (chain for rooted operations)
	AlgoTree                               // binomial tree
	AlgoRecursiveDoubling                  // recursive doubling / halving
	AlgoDirect                             // every peer at once
	algoEnd
)

var algoNames = [...]string{"auto", "ring", "tree", "rd", "direct"}

func (a Algorithm) String() string {
	if a >= algoEnd {
		return fmt.Sprintf("algo(%d)", uint8(a))
	}
	return algoNames[a]
}

// ParseAlgorithm returns the algorithm named s (auto, ring, tree, rd, direct).
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := AlgoAuto; a < algoEnd; a++ {
		if algoNames[a] == s {
			return a, nil
		}
	}
	if s == "recursive-doubling" || s == "" {
		if s == "" {
			return AlgoAuto, nil
		}
		return AlgoRecursiveDoubling, nil
	}
	return 0, fmt.Errorf("collective: unknown algorithm %q (want auto, ring, tree, rd or direct)", s)
}

// BusBWFactor is nccl-tests' bus bandwidth factor: busbw = algbw × factor,
// where algbw is the operation's payload (the larger buffer for all-gather,
// reduce-scatter and all-to-all) over its time, so busbw compares with the
// hardware's bandwidth whatever the operation and world size.
// A barrier moves no payload: its factor is 0, as is every factor for a
// world of no ranks.
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
