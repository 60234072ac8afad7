package collective

// The tuner picks an algorithm and a pipeline chunk for each call from its
// size and the world size. VCCL_ALGO or WithAlgorithm override the choice
// wherever the forced algorithm implements the operation.

// smallMessage is the size up to which latency-bound algorithms win: they
// take log2(n) steps where the ring takes 2(n-1).
const smallMessage = 64 << 10

// supports reports whether algorithm a implements op.
func supports(op Op, a Algorithm) bool {
	switch op {
	case OpAllReduce:
		return a == AlgoRing || a == AlgoTree || a == AlgoRecursiveDoubling
	case OpBroadcast, OpReduce:
		return a == AlgoRing || a == AlgoTree
	case OpAllGather, OpReduceScatter:
		return a == AlgoRing
	case OpBarrier:
		return a == AlgoAuto
	}
	return a == AlgoDirect
}

func (c *Comm) pickAlgo(op Op, bytes int) Algorithm {
	if forced := c.opts.algo; forced != AlgoAuto && supports(op, forced) {
		return forced
	}
	switch op {
	case OpAllReduce:
		if bytes <= smallMessage {
			return AlgoRecursiveDoubling
		}
		return AlgoRing
	case OpBroadcast, OpReduce:
		if bytes <= smallMessage {
			return AlgoTree
		}
		return AlgoRing
	case OpAllGather, OpReduceScatter:
		return AlgoRing
	case OpBarrier:
		return AlgoAuto
	}
	return AlgoDirect
}

// chunkFor picks the pipeline chunk: small enough that a block crosses the
// ring in several chunks (so steps overlap), large enough that per-chunk
// costs stay small, and never above the configured chunk size.
func (c *Comm) chunkFor(cl *call) int {
	if c.opts.chunk != DefaultChunk {
		return c.opts.chunk
	}
	block := cl.count * cl.esize / max(cl.n, 1)
	return min(max(block/4, 32<<10), c.opts.chunk)
}
