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
		return a == AlgoRing || a == AlgoTree || a == AlgoRecursiveDoubling || a == AlgoDirect
	case OpBroadcast, OpReduce:
		return a == AlgoRing || a == AlgoTree || a == AlgoDirect
	case OpAllGather, OpReduceScatter:
		return a == AlgoRing || a == AlgoDirect
	case OpBarrier:
		return a == AlgoAuto
	}
	return a == AlgoDirect
}

// Where ranks outnumber cores over TCP (crowded, overStream: the same on
// every rank), an all-gather or a reduce-scatter of up to smallMessage a
// rank goes direct, every peer's message at once: there a step costs the
// peers' turns on the cores, and the ring's n-1 steps took 1.5-2.5x as
// long as the direct one (decision 0058). So does an all-reduce small
// enough to go in one shot (oneShot), in one step where recursive
// doubling takes log2(n) (decision 0059).
func (c *Comm) pickAlgo(op Op, bytes int) Algorithm {
	if forced := c.opts.algo; forced != AlgoAuto && supports(op, forced) {
		return forced
	}
	if c.hostDirect && bytes >= directFrom && supports(op, AlgoDirect) {
		return AlgoDirect
	}
	crowdedTCP := c.crowded && c.overStream
	switch op {
	case OpAllReduce:
		if crowdedTCP && oneShot(bytes, c.size) {
			return AlgoDirect
		}
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
		if crowdedTCP && bytes <= smallMessage {
			return AlgoDirect
		}
		return AlgoRing
	case OpBarrier:
		return AlgoAuto
	}
	return AlgoDirect
}

// streamMinChunk is the smallest pipeline chunk when a link is a stream
// socket (transport.Capabilities.StreamSocket, TCP): a chunk there costs
// system calls and a pass through the kernel's stack at both ends, so
// smaller chunks overlap less than they cost. A communicator with such a
// link has one on every rank (it spans hosts, or the backend is forced
// everywhere), so every rank picks the same chunk.
const streamMinChunk = 256 << 10

// directChunk is the direct algorithms' chunk for blocks of twice that and
// more: each of a chunk's n-1 pieces lands in a scratch slot of its own,
// and two sets of slots must stay in the L2 beside the partial sum. On the
// 16-core host 8 ranks ran 1.0-1.3x faster with it than with the rings'
// 512 KiB at 4 and 64 MiB, and 1.1-1.6x faster than with 64 KiB
// (BENCHMARKS.md, "All the cores of a host").
const directChunk = 256 << 10

// directChunkWide is directChunk beyond directWide ranks, where 256 KiB
// slots no longer fit the L2 (15 of them at 16 ranks, two sets: 7.5 MiB
// against the 16-core host's 2 MiB a core): 16 ranks ran 1.3-1.6x faster
// with it than with 256 KiB at 16 and 64 MiB, and 32 KiB was no faster
// (decision 0037).
const (
	directChunkWide = 64 << 10
	directWide      = 8
)

// directChunkFor is the direct algorithms' chunk on n ranks.
func directChunkFor(n int) int {
	if n > directWide {
		return directChunkWide
	}
	return directChunk
}

// chunkedDirect reports whether op's direct schedule is cut into chunks
// (the others move every block whole).
func chunkedDirect(op Op) bool {
	switch op {
	case OpAllReduce, OpReduceScatter, OpAllGather, OpBroadcast, OpReduce:
		return true
	}
	return false
}

// wholeBlockMax is the largest block a 2-rank all-gather over shared
// memory sends as one message (chunkFor).
const wholeBlockMax = 8 << 20

// wholeBcastMax is the largest 2-rank broadcast over shared memory that
// goes as one message (chunkFor).
const wholeBcastMax = 512 << 10

// chunkFor picks the pipeline chunk: small enough that a block crosses the
// ring in several chunks (so steps overlap), large enough that per-chunk
// costs stay small, and never above the configured chunk size.
func (c *Comm) chunkFor(cl *call, algo Algorithm) int {
	if c.opts.chunk != DefaultChunk {
		return c.opts.chunk
	}
	block := cl.count * cl.esize / max(cl.n, 1)
	if dc := directChunkFor(cl.n); algo == AlgoDirect && chunkedDirect(cl.op) && block >= 2*dc {
		return dc
	}
	if !c.overStream && (cl.op == OpAllGather || cl.op == OpBroadcast) {
		// What one step moves is the whole of count (a rank's block of
		// an all-gather, a broadcast's buffer), not count/n. Over shared
		// memory the transport pipelines each message through its ring
		// in records of its own anyway, and every chunk costs a
		// message's round of credits and completions, and a single-copy
		// read when the ranks sit on different sockets.
		block = cl.count * cl.esize
	}
	if cl.op == OpAllGather && cl.n == 2 && !c.overStream && block <= wholeBlockMax {
		// Nothing relays a 2-rank all-gather's block, so chunks only
		// cost: each a message, and by single copy (an exchange, see
		// shm's exchangeCMA) a read behind the last one's
		// acknowledgement. Up to wholeBlockMax only: beyond it, out of
		// place, chunks win again.
		return max(block, 1)
	}
	if cl.op == OpBroadcast && cl.n == 2 && !c.overStream && block <= wholeBcastMax {
		// Nor a 2-rank broadcast's: the transport's records overlap its
		// two copies as chunks would, and each chunk costs a message
		// and, by single copy, a read behind the last one's
		// acknowledgement. Up to wholeBcastMax only: beyond it chunks
		// were no better (and 4-8 MiB whole were slower).
		return max(block, 1)
	}
	if c.crowded && !c.overStream {
		// More ranks than cores: a rank runs only while another waits,
		// so chunks overlap nothing, and each costs a hand-off between
		// ranks that take turns on a core (a sleep and a wake-up, or a
		// yield), which is what such a call's time is made of.
		return min(max(block, 1), c.opts.chunk)
	}
	least := 32 << 10
	if c.overStream {
		least = streamMinChunk
	}
	return min(max(block/4, least), c.opts.chunk)
}
