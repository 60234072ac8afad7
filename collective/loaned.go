package collective

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/vccl-go/vccl/internal/affinity"
)

// Calls above the mailbox path's whole calls, between ranks that read
// each other's memory and each have a core, go by loans over the
// mailboxes (loanedMin says from what size): an all-reduce (decision
// 0060), and an all-gather, a reduce-scatter, a broadcast and a reduce
// (decision 0061; their functions below say how). Each replaces the engine's
// messages, a message, a credit and an acknowledgement per chunk and
// peer, with a hand-off or two a call.
//
// An all-reduce: every rank lends its input and
// output (transport.Mailbox.Lend) and publishes the call. The blocks go in
// rounds of about loanRound bytes each: in round i, rank r reads its piece
// of block r of every peer's input straight out of the peer's memory, a
// chunk at a time into a scratch buffer that stays in the core's cache,
// and reduces it into its output (the reduce-scatter); it says so (part
// i+1), and reads every peer q's piece of block q from q's output as soon
// as q has said the same (the all-gather). A last part tells the peers it
// has read all of theirs, and the call ends once every peer has. That is
// the traffic of the bound BENCHMARKS.md derives (each byte of a peer read
// once a half), with a hand-off a round and two more a call whatever the
// number of ranks, where the engine's direct algorithm sends a message
// and its acknowledgement per chunk and peer, and waits on each (at 16
// ranks on 16 cores about a third of a call went to those waits).
//
// Each element is reduced by one rank only, so every rank gets the same
// bits. In place, a rank overwrites its copy of a piece of block q only
// after rank q said it has reduced that piece (having read every peer's
// copy of it), and its own block r while no peer reads it (a peer reads
// only its own block of this rank's input, and a piece of block r of the
// output only after the round's part).
//
// Part 0's slot carries the call's size (where a sliced call's lies, so
// that ranks whose sizes differ fall back to the engine alike) and the
// distance from the rank's input to its output, at which the peers read
// the reduced blocks of a call out of place.

// loanChunk is how much of a peer's block the reduce-scatter reads at a
// time.
const loanChunk = 64 << 10

// loanedMin is the smallest call of op, in bytes a rank (an all-gather's
// input, a reduce-scatter's output, a broadcast's or a reduce's buffer),
// that goes by loans where it may (loanedFor) on a communicator of ranks
// ranks. From 3 ranks on: an all-reduce from 32 KiB, an all-gather from 8
// KiB, a reduce-scatter from 2 KiB, and a broadcast and a reduce from 256
// KiB, from where they measured faster than the engine at 8 and 16 ranks
// on 16 cores (1.1-3x; decision 0061); smaller calls take the mailbox
// whole, or measured level or slower by loans. Between 2 ranks an
// all-reduce may go by loans from 2 MiB, where the ranks measure it
// against the ring (loanChoice): the engine runs the ring through the shm
// transport's rings, which hands each piece over in the sender's cache,
// and a loan's reader takes the peer's block from where the peer last
// wrote it: in place, that is the peer's core's cache while a block fits
// there, and 2 ranks' 1 MiB in place went 0.7x the ring's speed (both the
// 2-core VM and the 16-core host), 2 MiB level with it. The other
// operations do not go by loans between 2 ranks: an all-gather and a
// broadcast go in slices, lent where that measured faster (decision
// 0054), and a reduce-scatter and a reduce on the engine.
func loanedMin(op Op, ranks int) int {
	switch {
	case ranks == 2 && op == OpAllReduce:
		return 2 << 20
	case ranks == 2:
		return math.MaxInt
	case op == OpAllGather:
		return 8 << 10
	case op == OpReduceScatter:
		return 2 << 10
	case op == OpBroadcast || op == OpReduce:
		return 256 << 10
	}
	return 32 << 10
}

// loanStreamMin is the ranks' buffers together (their outputs, and their
// inputs where apart) from which the reads of an all-gather by loans, and
// of the all-gather halves of an all-reduce and a broadcast by loans,
// write past the caches (ReadLentStream): there nothing reads the pieces
// before they leave the caches, and a plain store first reads each line it
// overwrites. On the 16-core host (300 MiB L3), with buffers the peers
// map, all-reduces of 64 MiB at 8 and 16 ranks ran 1.1-1.4x faster that
// way, all-gathers of 64 and 256 MiB at 16 ranks 1.3-2x, and calls whose
// buffers the cache holds slower (decision 0062); from heap buffers, read
// by single copy through a buffer in the cache, all-reduces of 64 MiB
// 1.05-1.25x, all-gathers 1.3-1.7x (its addendum).
const loanStreamMin = 512 << 20

// gatherPastCaches reports whether call rq's all-gather reads write past
// the caches (loanStreamMin).
func (c *Comm) gatherPastCaches(rq *request) bool {
	least, held := loanStreamMin, len(rq.out)
	if v := loanStreamForTests.Load(); v > 0 {
		least = int(v)
	}
	if !rq.call.inPlace {
		held += len(rq.in)
	}
	return c.size*held >= least
}

// loanStreamForTests, when above 0, stands for loanStreamMin.
var loanStreamForTests atomic.Int64

// loanDeltaAt is where part 0's slot carries the output's distance from
// the input, beside the size (slicesSizeAt).
const loanDeltaAt = slicesSizeAt - 8

// loanedFor reports whether a call of op of n bytes a rank (loanedMin's),
// above the mailbox path's limit, goes by loans: where the ranks' engines
// spin (where ranks outnumber cores the sliced path stays: loans measured
// level with it), from loanedMin, and only where every peer can read this
// rank's memory and this rank every peer's. Every rank of a host normally
// answers alike; one that does not meets the others at the tag check, and
// all run the call on the engine.
func (c *Comm) loanedFor(op Op, n int, spin bool) bool {
	s := c.small
	return (spin || loansForTests.Load()) && n >= loanedMin(op, c.size) && s.peersReadMe() && s.readsPeers()
}

// loansForTests sends calls that may go by loans there whether the
// engines spin or not: tests run more ranks than cores.
var loansForTests atomic.Bool

// readsPeers reports whether this rank can read every peer's memory.
func (s *smallPath) readsPeers() bool {
	for _, b := range s.boxes {
		if b != nil && !b.ReadsPeer() {
			return false
		}
	}
	return true
}

// loanTag is the tag of a call by loans: arg 0x7e, which no other
// mailbox call of the operation has (slicesTag), and the reduction or a
// broadcast's root beside, and a reduce's root below (takesSmall keeps
// roots below 1<<7).
func loanTag(rq *request) uint32 {
	arg, root := uint32(rq.call.redop), uint32(0)
	switch rq.call.op {
	case OpBroadcast:
		arg = uint32(rq.call.root)
	case OpReduce:
		root = uint32(rq.call.root)
	}
	return 1<<31 | uint32(rq.call.op)<<27 | uint32(rq.dt)<<23 | 0x7e<<16 | arg<<8 | root
}

// loanStart writes part 0's slot: the call's size (slicesSize) and where
// the peers read what it makes from its input: its output, but a reduce's
// rank other than the root holds its reduced block at the start of
// smallPath.reduced, which the root reads as if it lay in an output.
func (c *Comm) loanStart(k uint32, rq *request) {
	at := uintptr(unsafe.Pointer(unsafe.SliceData(rq.out)))
	if rq.call.op == OpReduce && c.rank != rq.call.root {
		es := rq.dt.Size()
		lo, hi := sliceBounds(0, len(rq.in)/es, c.size, c.rank)
		c.small.reduced = growTo(c.small.reduced, (hi-lo)*es)
		at = uintptr(unsafe.Pointer(unsafe.SliceData(c.small.reduced))) - uintptr(lo*es)
	}
	delta := at - uintptr(unsafe.Pointer(unsafe.SliceData(rq.in)))
	for _, b := range c.small.boxes {
		if b != nil {
			slot := b.Slot(k, slotMax)
			binary.LittleEndian.PutUint64(slot[loanDeltaAt:], uint64(delta))
			binary.LittleEndian.PutUint64(slot[slicesSizeAt:], uint64(slicesSize(rq)))
		}
	}
}

// loanedRun runs a call by loans whose part 0 every peer has published
// with the same call.
func (c *Comm) loanedRun(ctx context.Context, k uint32, seq uint64, deadline *smallDeadline, rq *request) error {
	s := c.small
	for p, b := range s.boxes {
		if b != nil && !b.PeerLent(k) {
			return fmt.Errorf("collective: %v seq %d: rank %d published a call by loans but lent nothing", rq.call.op, seq, p)
		}
	}
	switch rq.call.op {
	case OpAllGather:
		return c.loanedAllGather(ctx, k, seq, deadline, rq)
	case OpReduceScatter:
		return c.loanedReduceScatter(ctx, k, seq, deadline, rq)
	case OpBroadcast:
		return c.loanedBroadcast(ctx, k, seq, deadline, rq)
	case OpReduce:
		return c.loanedReduce(ctx, k, seq, deadline, rq)
	}
	// The workers' closures take copies of what they need of rq, which
	// would otherwise escape to the heap with them on every mailbox call.
	in, out, dt, redop, op, rank := rq.in, rq.out, rq.dt, rq.call.redop, rq.call.op, c.rank
	es, n := dt.Size(), c.size
	count := len(in) / es
	workers := c.loanWorkers()
	s.growScratch(workers)
	lo, hi := sliceBounds(0, count, n, rank)
	block := func(q int) (int, int) { return sliceBounds(0, count, n, q) }
	per, rounds := loanRounds(count, n, es)
	for i := range rounds {
		// The reduce-scatter of round i: its piece of block r of every
		// peer's input.
		a, b := min(lo+i*per, hi), min(lo+(i+1)*per, hi)
		err := loanSplit(workers, a, b, es, func(w, a, b int) error {
			return s.loanReduce(k, seq, op, dt, redop, rank, n, out[a*es:b*es], in[a*es:b*es], a*es, w)
		})
		if err != nil {
			return err
		}
		part := uint32(i + 1)
		c.publishPart(k, part)
		if err := c.loanGather(ctx, k, part, seq, deadline, rq, s.gatherOrder(rank, n, -1, -1), block, i*per, per, workers); err != nil {
			return err
		}
	}
	return c.slicesPublishWait(ctx, k, uint32(rounds+1), seq, deadline, rq) // the last part: every peer's buffers read
}

// growScratch gives each of workers loan workers its scratch chunk.
func (s *smallPath) growScratch(workers int) {
	for len(s.scratch) < workers {
		s.scratch = append(s.scratch, make([]byte, loanChunk))
	}
}

// loanReduce reduces own and every peer's input bytes [at, at+len(mine))
// into mine (which may be own), a chunk at a time read into worker w's
// scratch, peers in a staggered order so that the ranks read different
// peers at once.
func (s *smallPath) loanReduce(k uint32, seq uint64, op Op, dt Datatype, redop ReduceOp, rank, n int, mine, own []byte, at, w int) error {
	for off := 0; off < len(mine); off += loanChunk {
		end := min(off+loanChunk, len(mine))
		dst, acc := mine[off:end], own[off:end]
		for d := 1; d < n; d++ {
			q := (rank + d) % n
			sc := s.scratch[w][:end-off]
			if err := s.boxes[q].ReadLent(k, sc, at+off); err != nil {
				return fmt.Errorf("collective: %v seq %d: reading rank %d's input: %w", op, seq, q, err)
			}
			reduceInto(dt, redop, dst, acc, sc)
			acc = dst
		}
	}
	if redop == Avg {
		scaleDiv(dt, mine, n)
	}
	return nil
}

// beforeReads calls the test hook testRead for each peer whose loan a
// call is about to read: peer only, or every peer (-1).
func (s *smallPath) beforeReads(peer int) {
	if s.testRead == nil {
		return
	}
	for q, b := range s.boxes {
		if b != nil && (peer < 0 || q == peer) {
			s.testRead(q)
		}
	}
}

// loanedAllGather runs an all-gather by loans: every rank reads every
// peer's input into its block of the output, peers in a staggered order,
// and returns once every peer has read its own.
func (c *Comm) loanedAllGather(ctx context.Context, k uint32, seq uint64, deadline *smallDeadline, rq *request) error {
	s, in, out, es, op, rank, n, inPlace := c.small, rq.in, rq.out, rq.dt.Size(), rq.call.op, c.rank, c.size, rq.call.inPlace
	blk, stream := len(in), c.gatherPastCaches(rq)
	s.beforeReads(-1)
	err := loanSplit(c.loanWorkers(), 0, blk/es, es, func(_, a, b int) error {
		a, b = a*es, b*es
		if !inPlace {
			copy(out[rank*blk+a:rank*blk+b], in[a:b])
		}
		for d := 1; d < n; d++ {
			q := (rank + d) % n
			var err error
			if stream {
				err = s.boxes[q].ReadLentStream(k, out[q*blk+a:q*blk+b], a)
			} else {
				err = s.boxes[q].ReadLent(k, out[q*blk+a:q*blk+b], a)
			}
			if err != nil {
				return fmt.Errorf("collective: %v seq %d: reading rank %d's input: %w", op, seq, q, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return c.slicesPublishWait(ctx, k, 1, seq, deadline, rq)
}

// loanedReduceScatter runs a reduce-scatter by loans: every rank reduces
// its block of every peer's input into its output, and returns once every
// peer has read its own. In place, the output is this rank's block of its
// input, which no peer reads.
func (c *Comm) loanedReduceScatter(ctx context.Context, k uint32, seq uint64, deadline *smallDeadline, rq *request) error {
	s, in, out, dt, redop, op, rank, n := c.small, rq.in, rq.out, rq.dt, rq.call.redop, rq.call.op, c.rank, c.size
	es, blk := dt.Size(), len(out)
	workers := c.loanWorkers()
	s.growScratch(workers)
	s.beforeReads(-1)
	err := loanSplit(workers, 0, blk/es, es, func(w, a, b int) error {
		at := rank*blk + a*es
		return s.loanReduce(k, seq, op, dt, redop, rank, n, out[a*es:b*es], in[at:at+(b-a)*es], at, w)
	})
	if err != nil {
		return err
	}
	return c.slicesPublishWait(ctx, k, 1, seq, deadline, rq)
}

// loanedReduce runs a reduce by loans: a reduce-scatter as an
// all-reduce's (every rank reduces its block of every peer's input, the
// root into its output, the others into smallPath.reduced), said by part
// 1; the root then reads every peer's reduced block as soon as that peer
// has said so. Every rank returns once every peer has said part 2: it has
// read all it needs of the others.
func (c *Comm) loanedReduce(ctx context.Context, k uint32, seq uint64, deadline *smallDeadline, rq *request) error {
	s, in, dt, redop, op, rank, n, root := c.small, rq.in, rq.dt, rq.call.redop, rq.call.op, c.rank, c.size, rq.call.root
	es := dt.Size()
	count := len(in) / es
	lo, hi := sliceBounds(0, count, n, rank)
	var mine []byte
	if rank == root {
		mine = rq.out[lo*es : hi*es]
	} else {
		mine = s.reduced[:(hi-lo)*es] // sized by loanStart
	}
	workers := c.loanWorkers()
	s.growScratch(workers)
	s.beforeReads(-1)
	err := loanSplit(workers, lo, hi, es, func(w, a, b int) error {
		return s.loanReduce(k, seq, op, dt, redop, rank, n, mine[(a-lo)*es:(b-lo)*es], in[a*es:b*es], a*es, w)
	})
	if err != nil {
		return err
	}
	c.publishPart(k, 1)
	if rank == root {
		block := func(q int) (int, int) { return sliceBounds(0, count, n, q) }
		if err := c.loanGather(ctx, k, 1, seq, deadline, rq, s.gatherOrder(rank, n, 1, -1), block, 0, count, workers); err != nil {
			return err
		}
	}
	return c.slicesPublishWait(ctx, k, 2, seq, deadline, rq)
}

// growTo returns b with at least n bytes, reallocated if it has fewer.
func growTo(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// loanedBroadcast runs a broadcast by loans: a scatter from the root,
// then an all-gather among the other ranks. Rank j, the i-th rank after
// the root, reads piece i of the n-1 pieces of the root's buffer into its
// output and says so (part 1); then it reads every other reader's piece
// from that reader's output as soon as that reader has said the same, and
// says so (part 2). Each byte of the root's buffer is read once: where
// every reader read the whole buffer from the root, they took the same
// pages at once (a 4 MiB broadcast at 8 ranks went 0.6-0.8x the engine's
// speed, decision 0061). The root lends its input, the others their
// output; every rank returns once every peer has read all it needs.
func (c *Comm) loanedBroadcast(ctx context.Context, k uint32, seq uint64, deadline *smallDeadline, rq *request) error {
	s, in, out, es, op, rank, n, root := c.small, rq.in, rq.out, rq.dt.Size(), rq.call.op, c.rank, c.size, rq.call.root
	count, workers := len(out)/es, c.loanWorkers()
	// Rank q's piece, for q other than the root.
	block := func(q int) (int, int) { return sliceBounds(0, count, n-1, (q-root-1+n)%n) }
	if rank == root {
		if !rq.call.inPlace {
			_ = loanSplit(workers, 0, count, es, func(_, a, b int) error {
				copy(out[a*es:b*es], in[a*es:b*es])
				return nil
			})
		}
		c.publishPart(k, 1)
		return c.slicesPublishWait(ctx, k, 2, seq, deadline, rq) // every peer read its piece
	}
	lo, hi := block(rank)
	s.beforeReads(root)
	err := loanSplit(workers, lo, hi, es, func(_, a, b int) error {
		return s.boxes[root].ReadLent(k, out[a*es:b*es], a*es)
	})
	if err != nil {
		return fmt.Errorf("collective: %v seq %d: reading rank %d's buffer: %w", op, seq, root, err)
	}
	c.publishPart(k, 1)
	// The other readers, from the next one on: at each step every reader
	// reads a different one.
	if err := c.loanGather(ctx, k, 1, seq, deadline, rq, s.gatherOrder(rank, n, 1, root), block, 0, count, workers); err != nil {
		return err
	}
	return c.slicesPublishWait(ctx, k, 2, seq, deadline, rq) // every peer read this rank's piece
}

// loanWorkers is how many goroutines an all-reduce by loans copies and
// reduces with: one a CPU of the rank's share of the host, as spinFits
// counts it (the CPUs a launcher bound it to, else the process's CPUs
// divided among the host's ranks), up to loanWorkersMax. A rank bound to
// several CPUs (8 ranks on 16 cores) moves its data on all of them, as the
// engine's drivers and the QPs' goroutines do; an unbound one does not
// crowd its peers' CPUs.
func (c *Comm) loanWorkers() int {
	if w := loanWorkersForTests.Load(); w > 0 {
		return int(w)
	}
	return min(cpuShare(int(liveEngines.Load()), c.engines[0].procs, runtime.NumCPU(), affinity.LauncherBound()), loanWorkersMax)
}

// cpuShare is an engine's share of the CPUs, with spinFits' arguments: at
// least one.
func cpuShare(live, procs, cpus int, bound bool) int {
	live = max(live, 1)
	if !bound {
		live *= procs
	}
	return max(cpus/live, 1)
}

const loanWorkersMax = 8

// loanWorkersForTests, when above 0, is loanWorkers' answer.
var loanWorkersForTests atomic.Int32

// loanWorkerMin is the least a worker of an all-reduce by loans takes of a
// phase: a smaller share costs more in waking the worker's CPU than it
// saves.
const loanWorkerMin = 256 << 10

// loanSplit runs fn on up to workers contiguous parts of elements [a, b)
// of es bytes, each at least loanWorkerMin bytes, each on a goroutine of its
// own but the first, and returns their errors.
func loanSplit(workers, a, b, es int, fn func(w, a, b int) error) error {
	workers = min(workers, (b-a)*es/loanWorkerMin)
	if workers <= 1 {
		return fn(0, a, b)
	}
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = fn(w, a+w*(b-a)/workers, a+(w+1)*(b-a)/workers)
		}()
	}
	errs[0] = fn(0, a, a+(b-a)/workers)
	wg.Wait()
	return errors.Join(errs...)
}

// loanRound is about how much of its block each rank reduces in a round
// of an all-reduce by loans before its peers read it, so that they read
// each piece soon after it was written, where a cache smaller than the
// ranks' data may still hold it. On the 16-core host, whose 300 MiB L3
// holds most of it, rounds of 256 KiB, 1 MiB and whole blocks measured
// level (decision 0060).
const loanRound = 1 << 20

// loanRounds is how many elements of each block a round of an all-reduce
// by loans of count elements takes, and how many rounds there are: the
// same on every rank.
func loanRounds(count, n, es int) (per, rounds int) {
	largest := (count + n - 1) / n
	per = max(loanRound/es, 1)
	return per, max((largest+per-1)/per, 1)
}

// gatherOrder returns the peers a rank of n gathers from, in the order it
// tries them: from the one after it (step 1) or before it (step -1) on,
// without skip (-1: none). It reuses smallPath.loanOrder.
func (s *smallPath) gatherOrder(rank, n, step, skip int) []int {
	left := s.loanOrder[:0]
	for d := 1; d < n; d++ {
		if q := (rank + n + step*d) % n; q != skip {
			left = append(left, q)
		}
	}
	s.loanOrder = left
	return left
}

// loanGather reads elements [from, from+per) of every peer q's block of
// the output (block(q), in elements), clipped to the block, from q's
// output once q has published part: whichever peer comes first, trying
// them in the order of left (which it consumes).
func (c *Comm) loanGather(ctx context.Context, k, part uint32, seq uint64, deadline *smallDeadline, rq *request, left []int, block func(q int) (int, int), from, per, workers int) error {
	s := c.small
	out, es, stream := rq.out, rq.dt.Size(), c.gatherPastCaches(rq)
	for len(left) > 0 {
		i := 0
		for i < len(left) && !s.boxes[left[i]].ArrivedPart(k, part) {
			i++
		}
		if i == len(left) {
			if err := c.smallWait(ctx, s.boxes[left[0]], k, part, left[0], seq, deadline, rq); err != nil {
				return err
			}
			i = 0
		}
		q := left[i]
		left = append(left[:i], left[i+1:]...)
		if s.testRead != nil {
			s.testRead(q)
		}
		b := s.boxes[q]
		delta := int(binary.LittleEndian.Uint64(b.PeerSlot(k, slotMax)[loanDeltaAt:]))
		qlo, qhi := block(q)
		err := loanSplit(workers, min(qlo+from, qhi), min(qlo+from+per, qhi), es, func(_, a, e int) error {
			if stream {
				return b.ReadLentStream(k, out[a*es:e*es], delta+a*es)
			}
			return b.ReadLent(k, out[a*es:e*es], delta+a*es)
		})
		if err != nil {
			return fmt.Errorf("collective: %v seq %d: reading rank %d's output: %w", rq.call.op, seq, q, err)
		}
	}
	return nil
}
