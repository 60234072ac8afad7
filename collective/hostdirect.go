package collective

// Direct algorithms (AlgoDirect) for the reducing and gathering
// collectives: every rank talks to every peer at once instead of passing
// blocks around a ring. They are for ranks that share a host's memory.
//
// A ring all-reduce moves each byte 2(n-1) times through n-1 hops, and every
// hop over shared memory is a copy into the link and a copy (or a reduction)
// out of it: about 6 bytes of memory traffic per payload byte per rank. That
// is what a ring costs whatever the world size, so at 8 or 16 ranks on one
// host the ranks together saturate the memory long before they run out of
// cores. Directly, rank r reduces block r of the result by reading block r
// of every peer's input once, chunk by chunk (so the partial sum and the
// landed pieces stay in the cache), then gathers every other block from the
// rank that reduced it: about 3 - 1/n bytes per payload byte per rank, and
// every rank busy from the first chunk. The receives ask the transport to
// read the message out of the sender's memory (transport.WR.Pull): over
// shared memory the sender then copies nothing.
//
// The price is n-1 messages per chunk where the ring has one, which only
// pays from a size where a chunk's transfer outweighs its message: the
// tuner chooses (directFrom).

// pullAll marks every receive of s to be read out of its sender's memory
// (transport.WR.Pull): every rank moves data at once, so a copy into a
// link and out again costs the memory bandwidth that all of them share.
func pullAll(s *schedule) {
	for i := range s.prims {
		if s.prims[i].kind == primRecv {
			s.prims[i].pull = true
		}
	}
}

// reduceBlock builds the reduce-scatter half for one block: rank r's block
// of bl bytes at dst(off) becomes src(off) reduced with every peer's copy
// of it, chunk by chunk. It returns, per chunk, the primitive after which
// the chunk holds its result (with Avg scaled).
//
// Every peer's piece of a chunk is received at once, each into a scratch
// slot of its own, and reduced into the chunk as it lands: receives
// reduced on arrival would have to run one after another into the same
// partial sum, and each would wait on its sender noticing it was posted,
// a chain of n-1 hand-offs per chunk. The slots come in two sets, so the
// next chunk's receives are out while this one's are reduced; a chunk of
// slots is small enough to stay in the cache. Peers are visited in a
// staggered order (r+k here, r-k for the sends), so that at each step every
// rank reads a different peer instead of all reading rank 0 first.
func reduceBlock(c *call, s *schedule, dst, src func(off int) ref, bl int, step uint32) []int32 {
	r, n := c.rank, c.n
	chunks := c.chunks(bl)
	done := make([]int32, len(chunks))
	size := max(c.chunk/c.esize, 1) * c.esize
	s.scratch = max(s.scratch, 2*(n-1)*size)
	// slotFree[set][k]: the reduction that last read slot k of the set.
	slotFree := [2][]int32{make([]int32, n), make([]int32, n)}
	for i := range slotFree {
		for k := range slotFree[i] {
			slotFree[i][k] = -1
		}
	}
	for i, ch := range chunks {
		set := i % 2
		last := int32(-1)
		for k := 1; k < n; k++ {
			p := mod(r+k, n)
			a := src(ch[0])
			if k > 1 {
				a = dst(ch[0])
			}
			sl := scratch((set*(n-1) + k - 1) * size)
			rv := s.recv(p, sl, ch[1], step, deps(slotFree[set][k])...)
			last = s.reduce(dst(ch[0]), a, sl, ch[1], step, deps(rv, last)...)
			slotFree[set][k] = last
		}
		if c.redop == Avg {
			last = s.scale(dst(ch[0]), ch[1], step, last)
		}
		done[i] = last
	}
	return done
}

// sendInputBlocks sends every peer t its block of the caller's input, the bl
// bytes at at(t), chunked as the receiver's reduceBlock expects. It returns
// the sends, per peer and chunk.
func sendInputBlocks(c *call, s *schedule, at func(t int) int, bl func(t int) int) [][]int32 {
	r, n := c.rank, c.n
	sent := make([][]int32, n)
	for k := 1; k < n; k++ {
		t := mod(r-k, n)
		for _, ch := range c.chunks(bl(t)) {
			sent[t] = append(sent[t], s.send(t, in(at(t)+ch[0]), ch[1], 0))
		}
	}
	return sent
}

// landAfter returns the dependencies of a receive into chunk i of block p
// of the output: in place that is input this rank sent p, so the receive
// waits for the send (a posted receive's buffer is the transport's).
func landAfter(c *call, sent [][]int32, p, i int) []int32 {
	if !c.inPlace {
		return nil
	}
	return deps(sent[p][i])
}

// blockOf and blockLenOf are c.block's offset and length for count.
func blockOf(c *call, count int) func(int) int {
	return func(t int) int { off, _ := c.block(t, count); return off }
}

func blockLenOf(c *call, count int) func(int) int {
	return func(t int) int { _, l := c.block(t, count); return l }
}

// directAllReduce: a direct reduce-scatter of the n blocks (rank r reduces
// block r), then a direct all-gather of the reduced blocks; a small call
// in one shot (oneShot).
func directAllReduce(c *call, s *schedule) {
	if oneShot(c.count*c.esize, c.n) {
		oneShotAllReduce(c, s)
		return
	}
	r, n := c.rank, c.n
	total := c.count
	roff, rlen := c.block(r, total)
	sent := sendInputBlocks(c, s, blockOf(c, total), blockLenOf(c, total))
	done := reduceBlock(c, s, func(off int) ref { return out(roff + off) }, func(off int) ref { return in(roff + off) }, rlen, 0)
	for k := 1; k < n; k++ {
		t := mod(r+k, n)
		for i, ch := range c.chunks(rlen) {
			s.send(t, out(roff+ch[0]), ch[1], 1, done[i])
		}
	}
	for k := 1; k < n; k++ {
		p := mod(r-k, n)
		poff, plen := c.block(p, total)
		for i, ch := range c.chunks(plen) {
			rv := s.recv(p, out(poff+ch[0]), ch[1], 1, landAfter(c, sent, p, i)...)
			s.streamed(rv, total*c.esize)
		}
	}
}

// oneShot reports whether a direct all-reduce of bytes a rank on ranks
// ranks goes in one shot: while what a rank then sends, ranks-1 copies of
// its input, stays within smallMessage, the size up to which steps cost
// more than bytes. Each copy then fits the call check's header
// (eagerLimit), so the call is the headers' one exchange and nothing else.
// (Divided, not multiplied: a 32-bit int would overflow.)
func oneShot(bytes, ranks int) bool { return ranks < 2 || bytes <= smallMessage/(ranks-1) }

// oneShotAllReduce: every rank sends its whole input to every peer and
// reduces all n inputs itself, in rank order, so that every rank gets the
// same bits. It moves n-1 times a rank's input each way where the two
// halves move about twice that input in all, but in one step, where
// recursive doubling takes log2(n) and the call check still sends a
// header to every peer it does not pair with. Where ranks outnumber cores
// every step waits for the peers' turns on the cores (decision 0059).
func oneShotAllReduce(c *call, s *schedule) {
	r, n := c.rank, c.n
	bl := c.count * c.esize
	if bl == 0 {
		return
	}
	s.scratch = n * bl // slot q holds rank q's input
	var sent []int32
	for k := 1; k < n; k++ {
		sent = append(sent, s.send(mod(r+k, n), in(0), bl, 0))
	}
	got := make([]int32, n)
	for k := 1; k < n; k++ {
		p := mod(r-k, n)
		got[p] = s.recv(p, scratch(p*bl), bl, 0)
	}
	// In place the reductions overwrite the input: they wait for the
	// sends, and a rank whose own term comes after the first reduction
	// reads a copy of it.
	own, first := in(0), []int32(nil)
	got[r] = -1
	if c.inPlace {
		first = sent
		if r > 0 {
			own, got[r] = scratch(r*bl), s.copyTo(scratch(r*bl), in(0), bl, 0)
			first = append(first, got[r])
		}
	}
	term := func(q int) ref {
		if q == r {
			return own
		}
		return scratch(q * bl)
	}
	last := s.reduce(out(0), term(0), term(1), bl, 0, append(deps(got[0], got[1]), first...)...)
	for q := 2; q < n; q++ {
		last = s.reduce(out(0), out(0), term(q), bl, 0, deps(last, got[q])...)
	}
	if c.redop == Avg {
		s.scale(out(0), bl, 0, last)
	}
}

// directReduceScatter: rank r reduces block r of every rank's input.
func directReduceScatter(c *call, s *schedule) {
	r := c.rank
	bl := c.count * c.esize
	sendInputBlocks(c, s, func(t int) int { return t * bl }, func(int) int { return bl })
	reduceBlock(c, s, out, func(off int) ref { return in(r*bl + off) }, bl, 0)
}

// directAllGather: every rank sends its block to every peer, and receives
// each peer's block from it.
func directAllGather(c *call, s *schedule) {
	r, n := c.rank, c.n
	bl := c.count * c.esize
	if !c.inPlace && bl > 0 {
		s.copyTo(out(r*bl), in(0), bl, 0)
	}
	for k := 1; k < n; k++ {
		p := mod(r-k, n)
		for _, ch := range c.chunks(bl) {
			rv := s.recv(p, out(p*bl+ch[0]), ch[1], 0)
			s.streamed(rv, n*bl)
		}
	}
	for k := 1; k < n; k++ {
		t := mod(r+k, n)
		for _, ch := range c.chunks(bl) {
			s.send(t, in(ch[0]), ch[1], 0)
		}
	}
}

// directBroadcast scatters the root's buffer, block p to rank p, and every
// rank then passes its block to every other (van de Geijn): the root's
// memory is read about twice instead of n-1 times, and every rank relays.
// The root's own block goes to every rank from the root.
func directBroadcast(c *call, s *schedule) {
	r, n, root := c.rank, c.n, c.root
	total := c.count
	src := in
	if r == root {
		if !c.inPlace && total > 0 {
			s.copyTo(out(0), in(0), total*c.esize, 0)
		}
		for k := 1; k < n; k++ {
			t := mod(r+k, n)
			toff, tlen := c.block(t, total)
			for _, ch := range c.chunks(tlen) {
				s.send(t, src(toff+ch[0]), ch[1], 0)
			}
		}
		ooff, olen := c.block(root, total)
		for k := 1; k < n; k++ {
			t := mod(r+k, n)
			for _, ch := range c.chunks(olen) {
				s.send(t, src(ooff+ch[0]), ch[1], 1)
			}
		}
		return
	}
	// A non-root rank receives its block from the root and relays it to
	// every other non-root rank; the others' blocks come from them, the
	// root's from the root.
	moff, mlen := c.block(r, total)
	var mine []int32
	for _, ch := range c.chunks(mlen) {
		mine = append(mine, s.recv(root, out(moff+ch[0]), ch[1], 0))
	}
	for k := 1; k < n; k++ {
		p := mod(r-k, n)
		if p == root {
			continue
		}
		poff, plen := c.block(p, total)
		for _, ch := range c.chunks(plen) {
			rv := s.recv(p, out(poff+ch[0]), ch[1], 1)
			s.streamed(rv, total*c.esize)
		}
	}
	ooff, olen := c.block(root, total)
	for _, ch := range c.chunks(olen) {
		rv := s.recv(root, out(ooff+ch[0]), ch[1], 1)
		s.streamed(rv, total*c.esize)
	}
	for k := 1; k < n; k++ {
		t := mod(r+k, n)
		if t == root {
			continue
		}
		for i, ch := range c.chunks(mlen) {
			s.send(t, out(moff+ch[0]), ch[1], 1, mine[i])
		}
	}
}

// directReduce: a direct reduce-scatter (rank r reduces block r, into the
// root's output at the root and into scratch elsewhere), then the root
// gathers the blocks.
func directReduce(c *call, s *schedule) {
	r, n, root := c.rank, c.n, c.root
	total := c.count
	roff, rlen := c.block(r, total)
	sent := sendInputBlocks(c, s, blockOf(c, total), blockLenOf(c, total))
	dst := func(off int) ref { return out(roff + off) }
	if r != root {
		// Where reduceBlock's slots end.
		base := 2 * (n - 1) * max(c.chunk/c.esize, 1) * c.esize
		s.scratch = max(s.scratch, base+rlen)
		dst = func(off int) ref { return scratch(base + off) }
	}
	done := reduceBlock(c, s, dst, func(off int) ref { return in(roff + off) }, rlen, 0)
	if r != root {
		for i, ch := range c.chunks(rlen) {
			s.send(root, dst(ch[0]), ch[1], 1, done[i])
		}
		return
	}
	for k := 1; k < n; k++ {
		p := mod(r+k, n)
		poff, plen := c.block(p, total)
		for i, ch := range c.chunks(plen) {
			rv := s.recv(p, out(poff+ch[0]), ch[1], 1, landAfter(c, sent, p, i)...)
			s.streamed(rv, total*c.esize)
		}
	}
}

// cpusEach returns the CPUs that every rank of the job surely has to
// itself: on a host whose ranks a launcher bound to CPUs of their own, the
// fewest any of them may use; on any other, the fewest any of them may use
// shared among the host's ranks (0 when they outnumber them). Every rank
// computes it from the same exchanged records, so all agree.
func cpusEach(peers []peerInfo) int {
	type host struct {
		ranks, least int
		bound        bool
	}
	hosts := map[string]*host{}
	for _, p := range peers {
		h := hosts[p.HostID]
		if h == nil {
			h = &host{least: p.CPUs, bound: true}
			hosts[p.HostID] = h
		}
		h.ranks++
		h.least = min(h.least, p.CPUs)
		h.bound = h.bound && p.Bound
	}
	each := -1
	for _, h := range hosts {
		n := h.least
		if !h.bound {
			n = h.least / h.ranks
		}
		if each < 0 || n < each {
			each = n
		}
	}
	return max(each, 0)
}

// directCPUs is the CPUs each rank must have to itself for the tuner to run
// the direct algorithms. They need every rank moving data at once, so
// time-shared ranks keep to the ring, whose steps need only neighbours. One
// is enough: on the 16-core host 16 ranks of one CPU each ran direct with
// directChunkWide chunks 1.6-2.1x faster than the ring at 16 and 64 MiB
// (decision 0037).
const directCPUs = 1

// everyPairShares reports whether every pair of ranks shares memory
// (transport.Capabilities.SharedMemory): every pair, not only this rank's,
// so that every rank picks the same algorithm.
func (c *Comm) everyPairShares(peers []peerInfo) bool {
	for i := range peers {
		for j := range i {
			if !c.sharedMemory(peers[i], peers[j]) {
				return false
			}
		}
	}
	return true
}

// directFrom is the size from which the tuner runs an operation directly
// where it may (Comm.hostDirect): below it a chunk's n-1 messages cost more
// than the ring's memory traffic saves.
const directFrom = 1 << 20
