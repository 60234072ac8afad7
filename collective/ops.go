package collective

import "github.com/vccl-go/vccl/flowtel"

// Op is a communication operation, as telemetry records name it
// (flowtel.Op).
type Op = flowtel.Op

// Operations.
const (
	OpAllReduce     = flowtel.OpAllReduce
	OpAllGather     = flowtel.OpAllGather
	OpReduceScatter = flowtel.OpReduceScatter
	OpBroadcast     = flowtel.OpBroadcast
	OpReduce        = flowtel.OpReduce
	OpAllToAll      = flowtel.OpAllToAll
	OpAllToAllv     = flowtel.OpAllToAllv
	OpGather        = flowtel.OpGather
	OpScatter       = flowtel.OpScatter
	OpSend          = flowtel.OpSend
	OpRecv          = flowtel.OpRecv
	OpGroup         = flowtel.OpGroup // grouped sends and receives
	OpBarrier       = flowtel.OpBarrier
)

// ParseOp returns the operation named s.
func ParseOp(s string) (Op, error) { return flowtel.ParseOp(s) }

// Algorithm is how a collective moves its data, as telemetry records name
// it (flowtel.Algorithm).
type Algorithm = flowtel.Algorithm

// Algorithms.
const (
	AlgoAuto              = flowtel.AlgoAuto              // let the tuner choose
	AlgoRing              = flowtel.AlgoRing              // chunked, pipelined ring (chain for rooted operations)
	AlgoTree              = flowtel.AlgoTree              // binomial tree
	AlgoRecursiveDoubling = flowtel.AlgoRecursiveDoubling // recursive doubling / halving
	AlgoDirect            = flowtel.AlgoDirect            // every peer at once
)

// ParseAlgorithm returns the algorithm named s (auto, ring, tree, rd, direct).
func ParseAlgorithm(s string) (Algorithm, error) { return flowtel.ParseAlgorithm(s) }

// BusBWFactor is nccl-tests' bus bandwidth factor (flowtel.BusBWFactor):
// busbw = algbw × factor.
func BusBWFactor(op Op, ranks int) float64 { return flowtel.BusBWFactor(op, ranks) }
