package otel

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/vccl-go/vccl/flowtel"
)

// recentKeys is how many exported collectives are remembered, so that late
// records for them are dropped instead of opening a new collective.
const recentKeys = 4096

type commInfo struct {
	size  int
	uid   string
	epoch int64 // add to a record time for Unix ns
}

type collKey struct {
	comm uint32
	rank int32
	seq  uint64
}

type stepKey struct {
	peer    int32
	channel uint16
	step    uint32
}

// coll is a collective (one rank's view) being assembled.
type coll struct {
	key         collKey
	call        flowtel.Call // as the fold reported it (Begun 0: its begin was not seen)
	first, last int64        // earliest and latest event of any kind
	lossy       bool
	sampled     bool
	exported    bool
	steps       map[stepKey]*stepAgg
	order       []*stepAgg
	events      []flowtel.PathChange
}

// stepAgg is the WR traffic of one (peer, channel, step) of a collective.
type stepAgg struct {
	key                  stepKey
	first, last          int64
	sendBytes, recvBytes uint64
	posts, wcs, errs     int
	maxDepth             uint32
	paths                uint8 // bit per path seen
	lastPath             flowtel.Path
	waits                *flowtel.WaitSpans // nil until a send waits for credit
	waitNs               int64
	events               []wrEvent
}

// wrEvent is a WR's post, completion, credit wait or grant, kept as a span
// event of its step for sampled collectives.
type wrEvent struct {
	kind   flowtel.Kind
	ts     int64
	wrID   uint64
	qp     uint32
	dir    flowtel.Dir
	bytes  uint64
	depth  uint32
	path   flowtel.Path
	status flowtel.Status
}

// assembler turns records into spans: a view over flowtel's fold, whose
// events it gathers per collective until the collective's end. Not safe for
// concurrent use: the Exporter serialises calls with its mutex.
type assembler struct {
	flowtel.NopHandler
	cfg      *config
	tracer   trace.Tracer
	parents  *parents
	fold     *flowtel.Fold
	comms    map[uint32]commInfo
	defEpoch int64
	open     map[collKey]*coll
	order    []*coll // open collectives by creation (exported ones are skipped)

	recent    map[collKey]struct{}
	recentBuf [recentKeys]collKey
	recentN   int

	stats Stats
}

func newAssembler(cfg *config, tracer trace.Tracer, parents *parents) *assembler {
	a := &assembler{
		cfg: cfg, tracer: tracer, parents: parents,
		comms:    map[uint32]commInfo{},
		defEpoch: epochOf(nil),
		open:     map[collKey]*coll{},
		recent:   map[collKey]struct{}{},
	}
	a.fold = flowtel.NewFold(a, flowtel.FoldConfig{GapNs: -1, MaxOpenCalls: cfg.maxOpen})
	return a
}

func (a *assembler) addComm(id uint32, ci commInfo) { a.comms[id] = ci }

func (a *assembler) info(comm uint32) commInfo {
	if ci, ok := a.comms[comm]; ok {
		return ci
	}
	return commInfo{size: a.cfg.worldSize, epoch: a.defEpoch}
}

func (a *assembler) add(r *flowtel.Record) {
	a.stats.Records++
	a.fold.AddRecord(r)
}

// get returns the open collective of key, creating it unless it was
// exported already (then nil: the event is late).
func (a *assembler) get(key collKey, ts int64) *coll {
	if c := a.open[key]; c != nil {
		c.first, c.last = min(c.first, ts), max(c.last, ts)
		return c
	}
	if _, ok := a.recent[key]; ok {
		a.stats.Late++
		return nil
	}
	for len(a.open) >= a.cfg.maxOpen {
		a.evictOldest()
	}
	c := &coll{key: key, first: ts, last: ts, steps: map[stepKey]*stepAgg{}}
	c.call = flowtel.Call{Comm: key.comm, Rank: key.rank, Seq: key.seq}
	c.sampled = sampled(key.comm, key.seq, a.cfg.wrEvents)
	a.open[key] = c
	a.order = append(a.order, c)
	return c
}

func (a *assembler) evictOldest() {
	for len(a.order) > 0 {
		c := a.order[0]
		a.order = a.order[1:]
		if !c.exported {
			a.stats.Evicted++
			a.emit(c)
			return
		}
	}
}

func (a *assembler) CallBegan(call *flowtel.Call) {
	if c := a.get(collKey{call.Comm, call.Rank, call.Seq}, call.BeginNs); c != nil {
		c.call = *call
	}
}

func (a *assembler) CallEnded(call *flowtel.Call) {
	k := collKey{call.Comm, call.Rank, call.Seq}
	c := a.get(k, call.BeginNs)
	if c == nil {
		return
	}
	c.call = *call
	if call.EndNs > 0 {
		c.last = max(c.last, call.EndNs)
	}
	a.emit(c)
}

// step returns the step of an event of collective seq, or nil when the event
// has no open collective.
func (a *assembler) step(comm uint32, link flowtel.LinkKey, seq uint64, step uint32, ts int64) (*coll, *stepAgg) {
	if seq == 0 {
		a.stats.Unattributed++
		return nil, nil
	}
	c := a.get(collKey{comm, link.Rank, seq}, ts)
	if c == nil {
		return nil, nil
	}
	k := stepKey{link.Peer, link.Channel, step}
	s := c.steps[k]
	if s == nil {
		s = &stepAgg{key: k, first: ts, last: ts}
		c.steps[k] = s
		c.order = append(c.order, s)
	}
	s.first, s.last = min(s.first, ts), max(s.last, ts)
	s.paths |= 1 << min(link.Path, 7)
	s.lastPath = link.Path
	return c, s
}

func (a *assembler) event(c *coll, s *stepAgg, e wrEvent) {
	if !c.sampled {
		return
	}
	if len(s.events) < a.cfg.maxEvents {
		s.events = append(s.events, e)
	} else {
		a.stats.EventsCapped++
	}
}

func (a *assembler) Posted(t *flowtel.Transfer) {
	c, s := a.step(t.Comm, t.Link, t.CollSeq, t.Step, t.PostNs)
	if s == nil {
		return
	}
	s.posts++
	s.maxDepth = max(s.maxDepth, t.Depth)
	a.event(c, s, wrEvent{kind: flowtel.KindWRPost, ts: t.PostNs, wrID: t.WrID, qp: t.QP, dir: t.Link.Dir, bytes: t.Bytes, depth: t.Depth, path: t.Link.Path})
}

func (a *assembler) Completed(t *flowtel.Transfer) {
	c, s := a.step(t.Comm, t.Link, t.CollSeq, t.Step, t.DoneNs)
	if s == nil {
		return
	}
	s.wcs++
	s.maxDepth = max(s.maxDepth, t.Depth)
	switch {
	case t.Status == flowtel.StatusOK && t.Link.Dir == flowtel.DirRecv:
		s.recvBytes += t.Bytes
	case t.Status == flowtel.StatusOK:
		s.sendBytes += t.Bytes
	case t.Status == flowtel.StatusError:
		s.errs++
	}
	a.event(c, s, wrEvent{kind: flowtel.KindWC, ts: t.DoneNs, wrID: t.WrID, qp: t.QP, dir: t.Link.Dir, bytes: t.Bytes, depth: t.Depth, path: t.Link.Path, status: t.Status})
}

func (a *assembler) WaitBegan(w *flowtel.CreditWait) {
	c, s := a.step(w.Comm, w.Link, w.CollSeq, w.Step, w.FromNs)
	if s == nil {
		return
	}
	if s.waits == nil {
		s.waits = flowtel.NewWaitSpans(0)
	}
	s.waits.Began(w)
	a.event(c, s, wrEvent{kind: flowtel.KindCreditWait, ts: w.FromNs, wrID: w.WrID, qp: w.QP, bytes: w.Bytes, depth: w.Depth, path: w.Link.Path})
}

func (a *assembler) WaitEnded(w *flowtel.CreditWait) {
	c := a.open[collKey{w.Comm, w.Link.Rank, w.CollSeq}]
	if c == nil {
		return
	}
	s := c.steps[stepKey{w.Link.Peer, w.Link.Channel, w.Step}]
	if s == nil || s.waits == nil {
		return
	}
	s.waitNs += s.waits.Ended(w)
	if w.Granted {
		c.last = max(c.last, w.ToNs)
		s.last = max(s.last, w.ToNs)
		a.event(c, s, wrEvent{kind: flowtel.KindCreditGrant, ts: w.ToNs, wrID: w.WrID, qp: w.QP, bytes: w.Bytes, depth: w.Depth, path: w.Link.Path})
	}
}

func (a *assembler) PathChanged(p *flowtel.PathChange) {
	c := a.open[collKey{p.Comm, p.Link.Rank, p.CollSeq}]
	if c == nil {
		// Not tagged with an open collective: the latest one of the
		// rank, if any, is the one it hit.
		for i := len(a.order) - 1; i >= 0; i-- {
			if o := a.order[i]; !o.exported && o.key.comm == p.Comm && o.key.rank == p.Link.Rank {
				c = o
				break
			}
		}
	}
	if c == nil {
		a.stats.Unattributed++
		return
	}
	c.events = append(c.events, *p)
}

func (a *assembler) Lost(x *flowtel.Lost) {
	a.stats.LostRecords += x.Records
	for _, c := range a.open {
		c.lossy = true
	}
}

// closeAll ends the fold's open calls and exports every open collective,
// oldest first.
func (a *assembler) closeAll() {
	a.fold.Finish()
	for len(a.order) > 0 {
		a.evictOldest()
	}
}

func (a *assembler) remember(k collKey) {
	if a.recentN >= recentKeys {
		delete(a.recent, a.recentBuf[a.recentN%recentKeys])
	}
	a.recentBuf[a.recentN%recentKeys] = k
	a.recentN++
	a.recent[k] = struct{}{}
}

// emit ends the spans of c and forgets it.
func (a *assembler) emit(c *coll) {
	delete(a.open, c.key)
	c.exported = true
	a.remember(c.key)
	for len(a.order) > 0 && a.order[0].exported {
		a.order = a.order[1:]
	}

	ci := a.info(c.key.comm)
	wall := func(ts int64) time.Time { return time.Unix(0, ts+ci.epoch) }
	call := &c.call
	start, end := c.first, c.last
	if call.Begun > 0 {
		start = call.BeginNs
	}
	if call.Ended > 0 {
		end = max(call.EndNs, c.last)
	}
	end = max(end, start)
	incomplete := !call.Complete
	bytes := call.Bytes
	op := call.Op

	seq := c.key.seq
	attrs := make([]attribute.KeyValue, 0, 16)
	attrs = append(attrs,
		keyComm.String(flowtel.JobID(c.key.comm)),
		keyCollSeq.Int64(int64(seq&^flowtel.SeqP2P)),
		keyOp.String(op.String()),
		keyAlgo.String(call.Algo.String()),
		keyDtype.String(call.Dtype.String()),
		keyBytes.Int64(int64(min(bytes, math.MaxInt64))),
		keyRank.Int(int(c.key.rank)),
		keyChannels.Int(max(call.Begun, call.Ended)),
	)
	if call.P2P() {
		attrs = append(attrs, keyP2P.Bool(true))
	}
	if ci.size > 0 {
		attrs = append(attrs, keyWorldSize.Int(ci.size))
	}
	if algbw := call.AlgBW(); algbw > 0 {
		attrs = append(attrs, keyAlgBW.Float64(algbw/1e9)) // GB/s
		if ci.size > 0 {
			attrs = append(attrs, keyBusBW.Float64(call.BusBW(ci.size)/1e9))
		}
	}
	if call.Status != flowtel.StatusOK {
		attrs = append(attrs, keyStatus.String(call.Status.String()), semconv.ErrorTypeKey.String(call.Status.String()))
	}
	if incomplete {
		attrs = append(attrs, keyIncomplete.Bool(true))
		a.stats.Incomplete++
	}
	if c.lossy {
		attrs = append(attrs, keyLost.Bool(true))
	}

	// Under the caller's span when the call had one (CallStarted), else a
	// root in the trace every rank's span of this collective shares.
	ctx := withTraceID(context.Background(), traceIDFor(ci.uid, c.key.comm, seq))
	if parent, ok := a.parents.take(c.key); ok {
		ctx = trace.ContextWithSpanContext(context.Background(), parent)
	}
	name := op.String()
	ctx, span := a.tracer.Start(ctx, name,
		trace.WithTimestamp(wall(start)),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...))
	if call.Status == flowtel.StatusError {
		span.SetStatus(codes.Error, fmt.Sprintf("%s seq %d failed on rank %d", name, seq&^flowtel.SeqP2P, c.key.rank))
	}
	for i := range c.events {
		r := &c.events[i]
		span.AddEvent(r.Kind.String(), trace.WithTimestamp(wall(r.TsNs)), trace.WithAttributes(
			keyPeer.Int(int(r.Link.Peer)), keyChannel.Int(int(r.Link.Channel)), keyPath.Int(int(r.Link.Path)),
			keyQP.Int64(int64(r.QP)), keyStatus.String(r.Status.String())))
		a.stats.Events++
	}

	slices.SortStableFunc(c.order, func(x, y *stepAgg) int { return cmp.Compare(x.first, y.first) })
	stepName := name + ".step"
	for _, s := range c.order {
		sa := []attribute.KeyValue{
			keyRank.Int(int(c.key.rank)),
			keyPeer.Int(int(s.key.peer)),
			keyChannel.Int(int(s.key.channel)),
			keyStep.Int64(int64(s.key.step)),
			keyPath.Int(int(s.lastPath)),
			keySendBytes.Int64(int64(min(s.sendBytes, math.MaxInt64))),
			keyRecvBytes.Int64(int64(min(s.recvBytes, math.MaxInt64))),
			keyWRs.Int(s.posts),
			keyCompletions.Int(s.wcs),
			keyMaxDepth.Int64(int64(s.maxDepth)),
		}
		waitNs := s.waitNs
		if s.waits != nil {
			if from, open := s.waits.Open(); open {
				waitNs += max(s.last-from, 0)
			}
		}
		if waitNs > 0 {
			sa = append(sa, keyCreditWait.Int64(waitNs))
		}
		if s.errs > 0 {
			sa = append(sa, keyWRErrors.Int(s.errs))
		}
		if s.paths&(s.paths-1) != 0 {
			sa = append(sa, keyFailedOver.Bool(true))
		}
		_, ss := a.tracer.Start(ctx, stepName, trace.WithTimestamp(wall(s.first)),
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(sa...))
		if s.errs > 0 {
			ss.SetStatus(codes.Error, fmt.Sprintf("%d WRs failed", s.errs))
		}
		for i := range s.events {
			r := &s.events[i]
			ea := []attribute.KeyValue{
				keyWRID.Int64(int64(r.wrID & math.MaxInt64)),
				keyQP.Int64(int64(r.qp)),
				keyDir.String(r.dir.String()),
				keyBytes.Int64(int64(min(r.bytes, math.MaxInt64))),
				keyDepth.Int64(int64(r.depth)),
				keyPath.Int(int(r.path)),
			}
			if r.status != flowtel.StatusOK {
				ea = append(ea, keyStatus.String(r.status.String()))
			}
			ss.AddEvent(r.kind.String(), trace.WithTimestamp(wall(r.ts)), trace.WithAttributes(ea...))
			a.stats.Events++
		}
		ss.End(trace.WithTimestamp(wall(s.last)))
		a.stats.Steps++
	}
	span.End(trace.WithTimestamp(wall(end)))
	a.stats.Collectives++
}

// sampled decides, the same way on every rank, whether the collective
// (comm, seq) gets WR events.
func sampled(comm uint32, seq uint64, rate float64) bool {
	switch {
	case rate <= 0:
		return false
	case rate >= 1:
		return true
	}
	h := splitmix64(uint64(comm)<<32 ^ seq ^ 0x9e3779b97f4a7c15)
	return float64(h>>11)/(1<<53) < rate
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Trace ids -----------------------------------------------------------------

// traceIDFor derives the trace id of collective seq of comm: FNV-1a 128 of
// the communicator's unique id (empty when not registered), its 32-bit id
// and the sequence number.
func traceIDFor(uid string, comm uint32, seq uint64) trace.TraceID {
	h := fnv.New128a()
	h.Write([]byte("vccl/"))
	h.Write([]byte(uid))
	var b [12]byte
	binary.LittleEndian.PutUint32(b[:4], comm)
	binary.LittleEndian.PutUint64(b[4:], seq)
	h.Write(b[:])
	var id trace.TraceID
	h.Sum(id[:0])
	if !id.IsValid() {
		id[15] = 1
	}
	return id
}

type traceIDKey struct{}

func withTraceID(ctx context.Context, id trace.TraceID) context.Context {
	return context.WithValue(ctx, traceIDKey{}, id)
}

// idGenerator gives root spans the trace id their context carries (see
// withTraceID) and random span ids.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	tid, ok := ctx.Value(traceIDKey{}).(trace.TraceID)
	if !ok || !tid.IsValid() {
		binary.LittleEndian.PutUint64(tid[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, newSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.LittleEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
