package collective

import "fmt"

// call is one rank's view of one collective on one channel: everything an
// algorithm needs to build its schedule.
type call struct {
	op      Op
	rank    int
	n       int // ranks
	root    int
	count   int // elements; per rank for allgather/reducescatter, per peer for alltoall
	esize   int
	redop   ReduceOp
	inPlace bool
	chunk   int  // bytes per pipeline chunk
	fuse    bool // every peer's transport reduces receives on arrival (transport.Reducer)
	tee     bool // every peer's transport copies a send into its tee too (transport.Teer)
	prefix  bool // the signature header carries the first bytes of a first send too large to fold (withSignature)

	// alltoallv, in elements
	sendCounts, sendDispls, recvCounts, recvDispls []int
	// grouped point-to-point
	p2p []p2pOp
}

// p2pOp is one send or receive of a grouped call, on a buffer of its own.
type p2pOp struct {
	recv bool
	peer int
	buf  bufID
	n    int
}

func mod(a, n int) int { return ((a % n) + n) % n }

// block returns the byte range of block i when count elements are split into
// n near-equal blocks.
func (c *call) block(i, count int) (off, n int) {
	base, rem := count/c.n, count%c.n
	start := i*base + min(i, rem)
	size := base
	if i < rem {
		size++
	}
	return start * c.esize, size * c.esize
}

// chunks splits n bytes into pipeline chunks: [offset, length) pairs.
func (c *call) chunks(n int) [][2]int {
	size := max(c.chunk/c.esize, 1) * c.esize
	if n == 0 {
		return [][2]int{{0, 0}}
	}
	out := make([][2]int, 0, (n+size-1)/size)
	for off := 0; off < n; off += size {
		out = append(out, [2]int{off, min(size, n-off)})
	}
	return out
}

func in(off int) ref      { return ref{bufIn, off} }
func out(off int) ref     { return ref{bufOut, off} }
func scratch(off int) ref { return ref{bufScratch, off} }

// build returns the schedule of c with algorithm a.
func build(c *call, a Algorithm) (*schedule, error) {
	s := &schedule{algo: a}
	if c.n == 1 {
		buildSelf(c, s)
		return s, nil
	}
	switch c.op {
	case OpAllReduce:
		switch a {
		case AlgoRing:
			ringAllReduce(c, s)
		case AlgoTree:
			treeAllReduce(c, s)
		case AlgoRecursiveDoubling:
			rdAllReduce(c, s)
		case AlgoDirect:
			directAllReduce(c, s)
			pullAll(s)
		default:
			return nil, unsupported(c.op, a)
		}
	case OpAllGather:
		switch a {
		case AlgoRing:
			ringAllGather(c, s)
		case AlgoDirect:
			directAllGather(c, s)
			pullAll(s)
		default:
			return nil, unsupported(c.op, a)
		}
	case OpReduceScatter:
		switch a {
		case AlgoRing:
			ringReduceScatter(c, s)
		case AlgoDirect:
			directReduceScatter(c, s)
			pullAll(s)
		default:
			return nil, unsupported(c.op, a)
		}
	case OpBroadcast:
		switch a {
		case AlgoRing:
			chainBroadcast(c, s)
		case AlgoTree:
			treeBroadcast(c, s, c.root, in(0), true)
		case AlgoDirect:
			directBroadcast(c, s)
			pullAll(s)
		default:
			return nil, unsupported(c.op, a)
		}
	case OpReduce:
		switch a {
		case AlgoRing:
			chainReduce(c, s)
		case AlgoTree:
			treeReduce(c, s, c.root)
		case AlgoDirect:
			directReduce(c, s)
			pullAll(s)
		default:
			return nil, unsupported(c.op, a)
		}
	case OpAllToAll, OpAllToAllv, OpGather, OpScatter, OpSend, OpRecv, OpGroup:
		if a != AlgoDirect {
			return nil, unsupported(c.op, a)
		}
		direct(c, s)
	case OpBarrier:
		dissemination(c, s)
	default:
		return nil, fmt.Errorf("collective: no schedule for %v", c.op)
	}
	return s, nil
}

func unsupported(op Op, a Algorithm) error {
	return fmt.Errorf("collective: algorithm %v does not implement %v", a, op)
}

// buildSelf is every collective on one rank: a copy at most.
func buildSelf(c *call, s *schedule) {
	switch c.op {
	case OpAllReduce, OpBroadcast, OpReduce, OpAllGather, OpReduceScatter, OpAllToAll, OpGather, OpScatter:
		if !c.inPlace && c.count > 0 {
			s.copyTo(out(0), in(0), c.count*c.esize, 0)
		}
	case OpAllToAllv:
		if n := c.sendCounts[0] * c.esize; n > 0 {
			s.copyTo(out(c.recvDispls[0]*c.esize), in(c.sendDispls[0]*c.esize), n, 0)
		}
	case OpGroup, OpSend, OpRecv:
		direct(c, s)
	}
}

// ringAllReduce is reduce-scatter then all-gather around the ring, each block
// cut into chunks that pipeline from one step to the next. Out of place, a
// block is received straight into the output and reduced there; in place, it
// lands in a scratch slot first. Where the transport reduces on arrival
// (c.fuse), the received chunk is reduced with the input straight into the
// output, in place or not: no scratch, no separate pass.
//
// Over transports that reduce on arrival (shared memory) the transfers go
// out chunk-major, as NCCL's do: chunk i of step k+1 is posted ringLag
// chunks after chunk i of step k, not after the whole of step k, so a
// chunk reduced in the reduce-scatter is sent on by the all-gather while
// it is still in this core's cache (step-major, a 64 MiB call read every
// reduced chunk back from memory, 32 MiB later). Every rank posts its
// sends and receives in the same (step, chunk) order, so the k-th send on
// a link still meets the k-th receive. Over TCP the kernel's copies
// through the socket dominate, so a chunk still in the cache gains nothing
// (step-major was as fast), and the lag there covers a whole step.
func ringAllReduce(c *call, s *schedule) {
	r, n := c.rank, c.n
	next, prev := mod(r+1, n), mod(r-1, n)
	total := c.count
	maxChunks := len(c.chunks(blockLen(c, total)))
	// last[b][k]: the last primitive that touched chunk k of block b in out.
	last := make([][]int32, n)
	for b := range last {
		last[b] = make([]int32, maxChunks)
		for k := range last[b] {
			last[b][k] = -1
		}
	}
	const slots = 8
	slotLast := make([]int32, slots)
	for i := range slotLast {
		slotLast[i] = -1
	}
	if c.inPlace && !c.fuse {
		s.scratch = slots * max(c.chunk/c.esize, 1) * c.esize
	}
	slot := 0
	steps := 2 * (n - 1)
	// Step k < n-1 (reduce-scatter) sends block r-k-1 and receives and
	// reduces block r-k-2; rank r then owns block r. Step n-1+j
	// (all-gather) sends block r-j and receives block r-j-1 in place.
	blocks := func(k int) (sb, rb int) {
		if k < n-1 {
			return mod(r-k-1, n), mod(r-k-2, n)
		}
		j := k - (n - 1)
		return mod(r-j, n), mod(r-j-1, n)
	}
	chunksOf := make([][][2]int, n)
	for b := range chunksOf {
		_, l := c.block(b, total)
		chunksOf[b] = c.chunks(l)
	}
	// groups lists the (step, chunk) pairs in the order they are posted;
	// within a group the sends go before the receives.
	var groups [][][2]int
	if c.fuse {
		lag := min(ringLag, maxChunks)
		for t := 0; t < maxChunks+(steps-1)*lag; t++ {
			var g [][2]int
			for k := 0; k < steps && t-k*lag >= 0; k++ {
				if i := t - k*lag; i < maxChunks {
					g = append(g, [2]int{k, i})
				}
			}
			groups = append(groups, g)
		}
	} else {
		for k := 0; k < steps; k++ {
			g := make([][2]int, maxChunks)
			for i := range g {
				g[i] = [2]int{k, i}
			}
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		for _, ki := range g {
			k, i := ki[0], ki[1]
			sb, _ := blocks(k)
			if i >= len(chunksOf[sb]) {
				continue
			}
			soff, _ := c.block(sb, total)
			ch := chunksOf[sb][i]
			src := out(soff + ch[0])
			if k == 0 {
				src = in(soff + ch[0])
			}
			last[sb][i] = s.send(next, src, ch[1], uint32(k), deps(last[sb][i])...)
		}
		for _, ki := range g {
			k, i := ki[0], ki[1]
			_, rb := blocks(k)
			if i >= len(chunksOf[rb]) {
				continue
			}
			step := uint32(k)
			roff, _ := c.block(rb, total)
			ch := chunksOf[rb][i]
			at := roff + ch[0]
			switch {
			case k >= n-1:
				last[rb][i] = s.recv(prev, out(at), ch[1], step, deps(last[rb][i])...)
				if k == steps-1 {
					s.streamed(last[rb][i], total*c.esize)
				}
			case c.fuse:
				last[rb][i] = s.recvReduce(prev, out(at), in(at), ch[1], step, deps(last[rb][i])...)
			case c.inPlace:
				sl := scratch(slot * max(c.chunk/c.esize, 1) * c.esize)
				rv := s.recv(prev, sl, ch[1], step, deps(slotLast[slot])...)
				red := s.reduce(out(at), in(at), sl, ch[1], step, deps(rv, last[rb][i])...)
				slotLast[slot] = red
				slot = (slot + 1) % slots
				last[rb][i] = red
			default:
				rv := s.recv(prev, out(at), ch[1], step, deps(last[rb][i])...)
				last[rb][i] = s.reduce(out(at), out(at), in(at), ch[1], step, rv)
			}
			if k == n-2 && c.redop == Avg {
				// Block r is complete here: scale it before the
				// all-gather sends it.
				last[rb][i] = s.scale(out(at), ch[1], step+1, last[rb][i])
			}
		}
	}
}

// ringLag is how many chunks of one ring step go out before the next
// step's first chunk: enough that the chunk it forwards has arrived, few
// enough that it is still in the cache.
const ringLag = 2

// blockLen is the largest block of count elements over n ranks, in bytes.
func blockLen(c *call, count int) int {
	_, l := c.block(0, count)
	return l
}

// ringAllGather passes each rank's block around the ring. Out of place, the
// own block is copied into the output too, chunk by chunk: by the transport
// as it sends the chunk, where it can (c.tee: the chunk is read once and
// written twice, see transport.WR.Tee), or else each piece after that
// chunk's first send has left: a copy of the whole block first would hold
// back every post of the call behind it. Only an output of streamFrom or
// more has its block copied whole first, with memmove's non-temporal
// stores (from ntCopy), past the caches: an output that large does not
// stay in the cache, and pieces copied through it cost a read of every
// line. Below that the output's lines are in the cache from the last call,
// and a non-temporal store would first evict them, so pieces win.
func ringAllGather(c *call, s *schedule) {
	r, n := c.rank, c.n
	next, prev := mod(r+1, n), mod(r-1, n)
	bl := c.count * c.esize
	chunks := c.chunks(bl)
	prevRecv := make([]int32, len(chunks))
	for i := range prevRecv {
		prevRecv[i] = -1
	}
	pieces := !c.inPlace && bl > 0 && (bl < ntCopy || bl*n < streamFrom)
	if !c.inPlace && bl > 0 && !pieces {
		s.copyTo(out(r*bl), in(0), bl, 0)
	}
	for k := 0; k < n-1; k++ {
		sb, rb := mod(r-k, n), mod(r-k-1, n)
		for i, ch := range chunks {
			if k == 0 {
				if pieces && ch[1] > 0 && c.tee {
					s.sendTee(next, in(ch[0]), out(r*bl+ch[0]), ch[1], 0)
					continue
				}
				snd := s.send(next, in(ch[0]), ch[1], 0)
				if pieces && ch[1] > 0 {
					s.copyTo(out(r*bl+ch[0]), in(ch[0]), ch[1], 0, snd)
				}
				continue
			}
			s.send(next, out(sb*bl+ch[0]), ch[1], uint32(k), deps(prevRecv[i])...)
		}
		for i, ch := range chunks {
			prevRecv[i] = s.recv(prev, out(rb*bl+ch[0]), ch[1], uint32(k))
			if k == n-2 {
				s.streamed(prevRecv[i], n*bl)
			}
		}
	}
}

// streamFrom is the output size from which a collective's last landing of
// its bytes is written past the caches (transport.WR.Stream): beyond what
// the ranks' buffers and rings leave of this VM's 32 MiB L3, the lines
// would go to memory anyway, and a plain store reads each first. Below it
// the output may still be cached from the last call, which streaming would
// throw away (an in-place all-reduce then reads it back from memory).
const streamFrom = 16 << 20

// ntCopy is the size from which Go's memmove (amd64) writes with
// non-temporal stores, past the caches.
const ntCopy = 1 << 20

// ringReduceScatter reduces block b along the ring ending at rank b. Partial
// sums travel in two alternating scratch areas of one block each. Where the
// transport reduces on arrival (c.fuse), a received chunk is reduced with
// the input as it lands.
func ringReduceScatter(c *call, s *schedule) {
	r, n := c.rank, c.n
	next, prev := mod(r+1, n), mod(r-1, n)
	bl := c.count * c.esize
	chunks := c.chunks(bl)
	s.scratch = 2 * bl
	lastSend := [2][]int32{make([]int32, len(chunks)), make([]int32, len(chunks))}
	for a := range lastSend {
		for i := range lastSend[a] {
			lastSend[a][i] = -1
		}
	}
	reduced := make([]int32, len(chunks))
	for k := 0; k < n-1; k++ {
		sb, rb := mod(r-k-1, n), mod(r-k-2, n)
		for i, ch := range chunks {
			if k == 0 {
				s.send(next, in(sb*bl+ch[0]), ch[1], uint32(k))
			} else {
				area := (k - 1) % 2
				lastSend[area][i] = s.send(next, scratch(area*bl+ch[0]), ch[1], uint32(k), reduced[i])
			}
		}
		area := k % 2
		for i, ch := range chunks {
			sl := scratch(area*bl + ch[0])
			if c.fuse {
				if k == n-2 {
					red := s.recvReduce(prev, out(ch[0]), in(rb*bl+ch[0]), ch[1], uint32(k), deps(lastSend[area][i])...)
					if c.redop == Avg {
						s.scale(out(ch[0]), ch[1], uint32(k), red)
					}
				} else {
					reduced[i] = s.recvReduce(prev, sl, in(rb*bl+ch[0]), ch[1], uint32(k), deps(lastSend[area][i])...)
				}
				continue
			}
			rv := s.recv(prev, sl, ch[1], uint32(k), deps(lastSend[area][i])...)
			if k == n-2 {
				red := s.reduce(out(ch[0]), sl, in(rb*bl+ch[0]), ch[1], uint32(k), rv)
				if c.redop == Avg {
					s.scale(out(ch[0]), ch[1], uint32(k), red)
				}
			} else {
				reduced[i] = s.reduce(sl, sl, in(rb*bl+ch[0]), ch[1], uint32(k), rv)
			}
		}
	}
}

// chainBroadcast pipelines chunks down the chain root, root+1, …. Out of
// place, the root's input reaches its output on its sends where the
// transports tee them (c.tee: read once, written twice): over shared
// memory a separate copy reads the input a second time, as much memory
// traffic as the broadcast's own. Elsewhere each chunk is copied once its
// send has left, while the next waits for room in the socket, and from
// streamFrom in one copy after the sends are posted (memmove's
// non-temporal stores): pieces of an output that large go through the
// cache only to be evicted.
func chainBroadcast(c *call, s *schedule) {
	r, n := c.rank, c.n
	v := mod(r-c.root, n)
	next, prev := mod(r+1, n), mod(r-1, n)
	bl := c.count * c.esize
	tee := v == 0 && !c.inPlace && c.tee
	pieces := v == 0 && !c.inPlace && !tee && bl < streamFrom
	for _, ch := range c.chunks(bl) {
		if v == 0 {
			if tee && ch[1] > 0 {
				s.sendTee(next, in(ch[0]), out(ch[0]), ch[1], 0)
				continue
			}
			snd := s.send(next, in(ch[0]), ch[1], 0)
			if pieces && ch[1] > 0 {
				s.copyTo(out(ch[0]), in(ch[0]), ch[1], 0, snd)
			}
			continue
		}
		rv := s.recv(prev, out(ch[0]), ch[1], uint32(v-1))
		if v < n-1 {
			s.send(next, out(ch[0]), ch[1], uint32(v), rv)
		} else {
			s.streamed(rv, bl)
		}
	}
	if v == 0 && !c.inPlace && !tee && !pieces && bl > 0 {
		s.copyTo(out(0), in(0), bl, 0)
	}
}

// chainReduce pipelines partial sums up the chain from root+n-1 to root.
func chainReduce(c *call, s *schedule) {
	r, n := c.rank, c.n
	v := mod(r-c.root, n)
	toward, from := mod(r-1, n), mod(r+1, n)
	bl := c.count * c.esize
	if v != n-1 && (v != 0 || c.inPlace) {
		s.scratch = bl
	}
	for _, ch := range c.chunks(bl) {
		switch {
		case v == n-1:
			s.send(toward, in(ch[0]), ch[1], 0)
		case v == 0:
			// In place, the output is the input: receive beside it.
			land := out(ch[0])
			if c.inPlace {
				land = scratch(ch[0])
			}
			rv := s.recv(from, land, ch[1], uint32(n-2))
			red := s.reduce(out(ch[0]), land, in(ch[0]), ch[1], uint32(n-2), rv)
			if c.redop == Avg {
				s.scale(out(ch[0]), ch[1], uint32(n-2), red)
			}
		default:
			st := uint32(n - 1 - v)
			rv := s.recv(from, scratch(ch[0]), ch[1], st-1)
			red := s.reduce(scratch(ch[0]), scratch(ch[0]), in(ch[0]), ch[1], st, rv)
			s.send(toward, scratch(ch[0]), ch[1], st, red)
		}
	}
}

// treeReduce is a binomial-tree reduction to root. Non-root ranks accumulate
// in scratch; children's contributions land in scratch slots.
func treeReduce(c *call, s *schedule, root int) {
	r, n := c.rank, c.n
	v := mod(r-root, n)
	bl := c.count * c.esize
	var children []int
	parent := -1
	for mask := 1; mask < n; mask <<= 1 {
		if v&mask != 0 {
			parent = mod(v-mask+root, n)
			break
		}
		if v+mask < n {
			children = append(children, mod(v+mask+root, n))
		}
	}
	acc := out(0)
	if v != 0 {
		acc = scratch(len(children) * bl)
	}
	s.scratch = len(children) * bl
	if v != 0 && len(children) > 0 {
		s.scratch += bl
	}
	cur := in(0) // where the running result is
	var last int32 = -1
	for i, child := range children {
		sl := scratch(i * bl)
		rv := s.recv(child, sl, bl, uint32(i))
		last = s.reduce(acc, cur, sl, bl, uint32(i), deps(rv, last)...)
		cur = acc
	}
	if v == 0 {
		if len(children) == 0 && !c.inPlace {
			last = s.copyTo(out(0), in(0), bl, 0)
		}
		if c.redop == Avg && c.op == OpReduce {
			s.scale(out(0), bl, uint32(len(children)), deps(last)...)
		}
		return
	}
	s.send(parent, cur, bl, uint32(len(children)), deps(last)...)
}

// treeBroadcast is a binomial-tree broadcast from root; src is where the
// root's data is, and copyOut asks the root to copy it to out.
func treeBroadcast(c *call, s *schedule, root int, src ref, copyOut bool) {
	r, n := c.rank, c.n
	v := mod(r-root, n)
	bl := c.count * c.esize
	mask := 1
	var got int32 = -1
	for ; mask < n; mask <<= 1 {
		if v&mask != 0 {
			got = s.recv(mod(v-mask+root, n), out(0), bl, 0)
			src = out(0)
			break
		}
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < n {
			s.send(mod(v+mask+root, n), src, bl, 1, deps(got)...)
		}
	}
	if v == 0 && copyOut && !c.inPlace && bl > 0 {
		s.copyTo(out(0), src, bl, 0)
	}
}

// treeAllReduce reduces to rank 0 over a binomial tree, then broadcasts.
func treeAllReduce(c *call, s *schedule) {
	treeReduce(c, s, 0)
	bl := c.count * c.esize
	lastReduce := int32(len(s.prims) - 1)
	if c.rank == 0 && c.redop == Avg {
		lastReduce = s.scale(out(0), bl, 0, deps(lastReduce)...)
	}
	start := len(s.prims)
	treeBroadcast(c, s, 0, out(0), false)
	// The broadcast starts once the reduction is done (at the root) and
	// once this rank's contribution has left (elsewhere: out is overwritten).
	for i := start; i < len(s.prims); i++ {
		if lastReduce >= 0 {
			s.prims[i].deps = append(s.prims[i].deps, lastReduce)
		}
	}
}

// rdAllReduce is recursive doubling: log2(n) exchanges of the whole buffer.
// With n not a power of two, the first 2·rem ranks pair up first so that a
// power of two take part, and hand the result back at the end.
func rdAllReduce(c *call, s *schedule) {
	r, n := c.rank, c.n
	bl := c.count * c.esize
	pof2 := 1
	for pof2*2 <= n {
		pof2 *= 2
	}
	rem := n - pof2
	steps := 0
	for m := 1; m < pof2; m <<= 1 {
		steps++
	}
	s.scratch = (steps + 1) * bl
	cur := in(0)
	var last int32 = -1
	newRank := r - rem
	if r < 2*rem {
		if r%2 == 0 {
			// Folded out: hand the data to r+1, get the result back.
			snd := s.send(r+1, in(0), bl, 0)
			rv := s.recv(r+1, out(0), bl, uint32(steps+1), snd)
			_ = rv
			return
		}
		rv := s.recv(r-1, scratch(0), bl, 0)
		last = s.reduce(out(0), in(0), scratch(0), bl, 0, rv)
		cur = out(0)
		newRank = r / 2
	}
	realRank := func(nr int) int {
		if nr < rem {
			return nr*2 + 1
		}
		return nr + rem
	}
	for k, mask := 1, 1; mask < pof2; k, mask = k+1, mask<<1 {
		partner := realRank(newRank ^ mask)
		sl := scratch(k * bl)
		snd := s.send(partner, cur, bl, uint32(k), deps(last)...)
		rv := s.recv(partner, sl, bl, uint32(k))
		last = s.reduce(out(0), cur, sl, bl, uint32(k), rv, snd)
		cur = out(0)
	}
	if cur != out(0) && bl > 0 { // pof2 == 1 cannot happen with n > 1
		last = s.copyTo(out(0), cur, bl, 0)
	}
	if c.redop == Avg {
		last = s.scale(out(0), bl, uint32(steps+1), deps(last)...)
	}
	if r < 2*rem {
		s.send(r-1, out(0), bl, uint32(steps+1), deps(last)...)
	}
}

// direct posts every transfer at once: all-to-all(v), gather, scatter and
// grouped point-to-point. Receives go first so their credits are out early.
func direct(c *call, s *schedule) {
	r, n := c.rank, c.n
	bl := c.count * c.esize
	switch c.op {
	case OpAllToAll:
		if c.inPlace {
			// Block p is both sent to p and received from p: land the
			// incoming copy beside it until the outgoing one has left.
			s.scratch = n * bl
			rv := make([]int32, n)
			for k := 1; k < n; k++ {
				p := mod(r-k, n)
				rv[p] = s.recv(p, scratch(p*bl), bl, uint32(k))
			}
			for k := 1; k < n; k++ {
				p := mod(r+k, n)
				snd := s.send(p, in(p*bl), bl, uint32(k))
				s.copyTo(out(p*bl), scratch(p*bl), bl, uint32(k), snd, rv[p])
			}
			return
		}
		for k := 1; k < n; k++ {
			p := mod(r-k, n)
			s.recv(p, out(p*bl), bl, uint32(k))
		}
		for k := 1; k < n; k++ {
			p := mod(r+k, n)
			s.send(p, in(p*bl), bl, uint32(k))
		}
		if bl > 0 {
			s.copyTo(out(r*bl), in(r*bl), bl, 0)
		}
	case OpAllToAllv:
		e := c.esize
		for k := 1; k < n; k++ {
			p := mod(r-k, n)
			s.recv(p, out(c.recvDispls[p]*e), c.recvCounts[p]*e, uint32(k))
		}
		for k := 1; k < n; k++ {
			p := mod(r+k, n)
			s.send(p, in(c.sendDispls[p]*e), c.sendCounts[p]*e, uint32(k))
		}
		if l := c.sendCounts[r] * e; l > 0 {
			s.copyTo(out(c.recvDispls[r]*e), in(c.sendDispls[r]*e), l, 0)
		}
	case OpGather, OpScatter:
		// Mirror images: block p of the root's buffer comes from (gather)
		// or goes to (scatter) rank p; the root's own block is a copy.
		gather := c.op == OpGather
		if r != c.root {
			if gather {
				s.send(c.root, in(0), bl, 0)
			} else {
				s.recv(c.root, out(0), bl, 0)
			}
			return
		}
		for k := 1; k < n; k++ {
			if p := mod(r+k, n); gather {
				s.recv(p, out(p*bl), bl, 0)
			} else {
				s.send(p, in(p*bl), bl, 0)
			}
		}
		if !c.inPlace && bl > 0 {
			if gather {
				s.copyTo(out(r*bl), in(0), bl, 0)
			} else {
				s.copyTo(out(0), in(r*bl), bl, 0)
			}
		}
	case OpSend, OpRecv, OpGroup:
		for _, p := range c.p2p {
			if p.recv {
				s.recv(p.peer, ref{p.buf, 0}, p.n, 0)
			}
		}
		for _, p := range c.p2p {
			if !p.recv {
				s.send(p.peer, ref{p.buf, 0}, p.n, 0)
			}
		}
	}
}

// dissemination is the barrier: in round k every rank signals rank+2^k and
// waits for rank-2^k, so after ceil(log2 n) rounds each has heard from all.
func dissemination(c *call, s *schedule) {
	r, n := c.rank, c.n
	var last int32 = -1
	for k, d := uint32(0), 1; d < n; k, d = k+1, d<<1 {
		snd := s.send(mod(r+d, n), in(0), 0, k, deps(last)...)
		rv := s.recv(mod(r-d, n), out(0), 0, k, deps(last)...)
		last = rv
		_ = snd
	}
}
