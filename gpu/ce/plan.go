package ce

import (
	"fmt"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// Collectives of a Proc job on one host, for any number of ranks, one
// table entry each (ipcOps): the shape their buffers must have, the
// registered scratch they need and their plan. Data moves only on copy
// engines, pushed by the sender into the receiver's registered memory
// (transfer); reductions are the PTX kernels on this rank's stream,
// Config.SMs blocks, operands folded in rank order so every rank computes
// bit-identical results:
//
//   - reduce-scatter: each rank sends block q of its input into rank q's
//     scratch (slot = its own rank); rank q folds the n operands into its
//     output.
//   - all-reduce: the same on n parts of the vector (split on 16-byte
//     boundaries), then each rank sends its reduced part into every peer's
//     output (an all-gather on copy engines).
//   - reduce: every rank sends its input into root's scratch; root folds.
//   - broadcast, gather, scatter, all-to-all, send/recv: copies only, 0 SMs.
//     All-to-all in place copies the input to scratch first.
//
// A plan is pure, as the engine's schedules are: it names addresses and
// sizes, the proxy runs it (runPlan), and a test runs every entry's
// plans on all ranks in a simulator, without a GPU (plan_test.go).

// span is a buffer a plan names: where it is on this rank, and, when
// peers may write into it, its registration and offset there.
type span struct {
	ptr cuda.DevicePtr
	reg *Mem
	off int // into reg
	n   int
}

func memSpan(m *DeviceMem) span {
	if m == nil {
		return span{}
	}
	return span{ptr: m.Ptr(), reg: m.alloc.reg, off: m.off, n: m.n}
}

func regSpan(m *Mem) span { return span{ptr: m.Ptr, reg: m, n: m.Bytes} }

// at is the address off bytes into s.
func (s span) at(off int) cuda.DevicePtr { return s.ptr.Add(off) }

// into is a receive from peer from of bytes at off into s.
func (s span) into(from, off, bytes int) P2P { return RecvInto(from, s.reg, s.off+off, bytes) }

// overlaps reports whether s and o share a byte.
func (s span) overlaps(o span) bool { return s.ptr < o.ptr.Add(o.n) && o.ptr < s.ptr.Add(s.n) }

// opShape is what a plan is made from: the call and this rank's view of it.
type opShape struct {
	op         collective.DeviceOp
	n, me, es  int
	send, recv span         // zero where the call has none on this rank
	hasSend    bool         // a send buffer was given
	hasRecv    bool         // a receive buffer was given
	p2p        []*DeviceMem // op.P2P's buffers
}

func (s *opShape) need(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf("ce: %v: "+format, append([]any{s.op.Op}, args...)...)
}

// phase is one step of a plan: an optional copy on this rank's stream
// first, a transfer (receives posted, sends pushed, and a local copy
// alongside: Proc.transfer), then an optional fold.
type phase struct {
	pre  *local
	ops  []P2P
	loc  *local
	fold *foldStep
}

// foldStep is dst = in[0] op in[1] op … over count elements (Proc.fold).
type foldStep struct {
	dst   cuda.DevicePtr
	in    []cuda.DevicePtr
	count int
}

// ipcOp is one operation's entry.
type ipcOp struct {
	check   func(s *opShape) error // the buffers' shape, as the host library checks it
	scratch func(s *opShape) int   // registered scratch bytes every rank needs alike; nil: none
	plan    func(s *opShape, scr *Mem) []phase
	payload func(s *opShape) int // the call's bytes as nccl-tests counts them (its records carry them)
	p2p     bool                 // point-to-point: numbered apart from collectives, transfers checked (Proc.checkOps)
}

func sendBytes(s *opShape) int   { return s.send.n }
func recvBytes(s *opShape) int   { return s.recv.n }
func ranksBySend(s *opShape) int { return s.n * s.send.n }
func p2pBytes(s *opShape) (n int) {
	for _, b := range s.p2p {
		n += b.n
	}
	return n
}

var ipcOps = map[collective.Op]ipcOp{
	collective.OpSend:  {check: checkP2P, plan: planP2P, payload: p2pBytes, p2p: true},
	collective.OpRecv:  {check: checkP2P, plan: planP2P, payload: p2pBytes, p2p: true},
	collective.OpGroup: {check: checkP2P, plan: planP2P, payload: p2pBytes, p2p: true},
	collective.OpAllGather: {
		check: func(s *opShape) error {
			return s.need(s.hasSend && s.hasRecv && s.recv.n == s.n*s.send.n, "receive has %d bytes, want %d ranks × %d", s.recv.n, s.n, s.send.n)
		},
		plan:    func(s *opShape, _ *Mem) []phase { return []phase{allGather(s.n, s.me, s.send, s.recv)} },
		payload: ranksBySend,
	},
	collective.OpBroadcast: {
		check: func(s *opShape) error {
			return s.need(s.hasRecv && (s.me != s.op.Root || s.hasSend && s.send.n == s.recv.n), "root's send and every receive must be device buffers of one size")
		},
		plan:    planBroadcast,
		payload: recvBytes,
	},
	collective.OpGather: {
		check: func(s *opShape) error {
			return s.need(s.hasSend && (s.me != s.op.Root || s.hasRecv && s.recv.n == s.n*s.send.n), "root's receive must hold %d ranks × %d bytes", s.n, s.send.n)
		},
		plan:    planGather,
		payload: ranksBySend,
	},
	collective.OpScatter: {
		check: func(s *opShape) error {
			return s.need(s.hasRecv && (s.me != s.op.Root || s.hasSend && s.send.n == s.n*s.recv.n), "root's send must hold %d ranks × %d bytes", s.n, s.recv.n)
		},
		plan:    planScatter,
		payload: func(s *opShape) int { return s.n * s.recv.n },
	},
	collective.OpAllToAll: {
		check: func(s *opShape) error {
			if err := checkSameSize(s); err != nil {
				return err
			}
			return s.need(s.send.n%(s.n*s.es) == 0, "%d bytes is not %d equal blocks of %v", s.send.n, s.n, s.op.Send.Type)
		},
		// Every rank grows the scratch alike (a registration is
		// collective), in place or not; only in place uses it.
		scratch: func(s *opShape) int { return s.send.n },
		plan:    planAllToAll,
		payload: sendBytes,
	},
	collective.OpReduceScatter: {
		check: func(s *opShape) error {
			return s.need(s.hasSend && s.hasRecv && s.send.n == s.n*s.recv.n, "send has %d bytes, want %d ranks × %d", s.send.n, s.n, s.recv.n)
		},
		scratch: func(s *opShape) int { return s.send.n },
		plan:    planReduceScatter,
		payload: sendBytes,
	},
	collective.OpReduce: {
		check: func(s *opShape) error {
			return s.need(s.hasSend && (s.me != s.op.Root || s.hasRecv && s.send.n == s.recv.n), "send and root's receive must be device buffers of one size")
		},
		scratch: func(s *opShape) int { return s.n * s.send.n },
		plan:    planReduce,
		payload: sendBytes,
	},
	collective.OpAllReduce: {
		check: checkSameSize,
		scratch: func(s *opShape) int {
			_, per := splitParts(s.send.n/s.es, s.n, s.es)
			return s.n * per * s.es
		},
		plan:    planAllReduce,
		payload: sendBytes,
	},
}

func checkSameSize(s *opShape) error {
	return s.need(s.hasSend && s.hasRecv && s.send.n == s.recv.n, "send and receive must be device buffers of one size (%d and %d bytes)", s.send.n, s.recv.n)
}

func checkP2P(s *opShape) error {
	for i, b := range s.p2p {
		if b == nil {
			return fmt.Errorf("ce: operation %d has no device buffer", i)
		}
	}
	return nil
}

func planP2P(s *opShape, _ *Mem) []phase {
	var ops []P2P
	for i, o := range s.op.P2P {
		if b := memSpan(s.p2p[i]); o.Recv {
			ops = append(ops, b.into(o.Peer, 0, b.n))
		} else {
			ops = append(ops, SendTo(o.Peer, b.ptr, b.n))
		}
	}
	return []phase{{ops: ops}}
}

// allGather is the all-gather of send's bytes per rank into recv: pushed
// to every peer, this rank's own piece copied locally.
func allGather(n, me int, send, recv span) phase {
	b := send.n
	var ph phase
	for k := 1; k < n; k++ {
		ph.ops = append(ph.ops, SendTo((me+k)%n, send.ptr, b))
		q := (me - k + n) % n
		ph.ops = append(ph.ops, recv.into(q, q*b, b))
	}
	if own := recv.at(me * b); own != send.ptr {
		ph.loc = &local{dst: own, src: send.ptr, bytes: b}
	}
	return ph
}

func planBroadcast(s *opShape, _ *Mem) []phase { return planFromRoot(s, 0) }

func planScatter(s *opShape, _ *Mem) []phase { return planFromRoot(s, s.recv.n) }

// planFromRoot sends from the root to every rank the block of recv's size
// at q*stride of send: stride 0 broadcasts one block, stride recv's size
// scatters send's blocks.
func planFromRoot(s *opShape, stride int) []phase {
	b, me := s.recv.n, s.me
	var ph phase
	if me != s.op.Root {
		ph.ops = append(ph.ops, s.recv.into(s.op.Root, 0, b))
		return []phase{ph}
	}
	for q := range s.n {
		if q != me {
			ph.ops = append(ph.ops, SendTo(q, s.send.at(q*stride), b))
		}
	}
	if own := s.send.at(me * stride); own != s.recv.ptr {
		ph.loc = &local{dst: s.recv.ptr, src: own, bytes: b}
	}
	return []phase{ph}
}

func planGather(s *opShape, _ *Mem) []phase {
	b, me := s.send.n, s.me
	var ph phase
	if me != s.op.Root {
		ph.ops = append(ph.ops, SendTo(s.op.Root, s.send.ptr, b))
		return []phase{ph}
	}
	for q := range s.n {
		if q != me {
			ph.ops = append(ph.ops, s.recv.into(q, q*b, b))
		}
	}
	if own := s.recv.at(me * b); own != s.send.ptr {
		ph.loc = &local{dst: own, src: s.send.ptr, bytes: b}
	}
	return []phase{ph}
}

func planAllToAll(s *opShape, scr *Mem) []phase {
	n, me, b := s.n, s.me, s.send.n/s.n
	var ph phase
	src := s.send.ptr
	if s.send.overlaps(s.recv) { // in place: send from a copy
		ph.pre = &local{dst: scr.Ptr, src: src, bytes: s.send.n}
		src = scr.Ptr
	}
	for k := 1; k < n; k++ {
		q := (me + k) % n
		ph.ops = append(ph.ops, SendTo(q, src.Add(q*b), b))
		q = (me - k + n) % n
		ph.ops = append(ph.ops, s.recv.into(q, q*b, b))
	}
	if own := s.recv.at(me * b); own != src.Add(me*b) {
		ph.loc = &local{dst: own, src: src.Add(me * b), bytes: b}
	}
	return []phase{ph}
}

func planReduceScatter(s *opShape, scr *Mem) []phase {
	n, me, b := s.n, s.me, s.recv.n
	var ph phase
	for k := 1; k < n; k++ {
		q := (me + k) % n
		ph.ops = append(ph.ops, SendTo(q, s.send.at(q*b), b))
		q = (me - k + n) % n
		ph.ops = append(ph.ops, RecvInto(q, scr, q*b, b))
	}
	in := make([]cuda.DevicePtr, n)
	for q := range in {
		in[q] = scr.Ptr.Add(q * b)
	}
	in[me] = s.send.at(me * b)
	ph.fold = &foldStep{dst: s.recv.ptr, in: in, count: b / s.es}
	return []phase{ph}
}

func planReduce(s *opShape, scr *Mem) []phase {
	n, me, b := s.n, s.me, s.send.n
	if me != s.op.Root {
		return []phase{{ops: []P2P{SendTo(s.op.Root, s.send.ptr, b)}}}
	}
	var ph phase
	in := make([]cuda.DevicePtr, n)
	for q := range in {
		if q != me {
			ph.ops = append(ph.ops, RecvInto(q, scr, q*b, b))
		}
		in[q] = scr.Ptr.Add(q * b)
	}
	in[me] = s.send.ptr
	ph.fold = &foldStep{dst: s.recv.ptr, in: in, count: b / s.es}
	return []phase{ph}
}

// planAllReduce is a reduce-scatter of n parts into scratch, each rank
// folding its own, then an all-gather of the reduced parts on copy
// engines.
func planAllReduce(s *opShape, scr *Mem) []phase {
	n, me, es := s.n, s.me, s.es
	parts, per := splitParts(s.send.n/es, n, es)
	lo, hi := parts[me], parts[me+1]
	var rs, ag phase
	for k := 1; k < n; k++ {
		q := (me + k) % n
		rs.ops = append(rs.ops, SendTo(q, s.send.at(parts[q]*es), (parts[q+1]-parts[q])*es))
		q = (me - k + n) % n
		rs.ops = append(rs.ops, RecvInto(q, scr, q*per*es, (hi-lo)*es))
	}
	in := make([]cuda.DevicePtr, n)
	for q := range in {
		in[q] = scr.Ptr.Add(q * per * es)
	}
	in[me] = s.send.at(lo * es)
	rs.fold = &foldStep{dst: s.recv.at(lo * es), in: in, count: hi - lo}
	for k := 1; k < n; k++ {
		q := (me + k) % n
		ag.ops = append(ag.ops, SendTo(q, s.recv.at(lo*es), (hi-lo)*es))
		q = (me - k + n) % n
		ag.ops = append(ag.ops, s.recv.into(q, parts[q]*es, (parts[q+1]-parts[q])*es))
	}
	return []phase{rs, ag}
}

// splitParts divides count elements of size es among n ranks on 16-byte
// boundaries: rank q owns [bounds[q], bounds[q+1]); per is the largest
// part.
func splitParts(count, n, es int) (bounds []int, per int) {
	lanes := max(1, 16/es)
	per = (count + n - 1) / n
	per = (per + lanes - 1) / lanes * lanes
	bounds = make([]int, n+1)
	for q := 1; q <= n; q++ {
		bounds[q] = min(q*per, count)
	}
	return bounds, per
}
