package flowtel

import "math"

// The fold: the one place that turns a record stream into the facts every
// consumer reports. A transfer is a wr_post paired with its wc; a credit wait
// is a credit_wait closed by its credit_grant; a call is a rank's
// coll_begin records closed by its coll_end records, one per channel part; a
// path change is a failover, failback, link_down or link_up; a gap is a rank
// that wrote nothing for a while although it had work outstanding; lost
// records are reported as the ring reported them. The Window, the
// Prometheus and OpenTelemetry exporters, the analyzer and vccl-top's
// sources are views over these events: none of them pairs records itself.
//
// Pairing rules, and why:
//   - A QP completes its sends in posting order and its receives in posting
//     order, and transports number each direction's WRs in posting order
//     (WRID), so a wc pairs with the oldest pending post of its QP and
//     direction. After a gap in the records (a lost record), pairing
//     resynchronises on the WrIDs: posts older than the completion at hand
//     lost their own completion and are dropped as orphans, and a
//     completion older than every pending post has no post (Matched false).
//   - A QP grants credit to its waiting sends in posting order: a
//     credit_grant closes the wait with its WrID, and waits older than it,
//     or not younger than a completed send, lost their grant and are closed
//     unGranted rather than guessed.
//   - A call split over channels writes a coll_begin and a coll_end per part,
//     and its coll_begin's Step says how many parts there are: a rank's call
//     ends when that many parts have ended.

// SeqP2P is set in the CollSeq of point-to-point calls (send, recv and
// grouped sends and receives), which are numbered apart from collectives.
const SeqP2P = 1 << 63

// Fold defaults.
const (
	DefaultFoldMaxPending   = 1 << 16
	DefaultFoldMaxOpenCalls = 4096
	DefaultFoldMaxQPs       = 1 << 16
	// DefaultFoldGap is a silence of more than two heartbeats: one a
	// waiting rank would have written (HeartbeatInterval) may be late by a
	// scheduler's time slice.
	DefaultFoldGap = 25_000_000 // ns
)

// FoldConfig bounds a Fold's memory and sets when silence is a gap. Zero
// fields take the defaults.
type FoldConfig struct {
	// MaxPending bounds the posts awaiting completion per QP and
	// direction, and the open credit waits per QP; past it the oldest is
	// dropped as an orphan.
	MaxPending int
	// MaxOpenCalls bounds the calls whose end has not come; past it the
	// oldest is ended incomplete.
	MaxOpenCalls int
	// MaxQPs bounds the queue pairs tracked; records of further ones are
	// counted in FoldStats.Untracked and otherwise ignored.
	MaxQPs int
	// Ahead asks for each send's Transfer.Ahead (the largest send pending
	// before it), which head-of-line blocking needs and costs a queue per
	// QP; without it Ahead is never set.
	Ahead bool
	// GapNs is the silence, in ns, after which a rank with work
	// outstanding (posts not completed, calls not ended) is reported as a
	// Gap (0: DefaultFoldGap). Negative: never.
	GapNs int64
}

func (c FoldConfig) withDefaults() FoldConfig {
	if c.MaxPending <= 0 {
		c.MaxPending = DefaultFoldMaxPending
	}
	if c.MaxOpenCalls <= 0 {
		c.MaxOpenCalls = DefaultFoldMaxOpenCalls
	}
	if c.MaxQPs <= 0 {
		c.MaxQPs = DefaultFoldMaxQPs
	}
	if c.GapNs == 0 {
		c.GapNs = DefaultFoldGap
	}
	return c
}

// WRRef identifies a work request and when it was posted.
type WRRef struct {
	WrID    uint64
	CollSeq uint64
	Bytes   uint64
	PostNs  int64
}

// Transfer is one work request on one QP: its post (Posted), then its
// completion (Completed).
type Transfer struct {
	Link    LinkKey // rank, peer, channel and path of this event's record, and the WR's direction
	Comm    uint32
	QP      uint32
	QPIndex uint32 // the QP's index in the fold (see QPs): views keep per-QP state in a slice by it
	WrID    uint64
	CollSeq uint64
	Step    uint32
	Op      Op
	Bytes   uint64 // the WR's payload (the post's when the completion carries none)
	PostNs  int64  // when it was posted (0: the post was not seen)
	DoneNs  int64  // when it completed (0 in Posted)
	Status  Status // the completion's status (StatusOK in Posted)
	Matched bool   // Completed: the post was seen, so PostNs and the latency are known
	Depth   uint32 // the QP's depth after this event, as the transport reported it

	// The QP direction's posts awaiting completion after this event, and
	// their bytes.
	Pending      int
	PendingBytes uint64
	// Orphans is how many older posts of this QP direction were dropped
	// just before this event because their completion was lost (or their
	// queue was full).
	Orphans int

	// Sends only, with FoldConfig.Ahead. Ahead is the largest send still
	// pending on the QP when this one was posted (HasAhead false: none),
	// the WR it may have
	// waited behind; PrevDoneNs is when the QP completed the send before
	// this one (Completed; 0: none seen).
	Ahead      WRRef
	HasAhead   bool
	PrevDoneNs int64
}

// LatencyNs returns the WR's latency, post to completion, and whether it is
// known.
func (t *Transfer) LatencyNs() (int64, bool) {
	if !t.Matched || t.DoneNs < t.PostNs {
		return 0, false
	}
	return t.DoneNs - t.PostNs, true
}

// Failed reports whether a completed WR did not deliver: it failed or was
// flushed. A retransmitted WR was delivered on another path.
func (t *Transfer) Failed() bool { return t.Status == StatusError || t.Status == StatusFlushed }

// CreditWait is a send that waited for credit: begun at FromNs (WaitBegan),
// ended at ToNs (WaitEnded) by its grant (Granted). A wait whose grant was
// lost (a later send completed, or a later grant came, first) ends with
// Granted false and ToNs = FromNs: its length is not known, and not guessed.
type CreditWait struct {
	Link    LinkKey // always DirSend
	Comm    uint32
	QP      uint32
	QPIndex uint32
	WrID    uint64
	CollSeq uint64
	Step    uint32
	Bytes   uint64
	FromNs  int64
	ToNs    int64 // 0 in WaitBegan
	Granted bool
	Depth   uint32
}

// Call is one rank's part in a call: from its first coll_begin to its last
// coll_end over the channel parts it was split into.
type Call struct {
	Comm  uint32
	Rank  int32
	Seq   uint64 // CollSeq; SeqP2P set for point-to-point calls
	Op    Op
	Algo  Algorithm
	Dtype Datatype

	BeginNs int64 // the earliest part's coll_begin
	EndNs   int64 // the latest part's coll_end (CallEnded; 0 when no part ended)
	Bytes   uint64
	Parts   int    // parts the call was split into (its coll_begin's Step)
	Begun   int    // parts whose coll_begin was seen
	Ended   int    // parts whose coll_end was seen
	Status  Status // the worst of the parts' end statuses
	// Complete: every part began and ended. An incomplete call was ended
	// by Finish or pushed out by newer calls (its rank died, or records
	// were lost).
	Complete bool
}

// P2P reports whether the call is a point-to-point one.
func (c *Call) P2P() bool { return c.Seq&SeqP2P != 0 }

// DurationNs returns the call's time, begin to end (0 when not known).
func (c *Call) DurationNs() int64 {
	if c.Begun == 0 || c.Ended == 0 || c.EndNs <= c.BeginNs {
		return 0
	}
	return c.EndNs - c.BeginNs
}

// AlgBW returns the call's algorithm bandwidth in bytes per second: its
// payload over its time (0 when either is unknown, or it failed).
func (c *Call) AlgBW() float64 {
	d := c.DurationNs()
	if d == 0 || c.Bytes == 0 || !c.Complete || c.Status != StatusOK {
		return 0
	}
	return float64(c.Bytes) * 1e9 / float64(d)
}

// BusBW returns the call's bus bandwidth in bytes per second in a world of
// ranks ranks: AlgBW times BusBWFactor, nccl-tests' busbw.
func (c *Call) BusBW(ranks int) float64 { return c.AlgBW() * BusBWFactor(c.Op, ranks) }

// PathChange is a failover, failback, link_down or link_up record.
type PathChange struct {
	Link    LinkKey // DirSend: the link of the rank that recorded it
	Comm    uint32
	QP      uint32
	QPIndex uint32
	Kind    Kind
	Status  Status
	CollSeq uint64
	Bytes   uint64
	TsNs    int64
}

// Gap is a rank that wrote no record from FromNs to ToNs while it had work
// outstanding: posts not completed, or calls not ended. An Open gap is one
// still going on at the latest time the fold was told of (Advance or
// Finish); it is reported again, closed, if the rank writes again.
type Gap struct {
	Comm   uint32
	Rank   int32
	FromNs int64
	ToNs   int64
	Open   bool
	// Beats: the rank writes heartbeats while it waits (see
	// HeartbeatInterval), so a gap much longer than their interval means
	// it did not run; without them it may have waited for a peer.
	Beats      bool
	PendingWRs int // posts awaiting completion when it fell silent
	OpenCalls  int // calls begun and not ended when it fell silent
}

// Lost is a KindLost record: records of Rank that were dropped before they
// reached the fold.
type Lost struct {
	Comm    uint32
	Rank    int32
	TsNs    int64
	Records uint64
}

// Handler receives a Fold's events. Embed NopHandler to implement only some.
// The events are the fold's: a handler must copy what it keeps.
type Handler interface {
	Posted(*Transfer)
	Completed(*Transfer)
	WaitBegan(*CreditWait)
	WaitEnded(*CreditWait)
	CallBegan(*Call)
	CallEnded(*Call)
	PathChanged(*PathChange)
	Gap(*Gap)
	Lost(*Lost)
}

// NopHandler ignores every event.
type NopHandler struct{}

func (NopHandler) Posted(*Transfer)        {}
func (NopHandler) Completed(*Transfer)     {}
func (NopHandler) WaitBegan(*CreditWait)   {}
func (NopHandler) WaitEnded(*CreditWait)   {}
func (NopHandler) CallBegan(*Call)         {}
func (NopHandler) CallEnded(*Call)         {}
func (NopHandler) PathChanged(*PathChange) {}
func (NopHandler) Gap(*Gap)                {}
func (NopHandler) Lost(*Lost)              {}

// FoldStats are a fold's counters.
type FoldStats struct {
	Records   uint64 // records folded
	Lost      uint64 // records reported lost (the sum of KindLost)
	Unmatched uint64 // completions whose post was not seen
	Orphaned  uint64 // posts whose completion was not seen
	LateCalls uint64 // call records that came after their call ended
	Evicted   uint64 // calls ended incomplete to stay within MaxOpenCalls
	Untracked uint64 // records of QPs beyond MaxQPs
	Invalid   uint64 // records of an unknown kind
}

// Fold turns records into events for its Handler. Records of one rank must
// come in that rank's order; ranks may be interleaved. A Fold is not safe for
// concurrent use. Once its QPs and calls have been seen, folding a record
// does not allocate.
type Fold struct {
	cfg   FoldConfig
	h     Handler
	stats FoldStats

	qps     map[foldQPKey]*foldQP
	qpCache [foldCacheSize]*foldQP
	ranks   map[foldRankKey]*foldRank
	lastRk  *foldRank
	spill   foldRank

	// calls holds the open calls that are not their rank's latest
	// (foldRank.open). The calls ended lately are remembered, so that a
	// late part is counted instead of opening its call again: a rank's
	// run of consecutive ended seqs (foldRank.ended), and the others in
	// recent (recentQ). Neither is looked up for a call above every one
	// its rank opened: a rank's calls one at a time, the common case,
	// cost no map or set operation.
	calls    map[foldCallKey]*foldCall
	open     int             // calls begun and not ended
	order    FIFO[*foldCall] // open calls by creation, ended ones left in place
	recent   callSet
	recentQ  FIFO[foldCallKey]
	freeCall []*foldCall

	maxTs int64

	// Scratch events, reused so that folding does not allocate.
	tr  Transfer
	cw  CreditWait
	pc  PathChange
	gap Gap
	ls  Lost
}

type foldQPKey struct {
	comm uint32
	rank int32
	qp   uint32
}

type foldRankKey struct {
	comm uint32
	rank int32
}

const foldCacheSize = 256

// recentCalls is how many ended calls are remembered apart (out of their
// rank's order), and how many seqs back a rank's run of ended calls
// reaches, so that a late part is counted instead of opening a call again.
const recentCalls = 4096

type foldQP struct {
	key   foldQPKey
	idx   uint32
	rank  *foldRank
	dir   [2]foldDir
	waits FIFO[foldWait] // sends waiting for credit, oldest first
}

type foldDir struct {
	pend      FIFO[foldPend]
	pendBytes uint64
	maxQ      FIFO[WRRef] // sends: pending sends larger than every later one, so the front is the largest
	lastDone  int64
}

type foldPend struct {
	wr       WRRef
	ahead    WRRef
	hasAhead bool
}

type foldWait struct {
	wrID, coll, bytes uint64
	step              uint32
	from              int64
	link              LinkKey
}

type foldRank struct {
	key     foldRankKey
	open    *foldCall // the latest call begun, while open (not in Fold.calls)
	maxSeq  [2]uint64 // the highest CollSeq of a call opened, collectives and point-to-point
	ended   [2]seqRun // the latest run of consecutive seqs ended, the same two
	beats   bool      // it writes heartbeats
	lastTs  int64
	pending int // posts awaiting completion, over its QPs
	calls   int // calls begun and not ended
	gapOpen bool
	gapFrom int64
	gapPend int
	gapCall int
}

type foldCallKey struct {
	comm uint32
	rank int32
	seq  uint64
}

type foldCall struct {
	Call
	key      foldCallKey
	rk       *foldRank
	endBytes uint64
	ended    bool
}

// NewFold returns a fold that sends its events to h.
func NewFold(h Handler, cfg FoldConfig) *Fold {
	return &Fold{
		cfg:   cfg.withDefaults(),
		h:     h,
		qps:   map[foldQPKey]*foldQP{},
		ranks: map[foldRankKey]*foldRank{},
		calls: map[foldCallKey]*foldCall{},
	}
}

// Stats returns the fold's counters.
func (f *Fold) Stats() FoldStats { return f.stats }

// MaxTs returns the time of the latest record folded.
func (f *Fold) MaxTs() int64 { return f.maxTs }

// Add folds recs, in order.
func (f *Fold) Add(recs []Record) {
	for i := range recs {
		f.AddRecord(&recs[i])
	}
}

// AddRecord folds one record.
func (f *Fold) AddRecord(r *Record) {
	f.stats.Records++
	if r.TsNs > f.maxTs {
		f.maxTs = r.TsNs
	}
	switch r.Kind {
	case KindWRPost, KindWC, KindCreditWait, KindCreditGrant:
		q := f.qp(r)
		if q == nil {
			break
		}
		f.touch(q.rank, r.TsNs)
		switch r.Kind {
		case KindWRPost:
			f.post(q, r)
		case KindWC:
			f.complete(q, r)
		case KindCreditWait:
			f.waitBegin(q, r)
		default:
			f.grant(q, r)
		}
	case KindCollBegin, KindCollEnd:
		rk := f.rank(foldRankKey{r.Comm, r.Rank})
		f.touch(rk, r.TsNs)
		f.call(rk, r)
	case KindFailover, KindFailback, KindLinkDown, KindLinkUp:
		if q := f.qp(r); q != nil {
			f.touch(q.rank, r.TsNs)
			f.pc = PathChange{Link: linkKeyOf(r, DirSend), Comm: r.Comm, QP: r.QP, QPIndex: q.idx, Kind: r.Kind, Status: r.Status,
				CollSeq: r.CollSeq, Bytes: r.Bytes, TsNs: r.TsNs}
			f.h.PathChanged(&f.pc)
		}
	case KindHeartbeat:
		rk := f.rank(foldRankKey{r.Comm, r.Rank})
		rk.beats = true
		f.touch(rk, r.TsNs)
	case KindLost:
		f.stats.Lost += r.Bytes
		f.ls = Lost{Comm: r.Comm, Rank: r.Rank, TsNs: r.TsNs, Records: r.Bytes}
		f.h.Lost(&f.ls)
	default:
		f.stats.Invalid++
	}
}

func (f *Fold) qp(r *Record) *foldQP {
	slot := &f.qpCache[(r.QP*0x9E3779B1^uint32(r.Rank)*0x85EBCA77^r.Comm)%foldCacheSize]
	// Compared field by field: a key built whole and compared wide stalls
	// on store forwarding, and this runs for every WR record.
	if q := *slot; q != nil && q.key.qp == r.QP && q.key.rank == r.Rank && q.key.comm == r.Comm {
		return q
	}
	k := foldQPKey{r.Comm, r.Rank, r.QP}
	q := f.qps[k]
	if q == nil {
		if len(f.qps) >= f.cfg.MaxQPs {
			f.stats.Untracked++
			return nil
		}
		q = &foldQP{key: k, idx: uint32(len(f.qps)), rank: f.rank(foldRankKey{r.Comm, r.Rank})}
		f.qps[k] = q
	}
	*slot = q
	return q
}

func (f *Fold) rank(k foldRankKey) *foldRank {
	if rk := f.lastRk; rk != nil && rk.key == k {
		return rk
	}
	rk := f.ranks[k]
	if rk == nil {
		if len(f.ranks) >= f.cfg.MaxQPs {
			// Bounded: further ranks share one state, which only
			// makes their gaps unreliable.
			return &f.spill
		}
		rk = &foldRank{key: k}
		f.ranks[k] = rk
	}
	f.lastRk = rk
	return rk
}

// touch notes a record of rk at ts, first reporting the silence before it
// as a gap if the rank had work outstanding.
func (f *Fold) touch(rk *foldRank, ts int64) {
	if f.cfg.GapNs < 0 || rk == &f.spill {
		return
	}
	if rk.gapOpen {
		f.gap = Gap{Comm: rk.key.comm, Rank: rk.key.rank, FromNs: rk.gapFrom, ToNs: max(ts, rk.gapFrom),
			PendingWRs: rk.gapPend, OpenCalls: rk.gapCall, Beats: rk.beats}
		rk.gapOpen = false
		f.h.Gap(&f.gap)
	} else if rk.lastTs > 0 && ts-rk.lastTs >= f.cfg.GapNs && (rk.pending > 0 || rk.calls > 0) {
		f.gap = Gap{Comm: rk.key.comm, Rank: rk.key.rank, FromNs: rk.lastTs, ToNs: ts,
			PendingWRs: rk.pending, OpenCalls: rk.calls, Beats: rk.beats}
		f.h.Gap(&f.gap)
	}
	rk.lastTs = max(rk.lastTs, ts)
}

// transfer fills the fold's scratch Transfer from r. It sets every field
// rather than assign a composite literal, which builds a copy first.
func (f *Fold) transfer(q *foldQP, r *Record, d Dir) *Transfer {
	t := &f.tr
	// Field by field: a LinkKey built whole and copied stalls on store
	// forwarding (it is written in pieces and read back wide).
	t.Link.Rank, t.Link.Peer, t.Link.Channel, t.Link.Path, t.Link.Dir = r.Rank, r.Peer, r.Channel, r.Path, d
	t.Comm, t.QP, t.QPIndex = r.Comm, r.QP, q.idx
	t.WrID, t.CollSeq, t.Step, t.Op = r.WrID, r.CollSeq, r.Step, r.Op
	t.Bytes, t.Status, t.Depth = r.Bytes, r.Status, r.Depth
	t.PostNs, t.DoneNs, t.Matched, t.Orphans = 0, 0, false, 0
	t.Ahead, t.HasAhead, t.PrevDoneNs = WRRef{}, false, 0
	return t
}

func (f *Fold) post(q *foldQP, r *Record) {
	d := Dir(r.WrID & 1)
	qd := &q.dir[d]
	t := f.transfer(q, r, d)
	t.Status, t.PostNs = StatusOK, r.TsNs
	if qd.pend.Len() >= f.cfg.MaxPending {
		f.orphan(q, qd)
		t.Orphans++
	}
	// The entry is written in place: building it and copying it in costs
	// more than the rest of the post.
	p := qd.pend.PushSlot()
	p.wr.WrID, p.wr.CollSeq, p.wr.Bytes, p.wr.PostNs = r.WrID, r.CollSeq, r.Bytes, r.TsNs
	p.hasAhead = false
	if d == DirSend && f.cfg.Ahead {
		// The largest send still ahead of this one names what it may
		// wait behind; maxQ keeps the pending sends larger than every
		// later one, so its front is the largest.
		if qd.maxQ.Len() > 0 {
			p.ahead, p.hasAhead = *qd.maxQ.Front(), true
			t.Ahead, t.HasAhead = p.ahead, true
		}
		for qd.maxQ.Len() > 0 && qd.maxQ.Back().Bytes <= r.Bytes {
			qd.maxQ.PopBack()
		}
		m := qd.maxQ.PushSlot()
		m.WrID, m.CollSeq, m.Bytes, m.PostNs = r.WrID, r.CollSeq, r.Bytes, r.TsNs
	}
	qd.pendBytes += r.Bytes
	q.rank.pending++
	t.Pending, t.PendingBytes = qd.pend.Len(), qd.pendBytes
	f.h.Posted(t)
}

// orphan drops the oldest pending post of qd: its completion was lost.
func (f *Fold) orphan(q *foldQP, qd *foldDir) {
	old := qd.pend.Front()
	qd.pendBytes -= old.wr.Bytes
	q.rank.pending--
	f.stats.Orphaned++
	for qd.maxQ.Len() > 0 && qd.maxQ.Front().WrID <= old.wr.WrID {
		qd.maxQ.Drop()
	}
	qd.pend.Drop()
}

func (f *Fold) complete(q *foldQP, r *Record) {
	d := Dir(r.WrID & 1)
	qd := &q.dir[d]
	t := f.transfer(q, r, d)
	t.DoneNs = r.TsNs
	for qd.pend.Len() > 0 && qd.pend.Front().wr.WrID < r.WrID {
		f.orphan(q, qd)
		t.Orphans++
	}
	if qd.pend.Len() > 0 && qd.pend.Front().wr.WrID == r.WrID {
		p := qd.pend.Front() // read in place, then dropped
		qd.pend.Drop()
		qd.pendBytes -= p.wr.Bytes
		q.rank.pending--
		t.Matched, t.PostNs = true, p.wr.PostNs
		if t.Bytes == 0 {
			t.Bytes = p.wr.Bytes
		}
		if t.CollSeq == 0 {
			t.CollSeq = p.wr.CollSeq
		}
		t.Ahead, t.HasAhead = p.ahead, p.hasAhead
	} else {
		f.stats.Unmatched++
	}
	for qd.maxQ.Len() > 0 && qd.maxQ.Front().WrID <= r.WrID {
		qd.maxQ.Drop()
	}
	t.PrevDoneNs = qd.lastDone
	qd.lastDone = max(qd.lastDone, r.TsNs)
	t.Pending, t.PendingBytes = qd.pend.Len(), qd.pendBytes
	if d == DirSend {
		// A completed send had its credit: a wait still open for it, or
		// for an older send, lost its grant.
		for q.waits.Len() > 0 && q.waits.Front().wrID <= r.WrID {
			f.endWait(q, q.waits.PopFront(), r.TsNs, r.Depth, false)
		}
	}
	f.h.Completed(t)
}

func (f *Fold) waitBegin(q *foldQP, r *Record) {
	if q.waits.Len() > 0 && r.WrID <= q.waits.Back().wrID {
		return // a duplicate, or out of order
	}
	if q.waits.Len() >= f.cfg.MaxPending {
		f.endWait(q, q.waits.PopFront(), r.TsNs, r.Depth, false)
	}
	w := foldWait{wrID: r.WrID, coll: r.CollSeq, bytes: r.Bytes, step: r.Step, from: r.TsNs, link: linkKeyOf(r, DirSend)}
	q.waits.Push(w)
	f.cw = CreditWait{Link: w.link, Comm: r.Comm, QP: r.QP, QPIndex: q.idx, WrID: r.WrID, CollSeq: r.CollSeq, Step: r.Step,
		Bytes: r.Bytes, FromNs: r.TsNs, Depth: r.Depth}
	f.h.WaitBegan(&f.cw)
}

func (f *Fold) grant(q *foldQP, r *Record) {
	// Credit comes in posting order: older waits lost their grant.
	for q.waits.Len() > 0 && q.waits.Front().wrID < r.WrID {
		f.endWait(q, q.waits.PopFront(), r.TsNs, r.Depth, false)
	}
	if q.waits.Len() > 0 && q.waits.Front().wrID == r.WrID {
		f.endWait(q, q.waits.PopFront(), r.TsNs, r.Depth, true)
	}
}

func (f *Fold) endWait(q *foldQP, w foldWait, ts int64, depth uint32, granted bool) {
	if !granted {
		ts = w.from
	}
	f.cw = CreditWait{Link: w.link, Comm: q.key.comm, QP: q.key.qp, QPIndex: q.idx, WrID: w.wrID, CollSeq: w.coll, Step: w.step,
		Bytes: w.bytes, FromNs: w.from, ToNs: max(ts, w.from), Granted: granted, Depth: depth}
	f.h.WaitEnded(&f.cw)
}

func (f *Fold) call(rk *foldRank, r *Record) {
	k := foldCallKey{r.Comm, r.Rank, r.CollSeq}
	class := r.CollSeq >> 63
	var c *foldCall
	if o := rk.open; o != nil && o.key == k {
		c = o
	} else if r.CollSeq <= rk.maxSeq[class] {
		// Not above every call the rank opened: it may be open, or
		// ended lately. (A spill rank's maxSeq is over several ranks:
		// a lookup more, never one less.)
		if c = f.calls[k]; c == nil && f.ended(rk, k) {
			f.stats.LateCalls++
			return
		}
	}
	if c == nil {
		for f.open >= f.cfg.MaxOpenCalls {
			f.evictOldest()
		}
		c = f.newCall()
		c.key, c.rk = k, rk
		c.Call = Call{Comm: r.Comm, Rank: r.Rank, Seq: r.CollSeq, Op: r.Op, Algo: r.Algo, Dtype: r.Dtype,
			BeginNs: r.TsNs, Parts: 1}
		if o := rk.open; o != nil {
			f.calls[o.key] = o // still open, no longer the latest
		}
		rk.open = c
		rk.maxSeq[class] = max(rk.maxSeq[class], r.CollSeq)
		f.open++
		f.order.Push(c)
		rk.calls++
	}
	if r.Kind == KindCollBegin {
		first := c.Begun == 0
		if first || r.TsNs < c.BeginNs {
			c.BeginNs = r.TsNs
		}
		c.Begun++
		c.Bytes += r.Bytes
		c.Op, c.Algo, c.Dtype = r.Op, r.Algo, r.Dtype
		c.Parts = max(c.Parts, int(min(max(r.Step, 1), math.MaxInt32)))
		if first {
			f.h.CallBegan(&c.Call)
		}
	} else {
		c.EndNs = max(c.EndNs, r.TsNs)
		c.Ended++
		c.endBytes += r.Bytes
		c.Status = max(c.Status, r.Status)
	}
	if c.Ended >= c.Parts && c.Begun >= c.Parts {
		f.endCall(c)
	}
}

// seqRun is the seqs from..to (when ok), every one an ended call.
type seqRun struct {
	from, to uint64
	ok       bool
}

// ended reports whether call k of rk ended lately.
func (f *Fold) ended(rk *foldRank, k foldCallKey) bool {
	if run := &rk.ended[k.seq>>63]; rk != &f.spill && run.ok && run.from <= k.seq && k.seq <= run.to {
		return true
	}
	return f.recent.has(k)
}

// remember notes that c ended: in its rank's run when it extends it (a
// spill rank, shared by several, has none), else in recent. A run that
// grows takes in the calls recent holds right after it, so that one call
// ended out of order does not send every later one to recent.
func (f *Fold) remember(c *foldCall) {
	if rk := c.rk; rk != &f.spill {
		run := &rk.ended[c.key.seq>>63]
		if !run.ok || c.key.seq == run.to+1 && run.to != math.MaxUint64 {
			if !run.ok {
				*run = seqRun{from: c.key.seq, to: c.key.seq, ok: true}
			} else {
				run.to++
			}
			for f.recent.n > 0 && run.to != math.MaxUint64 {
				next := foldCallKey{c.key.comm, c.key.rank, run.to + 1}
				if !f.recent.has(next) {
					break
				}
				f.recent.remove(next) // its recentQ entry stays: removing it again does nothing
				run.to++
			}
			if run.to-run.from >= recentCalls {
				run.from = run.to - recentCalls + 1
			}
			return
		}
	}
	if f.recentQ.Len() >= recentCalls {
		f.recent.remove(f.recentQ.PopFront())
	}
	f.recent.add(c.key)
	f.recentQ.Push(c.key)
}

// callSet is a set of at most recentCalls call keys: open addressing with
// linear probing, at most half full, deletion by shifting back. A Go map
// churned by an insert and a delete a call cost more than the rest of the
// call's fold.
type callSet struct {
	slots []callSlot // len a power of two; nil until the first add
	n     int        // keys held
}

type callSlot struct {
	key  foldCallKey
	used bool
}

const callSetSlots = 2 * recentCalls

func (s *callSet) home(k foldCallKey) int {
	h := (uint64(k.comm)<<32|uint64(uint32(k.rank)))*0x9E3779B97F4A7C15 ^ k.seq*0xC2B2AE3D27D4EB4F
	return int(h>>32) & (len(s.slots) - 1)
}

// find returns k's slot, or the empty slot where it would go.
func (s *callSet) find(k foldCallKey) int {
	mask := len(s.slots) - 1
	i := s.home(k)
	for s.slots[i].used && s.slots[i].key != k {
		i = (i + 1) & mask
	}
	return i
}

func (s *callSet) has(k foldCallKey) bool {
	return s.slots != nil && s.slots[s.find(k)].used
}

// add adds k; the set must hold fewer than recentCalls keys.
func (s *callSet) add(k foldCallKey) {
	if s.slots == nil {
		s.slots = make([]callSlot, callSetSlots)
	}
	i := s.find(k)
	if !s.slots[i].used {
		s.n++
	}
	s.slots[i] = callSlot{key: k, used: true}
}

func (s *callSet) remove(k foldCallKey) {
	if s.slots == nil {
		return
	}
	mask := len(s.slots) - 1
	i := s.find(k)
	if !s.slots[i].used {
		return
	}
	s.n--
	// Shift back the keys after i that probed past it, so that every
	// key stays reachable from its home slot without tombstones.
	for j := i; ; {
		s.slots[i].used = false
		for {
			j = (j + 1) & mask
			if !s.slots[j].used {
				return
			}
			h := s.home(s.slots[j].key)
			// The key at j may move to i unless its home lies
			// cyclically in (i, j].
			if i <= j {
				if i < h && h <= j {
					continue
				}
			} else if i < h || h <= j {
				continue
			}
			break
		}
		s.slots[i] = s.slots[j]
		i = j
	}
}

func (f *Fold) newCall() *foldCall {
	if n := len(f.freeCall); n > 0 {
		c := f.freeCall[n-1]
		f.freeCall = f.freeCall[:n-1]
		*c = foldCall{}
		return c
	}
	return &foldCall{}
}

// endCall reports c ended and forgets it. It stays in f.order until it
// reaches the front, so that order needs no search.
func (f *Fold) endCall(c *foldCall) {
	if c.rk.open == c {
		c.rk.open = nil
	} else {
		delete(f.calls, c.key)
	}
	f.open--
	c.ended = true
	c.rk.calls--
	c.Bytes = max(c.Bytes, c.endBytes)
	c.Complete = c.Begun >= c.Parts && c.Ended >= c.Parts
	f.remember(c)
	f.h.CallEnded(&c.Call)
	f.dropEnded()
}

// dropEnded recycles the ended calls at the front of the creation order.
func (f *Fold) dropEnded() {
	for f.order.Len() > 0 && (*f.order.Front()).ended {
		f.freeCall = append(f.freeCall, f.order.PopFront())
	}
}

func (f *Fold) evictOldest() {
	f.dropEnded()
	if f.order.Len() == 0 {
		return
	}
	f.stats.Evicted++
	f.endCall(*f.order.Front())
}

// Advance tells the fold that the stream has reached now (ns, the records'
// time base) although some rank may have written nothing lately: a rank
// silent since before now-GapNs with work outstanding is reported as an
// open Gap, once per silence.
func (f *Fold) Advance(now int64) {
	if f.cfg.GapNs < 0 {
		return
	}
	for _, rk := range f.ranks {
		if !rk.gapOpen && rk.lastTs > 0 && now-rk.lastTs >= f.cfg.GapNs && (rk.pending > 0 || rk.calls > 0) {
			rk.gapOpen, rk.gapFrom, rk.gapPend, rk.gapCall = true, rk.lastTs, rk.pending, rk.calls
			f.gap = Gap{Comm: rk.key.comm, Rank: rk.key.rank, FromNs: rk.lastTs, ToNs: now, Open: true,
				PendingWRs: rk.pending, OpenCalls: rk.calls, Beats: rk.beats}
			f.h.Gap(&f.gap)
		}
	}
}

// Finish ends the stream: ranks silent at its end with work outstanding are
// reported as open gaps up to the latest record, and every call still open
// is ended incomplete, oldest first.
func (f *Fold) Finish() {
	f.Advance(f.maxTs)
	for f.order.Len() > 0 {
		c := f.order.PopFront()
		if !c.ended {
			f.endCall(c)
		}
	}
}

// LastSeen returns the time of the latest record of rank of communicator
// comm (0: none seen, or gaps are off: FoldConfig.GapNs < 0).
func (f *Fold) LastSeen(comm uint32, rank int32) int64 {
	if rk := f.ranks[foldRankKey{comm, rank}]; rk != nil {
		return rk.lastTs
	}
	return 0
}

// QPs returns how many QPs the fold tracks: every event's QPIndex is below
// it.
func (f *Fold) QPs() int { return len(f.qps) }

// OpenCalls returns how many calls have begun and not ended.
func (f *Fold) OpenCalls() int { return f.open }

// WaitSpans is the time during which at least one of a link's sends waited
// for credit, overlapping waits counted once: the granted waits, merged into
// disjoint spans, and the waits open now. A wait whose grant was lost
// (Granted false) counts nothing of its own. Waits should end roughly in
// time order, as a fold reports them; the spans kept are bounded.
type WaitSpans struct {
	spans FIFO[span] // finished, disjoint, ordered by start
	open  []openWait // the waits open now
	bound int
}

type span struct{ from, to int64 }

type openWait struct {
	qp   uint32
	wrID uint64
	from int64
}

// maxSpans is the default bound on the finished spans a WaitSpans keeps.
const maxSpans = 4096

// NewWaitSpans returns spans keeping at most bound finished spans (0: a
// default), the oldest forgotten first.
func NewWaitSpans(bound int) *WaitSpans {
	if bound <= 0 {
		bound = maxSpans
	}
	return &WaitSpans{bound: bound}
}

// Began notes a wait that began.
func (w *WaitSpans) Began(cw *CreditWait) {
	w.open = append(w.open, openWait{qp: cw.QP, wrID: cw.WrID, from: cw.FromNs})
}

// Ended notes a wait that ended and returns the ns it adds to the union
// (0 for a wait whose grant was lost, or one inside time already counted).
func (w *WaitSpans) Ended(cw *CreditWait) int64 {
	for i := range w.open {
		if o := w.open[i]; o.qp == cw.QP && o.wrID == cw.WrID {
			w.open = append(w.open[:i], w.open[i+1:]...)
			break
		}
	}
	if !cw.Granted || cw.ToNs <= cw.FromNs {
		return 0
	}
	if w.bound == 0 {
		w.bound = maxSpans
	}
	return w.add(cw.FromNs, cw.ToNs)
}

// add merges [from, to) into the spans and returns the time it newly covers.
func (w *WaitSpans) add(from, to int64) int64 {
	// Spans end roughly in time order: the ones it may overlap are last.
	i := w.spans.Len()
	for i > 0 && w.spans.At(i-1).to >= from {
		i--
	}
	if i == w.spans.Len() {
		w.spans.PushBounded(span{from, to}, w.bound)
		return to - from
	}
	covered := int64(0)
	lo, hi := from, to
	for j := i; j < w.spans.Len(); j++ {
		s := w.spans.At(j)
		covered += overlap(s.from, s.to, from, to)
		lo, hi = min(lo, s.from), max(hi, s.to)
	}
	// Replace spans i.. with their merge.
	for w.spans.Len() > i {
		w.spans.PopBack()
	}
	w.spans.Push(span{lo, hi})
	return (to - from) - covered
}

// Within returns the wait time within [lo, hi], the open waits counted up
// to hi.
func (w *WaitSpans) Within(lo, hi int64) int64 {
	var t int64
	lastTo := int64(math.MinInt64)
	for i := range w.spans.Len() {
		s := w.spans.At(i)
		t += overlap(s.from, s.to, lo, hi)
		lastTo = max(lastTo, s.to)
	}
	if from, open := w.Open(); open {
		t += overlap(max(from, lastTo), hi, lo, hi)
	}
	return t
}

// Open returns when the oldest wait open now began, and whether one is.
func (w *WaitSpans) Open() (from int64, open bool) {
	if len(w.open) == 0 {
		return 0, false
	}
	from = w.open[0].from
	for _, o := range w.open[1:] {
		from = min(from, o.from)
	}
	return from, true
}

func overlap(a, b, lo, hi int64) int64 {
	a, b = max(a, lo), min(b, hi)
	if b > a {
		return b - a
	}
	return 0
}
