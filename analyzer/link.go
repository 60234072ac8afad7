package analyzer

import (
	"math"

	"github.com/vccl-go/vccl/flowtel"
)

// sliceAcc is what one link did during one time slice.
type sliceAcc struct {
	backlog        float64 // ∫ bytes of posted, uncompleted sends dt (byte·ns)
	done           uint64  // bytes of send completions (sender's records)
	landed         uint64  // bytes of receive completions (receiver's records)
	backup         uint64  // of done, bytes completed on path 1
	busy           int64   // ns with at least one send pending
	wait           int64   // ns with at least one send waiting for credit
	wire           int64   // ns with at least one credited send pending (the wire holds it)
	minSeq, maxSeq uint64  // coll_seq of the link's send WR events in the slice (0: none)
	firstEv        int64   // first and last WR event of the link in the slice (0: none)
	lastEv         int64
	wrs            uint32 // send completions
	fails          uint32 // of which not ok
	posts          uint32 // sends posted
}

func (s *sliceAcc) seq(seq uint64) {
	if seq == 0 {
		return
	}
	if s.minSeq == 0 || seq < s.minSeq {
		s.minSeq = seq
	}
	if seq > s.maxSeq {
		s.maxSeq = seq
	}
}

func (s *sliceAcc) touch(ts int64) {
	if s.firstEv == 0 || ts < s.firstEv {
		s.firstEv = ts
	}
	s.lastEv = max(s.lastEv, ts)
}

func (s *sliceAcc) empty() bool {
	return s.busy == 0 && s.wait == 0 && s.done == 0 && s.landed == 0 && s.wrs == 0 && s.posts == 0
}

// linkKey names one direction of a connection: src sends to dst.
type linkKey struct {
	comm     uint32
	src, dst int32
	ch       uint16
}

// link is one direction of a connection, src -> dst on a channel: the
// sender's send WRs and the receiver's receive WRs over it.
type link struct {
	key linkKey
	id  int

	// Sender state, integrated over time into the slices.
	pending  int32  // sends posted, not completed (and not parked)
	waits    int32  // of which waiting for credit
	parked   int32  // sends whose receiver has not begun their collective
	outBytes uint64 // bytes of the pending sends
	lastTs   int64  // time the state was integrated up to

	// Slices from base on, not yet judged.
	slices   flowtel.FIFO[sliceAcc]
	base     int64 // slice index of slices' front
	curIdx   int64 // cached slice of the latest lookup
	curStart int64
	curEnd   int64

	// Sends in flight: posted by the sender, not yet landed at the
	// receiver (the k-th send of a QP lands as the peer QP's k-th receive).
	flight     flowtel.FIFO[flightWR]
	landQ      flowtel.FIFO[landedWR] // landings whose post has not been seen yet
	landMode   bool                   // a landing was seen: landings end flights
	arrivedSeq uint64                 // the latest collective its receiver is known to have begun
	lastLanded int64
	xferCache  *linkColl // accumulator of the collective of the latest pair
	xferSeq    uint64

	// Totals.
	sentBytes, sentWRs, landedBytes uint64
	xferBytes                       uint64
	xferNs                          int64
	maxOut                          uint64
	failed                          uint64
	usedPath1                       bool
	lat                             flowtel.LatencyHist // send WR latency
	waitSpans                       flowtel.WaitSpans
	creditWaitNs                    int64
	lastSeq                         uint64 // coll_seq of the latest send WR event

	src, dst *rankChan // the sending and receiving ranks on the link's channel
	comm     *commState

	det     linkDetect
	series  []seriesPoint
	history *cumHistory // for failover windows; nil until needed
	events  []linkEvent
}

// flightWR is a send in flight.
type flightWR struct {
	seq     uint64 // send number on the QP (WrID >> 1)
	post    int64
	grant   int64 // when its credit came, if it waited
	bytes   uint64
	coll    uint64
	waiting bool // for credit
	parked  bool // its receiver had not begun its collective
}

type landedWR struct {
	seq    uint64
	ts     int64
	bytes  uint64
	posted int64 // when the receiver posted the receive (0: not seen)
}

const maxPairing = 1 << 14 // pending sends or landings kept per link for pairing

// sliceAt returns the accumulator of slice idx, extending the ring as
// needed; a slice already judged maps to the oldest kept one. It returns nil
// for an index too far ahead (a corrupt time stamp).
func (a *Analyzer) sliceAt(l *link, ts int64) *sliceAcc {
	var idx int64
	if ts >= l.curStart && ts < l.curEnd {
		idx = l.curIdx
	} else {
		idx = ts / a.w
		l.curIdx, l.curStart, l.curEnd = idx, idx*a.w, idx*a.w+a.w
	}
	if l.slices.Len() == 0 {
		l.base = max(idx, a.final)
	}
	off := idx - l.base
	if off < 0 {
		// A slice already judged: the oldest kept one stands in.
		a.late++
		if l.slices.Len() == 0 {
			l.slices.Push(sliceAcc{})
		}
		return l.slices.Front()
	}
	if off >= int64(l.slices.Len()) {
		if idx-a.final > maxAhead {
			a.farAhead++
			return nil
		}
		for int64(l.slices.Len()) <= off {
			l.slices.Push(sliceAcc{})
		}
	}
	return l.slices.At(int(off))
}

// maxAhead bounds how many slices past the judged ones a link keeps; a record
// further ahead is judged corrupt and skipped, unless Add moves the judged
// horizon first (see Analyzer.Add).
const maxAhead = 1 << 13

// integrate accounts the sender state from lastTs to t.
func (a *Analyzer) integrate(l *link, t int64) {
	if t <= l.lastTs {
		return
	}
	if l.pending == 0 && l.waits == 0 {
		l.lastTs = t
		return
	}
	from := l.lastTs
	if from < a.final*a.w {
		from = min(a.final*a.w, t)
	}
	for from < t {
		acc := a.sliceAt(l, from)
		if acc == nil {
			break
		}
		end := min(t, l.curEnd)
		if end <= from { // late slice: account in the oldest kept one
			end = t
		}
		seg := end - from
		if l.pending > 0 {
			acc.busy += seg
			acc.backlog += float64(l.outBytes) * float64(seg)
		}
		if l.waits > 0 {
			acc.wait += seg
		}
		if l.pending > l.waits {
			acc.wire += seg
		}
		from = end
	}
	l.lastTs = t
}

// take removes and returns the accumulator of slice idx (which must be the
// oldest not yet judged), or a zero one.
func (l *link) take(idx int64) sliceAcc {
	if l.slices.Len() == 0 || l.base > idx {
		return sliceAcc{}
	}
	l.base++
	return l.slices.PopFront()
}

// firstData returns the index of the link's oldest kept slice, or MaxInt64.
func (l *link) firstData() int64 {
	if l.slices.Len() == 0 {
		return math.MaxInt64
	}
	return l.base
}

// pair accounts one transfer: from when the send could move (posted,
// credited, and the WR before it on the connection landed) to its landing.
// A send that went ahead of its credit (eager) before its receive was
// posted lands when the receiver gets to it: that time is the receiver's
// lateness, and when the bytes moved is not known, so such a transfer
// says nothing of the link's speed. Counted from the send's post, a
// 2-rank run's early rank charged its peer's lateness to its link, which
// read at a third of the other's rate; counted from the receive's post,
// the link read as fast as a memory copy and made the other look slow.
func (a *Analyzer) pair(l *link, s flightWR, d landedWR) {
	start := max(s.post, s.grant, l.lastLanded)
	l.lastLanded = max(l.lastLanded, d.ts)
	bytes := max(s.bytes, d.bytes)
	if bytes < a.o.SlowLink.MinWRBytes || d.posted > start {
		return
	}
	ns := max(d.ts-start, 1)
	l.xferBytes += bytes
	l.xferNs += ns
	if s.coll == 0 || s.coll&p2pBit != 0 {
		return
	}
	if l.xferCache == nil || l.xferSeq != s.coll {
		l.xferCache, l.xferSeq = a.linkColl(l, s.coll), s.coll
	}
	if acc := l.xferCache; acc != nil {
		acc.bytes += bytes
		acc.ns += ns
	}
}

// p2pBit marks point-to-point calls' coll_seq.
const p2pBit = 1 << 63

// seriesPoint is one point of a link's chart series.
type seriesPoint struct {
	done    uint64
	landed  uint64
	backlog float64 // byte·ns
	busy    int64
	wait    int64
}

// cumHistory keeps a link's cumulative completed bytes and busy time at the
// end of each of its latest active slices, for the failover windows.
type cumHistory struct {
	idxs []int64
	done []uint64
	busy []int64
	head int // index of the newest
	n    int
}

func newCumHistory(n int) *cumHistory {
	return &cumHistory{idxs: make([]int64, n), done: make([]uint64, n), busy: make([]int64, n), head: -1}
}

func (h *cumHistory) push(idx int64, done uint64, busy int64) {
	h.head++
	if h.head == len(h.done) {
		h.head = 0
	}
	h.idxs[h.head], h.done[h.head], h.busy[h.head] = idx, done, busy
	h.n = min(h.n+1, len(h.done))
}

type linkEvent struct {
	ts    int64
	kind  uint8 // flowtel.Kind
	path  uint8
	rank  int32 // who recorded it
	bytes uint64
}
