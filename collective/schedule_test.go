package collective

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// simRank is one rank of a simulated job: its schedule, machine and buffers.
type simRank struct {
	c    *call
	s    *schedule
	m    *machine
	bufs [][]byte
	// snapshot of each posted send's bytes, to catch a buffer changed in flight
	sent map[int32][]byte
	// verifyErr is what the verify primitive returned; the rank stops there
	verifyErr error
	// drained counts the receives peers filled with empty messages
	drained int
}

// simDrain stands for an empty message a rank sends after a mismatch.
const simDrain = -1

// verifyAt returns the index of the schedule's verify primitive.
func (sr *simRank) verifyAt() int {
	for i, p := range sr.s.prims {
		if p.kind == primVerify {
			return i
		}
	}
	return -1
}

type simXfer struct {
	from, to   int
	send, recv int32
}

// simulate runs the ranks' schedules against an ideal network, starting
// ready primitives and completing matched transfers in a random order. A
// receive buffer is poisoned when posted and filled only at completion, and
// a send buffer must not change between post and completion, so a missing
// dependency shows up as a wrong result or an error.
func simulate(ranks []*simRank, dt Datatype, op ReduceOp, rng *rand.Rand) error {
	n := len(ranks)
	type qkey struct{ from, to int }
	sends := map[qkey][]int32{}
	recvs := map[qkey][]int32{}
	var inflight []simXfer
	type cand struct {
		rank int
		prim int32
	}
	var ready []cand
	// match puts the heads of key's queues in flight; only a start adds to
	// a queue, so only the keys it touched can match.
	var touched []qkey
	match := func(key qkey) {
		sq, rq := sends[key], recvs[key]
		for len(sq) > 0 && len(rq) > 0 {
			inflight = append(inflight, simXfer{key.from, key.to, sq[0], rq[0]})
			sq, rq = sq[1:], rq[1:]
		}
		sends[key], recvs[key] = sq, rq
	}
	for r, sr := range ranks {
		sr.m = newMachine(sr.s, n)
		sr.sent = map[int32][]byte{}
		for _, i := range sr.m.initial(nil) {
			ready = append(ready, cand{r, i})
		}
	}
	for {
		if len(ready) == 0 && len(inflight) == 0 {
			break
		}
		// Pick: start something ready, or complete a transfer in flight.
		if len(ready) > 0 && (len(inflight) == 0 || rng.IntN(2) == 0) {
			k := rng.IntN(len(ready))
			cd := ready[k]
			ready = append(ready[:k], ready[k+1:]...)
			sr := ranks[cd.rank]
			p := &sr.s.prims[cd.prim]
			var more []int32
			more = sr.m.start(cd.prim, more)
			switch p.kind {
			case primSend:
				sr.sent[cd.prim] = bytes.Clone(p.a.slice(sr.bufs, p.n))
				if p.tee { // written by the send's completion, not before
					scribble(p.b.slice(sr.bufs, p.n))
				}
				key := qkey{cd.rank, p.peer}
				sends[key] = append(sends[key], cd.prim)
				touched = append(touched, key)
			case primRecv:
				if !p.fuse { // a fused receive's dst may be its source
					scribble(p.dst.slice(sr.bufs, p.n))
				}
				key := qkey{p.peer, cd.rank}
				recvs[key] = append(recvs[key], cd.prim)
				touched = append(touched, key)
			case primVerify:
				if err, _ := sr.s.hdr.verify(sr.bufs[bufHdr], sr.c); err != nil {
					// Nothing behind the verify starts; the rank fills the
					// receives its peers posted ahead of theirs.
					sr.verifyErr = err
					owed, err := sr.s.hdr.owed(sr.bufs[bufHdr])
					if err != nil {
						return err
					}
					for peer, k := range owed {
						key := qkey{cd.rank, peer}
						for range k {
							sends[key] = append(sends[key], simDrain)
						}
						touched = append(touched, key)
					}
					break
				}
				more = sr.m.complete(cd.prim, more)
			default:
				runLocal(p, sr.bufs, dt, op, n)
				more = sr.m.complete(cd.prim, more)
			}
			for _, i := range more {
				ready = append(ready, cand{cd.rank, i})
			}
			for _, key := range touched {
				match(key)
			}
			touched = touched[:0]
			continue
		}
		k := rng.IntN(len(inflight))
		x := inflight[k]
		inflight = append(inflight[:k], inflight[k+1:]...)
		sr, rr := ranks[x.from], ranks[x.to]
		rp := &rr.s.prims[x.recv]
		if x.send == simDrain {
			if !rp.spec || rr.verifyErr == nil && rr.m.completed[rr.verifyAt()] {
				return fmt.Errorf("rank %d's empty message after a mismatch reached rank %d's receive %d (step %d), not one posted ahead of a verify that fails",
					x.from, x.to, x.recv, rp.step)
			}
			rr.drained++
			continue
		}
		sp := &sr.s.prims[x.send]
		if sp.n != rp.n && !(rp.upTo && sp.n <= rp.n) {
			return fmt.Errorf("rank %d sends %d bytes (prim %d step %d) to rank %d, which receives %d (prim %d step %d)",
				x.from, sp.n, x.send, sp.step, x.to, rp.n, x.recv, rp.step)
		}
		if now := sp.a.slice(sr.bufs, sp.n); !bytes.Equal(now, sr.sent[x.send]) {
			return fmt.Errorf("rank %d: send prim %d buffer changed while in flight", x.from, x.send)
		}
		if rp.fuse {
			reduceInto(dt, op, rp.dst.slice(rr.bufs, sp.n), sr.sent[x.send], rp.a.slice(rr.bufs, sp.n))
		} else {
			copy(rp.dst.slice(rr.bufs, sp.n), sr.sent[x.send])
		}
		if sp.tee {
			copy(sp.b.slice(sr.bufs, sp.n), sr.sent[x.send])
		}
		for _, i := range sr.m.complete(x.send, nil) {
			ready = append(ready, cand{x.from, i})
		}
		for _, i := range rr.m.complete(x.recv, nil) {
			ready = append(ready, cand{x.to, i})
		}
	}
	for key, q := range sends {
		if len(q) > 0 {
			return fmt.Errorf("rank %d's sends %v to rank %d were never received", key.from, q, key.to)
		}
	}
	for key, q := range recvs {
		if len(q) > 0 {
			return fmt.Errorf("rank %d's receives %v from rank %d never got a message", key.to, q, key.from)
		}
	}
	for r, sr := range ranks {
		if sr.verifyErr == nil && !sr.m.done() {
			var stuck []string
			for i, p := range sr.s.prims {
				if !sr.m.started[i] || sr.m.unmet[i] >= 0 {
					if !sr.m.started[i] {
						stuck = append(stuck, fmt.Sprintf("%d:%s->%d", i, p.kind, p.peer))
					}
				}
			}
			return fmt.Errorf("deadlock: rank %d has %d primitives left; not started: %v; unmatched sends %v recvs %v", r, sr.m.left, stuck, sends, recvs)
		}
	}
	return nil
}

// algosFor lists the algorithms that implement op.
func algosFor(op Op) []Algorithm {
	switch op {
	case OpAllReduce:
		return []Algorithm{AlgoRing, AlgoTree, AlgoRecursiveDoubling, AlgoDirect}
	case OpBroadcast, OpReduce:
		return []Algorithm{AlgoRing, AlgoTree, AlgoDirect}
	case OpAllGather, OpReduceScatter:
		return []Algorithm{AlgoRing, AlgoDirect}
	case OpBarrier:
		return []Algorithm{AlgoAuto}
	}
	return []Algorithm{AlgoDirect}
}

// simChunks are the chunk sizes a cell of TestSchedulesSimulated runs with:
// one element per chunk (thousands of chunks at the largest count, so only
// under VCCL_TEST_FULL), 37 elements (a ragged last chunk), and count
// elements, which no block exceeds (one chunk per block).
func simChunks(count int) []int {
	const es = 8
	switch {
	case count <= 1:
		return []int{es}
	case fullMatrix:
		return []int{es, 37 * es, count * es}
	case count > 13:
		return []int{37 * es, count * es}
	}
	return []int{es, count * es}
}

// TestSchedulesSimulated checks every algorithm of every operation at every
// world size from 1 to 8 in the simulator, one parallel subtest each.
func TestSchedulesSimulated(t *testing.T) {
	t.Parallel()
	ops := []Op{OpAllReduce, OpAllGather, OpReduceScatter, OpBroadcast, OpReduce, OpAllToAll, OpGather, OpScatter, OpBarrier}
	for _, op := range ops {
		t.Run(op.String(), func(t *testing.T) {
			t.Parallel()
			for _, algo := range algosFor(op) {
				t.Run(algo.String(), func(t *testing.T) {
					t.Parallel()
					for n := 1; n <= 8; n++ {
						t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
							t.Parallel()
							rng := rand.New(rand.NewPCG(uint64(op)<<16|uint64(algo)<<8|uint64(n), 2))
							simulateCells(t, op, algo, n, rng)
						})
					}
				})
			}
		})
	}
}

// simulateCells runs every count, placement, reduction, chunk size, check
// and fusion of one operation, algorithm and world size.
func simulateCells(t *testing.T, op Op, algo Algorithm, n int, rng *rand.Rand) {
	const es = 8 // checkSimulated's int64
	fuses := []bool{false}
	if op == OpAllReduce && algo == AlgoRing || op == OpReduceScatter || op == OpAllGather {
		fuses = append(fuses, true) // receives reduced on arrival, sends teed
	}
	counts := []int{0, 1, 7, 13, 1003}
	if testing.Short() { // the race run: the default run has the rest
		counts = []int{1, 13}
	}
	if op == OpAllReduce && algo == AlgoDirect && !testing.Short() {
		// Below this every world size goes in one shot (oneShot): the
		// reduce-scatter and all-gather need a count of their own.
		counts = append(counts, smallMessage/es+1)
	}
	for _, count := range counts {
		for _, inPlace := range []bool{false, true} {
			for _, redop := range []ReduceOp{Sum, Max, Avg} {
				if redop != Sum && !op.Reduces() {
					continue
				}
				for _, chunk := range simChunks(count) {
					for _, check := range []bool{false, true} {
						if check && chunk == 8 && count > 13 {
							continue // thousands of chunks: the unchecked run covers them
						}
						for _, fuse := range fuses {
							if err := checkSimulated(op, algo, n, count, inPlace, redop, chunk, check, fuse, false, rng); err != nil {
								t.Fatalf("count=%d/inplace=%v/%v/chunk=%d/check=%v/fuse=%v: %v", count, inPlace, redop, chunk, check, fuse, err)
							}
						}
					}
				}
			}
		}
	}
}

// checkSimulated runs one simulated collective with int64 data and checks it
// against a reference computed directly.
func checkSimulated(op Op, algo Algorithm, n, count int, inPlace bool, redop ReduceOp, chunk int, check, fuse, prefix bool, rng *rand.Rand) error {
	const es = 8
	root := n / 2
	ranks := make([]*simRank, n)
	inputs := make([][]int64, n)
	for r := range n {
		// fuse stands for shared memory, which tees sends too.
		c := &call{op: op, rank: r, n: n, root: root, count: count, esize: es, redop: redop, inPlace: inPlace, chunk: chunk, fuse: fuse, tee: fuse, prefix: prefix}
		inLen, outLen := bufferLens(op, n, count)
		in := make([]int64, inLen)
		for i := range in {
			in[i] = int64(rng.IntN(2000) - 1000)
		}
		inputs[r] = append([]int64(nil), in...)
		outs := make([]int64, outLen)
		sr := &simRank{c: c, bufs: make([][]byte, numBufs)}
		sr.bufs[bufIn] = AsBytes(in)
		sr.bufs[bufOut] = AsBytes(outs)
		if inPlace {
			sr.bufs[bufIn], sr.bufs[bufOut] = inPlaceBuffers(op, r, n, root, count*es, AsBytes(in), AsBytes(outs))
		}
		s, err := build(c, algo)
		if err != nil {
			return err
		}
		if check && n > 1 {
			if s, err = withSignature(s, c, algo); err != nil {
				return err
			}
			sr.bufs[bufHdr] = make([]byte, s.hdrBytes())
			sig := c.signature(Int64, algo, 1)
			s.hdr.fill(sr.bufs[bufHdr], &sig)
		}
		sr.s = s
		sr.bufs[bufScratch] = make([]byte, s.scratch)
		if err := s.validate(sr.bufs); err != nil {
			return fmt.Errorf("rank %d: %v", r, err)
		}
		ranks[r] = sr
	}
	if err := simulate(ranks, Int64, redop, rng); err != nil {
		return err
	}
	for r, sr := range ranks {
		if sr.verifyErr != nil {
			return fmt.Errorf("rank %d: %v", r, sr.verifyErr)
		}
	}
	for r, sr := range ranks {
		want := referenceResult(op, redop, r, n, root, count, inputs)
		if want == nil {
			continue
		}
		got := sr.bufs[bufOut]
		if !bytes.Equal(got[:len(AsBytes(want))], AsBytes(want)) {
			return fmt.Errorf("rank %d: got %v, want %v", r, int64s(got), want)
		}
	}
	return nil
}

func int64s(b []byte) []int64 {
	out := make([]int64, len(b)/8)
	copy(AsBytes(out), b)
	return out
}

// bufferLens returns the element counts of the input and output buffers.
func bufferLens(op Op, n, count int) (int, int) {
	switch op {
	case OpAllGather, OpGather:
		return count, n * count
	case OpReduceScatter, OpScatter:
		return n * count, count
	case OpAllToAll:
		return n * count, n * count
	case OpBarrier:
		return 0, 0
	}
	return count, count
}

// inPlaceBuffers returns the in and out views of an in-place call: the
// caller's single buffer is the bigger of the two, the smaller a window of it.
func inPlaceBuffers(op Op, r, n, root, bl int, in, out []byte) ([]byte, []byte) {
	switch op {
	case OpAllGather:
		big := make([]byte, n*bl)
		copy(big[r*bl:], in)
		return big[r*bl : (r+1)*bl], big
	case OpGather:
		if r != root {
			return in, out
		}
		big := make([]byte, n*bl)
		copy(big[r*bl:], in)
		return big[r*bl : (r+1)*bl], big
	case OpReduceScatter:
		return in, in[r*bl : (r+1)*bl]
	case OpScatter:
		if r != root {
			return in, out
		}
		return in, in[r*bl : (r+1)*bl]
	}
	return in, in
}

// referenceResult computes what rank r's output must hold, directly.
func referenceResult(op Op, redop ReduceOp, r, n, root, count int, in [][]int64) []int64 {
	combine := func(block int) []int64 {
		acc := make([]int64, count)
		for q := range n {
			for i := range count {
				v := in[q][block*count+i]
				switch {
				case q == 0:
					acc[i] = v
				case redop == Max:
					acc[i] = max(acc[i], v)
				case redop == Min:
					acc[i] = min(acc[i], v)
				case redop == Prod:
					acc[i] *= v
				default:
					acc[i] += v
				}
			}
		}
		if redop == Avg {
			for i := range acc {
				acc[i] /= int64(n)
			}
		}
		return acc
	}
	switch op {
	case OpAllReduce:
		return combine(0)
	case OpReduce:
		if r != root {
			return nil
		}
		return combine(0)
	case OpReduceScatter:
		return combine(r)
	case OpBroadcast:
		return in[root]
	case OpAllGather:
		var out []int64
		for q := range n {
			out = append(out, in[q]...)
		}
		return out
	case OpGather:
		if r != root {
			return nil
		}
		var out []int64
		for q := range n {
			out = append(out, in[q]...)
		}
		return out
	case OpScatter:
		return in[root][r*count : (r+1)*count]
	case OpAllToAll:
		var out []int64
		for q := range n {
			out = append(out, in[q][r*count:(r+1)*count]...)
		}
		return out
	}
	return nil
}

func countXfers(s *schedule) (sends, recvs int) {
	for _, p := range s.prims {
		switch p.kind {
		case primSend:
			sends++
		case primRecv:
			recvs++
		}
	}
	return sends, recvs
}

// The check rides in the first message: a small two-rank all-reduce moves
// one message each way, checked or not; a payload past the eager limit gets
// a header of its own.
func TestSignatureFoldsFirstExchange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		op           Op
		algo         Algorithm
		n, count     int
		extra        int // messages each way the check adds per rank
		inPlace      bool
		wantNoScratc bool
	}{
		{OpAllReduce, AlgoRecursiveDoubling, 2, 256, 0, false, true},
		{OpAllReduce, AlgoRecursiveDoubling, 2, 256, 0, true, true},
		{OpAllReduce, AlgoRecursiveDoubling, 2, 16 << 10, 0, false, true}, // 64 KiB of float32: the limit
		{OpAllReduce, AlgoRecursiveDoubling, 2, 16<<10 + 1, 1, false, false},
		{OpAllReduce, AlgoRing, 2, 256, 0, false, false},
		{OpAllReduce, AlgoRecursiveDoubling, 4, 256, 2, false, false}, // the second round's peers get headers only
		{OpAllGather, AlgoRing, 2, 256, 0, false, false},
		{OpAllToAll, AlgoDirect, 4, 16, 0, true, false},
		{OpBarrier, AlgoAuto, 2, 0, 0, false, false},
	} {
		for r := range tc.n {
			c := &call{op: tc.op, rank: r, n: tc.n, count: tc.count, esize: 4, redop: Sum, inPlace: tc.inPlace, chunk: 1 << 20}
			body, err := build(c, tc.algo)
			if err != nil {
				t.Fatal(err)
			}
			bs, br := countXfers(body)
			s, err := withSignature(body, c, tc.algo)
			if err != nil {
				t.Fatal(err)
			}
			ss, sr := countXfers(s)
			if ss != bs+tc.extra || sr != br+tc.extra {
				t.Errorf("%v/%v n=%d count=%d rank %d: %d sends and %d receives checked, %d and %d unchecked; want %d more each",
					tc.op, tc.algo, tc.n, tc.count, r, ss, sr, bs, br, tc.extra)
			}
			if tc.wantNoScratc {
				if s.scratch != 0 {
					t.Errorf("%v n=%d count=%d rank %d: %d bytes of scratch taken, none used", tc.op, tc.n, tc.count, r, s.scratch)
				}
				for i, p := range s.prims {
					for _, rf := range []ref{p.dst, p.a, p.b} {
						if rf.buf == bufScratch && p.n > 0 && p.kind != primNop {
							t.Errorf("%v n=%d count=%d rank %d: prim %d (%s) still uses scratch: the header's payload should be read in place", tc.op, tc.n, tc.count, r, i, p.kind)
						}
					}
				}
			}
		}
	}
}

// Where links are stream sockets (call.prefix) a first send too large to
// fold has its first eager bytes ride in the header, and the receive it
// lands in is split alike: every operation and algorithm still computes
// its result, whatever the chunk, placement or world size; and the
// header carries data from every rank whose first send is an input's.
func TestSignaturePrefixSimulated(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	ops := []Op{OpAllReduce, OpAllGather, OpReduceScatter, OpBroadcast, OpReduce, OpAllToAll, OpGather, OpScatter}
	for _, op := range ops {
		for _, algo := range algosFor(op) {
			for _, n := range []int{2, 3, 5} {
				// Past the eager limit (64 KiB at 2 ranks) whole, per
				// block, and per chunk of 96 KiB.
				count := (3 * eagerLimit(n) / 8) * n
				for _, chunk := range []int{96 << 10, 1 << 20} {
					for _, inPlace := range []bool{false, true} {
						if err := checkSimulated(op, algo, n, count, inPlace, Sum, chunk, true, false, true, rng); err != nil {
							t.Fatalf("%v/%v/n=%d/chunk=%d/inplace=%v: %v", op, algo, n, chunk, inPlace, err)
						}
					}
				}
			}
		}
	}
	c := &call{op: OpBroadcast, rank: 0, n: 2, root: 0, count: 1 << 18, esize: 4, chunk: 256 << 10, prefix: true}
	body, err := build(c, AlgoRing)
	if err != nil {
		t.Fatal(err)
	}
	s, err := withSignature(body, c, AlgoRing)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.hdr.sendLen[1]; got != eagerLimit(2) {
		t.Errorf("a 1 MiB broadcast's root puts %d bytes in its header, want the eager limit %d", got, eagerLimit(2))
	}
}

// Ranks that make different calls all fail the verify, and every message
// any of them sent was received: nothing is left in flight to be matched
// with the next call's.
func TestMismatchSimulated(t *testing.T) {
	t.Parallel()
	type variant struct {
		op          Op
		algo        Algorithm
		count, root int
		redop       ReduceOp
	}
	variants := []variant{
		{OpAllReduce, AlgoRecursiveDoubling, 7, 0, Sum},
		{OpAllReduce, AlgoRecursiveDoubling, 9, 0, Sum},
		{OpAllReduce, AlgoRecursiveDoubling, 7, 0, Max},
		{OpAllReduce, AlgoRecursiveDoubling, 20000, 0, Sum}, // past the eager limit
		{OpAllReduce, AlgoRing, 7, 0, Sum},
		{OpAllReduce, AlgoRing, 20000, 0, Sum},
		{OpAllReduce, AlgoTree, 7, 0, Sum},
		{OpBroadcast, AlgoTree, 7, 0, Sum},
		{OpBroadcast, AlgoTree, 7, 1, Sum},
		{OpBroadcast, AlgoRing, 20000, 1, Sum},
		{OpReduce, AlgoTree, 7, 1, Sum},
		{OpAllGather, AlgoRing, 7, 0, Sum},
		{OpAllToAll, AlgoDirect, 3, 0, Sum},
		{OpGather, AlgoDirect, 7, 0, Sum},
		{OpBarrier, AlgoAuto, 0, 0, Sum},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	drained := 0
	for iter := range 300 {
		n := 2 + iter%4
		vs := make([]variant, n)
		same := true
		for r := range vs {
			vs[r] = variants[rng.IntN(len(variants))]
			same = same && vs[r] == vs[0]
		}
		if same {
			continue
		}
		ranks := make([]*simRank, n)
		for r, v := range vs {
			// Stream sockets' first sends split (call.prefix) on odd
			// iterations: their empty messages after a mismatch too.
			c := &call{op: v.op, rank: r, n: n, root: v.root, count: v.count, esize: 8, redop: v.redop, chunk: 1 << 20, prefix: iter%2 == 1}
			s, err := build(c, v.algo)
			if err != nil {
				t.Fatal(err)
			}
			if s, err = withSignature(s, c, v.algo); err != nil {
				t.Fatal(err)
			}
			inLen, outLen := bufferLens(v.op, n, v.count)
			sr := &simRank{c: c, s: s, bufs: make([][]byte, numBufs)}
			sr.bufs[bufIn], sr.bufs[bufOut] = make([]byte, inLen*8), make([]byte, outLen*8)
			sr.bufs[bufScratch], sr.bufs[bufHdr] = make([]byte, s.scratch), make([]byte, s.hdrBytes())
			sig := c.signature(Int64, v.algo, 1)
			s.hdr.fill(sr.bufs[bufHdr], &sig)
			ranks[r] = sr
		}
		if err := simulate(ranks, Int64, Sum, rng); err != nil {
			t.Fatalf("calls %v: %v", vs, err)
		}
		for r, sr := range ranks {
			drained += sr.drained
			var mm *MismatchError
			if !errors.As(sr.verifyErr, &mm) {
				t.Fatalf("calls %v: rank %d: %v, want a MismatchError", vs, r, sr.verifyErr)
			}
			if sr.verifyErr.Error() != ranks[0].verifyErr.Error() {
				t.Fatalf("calls %v: rank %d says %q, rank 0 %q", vs, r, sr.verifyErr, ranks[0].verifyErr)
			}
			for i, p := range sr.s.prims {
				if sr.m.started[i] && p.kind != primSend && p.kind != primRecv && p.kind != primVerify && p.kind != primNop && p.dst.buf != bufHdr {
					t.Fatalf("calls %v: rank %d ran prim %d (%s) into buffer %d before the verify passed", vs, r, i, p.kind, p.dst.buf)
				}
			}
		}
	}
	if drained == 0 {
		t.Error("no call posted a receive ahead of its verify: the empty messages of a mismatch went untested")
	}
}

// Over shared memory (fuse) the ring all-reduce posts chunk-major: the
// all-gather forwards chunk i ringLag chunks after the reduce-scatter sent
// it, while it is still cached; otherwise step-major. Only the last
// landing of a large output is streamed past the caches.
func TestRingAllReduceOrder(t *testing.T) {
	t.Parallel()
	steps := func(s *schedule) (sends, recvs string) {
		for _, p := range s.prims {
			switch p.kind {
			case primSend:
				sends += fmt.Sprint(p.step)
			case primRecv:
				recvs += fmt.Sprint(p.step)
			}
		}
		return sends, recvs
	}
	for _, tc := range []struct {
		fuse bool
		want string
	}{{true, "00010111"}, {false, "00001111"}} {
		c := &call{op: OpAllReduce, rank: 1, n: 2, count: 8 * 1024, esize: 4, redop: Sum, chunk: 4096, fuse: tc.fuse}
		s := &schedule{}
		ringAllReduce(c, s)
		if sends, recvs := steps(s); sends != tc.want || recvs != tc.want {
			t.Errorf("fuse=%v: sends by step %s, receives %s, want %s", tc.fuse, sends, recvs, tc.want)
		}
	}
	for _, count := range []int{streamFrom / 4, streamFrom/4 - 1} {
		c := &call{op: OpAllReduce, rank: 0, n: 3, count: count, esize: 4, redop: Sum, chunk: 512 << 10, fuse: true}
		s := &schedule{}
		ringAllReduce(c, s)
		streamed, last := 0, 0
		for _, p := range s.prims {
			if p.stream && (p.kind != primRecv || p.step != 3) {
				t.Fatalf("count %d: a %s of step %d streamed; only the last step's receives may be", count, p.kind, p.step)
			}
			if p.stream {
				streamed++
			}
			if p.kind == primRecv && p.step == 3 {
				last++
			}
		}
		if want := map[bool]int{true: last, false: 0}[count*4 >= streamFrom]; streamed != want || last == 0 {
			t.Errorf("count %d: %d of %d last-step receives streamed, want %d", count, streamed, last, want)
		}
	}
}

// Where the transports tee sends (call.tee), all-gather's own block rides
// the first send of each chunk into the output and is not copied apart,
// unless the output reaches streamFrom (copied whole, as without tees).
func TestRingAllGatherOwnTee(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		block int
		tees  bool
	}{{512 << 10, true}, {2 << 20, true}, {streamFrom / 2, false}} {
		c := &call{op: OpAllGather, rank: 1, n: 2, count: tc.block / 4, esize: 4, chunk: 512 << 10, fuse: true, tee: true}
		s := &schedule{}
		ringAllGather(c, s)
		teed, copies := teesAndCopies(s, func(p prim) {
			if p.b.buf != bufOut || p.b.off != c.rank*tc.block+p.a.off || p.a.buf != bufIn {
				t.Errorf("%d bytes each: send of %d bytes from %v teed to %v", tc.block, p.n, p.a, p.b)
			}
		})
		if want := map[bool][2]int{true: {tc.block, 0}, false: {0, 1}}[tc.tees]; teed != want[0] || copies != want[1] {
			t.Errorf("%d bytes each: %d bytes teed, %d copies; want %d, %d", tc.block, teed, copies, want[0], want[1])
		}
	}
}

// teesAndCopies returns the bytes s's sends tee and its copies, handing
// each teeing send to check.
func teesAndCopies(s *schedule, check func(p prim)) (teed, copies int) {
	for _, p := range s.prims {
		switch {
		case p.kind == primCopy:
			copies++
		case p.kind == primSend && p.tee:
			teed += p.n
			check(p)
		}
	}
	return teed, copies
}

// Out of place, a broadcast root's sends tee its input into its output
// where the transports tee (call.tee), with no copy apart; elsewhere one
// copy per chunk, each after that chunk's send, or one copy from
// streamFrom; and nothing in place or on the other ranks.
func TestChainBroadcastRootTee(t *testing.T) {
	t.Parallel()
	const count = 1 << 20 // 4 MiB of float32: 8 chunks of 512 KiB
	for _, tc := range []struct {
		rank          int
		count         int
		inPlace, tees bool
		teed, copies  int
	}{
		{0, count, false, true, 4 * count, 0},
		{0, count, false, false, 0, 8},
		{0, streamFrom / 4, false, false, 0, 1},
		{0, count, true, true, 0, 0},
		{0, count, true, false, 0, 0},
		{1, count, false, true, 0, 0},
		{1, count, false, false, 0, 0},
	} {
		c := &call{op: OpBroadcast, rank: tc.rank, n: 2, count: tc.count, esize: 4, chunk: 512 << 10, inPlace: tc.inPlace, tee: tc.tees}
		s := &schedule{}
		chainBroadcast(c, s)
		teed, copies := teesAndCopies(s, func(p prim) {
			if p.a.buf != bufIn || p.b.buf != bufOut || p.b.off != p.a.off {
				t.Errorf("%+v: send of %d bytes from %v teed to %v", tc, p.n, p.a, p.b)
			}
		})
		if teed != tc.teed || copies != tc.copies {
			t.Errorf("rank %d, %d bytes, in place %v, tees %v: %d bytes teed, %d copies; want %d, %d", tc.rank, 4*tc.count, tc.inPlace, tc.tees, teed, copies, tc.teed, tc.copies)
		}
		for _, p := range s.prims {
			if p.kind == primCopy && tc.copies > 1 && (len(p.deps) != 1 || s.prims[p.deps[0]].kind != primSend || s.prims[p.deps[0]].a != p.a) {
				t.Errorf("rank %d, %d bytes: a piece's copy of %v waits on %v, want the send of that chunk", tc.rank, 4*tc.count, p.a, p.deps)
			}
		}
	}
}

// Out of place, all-gather copies its own block into the output in pieces,
// one per chunk after that chunk's first send, unless the output reaches
// streamFrom: then whole, before the sends (memmove's non-temporal stores).
func TestRingAllGatherOwnCopy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n, block int // ranks, bytes a rank
		whole    bool
	}{
		{2, 512 << 10, false},
		{2, 2 << 20, false}, // from ntCopy, but a 4 MiB output stays in the caches
		{4, 2 << 20, false},
		{2, streamFrom / 2, true},
		{8, 2 << 20, true},
	} {
		c := &call{op: OpAllGather, rank: 1, n: tc.n, count: tc.block / 4, esize: 4, chunk: 512 << 10}
		s := &schedule{}
		ringAllGather(c, s)
		copies, total := 0, 0
		for _, p := range s.prims {
			if p.kind != primCopy {
				continue
			}
			copies++
			total += p.n
			afterSend := len(p.deps) == 1 && s.prims[p.deps[0]].kind == primSend
			if tc.whole == afterSend || p.dst.off != c.rank*tc.block+p.a.off {
				t.Errorf("%d ranks, %d bytes each: copy of %d bytes from %d to %d after %v (whole: %v)", tc.n, tc.block, p.n, p.a.off, p.dst.off, p.deps, tc.whole)
			}
		}
		if want := map[bool]int{true: 1, false: len(c.chunks(tc.block))}[tc.whole]; copies != want || total != tc.block {
			t.Errorf("%d ranks, %d bytes each: %d copies of %d bytes in all, want %d of %d", tc.n, tc.block, copies, total, want, tc.block)
		}
	}
}

// scribble fills b with a byte no test writes, so that a read of memory the
// schedule has not filled yet shows in the result.
func scribble(b []byte) {
	for i := range b {
		b[i] = 0xEE
	}
}
