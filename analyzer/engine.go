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

	qps     map[qpKey]*qpState
	qpCache [qpCacheSize]qpCacheEntry
	links   map[linkKey]*link
	list    []*link // in creation order
	rcs     map[rcKey]*rankChan
	comms   map[uint32]*commState
	lastCm  *commState

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
	findings  []Finding   // findings complete as they are
	hol       map[qpKey]*holAgg
	finished  bool
}

type qpKey struct {
	comm uint32
	rank int32
	qp   uint32
}

const qpCacheSize = 512

type qpCacheEntry struct {
	key qpKey
	q   *qpState
}

// qpState is one queue pair of one rank.
type qpState struct {
	key   qpKey
	peer  int32
	ch    uint16
	out   *link // rank -> peer
	in    *link // peer -> rank
	sends fifo[pendSend]
	maxQ  fifo[aheadWR] // pending sends larger than every later pending one

	lastSendDone int64
	recent       [holRecent]doneSend // the latest completed sends, for naming blockers
	nRecent      int
}

// pendSend is a send posted on a QP and not yet completed there.
type pendSend struct {
	wrID  uint64
	post  int64
	bytes uint64
	coll  uint64
	// The largest send ahead of this one when it was posted (its blocker,
	// should it wait behind it).
	aheadWR    uint64
	aheadBytes uint64
	aheadColl  uint64
	aheadPost  int64
	hasAhead   bool
}

type aheadWR struct {
	wrID  uint64
	bytes uint64
	coll  uint64
	post  int64
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
		qps:   map[qpKey]*qpState{},
		links: map[linkKey]*link{},
		rcs:   map[rcKey]*rankChan{},
		comms: map[uint32]*commState{},
		hol:   map[qpKey]*holAgg{},
	}
	a.seriesW = 1
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
	switch r.Kind {
	case flowtel.KindWRPost:
		if r.WrID&1 == 0 {
			a.sendPost(r)
		} else {
			a.recvPost(r)
		}
	case flowtel.KindWC:
		if r.WrID&1 == 0 {
			a.sendWC(r)
		} else {
			a.recvWC(r)
		}
	case flowtel.KindCreditWait:
		a.creditWait(r)
	case flowtel.KindCreditGrant:
		a.creditGrant(r)
	case flowtel.KindCollBegin:
		a.collBegin(r)
	case flowtel.KindCollEnd:
		a.collEnd(r)
	case flowtel.KindFailover, flowtel.KindFailback, flowtel.KindLinkDown, flowtel.KindLinkUp:
		a.linkEvent(r)
	case flowtel.KindLost:
		a.lost += r.Bytes
	}
}

func validWR(r *flowtel.Record) bool {
	return r.Rank >= 0 && r.Rank < maxRanks && r.Peer >= 0 && r.Peer < maxRanks && r.Peer != r.Rank
}

// qp returns the state of the record's queue pair, or nil for a record that
// names no valid link.
func (a *Analyzer) qp(r *flowtel.Record) *qpState {
	k := qpKey{comm: r.Comm, rank: r.Rank, qp: r.QP}
	h := (uint32(r.QP)*0x9E3779B1 ^ uint32(r.Rank)*0x85EBCA77 ^ r.Comm) % qpCacheSize
	e := &a.qpCache[h]
	if e.q != nil && e.key == k {
		return e.q
	}
	q := a.qps[k]
	if q == nil {
		if !validWR(r) {
			return nil
		}
		q = &qpState{key: k, peer: r.Peer, ch: r.Channel}
		q.out = a.link(linkKey{comm: r.Comm, src: r.Rank, dst: r.Peer, ch: r.Channel})
		q.in = a.link(linkKey{comm: r.Comm, src: r.Peer, dst: r.Rank, ch: r.Channel})
		a.qps[k] = q
	}
	e.key, e.q = k, q
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
	if int(l.key.dst) < len(cs.ranks) && cs.ranks[l.key.dst].nBegin > 0 {
		l.arrivedSeq = seq // a rank that began stays begun
		return true
	}
	return false
}

func (a *Analyzer) sendPost(r *flowtel.Record) {
	q := a.qp(r)
	if q == nil {
		return
	}
	l := q.out
	a.integrate(l, r.TsNs)
	// The sender's queue, for head-of-line blocking: the largest send
	// still ahead of this one names its blocker.
	p := pendSend{wrID: r.WrID, post: r.TsNs, bytes: r.Bytes, coll: r.CollSeq}
	if q.maxQ.n > 0 {
		b := q.maxQ.front()
		p.aheadWR, p.aheadBytes, p.aheadColl, p.aheadPost, p.hasAhead = b.wrID, b.bytes, b.coll, b.post, true
	}
	// maxQ: the pending sends that are larger than every later one, so
	// its front is the largest pending.
	for q.maxQ.n > 0 && q.maxQ.back().bytes <= r.Bytes {
		q.maxQ.popBack()
	}
	q.maxQ.pushBounded(aheadWR{wrID: r.WrID, bytes: r.Bytes, coll: r.CollSeq, post: r.TsNs}, maxPendingSends)
	q.sends.pushBounded(p, maxPendingSends)
	// The link: in flight until it lands at the receiver. A send to a rank
	// that has not begun its collective waits for that rank to arrive, not
	// for the link: it is parked until the rank begins.
	seq := r.WrID >> 1
	for l.landQ.n > 0 && l.landQ.front().seq < seq {
		l.landQ.popFront()
	}
	if l.landQ.n > 0 && l.landQ.front().seq == seq {
		// Landed already (the receiver's record came first).
		d := l.landQ.popFront()
		a.pair(l, flightWR{seq: seq, post: r.TsNs, bytes: r.Bytes, coll: r.CollSeq}, d)
	} else {
		f := flightWR{seq: seq, post: r.TsNs, bytes: r.Bytes, coll: r.CollSeq, parked: !a.arrived(l, r.CollSeq)}
		if l.flight.n >= maxPendingSends {
			old := l.flight.popFront()
			l.drop(&old)
		}
		l.flight.push(f)
		if f.parked {
			l.parked++
		}
		l.count(&f, 1)
		l.maxOut = max(l.maxOut, l.outBytes)
	}
	l.lastSeq = r.CollSeq
	if acc := a.sliceAt(l, r.TsNs); acc != nil {
		acc.touch(r.TsNs)
		acc.posts++
		acc.seq(r.CollSeq)
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

// unpark counts the parked sends of collective seq to rank (on channel ch)
// from now on: the rank began it.
func (a *Analyzer) unpark(c *commState, rank int32, ch uint16, seq uint64, ts int64) {
	rc := a.rcs[rcKey{comm: c.id, rank: rank, ch: ch}]
	if rc == nil {
		return
	}
	for _, l := range rc.in {
		if l.parked == 0 {
			continue
		}
		a.integrate(l, ts)
		for i := 0; i < l.flight.n; i++ {
			f := l.flight.at(i)
			if f.parked && f.coll == seq {
				f.parked = false
				l.parked--
				l.count(f, 1)
			}
		}
		l.maxOut = max(l.maxOut, l.outBytes)
	}
}

func (a *Analyzer) recvPost(r *flowtel.Record) {
	// Receives are timed by their completion (landing); their posts bound
	// the transfers' start (pair).
	if q := a.qp(r); q != nil {
		q.in.recvPosts.pushBounded(landedWR{seq: r.WrID >> 1, posted: r.TsNs}, maxPairing)
	}
}

func (a *Analyzer) sendWC(r *flowtel.Record) {
	q := a.qp(r)
	if q == nil {
		return
	}
	l := q.out
	// The sender's queue: posts older than this completion lost theirs.
	for q.sends.n > 0 && q.sends.front().wrID < r.WrID {
		q.sends.popFront()
	}
	for q.maxQ.n > 0 && q.maxQ.front().wrID <= r.WrID {
		q.maxQ.popFront()
	}
	bytes := r.Bytes
	var p pendSend
	matched := q.sends.n > 0 && q.sends.front().wrID == r.WrID
	if matched {
		p = q.sends.popFront()
		if bytes == 0 {
			bytes = p.bytes
		}
	}
	l.sentBytes += bytes
	l.sentWRs++
	l.lastSeq = r.CollSeq
	failed := r.Status == flowtel.StatusError || r.Status == flowtel.StatusFlushed
	if r.Path == 1 {
		l.usedPath1 = true
	}
	if !l.landMode {
		// No landing seen on this link (the receiver's trace may be
		// missing): the send's completion ends its flight.
		a.integrate(l, r.TsNs)
		seq := r.WrID >> 1
		for l.flight.n > 0 && l.flight.front().seq <= seq {
			f := l.flight.popFront()
			l.drop(&f)
		}
	}
	if acc := a.sliceAt(l, r.TsNs); acc != nil {
		acc.touch(r.TsNs)
		acc.done += bytes
		acc.wrs++
		if failed {
			acc.fails++
		}
		if r.Path == 1 {
			acc.backup += bytes
		}
		acc.seq(r.CollSeq)
	}
	if failed {
		l.failed++
	}
	if matched {
		a.holCheck(q, &p, r.TsNs)
		q.recent[q.nRecent%holRecent] = doneSend{wrID: p.wrID, post: p.post, done: r.TsNs, bytes: bytes, coll: p.coll}
		q.nRecent++
	}
	q.lastSendDone = max(q.lastSendDone, r.TsNs)
}

// recvWC is a landing: the k-th receive of a QP completes the k-th send of
// its peer's QP.
func (a *Analyzer) recvWC(r *flowtel.Record) {
	q := a.qp(r)
	if q == nil {
		return
	}
	l := q.in
	l.landedBytes += r.Bytes
	l.landMode = true
	a.integrate(l, r.TsNs)
	if acc := a.sliceAt(l, r.TsNs); acc != nil {
		acc.touch(r.TsNs)
		acc.landed += r.Bytes
	}
	seq := r.WrID >> 1
	d := landedWR{seq: seq, ts: r.TsNs, bytes: r.Bytes}
	for l.recvPosts.n > 0 && l.recvPosts.front().seq < seq {
		l.recvPosts.popFront()
	}
	if l.recvPosts.n > 0 && l.recvPosts.front().seq == seq {
		d.posted = l.recvPosts.popFront().posted
	}
	for l.flight.n > 0 && l.flight.front().seq < seq {
		f := l.flight.popFront()
		l.drop(&f)
	}
	if l.flight.n > 0 && l.flight.front().seq == seq {
		f := l.flight.popFront()
		l.drop(&f)
		if r.Status == flowtel.StatusOK || r.Status == flowtel.StatusRetransmitted {
			a.pair(l, f, d)
		}
		return
	}
	l.landQ.pushBounded(d, maxPairing)
}

// flightOf returns the link's send in flight with send number seq.
func (l *link) flightOf(seq uint64) *flightWR {
	for i := l.flight.n - 1; i >= 0 && i >= l.flight.n-holScan; i-- {
		if f := l.flight.at(i); f.seq == seq {
			return f
		}
	}
	return nil
}

func (a *Analyzer) creditWait(r *flowtel.Record) {
	q := a.qp(r)
	if q == nil {
		return
	}
	l := q.out
	f := l.flightOf(r.WrID >> 1)
	if f == nil || f.waiting {
		return
	}
	a.integrate(l, r.TsNs)
	f.waiting = true
	if !f.parked {
		l.waits++
	}
	if acc := a.sliceAt(l, r.TsNs); acc != nil {
		acc.touch(r.TsNs)
		acc.seq(r.CollSeq)
	}
}

func (a *Analyzer) creditGrant(r *flowtel.Record) {
	q := a.qp(r)
	if q == nil {
		return
	}
	l := q.out
	seq := r.WrID >> 1
	// Credit comes in posting order: the waiting send is near the front.
	for i := 0; i < l.flight.n && i < holScan; i++ {
		f := l.flight.at(i)
		if f.seq != seq {
			continue
		}
		if f.waiting {
			a.integrate(l, r.TsNs)
			f.waiting = false
			if !f.parked {
				l.waits--
			}
		}
		f.grant = r.TsNs
		return
	}
}

func (a *Analyzer) linkEvent(r *flowtel.Record) {
	q := a.qp(r)
	if q == nil {
		return
	}
	l := q.out
	if len(l.events) < maxLinkEvents {
		l.events = append(l.events, linkEvent{ts: r.TsNs, kind: uint8(r.Kind), path: uint8(r.Path), rank: r.Rank, bytes: r.Bytes})
	}
}

const maxLinkEvents = 4096
