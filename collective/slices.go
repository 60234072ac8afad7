package collective

import (
	"context"
	"encoding/binary"
)

// Calls in slices over the mailboxes. Where ranks outnumber cores
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
// reduced by one rank only, so every rank gets the same bits. An
// all-gather or a broadcast goes the same way in pieces: each part moves
// up to sliceMax bytes of every rank's block (of the root's buffer) through
// the slots (slicesFor says where).
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

// slicesFor reports whether a call of op above the mailbox path's limit
// goes by the mailboxes in slices on a communicator of ranks ranks whose
// engines spin or not: an all-reduce or a reduce-scatter (of any size: it
// has no whole mailbox call) where they may not; an all-gather or a
// broadcast there too, and between 2 ranks, where the engine's single
// copy and ring trade places from call to call on far cores and the
// slots' two copies, streamed, are steadier and faster (decision 0051).
func slicesFor(op Op, ranks int, spin bool) bool {
	switch op {
	case OpAllReduce, OpReduceScatter:
		return !spin
	case OpAllGather, OpBroadcast:
		return !spin || ranks == 2
	}
	return false
}

// sliceMax is the most bytes a rank's slice of one round takes in a slot:
// the slot less a page at its end, whose last bytes carry part 0's size.
const sliceMax = slotMax - 4096

// slicesTag is the tag of a sliced call: arg 0x7f, which no other mailbox
// call of the operation has (an all-reduce's reduction, or'ed with the
// high bits of its size of at most a slot, stays below 16; a broadcast's
// root is below 0x7f on the path), and the reduction or root beside.
func slicesTag(rq *request) uint32 {
	arg := uint32(rq.call.redop)
	if rq.call.op == OpBroadcast {
		arg = uint32(rq.call.root)
	}
	return 1<<31 | uint32(rq.call.op)<<27 | uint32(rq.dt)<<23 | 0x7f<<16 | arg<<8
}

// slicesSize is the size every rank's call must have: a rank's input, or
// a broadcast's buffer, or a reduce-scatter's output.
func slicesSize(rq *request) int {
	if rq.call.op == OpBroadcast || rq.call.op == OpReduceScatter {
		return len(rq.out)
	}
	return len(rq.in)
}

// sliceBounds returns rank q's slice of a round's chunk of n elements
// starting at element lo, in elements.
func sliceBounds(lo, n, ranks, q int) (int, int) {
	return lo + q*n/ranks, lo + (q+1)*n/ranks
}

// roundElems is how many elements a round covers on a communicator of
// ranks ranks: a slot's worth a rank.
func roundElems(ranks, esize int) int { return sliceMax / esize * ranks }

// slicesSent is about what a sliced call sends each peer (its records'
// bytes): an all-reduce a slice of each round in each of its two parts,
// an all-gather its input, a broadcast's root its buffer.
func (c *Comm) slicesSent(rq *request) int {
	switch rq.call.op {
	case OpAllReduce:
		return 2 * (len(rq.in) / c.size)
	case OpBroadcast:
		if c.rank != rq.call.root {
			return 0
		}
		return len(rq.out)
	case OpReduceScatter:
		return len(rq.out)
	}
	return len(rq.in)
}

// slicesPiece is the bytes of a rank's block (all-gather) or of the buffer
// (broadcast) that one part of a sliced call moves.
func slicesPiece(rq *request) int { return sliceMax / rq.dt.Size() * rq.dt.Size() }

// slicesScatter writes the reduce-scatter slices of the round whose chunk
// of n elements starts at element lo into the peers' slots of part i.
func (c *Comm) slicesScatter(k, part uint32, rq *request, lo, n int) {
	es := rq.dt.Size()
	for d := 1; d < c.size; d++ {
		q := (c.rank + d) % c.size
		a, b := sliceBounds(lo, n, c.size, q)
		c.small.putSlot(c.small.boxes[q], k+part, rq.in[a*es:b*es])
	}
}

// slicesSizeAt is where part 0's slot carries the call's size.
const slicesSizeAt = slotMax - 8

// slicesSameSize reports whether every peer's part 0 carries the size of
// this rank's call.
func (c *Comm) slicesSameSize(k uint32, rq *request) bool {
	for _, b := range c.small.boxes {
		if b != nil && binary.LittleEndian.Uint64(b.PeerSlot(k, slotMax)[slicesSizeAt:]) != uint64(slicesSize(rq)) {
			return false
		}
	}
	return true
}

// slicesStart writes part 0: round 0's slices, or an all-gather's or a
// broadcast's first piece, and the call's size.
func (c *Comm) slicesStart(k uint32, rq *request) {
	if rq.call.op == OpAllReduce {
		es := rq.dt.Size()
		c.slicesScatter(k, 0, rq, 0, min(roundElems(c.size, es), len(rq.in)/es))
	} else {
		c.piecesWrite(k, 0, rq, 0, min(slicesPiece(rq), slicesSize(rq)))
	}
	for _, b := range c.small.boxes {
		if b != nil {
			binary.LittleEndian.PutUint64(b.Slot(k, slotMax)[slicesSizeAt:], uint64(slicesSize(rq)))
		}
	}
}

// piecesWrite writes bytes [a, b) of an all-gather's input, or of a
// broadcast root's buffer, into every peer's slot of part i; of a
// reduce-scatter, bytes [a, b) of peer q's block into peer q's.
func (c *Comm) piecesWrite(k, part uint32, rq *request, a, b int) {
	if rq.call.op == OpBroadcast && c.rank != rq.call.root || c.small.way == wayLend {
		return
	}
	if rq.call.op == OpReduceScatter {
		n := len(rq.out)
		for q, box := range c.small.boxes {
			if box != nil {
				c.small.putSlot(box, k+part, rq.in[q*n+a:q*n+b])
			}
		}
		return
	}
	for _, box := range c.small.boxes {
		if box != nil {
			c.small.putSlot(box, k+part, rq.in[a:b])
		}
	}
}

// piecesRead copies bytes [a, b) of the peers' blocks (all-gather), or of
// the root's buffer (broadcast), from their slots of part i, or from the
// buffers they lent, into the output, and this rank's own from its input
// where they differ; a reduce-scatter reduces its own block's bytes
// [a, b) from its input and the peers' slots, in rank order, into its
// output.
func (c *Comm) piecesRead(k, part uint32, rq *request, a, b int) error {
	s := c.small
	from := func(q int, dst []byte) error {
		if s.lent[q] {
			return s.boxes[q].ReadLent(k, dst, a)
		}
		copy(dst, s.boxes[q].PeerSlot(k+part, b-a))
		return nil
	}
	if rq.call.op == OpReduceScatter {
		n := len(rq.out)
		c.reduceSlots(k, part, rq, rq.out[a:b], rq.in[c.rank*n+a:c.rank*n+b])
		return nil
	}
	if rq.call.op == OpBroadcast {
		switch root := rq.call.root; {
		case root != c.rank:
			return from(root, rq.out[a:b])
		case !rq.call.inPlace:
			copy(rq.out[a:b], rq.in[a:b])
		}
		return nil
	}
	n := len(rq.in)
	for q, box := range s.boxes {
		switch {
		case box != nil:
			if err := from(q, rq.out[q*n+a:q*n+b]); err != nil {
				return err
			}
		case !rq.call.inPlace:
			copy(rq.out[q*n+a:q*n+b], rq.in[a:b])
		}
	}
	return nil
}

// allLent reports whether every rank that hands data over in call rq lent
// it (takeLoans has run): then every rank reads the loans whole at once
// and the call ends with part 1 (lentDone), its slots unread. Every rank
// sees the same loans, so all agree.
func (c *Comm) allLent(rq *request) bool {
	s := c.small
	if rq.call.op == OpBroadcast {
		if root := rq.call.root; root != c.rank {
			return s.lent[root]
		}
		return s.way == wayLend
	}
	if s.way != wayLend {
		return false
	}
	for p, b := range s.boxes {
		if b != nil && !s.lent[p] {
			return false
		}
	}
	return true
}

// piecesRun runs a sliced all-gather, broadcast or reduce-scatter whose
// part 0 every peer has published with the same call: a piece a part, then
// the last part.
func (c *Comm) piecesRun(ctx context.Context, k uint32, seq uint64, deadline *smallDeadline, rq *request) error {
	total, piece := slicesSize(rq), slicesPiece(rq)
	if c.takeLoans(k, rq); c.allLent(rq) {
		if err := c.readWhole(k, rq); err != nil {
			return err
		}
		return c.lentDone(ctx, k, seq, deadline, rq)
	}
	part := uint32(0)
	for a := 0; a < total; a += piece {
		b := min(a+piece, total)
		if part > 0 {
			c.piecesWrite(k, part, rq, a, b)
			if err := c.slicesPublishWait(ctx, k, part, seq, deadline, rq); err != nil {
				return err
			}
		}
		if err := c.piecesRead(k, part, rq, a, b); err != nil {
			return err
		}
		part++
	}
	return c.slicesPublishWait(ctx, k, part, seq, deadline, rq) // the last part: every peer's slots read
}

// slicesPublishWait publishes part i of call k to every peer and waits
// until every peer has published it.
func (c *Comm) slicesPublishWait(ctx context.Context, k, part uint32, seq uint64, deadline *smallDeadline, rq *request) error {
	c.publishPart(k, part)
	return c.slicesWait(ctx, k, part, seq, deadline, rq)
}

// publishPart publishes part i of call k to every peer.
func (c *Comm) publishPart(k, part uint32) {
	for _, b := range c.small.boxes {
		if b != nil {
			b.PublishPart(k, part)
		}
	}
}

// slicesRun runs a sliced call whose part 0 every peer has published with
// the same call: an all-reduce's rounds, then the last part.
func (c *Comm) slicesRun(ctx context.Context, k uint32, seq uint64, deadline *smallDeadline, rq *request) error {
	if rq.call.op != OpAllReduce {
		return c.piecesRun(ctx, k, seq, deadline, rq)
	}
	s := c.small
	es := rq.dt.Size()
	count, round := len(rq.in)/es, roundElems(c.size, es)
	part := uint32(0)
	publishWait := func() error { return c.slicesPublishWait(ctx, k, part, seq, deadline, rq) }
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
		c.reduceSlots(k, part, rq, mine, rq.in[a*es:b*es])
		part++
		for _, box := range s.boxes {
			if box != nil {
				c.small.putSlot(box, k+part, mine)
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

// reduceSlots reduces own (this rank's contribution) and the peers' slots
// of part i, of as many bytes, in rank order into mine (which may be own).
func (c *Comm) reduceSlots(k, part uint32, rq *request, mine, own []byte) {
	acc := own
	for _, box := range c.small.boxes {
		if box != nil {
			reduceInto(rq.dt, rq.call.redop, mine, acc, box.PeerSlot(k+part, len(mine)))
			acc = mine
		}
	}
	if rq.call.redop == Avg {
		scaleDiv(rq.dt, mine, c.size)
	}
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
