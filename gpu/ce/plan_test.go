package ce

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// The plans run on every rank at once in a simulator of the GPUs' memory,
// without a GPU: every send meets the receive of its phase (same pair,
// order and size), no transfer writes where another of its phase reads,
// receives land inside their registration (scratch no larger than the
// entry asks for), and every rank ends with the operation's result.
func TestPlansSimulated(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		for _, c := range []int{1, 5, 37} { // elements per rank: below, at odd and above splitParts' lanes
			for _, tc := range simCases(n) {
				t.Run(fmt.Sprintf("%v/%d ranks/%d elems", tc.name, n, c), func(t *testing.T) {
					t.Parallel()
					runSim(t, n, c, tc)
				})
			}
		}
	}
}

// simCase is one operation: its buffers' sizes on rank r (in elements of
// a rank's count c) and the result rank r's receive buffer must hold.
type simCase struct {
	name      string
	op        collective.DeviceOp
	send      func(r int) int // elements in units of c; 0: none
	recv      func(r int) int
	inPlace   bool
	p2p       bool
	want      func(r, i int, in func(q, i int) int32) int32
	hasResult func(r int) bool
}

func simCases(n int) []simCase {
	one := func(int) int { return 1 }
	all := func(int) int { return n }
	at := func(root int, k int) func(int) int {
		return func(r int) int {
			if r == root {
				return k
			}
			return 0
		}
	}
	everyone := func(int) bool { return true }
	only := func(root int) func(int) bool { return func(r int) bool { return r == root } }
	sum := func(i int, in func(q, i int) int32) (s int32) {
		for q := range n {
			s += in(q, i)
		}
		return s
	}
	root := n - 1
	op := func(o collective.Op) collective.DeviceOp {
		return collective.DeviceOp{Op: o, Reduce: collective.Sum, Root: root,
			Send: collective.Buffer{Type: collective.Int32}, Recv: collective.Buffer{Type: collective.Int32}}
	}
	var cs []simCase
	cs = append(cs,
		simCase{name: "allreduce", op: op(collective.OpAllReduce), send: one, recv: one, hasResult: everyone,
			want: func(r, i int, in func(q, i int) int32) int32 { return sum(i, in) }},
		simCase{name: "allgather", op: op(collective.OpAllGather), send: one, recv: all, hasResult: everyone},
		simCase{name: "broadcast", op: op(collective.OpBroadcast), send: at(root, 1), recv: one, hasResult: everyone},
		simCase{name: "reduce", op: op(collective.OpReduce), send: one, recv: at(root, 1), hasResult: only(root),
			want: func(r, i int, in func(q, i int) int32) int32 { return sum(i, in) }},
		simCase{name: "gather", op: op(collective.OpGather), send: one, recv: at(root, n), hasResult: only(root)},
		simCase{name: "scatter", op: op(collective.OpScatter), send: at(root, n), recv: one, hasResult: everyone},
		simCase{name: "alltoall", op: op(collective.OpAllToAll), send: all, recv: all, hasResult: everyone},
		simCase{name: "alltoall in place", op: op(collective.OpAllToAll), send: all, recv: all, inPlace: true, hasResult: everyone},
		simCase{name: "reducescatter", op: op(collective.OpReduceScatter), send: all, recv: one, hasResult: everyone},
		simCase{name: "group ring", op: op(collective.OpGroup), send: one, recv: one, p2p: true, hasResult: everyone},
	)
	return cs
}

// wantMoved returns element i of rank r's result (c: elements per rank).
func wantMoved(tc simCase, n, c, r, i int, in func(q, i int) int32) int32 {
	if tc.want != nil {
		return tc.want(r, i, in)
	}
	switch tc.op.Op {
	case collective.OpAllGather, collective.OpGather:
		return in(i/c, i%c)
	case collective.OpBroadcast:
		return in(tc.op.Root, i)
	case collective.OpScatter:
		return in(tc.op.Root, r*c+i)
	case collective.OpAllToAll:
		return in(i/c, r*c+i%c)
	case collective.OpReduceScatter:
		var s int32
		for q := range n {
			s += in(q, r*c+i)
		}
		return s
	case collective.OpGroup:
		return in((r-1+n)%n, i)
	}
	panic(tc.name)
}

// simRank is one GPU's memory: regions at fixed addresses.
type simRank struct {
	mem map[cuda.DevicePtr][]byte // region base → bytes
}

const (
	simSend = cuda.DevicePtr(1 << 32)
	simRecv = cuda.DevicePtr(2 << 32)
	simScr  = cuda.DevicePtr(3 << 32)
)

// bytesAt returns the n bytes at p, failing when they are not inside one
// region.
func (s *simRank) bytesAt(t *testing.T, p cuda.DevicePtr, n int) []byte {
	t.Helper()
	for base, b := range s.mem {
		if p >= base && p.Add(n) <= base.Add(len(b)) {
			return b[p-base : int(p-base)+n]
		}
	}
	t.Fatalf("%d bytes at %#x lie outside the rank's buffers", n, uint64(p))
	return nil
}

type simRange struct {
	rank   int
	lo, hi cuda.DevicePtr
}

func (a simRange) overlaps(b simRange) bool { return a.rank == b.rank && a.lo < b.hi && b.lo < a.hi }

func runSim(t *testing.T, n, c int, tc simCase) {
	const es = 4
	e := ipcOps[tc.op.Op]
	in := func(q, i int) int32 { return int32(q*1000 + i*7 + 1) }
	ranks := make([]*simRank, n)
	plans := make([][]phase, n)
	for r := range n {
		sr := &simRank{mem: map[cuda.DevicePtr][]byte{}}
		ranks[r] = sr
		s := &opShape{op: tc.op, n: n, me: r, es: es}
		if k := tc.send(r); k > 0 {
			b := make([]byte, k*c*es)
			for i := range k * c {
				binary.LittleEndian.PutUint32(b[i*es:], uint32(in(r, i)))
			}
			sr.mem[simSend] = b
			s.send, s.hasSend = span{ptr: simSend, reg: &Mem{Ptr: simSend, Bytes: len(b)}, n: len(b)}, true
		}
		if k := tc.recv(r); k > 0 {
			if tc.inPlace {
				s.recv, s.hasRecv = s.send, true
			} else {
				sr.mem[simRecv] = make([]byte, k*c*es)
				s.recv, s.hasRecv = span{ptr: simRecv, reg: &Mem{Ptr: simRecv, Bytes: k * c * es}, n: k * c * es}, true
			}
		}
		if tc.p2p {
			mem := func(sp span) *DeviceMem {
				return &DeviceMem{alloc: &allocation{ptr: sp.ptr, bytes: sp.n, reg: sp.reg}, n: sp.n}
			}
			s.op.P2P = []collective.P2P{{Peer: (r + 1) % n}, {Peer: (r - 1 + n) % n, Recv: true}}
			s.p2p = []*DeviceMem{mem(s.send), mem(s.recv)}
		}
		if err := e.check(s); err != nil {
			t.Fatalf("rank %d: the shape fails its check: %v", r, err)
		}
		var scr *Mem
		if e.scratch != nil {
			k := e.scratch(s)
			sr.mem[simScr] = make([]byte, k)
			scr = &Mem{Ptr: simScr, Bytes: k}
		}
		plans[r] = e.plan(s, scr)
		if len(plans[r]) != len(plans[0]) {
			t.Fatalf("rank %d's plan has %d phases, rank 0's %d", r, len(plans[r]), len(plans[0]))
		}
	}
	for k := range plans[0] {
		type write struct {
			rank int
			dst  cuda.DevicePtr
			data []byte
		}
		var writes []write
		var reads, dsts []simRange
		read := func(r int, p cuda.DevicePtr, b int) []byte {
			reads = append(reads, simRange{r, p, p.Add(b)})
			return append([]byte(nil), ranks[r].bytesAt(t, p, b)...)
		}
		for r := range n {
			if pre := plans[r][k].pre; pre != nil {
				copy(ranks[r].bytesAt(t, pre.dst, pre.bytes), ranks[r].bytesAt(t, pre.src, pre.bytes))
			}
		}
		for a := range n {
			for q := range n {
				var sends, recvs []P2P
				for _, o := range plans[a][k].ops {
					if !o.Recv && o.Peer == q {
						sends = append(sends, o)
					}
				}
				for _, o := range plans[q][k].ops {
					if o.Recv && o.Peer == a {
						recvs = append(recvs, o)
					}
				}
				if len(sends) != len(recvs) {
					t.Fatalf("phase %d: rank %d sends %d transfers to rank %d, which receives %d", k, a, len(sends), q, len(recvs))
				}
				for i, snd := range sends {
					rcv := recvs[i]
					if snd.Bytes != rcv.Bytes {
						t.Fatalf("phase %d: rank %d's transfer %d to rank %d has %d bytes, the receive %d", k, a, i, q, snd.Bytes, rcv.Bytes)
					}
					if rcv.Off < 0 || rcv.Off+rcv.Bytes > rcv.Dst.Bytes {
						t.Fatalf("phase %d: rank %d receives %d bytes at %d of a %d-byte registration", k, q, rcv.Bytes, rcv.Off, rcv.Dst.Bytes)
					}
					dst := rcv.Dst.Ptr.Add(rcv.Off)
					writes = append(writes, write{q, dst, read(a, snd.Src, snd.Bytes)})
				}
			}
			if loc := plans[a][k].loc; loc != nil {
				writes = append(writes, write{a, loc.dst, read(a, loc.src, loc.bytes)})
			}
		}
		for _, w := range writes {
			d := simRange{w.rank, w.dst, w.dst.Add(len(w.data))}
			for _, o := range append(reads, dsts...) {
				if d.overlaps(o) && len(w.data) > 0 {
					t.Fatalf("phase %d: a transfer writes rank %d's [%#x, %#x), which another of the phase reads or writes", k, w.rank, uint64(d.lo), uint64(d.hi))
				}
			}
			dsts = append(dsts, d)
		}
		for _, w := range writes {
			copy(ranks[w.rank].bytesAt(t, w.dst, len(w.data)), w.data)
		}
		for r := range n {
			f := plans[r][k].fold
			if f == nil {
				continue
			}
			acc := make([]int32, f.count)
			for _, p := range f.in {
				b := ranks[r].bytesAt(t, p, f.count*es)
				for i := range acc {
					acc[i] += int32(binary.LittleEndian.Uint32(b[i*es:]))
				}
			}
			out := ranks[r].bytesAt(t, f.dst, f.count*es)
			for i, v := range acc {
				binary.LittleEndian.PutUint32(out[i*es:], uint32(v))
			}
		}
	}
	for r := range n {
		if !tc.hasResult(r) {
			continue
		}
		base := simRecv
		if tc.inPlace {
			base = simSend
		}
		out := ranks[r].mem[base]
		for i := range len(out) / es {
			got := int32(binary.LittleEndian.Uint32(out[i*es:]))
			if want := wantMoved(tc, n, c, r, i, in); got != want {
				t.Fatalf("rank %d element %d = %d, want %d", r, i, got, want)
			}
		}
	}
}

// Every operation the host library runs on device buffers has an entry,
// and a shape the host library refuses is refused.
func TestIPCOpsCheckShapes(t *testing.T) {
	for _, op := range []collective.Op{collective.OpAllReduce, collective.OpAllGather, collective.OpBroadcast, collective.OpReduce,
		collective.OpGather, collective.OpScatter, collective.OpAllToAll, collective.OpReduceScatter,
		collective.OpSend, collective.OpRecv, collective.OpGroup} {
		if _, ok := ipcOps[op]; !ok {
			t.Errorf("no entry for %v", op)
		}
	}
	buf := func(n int) span { return span{ptr: simSend, n: n} }
	for _, tc := range []struct {
		name string
		s    opShape
	}{
		{"allreduce sizes differ", opShape{op: collective.DeviceOp{Op: collective.OpAllReduce}, n: 2, es: 4, send: buf(8), recv: buf(16), hasSend: true, hasRecv: true}},
		{"alltoall blocks", opShape{op: collective.DeviceOp{Op: collective.OpAllToAll}, n: 3, es: 4, send: buf(8), recv: buf(8), hasSend: true, hasRecv: true}},
		{"allgather receive", opShape{op: collective.DeviceOp{Op: collective.OpAllGather}, n: 2, es: 4, send: buf(8), recv: buf(8), hasSend: true, hasRecv: true}},
		{"broadcast root's send", opShape{op: collective.DeviceOp{Op: collective.OpBroadcast}, n: 2, es: 4, recv: buf(8), hasRecv: true}},
		{"reduce root's receive", opShape{op: collective.DeviceOp{Op: collective.OpReduce}, n: 2, es: 4, send: buf(8), hasSend: true}},
		{"scatter root's send", opShape{op: collective.DeviceOp{Op: collective.OpScatter}, n: 2, es: 4, send: buf(8), recv: buf(8), hasSend: true, hasRecv: true}},
		{"p2p buffer", opShape{op: collective.DeviceOp{Op: collective.OpSend}, n: 2, es: 4, p2p: []*DeviceMem{nil}}},
	} {
		if err := ipcOps[tc.s.op.Op].check(&tc.s); err == nil {
			t.Errorf("%s: the check passed a bad shape", tc.name)
		}
	}
}
