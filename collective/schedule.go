package collective

import "fmt"

// A schedule is one rank's part of one collective on one channel, written as
// a dependency graph of five primitives: send, recv, reduce, copy and scale.
// Algorithms (ring, tree, recursive doubling, direct) only build schedules;
// the machine below runs them as a pure state machine (completions in, work
// requests out) and the progress engine does the I/O. That split is what lets
// every algorithm be tested without a network and gives telemetry one place
// to stamp every step.

// bufID names a buffer of a collective call. Grouped point-to-point calls
// number each caller buffer from numBufs up.
type bufID uint16

const (
	bufIn      bufID = iota // the caller's send buffer
	bufOut                  // the caller's receive buffer
	bufScratch              // engine-owned scratch (schedule.scratch bytes)
	bufHdr                  // engine-owned: the signature headers sent and received (schedule.hdr bytes)
	numBufs
)

// ref is a byte range in one of the call's buffers.
type ref struct {
	buf bufID
	off int
}

type primKind uint8

const (
	primSend primKind = iota
	primRecv
	primReduce // dst = a op b
	primCopy   // dst = a
	primScale  // dst /= divisor (the avg reduction's final step)
	primVerify // compare the ranks' call signatures
	primNop    // a transfer the signature header carried: completes once its dependencies have
)

func (k primKind) String() string {
	return [...]string{"send", "recv", "reduce", "copy", "scale", "verify", "nop"}[k]
}

// prim is one primitive of a schedule.
type prim struct {
	kind primKind
	peer int // send and recv: the peer's rank
	n    int // bytes
	dst  ref // recv, reduce, copy, scale
	a, b ref // send: a (and its tee b); reduce: a, b; copy: a; fused recv: a
	step uint32
	upTo bool    // recv: n is the most it accepts (a signature header)
	deps []int32 // primitives that must complete first

	fuse   bool // recv: dst = message op a, reduced on arrival (recvReduce)
	stream bool // recv: nothing reads dst again in this call (transport.WR.Stream)
	pull   bool // recv: read out of the sender's memory where the transport can (transport.WR.Pull)
	tee    bool // send: the transport copies a into b too (transport.WR.Tee); only where call.tee
	spec   bool // recv: posted ahead of the signature verify (withSignature)
}

// schedule is one rank's program for one collective call.
type schedule struct {
	prims   []prim
	scratch int // bytes of scratch the schedule uses
	algo    Algorithm
	hdr     *hdrPlan // the signature headers; nil without the check

	// The compiled graph (compile).
	depCount   []int32
	dependents [][]int32
	queue      [][]int32 // per (peer, direction): sends or receives in program order
	qid        []int32   // each primitive's queue, -1 for local primitives
}

func (s *schedule) add(p prim) int32 {
	s.prims = append(s.prims, p)
	return int32(len(s.prims) - 1)
}

func (s *schedule) send(peer int, src ref, n int, step uint32, deps ...int32) int32 {
	return s.add(prim{kind: primSend, peer: peer, a: src, n: n, step: step, deps: deps})
}

// sendTee sends src to peer and has the transport copy it into tee as it
// goes (transport.WR.Tee). Only for transports that do (call.tee).
func (s *schedule) sendTee(peer int, src, tee ref, n int, step uint32, deps ...int32) int32 {
	return s.add(prim{kind: primSend, peer: peer, a: src, b: tee, tee: true, n: n, step: step, deps: deps})
}

func (s *schedule) recv(peer int, dst ref, n int, step uint32, deps ...int32) int32 {
	return s.add(prim{kind: primRecv, peer: peer, dst: dst, n: n, step: step, deps: deps})
}

// recvReduce receives from peer and reduces the message with src into dst
// as it arrives (dst = message op src; dst may be src). Only for transports
// that reduce on receive (call.fuse).
func (s *schedule) recvReduce(peer int, dst, src ref, n int, step uint32, deps ...int32) int32 {
	return s.add(prim{kind: primRecv, peer: peer, dst: dst, a: src, fuse: true, n: n, step: step, deps: deps})
}

// streamed marks receive i as the call's last touch of its bytes when the
// call's output is large (streamFrom): the transport may write them past
// the caches.
func (s *schedule) streamed(i int32, outBytes int) {
	if outBytes >= streamFrom {
		s.prims[i].stream = true
	}
}

func (s *schedule) reduce(dst, a, b ref, n int, step uint32, deps ...int32) int32 {
	return s.add(prim{kind: primReduce, dst: dst, a: a, b: b, n: n, step: step, deps: deps})
}

func (s *schedule) copyTo(dst, src ref, n int, step uint32, deps ...int32) int32 {
	return s.add(prim{kind: primCopy, dst: dst, a: src, n: n, step: step, deps: deps})
}

func (s *schedule) scale(dst ref, n int, step uint32, deps ...int32) int32 {
	return s.add(prim{kind: primScale, dst: dst, n: n, step: step, deps: deps})
}

// deps collects non-negative primitive indices (-1 means "none").
func deps(ids ...int32) []int32 {
	out := make([]int32, 0, len(ids))
	for _, id := range ids {
		if id >= 0 {
			out = append(out, id)
		}
	}
	return out
}

// validate checks a schedule's references against buffer sizes.
func (s *schedule) validate(bufs [][]byte) error {
	size := func(b bufID) int {
		switch {
		case b == bufScratch:
			return s.scratch
		case b == bufHdr:
			return s.hdrBytes()
		case int(b) >= len(bufs):
			return -1
		}
		return len(bufs[b])
	}
	check := func(i int, r ref, n int) error {
		if r.off < 0 || r.off+n > size(r.buf) {
			return fmt.Errorf("collective: schedule prim %d (%s) reaches [%d,%d) of buffer %d of %d bytes", i, s.prims[i].kind, r.off, r.off+n, r.buf, size(r.buf))
		}
		return nil
	}
	for i, p := range s.prims {
		var err error
		switch p.kind {
		case primSend:
			if err = check(i, p.a, p.n); err == nil && p.tee {
				err = check(i, p.b, p.n)
			}
		case primRecv, primScale:
			if err = check(i, p.dst, p.n); err == nil && p.fuse {
				err = check(i, p.a, p.n)
			}
		case primCopy:
			if err = check(i, p.dst, p.n); err == nil {
				err = check(i, p.a, p.n)
			}
		case primReduce:
			if err = check(i, p.dst, p.n); err == nil {
				if err = check(i, p.a, p.n); err == nil {
					err = check(i, p.b, p.n)
				}
			}
		}
		if err != nil {
			return err
		}
		for _, d := range p.deps {
			if d < 0 || int(d) >= i {
				return fmt.Errorf("collective: schedule prim %d depends on %d, not an earlier primitive", i, d)
			}
		}
	}
	return nil
}

// compile computes the schedule's static graph: dependency counts, reverse
// edges and per-peer queues. Schedules are cached and shared by calls with
// the same shape, so this runs once per shape.
func (s *schedule) compile(ranks int) {
	if s.dependents != nil {
		return
	}
	n := len(s.prims)
	s.depCount = make([]int32, n)
	s.dependents = make([][]int32, n)
	s.qid = make([]int32, n)
	s.queue = make([][]int32, 2*ranks)
	for i, p := range s.prims {
		s.depCount[i] = int32(len(p.deps))
		for _, d := range p.deps {
			s.dependents[d] = append(s.dependents[d], int32(i))
		}
		s.qid[i] = -1
		if p.kind == primSend || p.kind == primRecv {
			q := queueOf(p.kind, p.peer)
			s.qid[i] = q
			s.queue[q] = append(s.queue[q], int32(i))
		}
	}
}

// machine runs a schedule: it tells which primitives may start and takes
// their completions. It does no I/O. Sends and receives to one peer start in
// program order, because a queue pair matches the k-th send with the k-th
// receive; local primitives start as soon as their dependencies are done.
type machine struct {
	s         *schedule
	unmet     []int32 // dependencies not yet complete, per primitive
	started   []bool
	completed []bool
	head      []int // next unstarted position in each of s.queue
	left      int   // primitives not yet complete
	flags     []bool
}

// queueOf returns the queue id of a send or receive to peer.
func queueOf(kind primKind, peer int) int32 {
	if kind == primRecv {
		return int32(peer*2 + 1)
	}
	return int32(peer * 2)
}

func newMachine(s *schedule, ranks int) *machine {
	m := &machine{}
	m.reset(s, ranks)
	return m
}

// reset starts m on s, reusing m's memory.
func (m *machine) reset(s *schedule, ranks int) {
	s.compile(ranks)
	n := len(s.prims)
	m.s, m.left = s, n
	m.unmet = append(m.unmet[:0], s.depCount...)
	if cap(m.flags) < 2*n {
		m.flags = make([]bool, 2*n)
	}
	m.flags = m.flags[:2*n]
	clear(m.flags)
	m.started, m.completed = m.flags[:n:n], m.flags[n:]
	if cap(m.head) < len(s.queue) {
		m.head = make([]int, len(s.queue))
	}
	m.head = m.head[:len(s.queue)]
	clear(m.head)
}

// ready reports whether primitive i may start now.
func (m *machine) ready(i int32) bool {
	if m.unmet[i] != 0 || m.started[i] {
		return false
	}
	q := m.s.qid[i]
	return q < 0 || m.s.queue[q][m.head[q]] == i
}

// initial appends the primitives that may start at once to out.
func (m *machine) initial(out []int32) []int32 {
	for i := range m.s.prims {
		if m.ready(int32(i)) {
			out = append(out, int32(i))
		}
	}
	return out
}

// start marks primitive i started and appends the next primitive of its
// queue to out if that may start now.
func (m *machine) start(i int32, out []int32) []int32 {
	m.started[i] = true
	if q := m.s.qid[i]; q >= 0 {
		m.head[q]++
		if m.head[q] < len(m.s.queue[q]) {
			if nx := m.s.queue[q][m.head[q]]; m.ready(nx) {
				out = append(out, nx)
			}
		}
	}
	return out
}

// complete marks primitive i done and appends the primitives that may start
// because of it to out.
func (m *machine) complete(i int32, out []int32) []int32 {
	m.left--
	m.completed[i] = true
	for _, d := range m.s.dependents[i] {
		m.unmet[d]--
		if m.ready(d) {
			out = append(out, d)
		}
	}
	return out
}

// nextReady reports whether the next unstarted primitive of queue q may
// start now.
func (m *machine) nextReady(q int32) bool {
	return m.head[q] < len(m.s.queue[q]) && m.ready(m.s.queue[q][m.head[q]])
}

// pendingOn reports whether queue q still has primitives not started.
func (m *machine) pendingOn(q int32) bool { return m.head[q] < len(m.s.queue[q]) }

// done reports whether every primitive completed.
func (m *machine) done() bool { return m.left == 0 }

// slice returns the bytes r names, n long.
func (r ref) slice(bufs [][]byte, n int) []byte { return bufs[r.buf][r.off : r.off+n] }

// runLocal executes a local primitive (reduce, copy, scale) on the call's
// buffers.
func runLocal(p *prim, bufs [][]byte, dt Datatype, op ReduceOp, ranks int) {
	if p.n == 0 {
		return
	}
	switch p.kind {
	case primReduce:
		reduceInto(dt, op, p.dst.slice(bufs, p.n), p.a.slice(bufs, p.n), p.b.slice(bufs, p.n))
	case primCopy:
		copy(p.dst.slice(bufs, p.n), p.a.slice(bufs, p.n))
	case primScale:
		scaleDiv(dt, p.dst.slice(bufs, p.n), ranks)
	}
}
