package collective

import (
	"context"
	"encoding/binary"
)

// The sliced all-reduce over the mailboxes. Where ranks outnumber cores
// (engines may not spin), every step of an engine call waits through a
// yield or a sleep, and a ring all-reduce of a megabyte on 4 ranks of 2
// cores takes many of them (0.34x Open MPI's time). Above a slot, the
// mailbox path runs such an all-reduce in rounds instead, each of two
// hand-offs whatever the number of ranks: round j takes the next chunk of
// the input, up to sliceMax bytes for each rank; the reduce-scatter part
// writes slice q of the chunk into the slot of peer q's mailbox, and after
// every peer's has come each rank reduces its own slice from its input and
// the peers' slots into its output; the all-gather part writes that
// reduced slice into every peer's slot, and after every peer's has come
// each rank copies the peers' slices into its output. Each element is
// reduced by one rank only, so every rank gets the same bits.
//
// The parts run through the mailbox's parts of the call's ticket k
// (transport.Mailbox.PublishPart): part 0 is the call's publication, with
// round 0's reduce-scatter slices and, in the slot's last bytes, the call's
// size (its tag cannot hold more than 16 bits of it: ranks that disagree
// all fall back to the engine, whose call check names the difference).
// Part i's slot is that of call k+i, rewritten at part i+2 only after
// every peer published part i+1, which each does only after it read part
// i. A last part without data tells the peers this rank has read all of
// theirs, so the next call may write its slots.

// sliceMax is the most bytes a rank's slice of one round takes in a slot:
// the slot less a page at its end, whose last bytes carry part 0's size.
const sliceMax = slotMax - 4096

// slicesTag is the tag of a sliced call: arg 0x7f, which no other mailbox
// all-reduce's tag has (its reduction, or'ed with the high bits of its
// size of at most a slot, stays below 16), and the reduction beside.
func slicesTag(rq *request) uint32 {
	return 1<<31 | uint32(rq.call.op)<<27 | uint32(rq.dt)<<23 | 0x7f<<16 | uint32(rq.call.redop)<<8
}

// sliceBounds returns rank q's slice of a round's chunk of n elements
// starting at element lo, in elements.
func sliceBounds(lo, n, ranks, q int) (int, int) {
	return lo + q*n/ranks, lo + (q+1)*n/ranks
}

// roundElems is how many elements a round covers on a communicator of
// ranks ranks: a slot's worth a rank.
func roundElems(ranks, esize int) int { return sliceMax / esize * ranks }

// slicesPeerBytes is about what a sliced call of n bytes moves each way
// between two ranks (its records' sent and received bytes): a slice of
// each round each way in each part.
func slicesPeerBytes(n, ranks int) int { return 2 * (n / ranks) }

// slicesScatter writes the reduce-scatter slices of the round whose chunk
// of n elements starts at element lo into the peers' slots of part i.
func (c *Comm) slicesScatter(k, part uint32, rq *request, lo, n int) {
	es := rq.dt.Size()
	for d := 1; d < c.size; d++ {
		q := (c.rank + d) % c.size
		a, b := sliceBounds(lo, n, c.size, q)
		c.small.boxes[q].StreamSlot(k+part, rq.in[a*es:b*es])
	}
}

// slicesSizeAt is where part 0's slot carries the call's size.
const slicesSizeAt = slotMax - 8

// slicesSameSize reports whether every peer's part 0 carries the size of
// this rank's call.
func (c *Comm) slicesSameSize(k uint32, rq *request) bool {
	for _, b := range c.small.boxes {
		if b != nil && binary.LittleEndian.Uint64(b.PeerSlot(k, slotMax)[slicesSizeAt:]) != uint64(len(rq.in)) {
			return false
		}
	}
	return true
}

// slicesStart writes part 0: round 0's slices and the call's size.
func (c *Comm) slicesStart(k uint32, rq *request) {
	es := rq.dt.Size()
	c.slicesScatter(k, 0, rq, 0, min(roundElems(c.size, es), len(rq.in)/es))
	for _, b := range c.small.boxes {
		if b != nil {
			binary.LittleEndian.PutUint64(b.Slot(k, slotMax)[slicesSizeAt:], uint64(len(rq.in)))
		}
	}
}

// slicesRun runs a sliced all-reduce whose part 0 every peer has published
// with the same call: the rounds, then the last part.
func (c *Comm) slicesRun(ctx context.Context, k uint32, seq uint64, deadline *smallDeadline, rq *request) error {
	s := c.small
	es := rq.dt.Size()
	count, round := len(rq.in)/es, roundElems(c.size, es)
	part := uint32(0)
	publishWait := func() error {
		for _, b := range s.boxes {
			if b != nil {
				b.PublishPart(k, part)
			}
		}
		return c.slicesWait(ctx, k, part, seq, deadline, rq)
	}
	for lo := 0; lo < count; lo += round {
		n := min(round, count-lo)
		if part > 0 {
			c.slicesScatter(k, part, rq, lo, n)
			if err := publishWait(); err != nil {
				return err
			}
		}
		a, b := sliceBounds(lo, n, c.size, c.rank)
		mine := rq.out[a*es : b*es]
		acc := rq.in[a*es : b*es]
		for _, box := range s.boxes {
			if box != nil {
				reduceInto(rq.dt, rq.call.redop, mine, acc, box.PeerSlot(k+part, len(mine)))
				acc = mine
			}
		}
		if rq.call.redop == Avg {
			scaleDiv(rq.dt, mine, c.size)
		}
		part++
		for _, box := range s.boxes {
			if box != nil {
				box.StreamSlot(k+part, mine)
			}
		}
		if err := publishWait(); err != nil {
			return err
		}
		for q, box := range s.boxes {
			if box != nil {
				qa, qb := sliceBounds(lo, n, c.size, q)
				copy(rq.out[qa*es:qb*es], box.PeerSlot(k+part, (qb-qa)*es))
			}
		}
		part++
	}
	return publishWait() // the last part: every peer's slots read
}

// slicesWait waits until every peer has published part i of call k.
func (c *Comm) slicesWait(ctx context.Context, k, part uint32, seq uint64, deadline *smallDeadline, rq *request) error {
	for p, b := range c.small.boxes {
		if b != nil && !b.ArrivedPart(k, part) {
			if err := c.smallWait(ctx, b, k, part, p, seq, deadline, rq); err != nil {
				return err
			}
		}
	}
	return nil
}
