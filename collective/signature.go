package collective

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// The signature check. A rank's first message to every other rank in a
// collective is a header: a 32-byte description of its call (operation,
// datatype, reduction, algorithm, root, count, sequence number, pipeline
// chunk) and the length of the payload that follows it. Every rank posts one
// receive per peer for it, big enough for any header (hdrSize + eagerLimit,
// which depends on the world size only), so a peer that made another call
// can neither overflow a receive nor leave a message in flight: exactly one
// message each way per peer has moved when the verify primitive compares the
// signatures, whatever the calls. Ranks that disagree all fail with the same
// error naming each rank's call; nothing behind the verify ran, so the
// caller's buffers are untouched and the communicator stays usable.
//
// The check costs no round trip of its own where the algorithm's first
// message to a peer is a send of the caller's input that waits on nothing
// (recursive doubling's first exchange, the ring's first block, a tree
// leaf's contribution, all-to-all, a barrier's first round): up to
// eagerLimit bytes of it ride in the header. The receiver knows which peers
// fold because it builds their schedules (the same code, the same call, the
// peer's rank) and checks the length each header declares. The receive the
// header replaced becomes a no-op whose readers read the payload where the
// header landed when it would have landed in scratch, or a copy into the
// caller's buffer behind the verify when it would have landed there.
// Where links are stream sockets (call.prefix), a first send of the input
// too large to ride whole is split (prefixSplit): its first eager bytes
// ride in the header and the rest waits for the verify, so a broadcast's
// root has data in the socket while the peers' headers come to it, and the
// receive it lands in is split alike. Over shared memory the wait is a few
// microseconds and the split's copies would cost more than they hide.
//
// The receives that wait on nothing but the verify (a broadcast's chunks
// from the root, a ring's first block) are posted before it, behind the
// header receives, so their credits leave with the headers: a sender whose
// verify passed finds them there instead of waiting a round trip for the
// receiver's verify. They write nothing unless a sender passed its verify,
// and every rank compares the same signatures, so if one passes all do.
// After a mismatch every rank fills the receives a peer's header declares
// posted for it with empty messages and waits for its own to be filled the
// same way, then fails: no credit or message outlives the call.
// WithSignatureCheck(false) or VCCL_CHECK=0 turns the check off.

const (
	sigSize = 32
	specOff = sigSize + 8 // after the declared payload length: the speculative receives' count
	hdrSize = 64          // signature, payload length, speculative receives, padding (keeps the payload aligned)
)

// eagerLimit is the most payload a header carries. Every rank posts a
// receive this large for every peer of every checked call, so it shrinks as
// the world grows; it depends on the world size alone because ranks must
// agree on it whatever calls they make.
func eagerLimit(ranks int) int { return min(64<<10, max(1<<10, (256<<10)/ranks)) }

// signature encodes the call's description.
func (c *call) signature(dt Datatype, algo Algorithm, seq uint64) [sigSize]byte {
	var b [sigSize]byte
	b[0] = byte(c.op)
	b[1] = byte(dt)
	if c.op.Reduces() {
		b[2] = byte(c.redop)
	}
	b[3] = byte(algo)
	root := int32(-1)
	if c.op.Rooted() {
		root = int32(c.root)
	}
	binary.LittleEndian.PutUint32(b[4:], uint32(root))
	binary.LittleEndian.PutUint64(b[8:], uint64(c.count))
	binary.LittleEndian.PutUint64(b[16:], seq)
	if algo == AlgoRing || algo == AlgoDirect && chunkedDirect(c.op) { // the algorithms whose messages the chunk shapes
		binary.LittleEndian.PutUint64(b[24:], uint64(c.chunk))
	}
	return b
}

func describeSig(b []byte) string {
	op, dt, red, algo := Op(b[0]), Datatype(b[1]), ReduceOp(b[2]), Algorithm(b[3])
	root := int32(binary.LittleEndian.Uint32(b[4:]))
	count := binary.LittleEndian.Uint64(b[8:])
	seq := binary.LittleEndian.Uint64(b[16:])
	chunk := binary.LittleEndian.Uint64(b[24:])
	var sb strings.Builder
	fmt.Fprintf(&sb, "%v(count=%d, %v", op, count, dt)
	if red.Valid() {
		fmt.Fprintf(&sb, ", %v", red)
	}
	if root >= 0 {
		fmt.Fprintf(&sb, ", root=%d", root)
	}
	fmt.Fprintf(&sb, ", algo=%v", algo)
	if chunk > 0 {
		fmt.Fprintf(&sb, ", chunk=%d", chunk)
	}
	fmt.Fprintf(&sb, ") at seq %d", seq)
	return sb.String()
}

// hdrPlan lays out a checked call's header buffer: one receive slot per
// rank (this rank's holds its own signature, for the comparison), then one
// send slot per peer.
type hdrPlan struct {
	ranks, rank int
	slot        int   // receive slot: hdrSize + eagerLimit
	sendOff     []int // per peer: offset of the header sent to it
	sendLen     []int // per peer: payload the header to it carries; -1: none folded
	recvLen     []int // per peer: payload the header from it carries; -1: none folded
	spec        []int // per peer: receives from it posted ahead of the verify
	bytes       int
}

func (h *hdrPlan) recvOff(p int) int { return p * h.slot }

func (s *schedule) hdrBytes() int {
	if s.hdr == nil {
		return 0
	}
	return s.hdr.bytes
}

// fill writes the headers this rank sends, and its own signature where
// verify compares it. The folded payloads are copied by the schedule.
func (h *hdrPlan) fill(buf []byte, sig *[sigSize]byte) {
	copy(buf[h.recvOff(h.rank):], sig[:])
	for p := range h.ranks {
		if p == h.rank {
			continue
		}
		o := h.sendOff[p]
		copy(buf[o:], sig[:])
		binary.LittleEndian.PutUint64(buf[o+sigSize:], uint64(int64(h.sendLen[p])))
		binary.LittleEndian.PutUint32(buf[o+specOff:], uint32(h.spec[p]))
	}
}

// maxOwed bounds the speculative receives a header may declare: more than
// a schedule posts is a corrupt header, not a number of messages to send.
const maxOwed = 1 << 20

// owed returns, per peer, how many receives the peer posted ahead of its
// verify for messages from this rank, as its header declares: after a
// mismatch this rank fills each with an empty message, so that no credit
// outlives the call.
func (h *hdrPlan) owed(buf []byte) ([]int, error) {
	owed := make([]int, h.ranks)
	for p := range h.ranks {
		if p == h.rank {
			continue
		}
		k := binary.LittleEndian.Uint32(buf[h.recvOff(p)+specOff:])
		if k > maxOwed {
			return nil, fmt.Errorf("collective: rank %d's header declares %d receives posted ahead of its verify (internal error: please report)", p, k)
		}
		owed[p] = int(k)
	}
	return owed, nil
}

// firstXfer returns the index of s's first primitive of kind with peer, or -1.
func firstXfer(s *schedule, kind primKind, peer int) int32 {
	for i, p := range s.prims {
		if p.kind == kind && p.peer == peer {
			return int32(i)
		}
	}
	return -1
}

// foldable reports whether send p can ride in the header: it reads the
// caller's input, which nothing writes, and waits on nothing, so its bytes
// are final when the call starts.
func foldable(p *prim, eager int) bool {
	return p.kind == primSend && len(p.deps) == 0 && p.a.buf == bufIn && p.n <= eager
}

// splittable reports whether send p is one whose first eager bytes can
// ride in the header and the rest follow the verify (call.prefix): what
// foldable takes but for its size, and not teed (the transport's copy into
// the tee would be split with it).
func splittable(p *prim, eager int) bool {
	return p.kind == primSend && len(p.deps) == 0 && p.a.buf == bufIn && !p.tee && p.n > eager
}

// prefixSplit returns s with each first send to a peer that is splittable
// made two, its first eager bytes and the rest, and each first receive
// from a peer p where from[p] made two alike (from may be nil: no
// receive), so that the header carries the first part as it carries a
// foldable send whole. What waited for the one waits for both, through a
// no-op joining them. s's dependencies point backwards, as add makes them.
func prefixSplit(s *schedule, eager int, from []bool) *schedule {
	out := &schedule{algo: s.algo, scratch: s.scratch}
	idx := make([]int32, len(s.prims)) // s's primitive -> its (join's) index in out
	sent, got := map[int]bool{}, map[int]bool{}
	for i, p := range s.prims {
		d := make([]int32, len(p.deps))
		for k, x := range p.deps {
			d[k] = idx[x]
		}
		p.deps = d
		two := false
		switch p.kind {
		case primSend:
			two = !sent[p.peer] && splittable(&p, eager)
			sent[p.peer] = true
		case primRecv:
			two = !got[p.peer] && from != nil && from[p.peer]
			got[p.peer] = true
		}
		if !two {
			idx[i] = out.add(p)
			continue
		}
		first, rest := p, p
		first.n, first.stream = eager, false
		rest.n -= eager
		rest.deps = append([]int32(nil), d...)
		if p.kind == primSend || p.fuse {
			rest.a.off += eager
		}
		if p.kind == primRecv {
			rest.dst.off += eager
		}
		a, b := out.add(first), out.add(rest)
		idx[i] = out.add(prim{kind: primNop, step: p.step, deps: []int32{a, b}})
	}
	return out
}

// withSignature returns body behind the header exchange and the verify:
// body's primitives that have no dependency wait for the verify, except the
// sends the headers carry.
func withSignature(body *schedule, cl *call, algo Algorithm) (*schedule, error) {
	r, n := cl.rank, cl.n
	eager := eagerLimit(n)
	h := &hdrPlan{ranks: n, rank: r, slot: hdrSize + eager,
		sendOff: make([]int, n), sendLen: make([]int, n), recvLen: make([]int, n), spec: make([]int, n)}
	fs, fr := make([]int32, n), make([]int32, n)
	// All-to-all-v's counts differ by rank, so a rank cannot rebuild its
	// peers' schedules: nothing folds there.
	fold := cl.op != OpAllToAllv && cl.p2p == nil
	// The peers' schedules as built (raw) and as they send (their first
	// sends split where the call splits them), each rebuilt once.
	raw, split := make([]*schedule, n), make([]*schedule, n)
	rawPeer := func(p int) (*schedule, error) {
		if raw[p] == nil {
			peer := *cl
			peer.rank = p
			pb, err := build(&peer, algo)
			if err != nil {
				return nil, err
			}
			raw[p] = pb
		}
		return raw[p], nil
	}
	peerBody := func(p int) (*schedule, error) {
		if split[p] == nil {
			pb, err := rawPeer(p)
			if err != nil {
				return nil, err
			}
			if fold && cl.prefix {
				pb = prefixSplit(pb, eager, nil)
			}
			split[p] = pb
		}
		return split[p], nil
	}
	if fold && cl.prefix {
		// Each peer splits its first send to this rank when it is
		// splittable: split the receive it lands in alike.
		from := make([]bool, n)
		for p := range n {
			i := firstXfer(body, primRecv, p)
			if p == r || i < 0 || body.prims[i].n <= eager {
				continue
			}
			pb, err := rawPeer(p)
			if err != nil {
				return nil, err
			}
			j := firstXfer(pb, primSend, r)
			from[p] = j >= 0 && splittable(&pb.prims[j], eager) && pb.prims[j].n == body.prims[i].n
		}
		body = prefixSplit(body, eager, from)
	}
	for p := range n {
		h.sendLen[p], h.recvLen[p] = -1, -1
		fs[p], fr[p] = -1, -1
		if p == r || !fold {
			continue
		}
		if fs[p] = firstXfer(body, primSend, p); fs[p] >= 0 && foldable(&body.prims[fs[p]], eager) {
			h.sendLen[p] = body.prims[fs[p]].n
		}
		if fr[p] = firstXfer(body, primRecv, p); fr[p] >= 0 && body.prims[fr[p]].n <= eager {
			pb, err := peerBody(p)
			if err != nil {
				return nil, err
			}
			if j := firstXfer(pb, primSend, r); j >= 0 && foldable(&pb.prims[j], eager) && pb.prims[j].n == body.prims[fr[p]].n {
				h.recvLen[p] = pb.prims[j].n
			}
		}
	}
	off := n * h.slot
	for p := range n {
		if p != r {
			h.sendOff[p] = off
			off += (hdrSize + max(h.sendLen[p], 0) + 63) &^ 63
		}
	}
	h.bytes = off

	s := &schedule{algo: algo, scratch: body.scratch, hdr: h}
	var xfers []int32
	for k := 1; k < n; k++ {
		p := mod(r-k, n)
		xfers = append(xfers, s.add(prim{kind: primRecv, peer: p, dst: ref{bufHdr, h.recvOff(p)}, n: h.slot, upTo: true}))
	}
	// The receives posted ahead of the verify, right behind the header
	// receives so that their credits leave with this rank's headers: per
	// peer, the body's receives from it up to the first that waits on
	// something (a queue pair matches receives in order).
	folded := func(i int) bool {
		p := &body.prims[i]
		return p.kind == primRecv && int32(i) == fr[p.peer] && h.recvLen[p.peer] >= 0
	}
	idx := make([]int32, len(body.prims)) // body primitive -> its index in s
	spec := make([]bool, len(body.prims))
	blocked := make([]bool, n)
	for i := range body.prims {
		p := body.prims[i]
		if p.kind != primRecv || folded(i) || blocked[p.peer] {
			continue
		}
		if len(p.deps) > 0 {
			blocked[p.peer] = true
			continue
		}
		spec[i] = true
		p.spec = true
		idx[i] = s.add(p)
		h.spec[p.peer]++
	}
	staged := make([]int32, n) // per peer: the copy of the folded payload into its header
	for k := 1; k < n; k++ {
		p := mod(r+k, n)
		staged[p] = -1
		if l := h.sendLen[p]; l > 0 {
			staged[p] = s.copyTo(ref{bufHdr, h.sendOff[p] + hdrSize}, body.prims[fs[p]].a, l, 0)
		}
		xfers = append(xfers, s.send(p, ref{bufHdr, h.sendOff[p]}, hdrSize+max(h.sendLen[p], 0), 0, deps(staged[p])...))
	}
	gate := s.add(prim{kind: primVerify, deps: xfers})
	type move struct{ off, n, to int } // scratch [off, off+n) is read from the header at to
	var moves []move
	for i, p := range body.prims {
		if spec[i] {
			continue
		}
		// Everything but the speculative receives waits for the verify:
		// directly where it waits on nothing else or on one of those
		// receives, through its dependencies otherwise.
		gated := len(p.deps) == 0
		p.deps = append([]int32(nil), p.deps...)
		for k, d := range p.deps {
			gated = gated || spec[d]
			p.deps[k] = idx[d]
		}
		if gated {
			p.deps = append(p.deps, gate)
		}
		switch {
		case p.kind == primSend && int32(i) == fs[p.peer] && h.sendLen[p.peer] >= 0:
			// Its bytes left in the header. What waited for it to be read
			// waits for the copy into the header, and like everything of
			// the body for the verify; its tee is a copy of its own.
			if p.tee {
				p = prim{kind: primCopy, dst: p.b, a: p.a, n: p.n, step: p.step, deps: deps(staged[p.peer], gate)}
			} else {
				p = prim{kind: primNop, step: p.step, deps: deps(staged[p.peer], gate)}
			}
		case folded(i):
			from := h.recvOff(p.peer) + hdrSize
			d := p.deps
			if !gated {
				d = append(d, gate)
			}
			switch {
			case p.n == 0:
				p = prim{kind: primNop, step: p.step, deps: d}
			case p.fuse:
				// A receive reduced on arrival: reduce the header's copy.
				p = prim{kind: primReduce, dst: p.dst, a: ref{bufHdr, from}, b: p.a, n: p.n, step: p.step, deps: d}
			case exclusiveScratch(body, i):
				moves = append(moves, move{p.dst.off, p.n, from})
				p = prim{kind: primNop, step: p.step, deps: d}
			default:
				p = prim{kind: primCopy, dst: p.dst, a: ref{bufHdr, from}, n: p.n, step: p.step, deps: d}
			}
		}
		idx[i] = s.add(p)
	}
	for _, i := range idx {
		p := &s.prims[i]
		for _, rf := range []*ref{&p.dst, &p.a, &p.b} {
			for _, m := range moves {
				if rf.buf == bufScratch && rf.off >= m.off && rf.off < m.off+m.n {
					*rf = ref{bufHdr, m.to + rf.off - m.off}
					break
				}
			}
		}
	}
	if len(moves) > 0 && !usesScratch(s) {
		s.scratch = 0 // the payloads it held are read where the headers landed
	}
	return s, nil
}

func usesScratch(s *schedule) bool {
	for _, p := range s.prims {
		for _, rf := range []ref{p.dst, p.a, p.b} {
			if rf.buf == bufScratch && p.kind != primNop && p.kind != primVerify {
				return true
			}
		}
	}
	return false
}

// exclusiveScratch reports whether receive i of s lands in scratch that no
// other primitive writes and that every reader reads within its bounds: then
// its readers can read the bytes wherever else they landed instead.
func exclusiveScratch(s *schedule, i int) bool {
	d := s.prims[i].dst
	if d.buf != bufScratch {
		return false
	}
	lo, hi := d.off, d.off+s.prims[i].n
	for j, p := range s.prims {
		if j == i {
			continue
		}
		var reads, writes []ref
		switch p.kind {
		case primSend:
			reads = []ref{p.a}
			if p.tee {
				writes = []ref{p.b}
			}
		case primRecv, primScale:
			writes = []ref{p.dst}
			if p.fuse {
				reads = []ref{p.a}
			}
		case primCopy:
			writes, reads = []ref{p.dst}, []ref{p.a}
		case primReduce:
			writes, reads = []ref{p.dst}, []ref{p.a, p.b}
		}
		for _, w := range writes {
			if w.buf == bufScratch && w.off < hi && w.off+p.n > lo {
				return false
			}
		}
		for _, rd := range reads {
			if rd.buf == bufScratch && rd.off < hi && rd.off+p.n > lo && (rd.off < lo || rd.off+p.n > hi) {
				return false
			}
		}
	}
	return true
}

// verify compares the signatures every rank sent. A mismatch is the
// caller's; a header that declares another payload than this rank's
// rebuild of the sender's schedule expects is an internal error, and the
// schedules that follow would not match: it fails the channel.
func (h *hdrPlan) verify(buf []byte, c *call) (err error, poisons bool) {
	own := buf[h.recvOff(h.rank):][:sigSize]
	for p := range h.ranks {
		if string(buf[h.recvOff(p):][:sigSize]) == string(own) {
			continue
		}
		calls := make([]string, h.ranks)
		for r := range calls {
			calls[r] = describeSig(buf[h.recvOff(r):][:sigSize])
		}
		return &MismatchError{Calls: calls}, false
	}
	for p := range h.ranks {
		if p == h.rank {
			continue
		}
		if got := int64(binary.LittleEndian.Uint64(buf[h.recvOff(p)+sigSize:])); got != int64(h.recvLen[p]) {
			return fmt.Errorf("collective: %v: rank %d's header carries %d payload bytes where rank %d expected %d (internal error: please report)",
				c.op, p, got, h.rank, h.recvLen[p]), true
		}
	}
	return nil, false
}
