package analyzer

import (
	"math"

	"github.com/vccl-go/vccl/flowtel"
)

// Analyzer runs the detectors over a stream of records from every rank of a
// job, merged on the common time base: Add them in batches, roughly in time
// order (each rank's in its own order; AnalyzeFiles interleaves
// ranks), tell it with Advance how far every rank has got, and Finish.
// Memory stays bounded by the records of the last Options.Slack (plus the
// collectives still running), whatever the length of the trace.
//
// An Analyzer is not safe for concurrent use.
type Analyzer struct {
	o     Options
	w     int64 // slice width, ns
	slack int64

	fold   *flowtel.Fold
	qps    []*qpState // by the fold's QPIndex; nil: not a valid link
	links  map[linkKey]*link
	list   []*link // in creation order
	rcs    map[rcKey]*rankChan
	comms  map[uint32]*commState
	lastCm *commState

	final   int64 // slices before this index have been judged
	started bool  // final is set

	// Counters.
	records, lost, late, farAhead, badTs uint64
	firstTs, lastTs                      int64

	// Chart series: slices per point, and the slice of point 0.
	seriesW      int64
	seriesOrigin int64
	seriesSet    bool
	seriesN      int

	accs      []sliceAcc  // scratch: the slice being judged, by link
	collRanks int         // per-rank entries of the open collectives
	cands     []candidate // detector episodes awaiting the final report
	hol       map[qpKey]*holAgg
	finished  bool
}

type qpKey struct {
	comm uint32
	rank int32
	qp   uint32
}

// qpState is one queue pair of one rank.
type qpState struct {
	key     qpKey
	peer    int32
	ch      uint16
	out     *link               // rank -> peer
	in      *link               // peer -> rank
	recent  [holRecent]doneSend // the latest completed sends, for naming blockers
	nRecent int
}

type doneSend struct {
	wrID  uint64
	post  int64
	done  int64
	bytes uint64
	coll  uint64
}

const holRecent = 32

const maxPendingSends = 1 << 16

// maxFoldCalls bounds the calls (one rank's part in one collective) the
// fold keeps open: 64 calls in flight for each of 1024 ranks; a call pushed
// out is ended incomplete, as one whose rank died.
const maxFoldCalls = 1 << 16

// rcKey names a rank's side of one channel of a communicator.
type rcKey struct {
	comm uint32
	rank int32
	ch   uint16
}

// rankChan is a rank on one channel: the links it sends and receives on.
type rankChan struct {
	key       rcKey
	out       []*link
	in        []*link
	bpSlice   int64 // latest slice with a backpressured outgoing link
	stallFrom int64 // open stall candidates of its outgoing links, for stall roots
}

// New returns an analyzer with opts (zero fields take their defaults). It
// returns an error for options out of range.
func New(opts Options) (*Analyzer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	a := &Analyzer{
		o:     o,
		w:     int64(o.Resolution),
		slack: int64(o.Slack),
		links: map[linkKey]*link{},
		rcs:   map[rcKey]*rankChan{},
		comms: map[uint32]*commState{},
		hol:   map[qpKey]*holAgg{},
	}
	a.seriesW = 1
	a.fold = flowtel.NewFold((*events)(a), flowtel.FoldConfig{MaxOpenCalls: maxFoldCalls, MaxPending: maxPendingSends,
		GapNs: int64(o.Rank.NotRunning), Ahead: true})
	return a, nil
}

// Options returns the options in force, defaults filled in.
func (a *Analyzer) Options() Options { return a.o }

// SetWorldSize tells the analyzer how many ranks communicator comm has (the
// trace metadata's world size), so it knows when every rank has joined a
// collective. Without it the size is the number of ranks seen.
func (a *Analyzer) SetWorldSize(comm uint32, size int) {
	if size > 0 && size <= maxRanks {
		c := a.comm(comm)
		c.size = int32(size)
		c.sizeKnown = true
	}
}

// maxRanks bounds the rank numbers the analyzer accepts.
const maxRanks = 1 << 14

// Add analyses recs. Records of one rank must come in that rank's order;
// ranks may be interleaved in any way that keeps each close to time order
// (see Advance).
func (a *Analyzer) Add(recs []flowtel.Record) {
	for i := range recs {
		a.add(&recs[i])
	}
}

// Advance says that every record still to come is at or after ts, give or
// take Options.Slack: slices before ts-Slack are judged and their memory
// freed.
func (a *Analyzer) Advance(ts int64) {
	if ts == math.MaxInt64 {
		a.judgeUpTo(math.MaxInt64)
		return
	}
	a.fold.Advance(ts) // ranks silent since long before ts, before their slices are judged
	a.judgeUpTo((ts - a.slack) / a.w)
	a.expireCollectives(ts - a.slack)
}

func (a *Analyzer) add(r *flowtel.Record) {
	a.records++
	ts := r.TsNs
	if ts <= 0 {
		a.badTs++
		return
	}
	if !a.started {
		a.started = true
		a.final = ts/a.w - 1
		a.firstTs = ts
	}
	a.firstTs = min(a.firstTs, ts)
	a.lastTs = max(a.lastTs, ts)
	// Without Advance calls, keep memory bounded all the same.
	if idx := ts / a.w; idx-a.final > maxAhead/2 {
		a.judgeUpTo(idx - maxAhead/4)
	}
	if r.Kind == flowtel.KindHeartbeat {
		a.beat(r)
	}
	a.fold.AddRecord(r)
}

// events is the Analyzer as a handler of its fold's events: the fold pairs
// each rank's posts with their completions, credit waits with their grants
// and a rank's call parts; the analyzer pairs across ranks (a send with
// its landing at the receiver) and judges.
type events Analyzer

// Posted starts a send's flight; a receive's post comes with its
// completion (Transfer.PostNs), which is when the analyzer needs it.
func (e *events) Posted(t *flowtel.Transfer) {
	if t.Link.Dir == flowtel.DirSend {
		(*Analyzer)(e).sendPost(t)
	}
}

func (e *events) Completed(t *flowtel.Transfer) {
	a := (*Analyzer)(e)
	if t.Link.Dir == flowtel.DirSend {
		a.sendWC(t)
	} else {
		a.recvWC(t)
	}
}

func (e *events) WaitBegan(w *flowtel.CreditWait) { (*Analyzer)(e).creditWait(w) }

func (e *events) WaitEnded(w *flowtel.CreditWait) { (*Analyzer)(e).creditEnd(w) }

func (e *events) CallBegan(c *flowtel.Call) { (*Analyzer)(e).collBegin(c) }

func (e *events) CallEnded(c *flowtel.Call) { (*Analyzer)(e).collEnd(c) }

func (e *events) PathChanged(p *flowtel.PathChange) { (*Analyzer)(e).linkEvent(p) }

func (e *events) Gap(g *flowtel.Gap) { (*Analyzer)(e).gap(g) }

func (e *events) Lost(x *flowtel.Lost) { e.lost += x.Records }

func validLink(k flowtel.LinkKey) bool {
	return k.Rank >= 0 && k.Rank < maxRanks && k.Peer >= 0 && k.Peer < maxRanks && k.Peer != k.Rank
}

// qp returns the state of the queue pair with the fold's index idx, or nil
// for one that names no valid link.
func (a *Analyzer) qp(idx uint32, comm uint32, qp uint32, k flowtel.LinkKey) *qpState {
	if int(idx) < len(a.qps) {
		if q := a.qps[idx]; q != nil {
			return q
		}
	}
	if !validLink(k) {
		return nil
	}
	for int(idx) >= len(a.qps) {
		a.qps = append(a.qps, nil)
	}
	q := &qpState{key: qpKey{comm: comm, rank: k.Rank, qp: qp}, peer: k.Peer, ch: k.Channel}
	q.out = a.link(linkKey{comm: comm, src: k.Rank, dst: k.Peer, ch: k.Channel})
	q.in = a.link(linkKey{comm: comm, src: k.Peer, dst: k.Rank, ch: k.Channel})
	a.qps[idx] = q
	return q
}

func (a *Analyzer) link(k linkKey) *link {
	l := a.links[k]
	if l == nil {
		l = &link{key: k, id: len(a.list), lastTs: 0, curIdx: -1, curStart: 1, curEnd: 0}
		l.comm = a.comm(k.comm)
		l.comm.seeRank(k.src)
		l.comm.seeRank(k.dst)
		l.src = a.rankChan(rcKey{comm: k.comm, rank: k.src, ch: k.ch})
		l.dst = a.rankChan(rcKey{comm: k.comm, rank: k.dst, ch: k.ch})
		l.src.out = append(l.src.out, l)
		l.dst.in = append(l.dst.in, l)
		l.det.init()
		a.links[k] = l
		a.list = append(a.list, l)
	}
	return l
}

func (a *Analyzer) rankChan(k rcKey) *rankChan {
	rc := a.rcs[k]
	if rc == nil {
		rc = &rankChan{key: k, bpSlice: -1, stallFrom: -1}
		a.rcs[k] = rc
		c := a.comm(k.comm)
		for int(k.rank) >= len(c.rankChans) {
			c.rankChans = append(c.rankChans, nil)
		}
		c.rankChans[k.rank] = append(c.rankChans[k.rank], rc)
	}
	return rc
}

func (a *Analyzer) comm(id uint32) *commState {
	if c := a.lastCm; c != nil && c.id == id {
		return c
	}
	c := a.comms[id]
	if c == nil {
		c = newCommState(id)
		a.comms[id] = c
	}
	a.lastCm = c
	return c
}

// count adds (sign 1) or removes (sign -1) a send in flight from the link's
// state; parked sends are not counted.
func (l *link) count(f *flightWR, sign int32) {
	if f.parked {
		return
	}
	l.pending += sign
	if sign > 0 {
		l.outBytes += f.bytes
	} else {
		l.outBytes -= f.bytes
	}
	if f.waiting {
		l.waits += sign
	}
}

// arrived reports whether the receiver of link l has begun collective seq
// (p2p calls, and collectives no longer tracked, count as arrived).
func (a *Analyzer) arrived(l *link, seq uint64) bool {
	if seq == 0 || seq&p2pBit != 0 || seq == l.arrivedSeq {
		return true
	}
	cs := l.comm.colls[seq]
	if cs == nil {
		return true
	}
	if int(l.key.dst) < len(cs.ranks) && cs.ranks[l.key.dst].begun {
		l.arrivedSeq = seq // a rank that began stays begun
		return true
	}
	return false
}

func (a *Analyzer) sendPost(t *flowtel.Transfer) {
	q := a.qp(t.QPIndex, t.Comm, t.QP, t.Link)
	if q == nil {
		return
	}
	l := q.out
	a.integrate(l, t.PostNs)
	// The link: in flight until it lands at the receiver. A send to a rank
	// that has not begun its collective waits for that rank to arrive, not
	// for the link: it is parked until the rank begins.
	seq := t.WrID >> 1
	for l.landQ.Len() > 0 && l.landQ.Front().seq < seq {
		l.landQ.PopFront()
	}
	if l.landQ.Len() > 0 && l.landQ.Front().seq == seq {
		// Landed already (the receiver's record came first).
		d := l.landQ.PopFront()
		a.pair(l, flightWR{seq: seq, post: t.PostNs, bytes: t.Bytes, coll: t.CollSeq}, d)
	} else {
		f := flightWR{seq: seq, post: t.PostNs, bytes: t.Bytes, coll: t.CollSeq, parked: !a.arrived(l, t.CollSeq)}
		if l.flight.Len() >= maxPendingSends {
			old := l.flight.PopFront()
			l.drop(&old)
		}
		l.flight.Push(f)
		if f.parked {
			l.parked++
		}
		l.count(&f, 1)
		l.maxOut = max(l.maxOut, l.outBytes)
	}
	l.lastSeq = t.CollSeq
	if acc := a.sliceAt(l, t.PostNs); acc != nil {
		acc.touch(t.PostNs)
		acc.posts++
		acc.seq(t.CollSeq)
	}
}

// drop forgets a send in flight whose landing was never seen.
func (l *link) drop(f *flightWR) {
	l.count(f, -1)
	if f.parked {
		l.parked--
	}
}

// holScan bounds how far a credit record looks for its send.
const holScan = 64

// unpark counts the parked sends of collective seq to rank from now on: the
// rank began it.
func (a *Analyzer) unpark(c *commState, rank int32, seq uint64, ts int64) {
	if int(rank) >= len(c.rankChans) {
		return
	}
	for _, rc := range c.rankChans[rank] {
		for _, l := range rc.in {
			if l.parked == 0 {
				continue
			}
			a.integrate(l, ts)
			for i := 0; i < l.flight.Len(); i++ {
				f := l.flight.At(i)
				if f.parked && f.coll == seq {
					f.parked = false
					l.parked--
					l.count(f, 1)
				}
			}
			l.maxOut = max(l.maxOut, l.outBytes)
		}
	}
}

func (a *Analyzer) sendWC(t *flowtel.Transfer) {
	q := a.qp(t.QPIndex, t.Comm, t.QP, t.Link)
	if q == nil {
		return
	}
	l := q.out
	bytes := t.Bytes
	l.sentBytes += bytes
	l.sentWRs++
	l.lastSeq = t.CollSeq
	failed := t.Failed()
	if t.Link.Path == flowtel.PathBackup {
		l.usedPath1 = true
	}
	if !l.landMode {
		// No landing seen on this link (the receiver's trace may be
		// missing): the send's completion ends its flight.
		a.integrate(l, t.DoneNs)
		seq := t.WrID >> 1
		for l.flight.Len() > 0 && l.flight.Front().seq <= seq {
			f := l.flight.PopFront()
			l.drop(&f)
		}
	}
	if acc := a.sliceAt(l, t.DoneNs); acc != nil {
		acc.touch(t.DoneNs)
		acc.done += bytes
		acc.wrs++
		if failed {
			acc.fails++
		}
		if t.Link.Path == flowtel.PathBackup {
			acc.backup += bytes
		}
		acc.seq(t.CollSeq)
	}
	if failed {
		l.failed++
		if rl := l.comm.life(l.key.dst); rl.failedAt == 0 {
			rl.failedAt = t.DoneNs
		}
	}
	if lat, ok := t.LatencyNs(); ok {
		l.lat.Add(lat)
	}
	if t.Matched {
		a.holCheck(q, t)
		q.recent[q.nRecent%holRecent] = doneSend{wrID: t.WrID, post: t.PostNs, done: t.DoneNs, bytes: bytes, coll: t.CollSeq}
		q.nRecent++
	}
}

// recvWC is a landing: the k-th receive of a QP completes the k-th send of
// its peer's QP.
func (a *Analyzer) recvWC(t *flowtel.Transfer) {
	q := a.qp(t.QPIndex, t.Comm, t.QP, t.Link)
	if q == nil {
		return
	}
	l := q.in
	if t.Failed() {
		// A receive from the peer failed: its connection is gone.
		if rl := l.comm.life(l.key.src); rl.failedAt == 0 {
			rl.failedAt = t.DoneNs
		}
	}
	l.comm.life(l.key.dst).received(t.DoneNs)
	l.landedBytes += t.Bytes
	l.landMode = true
	a.integrate(l, t.DoneNs)
	if acc := a.sliceAt(l, t.DoneNs); acc != nil {
		acc.touch(t.DoneNs)
		acc.landed += t.Bytes
	}
	seq := t.WrID >> 1
	d := landedWR{seq: seq, ts: t.DoneNs, bytes: t.Bytes}
	if t.Matched {
		d.posted = t.PostNs // the receive's post bounds the transfer's start (pair)
	}
	for l.flight.Len() > 0 && l.flight.Front().seq < seq {
		f := l.flight.PopFront()
		l.drop(&f)
	}
	if l.flight.Len() > 0 && l.flight.Front().seq == seq {
		f := l.flight.PopFront()
		l.drop(&f)
		if !t.Failed() {
			a.pair(l, f, d)
		}
		return
	}
	l.landQ.PushBounded(d, maxPairing)
}

// flightOf returns the link's send in flight with send number seq.
func (l *link) flightOf(seq uint64) *flightWR {
	for i := l.flight.Len() - 1; i >= 0 && i >= l.flight.Len()-holScan; i-- {
		if f := l.flight.At(i); f.seq == seq {
			return f
		}
	}
	return nil
}

func (a *Analyzer) creditWait(w *flowtel.CreditWait) {
	q := a.qp(w.QPIndex, w.Comm, w.QP, w.Link)
	if q == nil {
		return
	}
	l := q.out
	l.waitSpans.Began(w)
	f := l.flightOf(w.WrID >> 1)
	if f == nil || f.waiting {
		return
	}
	a.integrate(l, w.FromNs)
	f.waiting = true
	if !f.parked {
		l.waits++
	}
	if acc := a.sliceAt(l, w.FromNs); acc != nil {
		acc.touch(w.FromNs)
		acc.seq(w.CollSeq)
	}
}

// creditEnd ends a send's wait for credit: granted, or its grant lost (the
// send completed, or a later send's credit came).
func (a *Analyzer) creditEnd(w *flowtel.CreditWait) {
	q := a.qp(w.QPIndex, w.Comm, w.QP, w.Link)
	if q == nil {
		return
	}
	l := q.out
	l.creditWaitNs += l.waitSpans.Ended(w)
	seq := w.WrID >> 1
	// Credit comes in posting order: the waiting send is near the front.
	for i := 0; i < l.flight.Len() && i < holScan; i++ {
		f := l.flight.At(i)
		if f.seq != seq {
			continue
		}
		if f.waiting {
			a.integrate(l, w.ToNs)
			f.waiting = false
			if !f.parked {
				l.waits--
			}
		}
		if w.Granted {
			f.grant = w.ToNs
		}
		return
	}
}

func (a *Analyzer) linkEvent(p *flowtel.PathChange) {
	q := a.qp(p.QPIndex, p.Comm, p.QP, p.Link)
	if q == nil {
		return
	}
	l := q.out
	if len(l.events) < maxLinkEvents {
		l.events = append(l.events, linkEvent{ts: p.TsNs, kind: uint8(p.Kind), path: uint8(p.Link.Path), rank: p.Link.Rank, bytes: p.Bytes})
	}
}

const maxLinkEvents = 4096
