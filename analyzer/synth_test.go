package analyzer

import (
	"cmp"
	"slices"

	"github.com/vccl-go/vccl/flowtel"
)

// synth writes the records a ring all-reduce job would: every rank's
// coll_begin, its sends and receives with their posts, credit waits and
// grants, completions and coll_end, on one time base. Tests use it to build
// jobs with a known fault; benchmarks for volume.
type synth struct {
	n     int
	comm  uint32
	recs  [][]flowtel.Record // by rank
	now   []int64            // by rank: when it is free
	seq   uint64
	sendN map[[2]int]uint64 // sends posted on rank a's QP to b
	recvN map[[2]int]uint64 // receives posted on rank b's QP from a

	// Knobs.
	bw     func(src, dst int) float64 // bytes per ns of link src->dst
	lat    func(src, dst int) int64   // one-way latency of link src->dst
	late   func(rank int, seq uint64) int64
	gap    int64 // compute time between collectives
	chunk  int
	starve func(src, dst int, seq uint64) int64 // extra credit wait of sends on src->dst
	idle   func(rank int, seq uint64, step int) int64
	// recvLate: the receives on src->dst are posted this long after
	// their sends, which go ahead of their credit (eager) and land once
	// the receive is posted.
	recvLate func(src, dst int, seq uint64) int64
}

func newSynth(n int) *synth {
	s := &synth{n: n, comm: 0xabcdef01, recs: make([][]flowtel.Record, n), now: make([]int64, n),
		sendN: map[[2]int]uint64{}, recvN: map[[2]int]uint64{}, gap: 1e6, chunk: 64 << 10}
	for r := range s.now {
		s.now[r] = 1e12
	}
	s.bw = func(int, int) float64 { return 1 } // 1 GB/s
	s.lat = func(int, int) int64 { return 20e3 }
	s.late = func(int, uint64) int64 { return 0 }
	s.starve = func(int, int, uint64) int64 { return 0 }
	s.idle = func(int, uint64, int) int64 { return 0 }
	s.recvLate = func(int, int, uint64) int64 { return 0 }
	return s
}

func (s *synth) qp(rank, peer int) uint32 { return uint32(rank*64 + peer + 1) }

func (s *synth) add(rank int, r flowtel.Record) {
	r.Rank, r.Comm = int32(rank), s.comm
	s.recs[rank] = append(s.recs[rank], r)
}

// allReduce runs one ring all-reduce of bytes on every rank.
func (s *synth) allReduce(bytes int) {
	s.seq++
	seq := s.seq
	n := s.n
	for r := range n {
		s.now[r] += s.late(r, seq)
		s.add(r, flowtel.Record{TsNs: s.now[r], Kind: flowtel.KindCollBegin, Peer: -1, CollSeq: seq, Op: flowtel.OpAllReduce, Algo: 1, Dtype: 9, Bytes: uint64(bytes), Step: 1})
	}
	// Every rank must have begun before data moves (the signature check).
	start := int64(0)
	for r := range n {
		start = max(start, s.now[r])
	}
	block := max(bytes/n, 1)
	chunks := max(block/s.chunk, 1)
	csize := block / chunks
	ready := make([]int64, n) // when rank r may send its next chunk
	for r := range n {
		ready[r] = start + 5e3
	}
	for step := range 2 * (n - 1) {
		for k := range chunks {
			landed := make([]int64, n)
			for r := range n {
				dst := (r + 1) % n
				ready[r] += s.idle(r, seq, step*chunks+k)
				t := ready[r]
				key := [2]int{r, dst}
				id := s.sendN[key]
				s.sendN[key]++
				rid := s.recvN[key]
				s.recvN[key]++
				// The receiver posts its receive (the credit) at its own
				// ready time.
				rpost := max(min(ready[dst], t)-1e3, start)
				if w := s.recvLate(r, dst, seq); w > 0 {
					rpost = t + w
				}
				s.add(dst, flowtel.Record{TsNs: rpost, Kind: flowtel.KindWRPost, Peer: int32(r), QP: s.qp(dst, r),
					CollSeq: seq, Step: uint32(step), WrID: flowtel.WRID(rid, true), Bytes: uint64(csize), Op: flowtel.OpAllReduce, Depth: 2})
				s.add(r, flowtel.Record{TsNs: t, Kind: flowtel.KindWRPost, Peer: int32(dst), QP: s.qp(r, dst), CollSeq: seq,
					Step: uint32(step), WrID: flowtel.WRID(id, false), Bytes: uint64(csize), Op: flowtel.OpAllReduce, Depth: 1})
				go_ := t
				if w := s.starve(r, dst, seq); w > 0 {
					s.add(r, flowtel.Record{TsNs: t + 100, Kind: flowtel.KindCreditWait, Peer: int32(dst), QP: s.qp(r, dst), CollSeq: seq,
						Step: uint32(step), WrID: flowtel.WRID(id, false), Bytes: uint64(csize), Depth: 1})
					go_ = t + w
					s.add(r, flowtel.Record{TsNs: go_, Kind: flowtel.KindCreditGrant, Peer: int32(dst), QP: s.qp(r, dst), CollSeq: seq,
						Step: uint32(step), WrID: flowtel.WRID(id, false), Bytes: uint64(csize), Depth: 1})
				}
				xfer := int64(float64(csize) / s.bw(r, dst))
				land := max(go_+s.lat(r, dst)+xfer, rpost+2e3)
				s.add(r, flowtel.Record{TsNs: go_ + xfer, Kind: flowtel.KindWC, Peer: int32(dst), QP: s.qp(r, dst), CollSeq: seq,
					Step: uint32(step), WrID: flowtel.WRID(id, false), Bytes: uint64(csize), Depth: 0})
				s.add(dst, flowtel.Record{TsNs: land, Kind: flowtel.KindWC, Peer: int32(r), QP: s.qp(dst, r), CollSeq: seq,
					Step: uint32(step), WrID: flowtel.WRID(rid, true), Bytes: uint64(csize), Depth: 0})
				landed[dst] = land
			}
			for r := range n {
				ready[r] = max(ready[r], landed[r]) + 2e3 // reduce, then forward
			}
		}
	}
	for r := range n {
		s.now[r] = ready[r] + 3e3
		s.add(r, flowtel.Record{TsNs: s.now[r], Kind: flowtel.KindCollEnd, Peer: -1, CollSeq: seq, Op: flowtel.OpAllReduce, Algo: 1, Dtype: 9, Bytes: uint64(bytes), Step: 1})
		s.now[r] += s.gap
	}
}

// merged returns every rank's records in time order (what Merge does with
// files), each rank's kept in its own order.
func (s *synth) merged() []flowtel.Record {
	for r := range s.n {
		slices.SortStableFunc(s.recs[r], func(a, b flowtel.Record) int { return cmp.Compare(a.TsNs, b.TsNs) })
	}
	var out []flowtel.Record
	pos := make([]int, s.n)
	for {
		best := -1
		for r := range s.n {
			if pos[r] < len(s.recs[r]) && (best < 0 || s.recs[r][pos[r]].TsNs < s.recs[best][pos[best]].TsNs) {
				best = r
			}
		}
		if best < 0 {
			return out
		}
		out = append(out, s.recs[best][pos[best]])
		pos[best]++
	}
}
