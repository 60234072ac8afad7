package collective

import (
	"bytes"
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
				key := qkey{cd.rank, p.peer}
				sends[key] = append(sends[key], cd.prim)
			case primRecv:
				dst := p.dst.slice(sr.bufs, p.n)
				for i := range dst {
					dst[i] = 0xEE
				}
				key := qkey{p.peer, cd.rank}
				recvs[key] = append(recvs[key], cd.prim)
			default:
				runLocal(p, sr.bufs, dt, op, n)
				more = sr.m.complete(cd.prim, more)
			}
			for _, i := range more {
				ready = append(ready, cand{cd.rank, i})
			}
			// Match heads of queues.
			for key, sq := range sends {
				rq := recvs[key]
				for len(sq) > 0 && len(rq) > 0 {
					inflight = append(inflight, simXfer{key.from, key.to, sq[0], rq[0]})
					sq, rq = sq[1:], rq[1:]
				}
				sends[key], recvs[key] = sq, rq
			}
			continue
		}
		k := rng.IntN(len(inflight))
		x := inflight[k]
		inflight = append(inflight[:k], inflight[k+1:]...)
		sr, rr := ranks[x.from], ranks[x.to]
		sp, rp := &sr.s.prims[x.send], &rr.s.prims[x.recv]
		if sp.n != rp.n {
			return fmt.Errorf("rank %d sends %d bytes (prim %d step %d) to rank %d, which receives %d (prim %d step %d)",
				x.from, sp.n, x.send, sp.step, x.to, rp.n, x.recv, rp.step)
		}
		if now := sp.a.slice(sr.bufs, sp.n); !bytes.Equal(now, sr.sent[x.send]) {
			return fmt.Errorf("rank %d: send prim %d buffer changed while in flight", x.from, x.send)
		}
		copy(rp.dst.slice(rr.bufs, rp.n), sr.sent[x.send])
		for _, i := range sr.m.complete(x.send, nil) {
			ready = append(ready, cand{x.from, i})
		}
		for _, i := range rr.m.complete(x.recv, nil) {
			ready = append(ready, cand{x.to, i})
		}
	}
	for r, sr := range ranks {
		if !sr.m.done() {
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
		return []Algorithm{AlgoRing, AlgoTree, AlgoRecursiveDoubling}
	case OpBroadcast, OpReduce:
		return []Algorithm{AlgoRing, AlgoTree}
	case OpAllGather, OpReduceScatter:
		return []Algorithm{AlgoRing}
	case OpBarrier:
		return []Algorithm{AlgoAuto}
	}
	return []Algorithm{AlgoDirect}
}

func TestSchedulesSimulated(t *testing.T) {
	ops := []Op{OpAllReduce, OpAllGather, OpReduceScatter, OpBroadcast, OpReduce, OpAllToAll, OpGather, OpScatter, OpBarrier}
	counts := []int{0, 1, 7, 13, 1003}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, op := range ops {
		for _, algo := range algosFor(op) {
			for n := 1; n <= 8; n++ {
				for _, count := range counts {
					for _, inPlace := range []bool{false, true} {
						for _, redop := range []ReduceOp{Sum, Max, Avg} {
							if redop != Sum && !op.reduces() {
								continue
							}
							name := fmt.Sprintf("%v/%v/n=%d/count=%d/inplace=%v/%v", op, algo, n, count, inPlace, redop)
							for _, chunk := range []int{8, 1 << 20} {
								if err := checkSimulated(op, algo, n, count, inPlace, redop, chunk, rng); err != nil {
									t.Fatalf("%s/chunk=%d: %v", name, chunk, err)
								}
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
func checkSimulated(op Op, algo Algorithm, n, count int, inPlace bool, redop ReduceOp, chunk int, rng *rand.Rand) error {
	const es = 8
	root := n / 2
	ranks := make([]*simRank, n)
	inputs := make([][]int64, n)
	for r := range n {
		c := &call{op: op, rank: r, n: n, root: root, count: count, esize: es, redop: redop, inPlace: inPlace, chunk: chunk}
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
