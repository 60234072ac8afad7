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

// tcpMinChunk is the smallest pipeline chunk when a link is TCP: a chunk
// there costs system calls and a pass through the kernel's TCP stack at both
// ends, so smaller chunks overlap less than they cost (a 2-rank all-reduce
// of 1 MiB over loopback took about 430 µs in 128 KiB chunks, 300 µs in
// 256 KiB ones; 256 KiB in one chunk beat four of 32 KiB by a quarter). A
// communicator with a TCP link has one on every rank (it spans hosts, or
// TCP is forced everywhere), so every rank picks the same chunk.
const tcpMinChunk = 256 << 10

// wholeBlockMax is the largest block a 2-rank all-gather over shared
// memory sends as one message (chunkFor).
const wholeBlockMax = 8 << 20

// chunkFor picks the pipeline chunk: small enough that a block crosses the
// ring in several chunks (so steps overlap), large enough that per-chunk
// costs stay small, and never above the configured chunk size.
func (c *Comm) chunkFor(cl *call) int {
	if c.opts.chunk != DefaultChunk {
		return c.opts.chunk
	}
	block := cl.count * cl.esize / max(cl.n, 1)
	if !c.overStream && (cl.op == OpAllGather || cl.op == OpBroadcast) {
		// What one step moves is the whole of count (a rank's block of
		// an all-gather, a broadcast's buffer), not count/n. Over shared
		// memory the transport pipelines each message through its ring
		// in 64 KiB records anyway, and every chunk costs a message's
		// round of credits and completions, and a single-copy read in
		// the far placement. 2 ranks, medians: all-gather 1 MiB in
		// 64/128/256 KiB chunks 58.7/50.1/50.2 us close, 138/92/90 far;
		// 4 MiB in 256/512 KiB 210/179 us close; broadcast 1 MiB in
		// 128/256 KiB 63.5/52.6 us close.
		block = cl.count * cl.esize
	}
	if cl.op == OpAllGather && cl.n == 2 && !c.overStream && block <= wholeBlockMax {
		// Nothing relays a 2-rank all-gather's block, so chunks only
		// cost: each a message, and by single copy (an exchange, see
		// shm's exchangeCMA) a read behind the last one's
		// acknowledgement. Intel host, close, 3 launches each, us out of
		// place / in place: 1 MiB 67-75 / 46-59 -> 47-54 / 32-38, 4 MiB
		// 307-341 / 263-287 -> 291-314 / 191-203, 16 MiB 1733-1902 /
		// 1033-1160 -> 1455-1464 / 744-763 (2 launches); a 64 MiB call in
		// 8 MiB chunks was slower out of place (9.9-10.4 -> 10.6-11.1 ms).
		return max(block, 1)
	}
	least := 32 << 10
	if c.overStream {
		least = tcpMinChunk
	}
	return min(max(block/4, least), c.opts.chunk)
}
