package otel

import (
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
	"go.opentelemetry.io/otel/trace"

	"github.com/vccl-go/vccl/flowtel"
)

// p2pBit marks the sequence numbers of point-to-point calls (docs/design.md).
const p2pBit = 1 << 63

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

type commRank struct {
	comm uint32
	rank int32
}

type stepKey struct {
	peer    int32
	channel uint16
	step    uint32
}

// coll is a collective (one rank's view) being assembled.
type coll struct {
	key             collKey
	serial          uint64 // creation order, for eviction
	op, algo, dtype uint8
	begun, ended    int   // coll_begin / coll_end records seen (one per channel part)
	begin, end      int64 // earliest coll_begin, latest coll_end
	first, last     int64 // earliest and latest record of any kind
	bytes, endBytes uint64
	status          flowtel.Status
	lossy, sampled  bool
	closing         bool // every part seen has ended: waiting out the linger
	closedAt        time.Time
	steps           map[stepKey]*stepAgg
	order           []*stepAgg
	events          []flowtel.Record // failover, failback, link_down, link_up
}

// stepAgg is the WR traffic of one (peer, channel, step) of a collective.
type stepAgg struct {
	key                  stepKey
	first, last          int64
	sendBytes, recvBytes uint64
	posts, wcs, errs     int
	maxDepth             uint32
	paths                uint8 // bit per path seen
	lastPath             uint8
	waitOpen             int
	waitSince, waitNs    int64
	events               []flowtel.Record
}

// assembler turns records into spans. Not safe for concurrent use: the
// Exporter serialises calls with its mutex.
type assembler struct {
	cfg      *config
	tracer   trace.Tracer
	comms    map[uint32]commInfo
	defEpoch int64
	channels map[commRank]int // channels seen per communicator and rank
	open     map[collKey]*coll
	closing  map[collKey]*coll
	serial   uint64

	recent    map[collKey]struct{}
	recentBuf [recentKeys]collKey
	recentN   int

	stats Stats
}

func newAssembler(cfg *config, tracer trace.Tracer) *assembler {
	return &assembler{
		cfg: cfg, tracer: tracer,
		comms:    map[uint32]commInfo{},
		defEpoch: epochOf(nil),
		channels: map[commRank]int{},
		open:     map[collKey]*coll{},
		closing:  map[collKey]*coll{},
		recent:   map[collKey]struct{}{},
	}
}

func (a *assembler) addComm(id uint32, ci commInfo) { a.comms[id] = ci }

func (a *assembler) info(comm uint32) commInfo {
	if ci, ok := a.comms[comm]; ok {
		return ci
	}
	return commInfo{size: a.cfg.worldSize, epoch: a.defEpoch}
}

// get returns the open collective of key, creating it unless it was
// exported already (then nil: the record is late).
func (a *assembler) get(key collKey, r *flowtel.Record) *coll {
	if c := a.open[key]; c != nil {
		return c
	}
	if _, ok := a.recent[key]; ok {
		a.stats.Late++
		return nil
	}
	if len(a.open) >= a.cfg.maxOpen {
		a.evictOldest()
	}
	a.serial++
	c := &coll{key: key, serial: a.serial, op: uint8(r.Op), algo: uint8(r.Algo), dtype: uint8(r.Dtype),
		first: r.TsNs, last: r.TsNs, steps: map[stepKey]*stepAgg{}}
	c.sampled = sampled(key.comm, key.seq, a.cfg.wrEvents)
	a.open[key] = c
	return c
}

func (a *assembler) evictOldest() {
	var old *coll
	for _, c := range a.open {
		if old == nil || c.serial < old.serial {
			old = c
		}
	}
	if old != nil {
		a.stats.Evicted++
		a.emit(old)
	}
}

func (a *assembler) add(r *flowtel.Record) {
	a.stats.Records++
	switch r.Kind {
	case flowtel.KindCollBegin:
		c := a.get(collKey{r.Comm, r.Rank, r.CollSeq}, r)
		if c == nil {
			return
		}
		c.touch(r.TsNs)
		if c.begun == 0 || r.TsNs < c.begin {
			c.begin = r.TsNs
		}
		c.begun++
		c.op, c.algo, c.dtype = uint8(r.Op), uint8(r.Algo), uint8(r.Dtype)
		c.bytes += r.Bytes
		c.closing = false
		delete(a.closing, c.key)
		cr := commRank{r.Comm, r.Rank}
		if n := int(r.Channel) + 1; n > a.channels[cr] {
			a.channels[cr] = n
		}
	case flowtel.KindCollEnd:
		c := a.get(collKey{r.Comm, r.Rank, r.CollSeq}, r)
		if c == nil {
			return
		}
		c.touch(r.TsNs)
		if c.ended == 0 || r.TsNs > c.end {
			c.end = r.TsNs
		}
		c.ended++
		c.endBytes += r.Bytes
		if r.Status > c.status {
			c.status = r.Status
		}
		if c.ended >= c.begun {
			if c.begun >= a.channels[commRank{r.Comm, r.Rank}] {
				a.emit(c) // every channel took part: nothing more can come
				return
			}
			c.closing, c.closedAt = true, time.Now()
			a.closing[c.key] = c
		}
	case flowtel.KindWRPost, flowtel.KindWC, flowtel.KindCreditWait, flowtel.KindCreditGrant:
		if r.CollSeq == 0 {
			a.stats.Unattributed++
			return
		}
		c := a.get(collKey{r.Comm, r.Rank, r.CollSeq}, r)
		if c == nil {
			return
		}
		c.touch(r.TsNs)
		a.addWR(c, r)
	case flowtel.KindFailover, flowtel.KindFailback, flowtel.KindLinkDown, flowtel.KindLinkUp:
		c := a.open[collKey{r.Comm, r.Rank, r.CollSeq}]
		if c == nil {
			// Not tagged with an open collective: the latest one of the
			// rank, if any, is the one it hit.
			for _, o := range a.open {
				if o.key.comm == r.Comm && o.key.rank == r.Rank && (c == nil || o.serial > c.serial) {
					c = o
				}
			}
		}
		if c == nil {
			a.stats.Unattributed++
			return
		}
		c.events = append(c.events, *r)
	case flowtel.KindLost:
		a.stats.LostRecords += r.Bytes
		for _, c := range a.open {
			c.lossy = true
		}
	}
}

func (c *coll) touch(ts int64) {
	c.first = min(c.first, ts)
	c.last = max(c.last, ts)
}

func (a *assembler) addWR(c *coll, r *flowtel.Record) {
	k := stepKey{r.Peer, r.Channel, r.Step}
	s := c.steps[k]
	if s == nil {
		s = &stepAgg{key: k, first: r.TsNs, last: r.TsNs}
		c.steps[k] = s
		c.order = append(c.order, s)
	}
	s.first = min(s.first, r.TsNs)
	s.last = max(s.last, r.TsNs)
	s.maxDepth = max(s.maxDepth, r.Depth)
	s.paths |= 1 << min(r.Path, 7)
	s.lastPath = uint8(r.Path)
	switch r.Kind {
	case flowtel.KindWRPost:
		s.posts++
	case flowtel.KindWC:
		s.wcs++
		if r.Status == flowtel.StatusOK {
			if r.IsRecv() {
				s.recvBytes += r.Bytes
			} else {
				s.sendBytes += r.Bytes
			}
		} else if r.Status == flowtel.StatusError {
			s.errs++
		}
	case flowtel.KindCreditWait:
		if s.waitOpen == 0 {
			s.waitSince = r.TsNs
		}
		s.waitOpen++
	case flowtel.KindCreditGrant:
		if s.waitOpen > 0 {
			s.waitOpen--
			if s.waitOpen == 0 {
				s.waitNs += r.TsNs - s.waitSince
			}
		}
	}
	if c.sampled {
		if len(s.events) < a.cfg.maxEvents {
			s.events = append(s.events, *r)
		} else {
			a.stats.EventsCapped++
		}
	}
}

// sweep exports the closing collectives whose linger has passed (all of
// them with force).
func (a *assembler) sweep(now time.Time, force bool) {
	for _, c := range a.closing {
		if force || now.Sub(c.closedAt) >= a.cfg.linger {
			a.emit(c)
		}
	}
}

// closeAll exports every open collective.
func (a *assembler) closeAll() {
	cs := make([]*coll, 0, len(a.open))
	for _, c := range a.open {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(x, y *coll) int { return cmp64(int64(x.serial), int64(y.serial)) })
	for _, c := range cs {
		a.emit(c)
	}
}

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
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
	delete(a.closing, c.key)
	a.remember(c.key)

	ci := a.info(c.key.comm)
	wall := func(ts int64) time.Time { return time.Unix(0, ts+ci.epoch) }
	start, end := c.first, c.last
	if c.begun > 0 {
		start = c.begin
	}
	if c.ended > 0 {
		end = max(c.end, c.last)
	}
	end = max(end, start)
	incomplete := c.begun == 0 || c.ended == 0 || c.ended < c.begun
	bytes := max(c.bytes, c.endBytes)
	op := flowtel.Op(c.op)

	seq := c.key.seq
	attrs := make([]attribute.KeyValue, 0, 16)
	attrs = append(attrs,
		keyComm.String(fmt.Sprintf("%08x", c.key.comm)),
		keyCollSeq.Int64(int64(seq&^p2pBit)),
		keyOp.String(op.String()),
		keyAlgo.String(flowtel.Algorithm(c.algo).String()),
		keyDtype.String(flowtel.Datatype(c.dtype).String()),
		keyBytes.Int64(int64(min(bytes, math.MaxInt64))),
		keyRank.Int(int(c.key.rank)),
		keyChannels.Int(max(c.begun, c.ended)),
	)
	if seq&p2pBit != 0 {
		attrs = append(attrs, keyP2P.Bool(true))
	}
	if ci.size > 0 {
		attrs = append(attrs, keyWorldSize.Int(ci.size))
	}
	if d := end - start; d > 0 && bytes > 0 && !incomplete && c.status == flowtel.StatusOK {
		algbw := float64(bytes) / float64(d) // bytes per ns = GB/s
		attrs = append(attrs, keyAlgBW.Float64(algbw))
		if ci.size > 0 {
			attrs = append(attrs, keyBusBW.Float64(algbw*flowtel.BusBWFactor(op, ci.size)))
		}
	}
	if c.status != flowtel.StatusOK {
		attrs = append(attrs, keyStatus.String(c.status.String()))
	}
	if incomplete {
		attrs = append(attrs, keyIncomplete.Bool(true))
		a.stats.Incomplete++
	}
	if c.lossy {
		attrs = append(attrs, keyLost.Bool(true))
	}

	ctx := withTraceID(context.Background(), traceIDFor(ci.uid, c.key.comm, seq))
	name := op.String()
	ctx, span := a.tracer.Start(ctx, name,
		trace.WithTimestamp(wall(start)),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...))
	if c.status == flowtel.StatusError {
		span.SetStatus(codes.Error, fmt.Sprintf("%s seq %d failed on rank %d", name, seq&^p2pBit, c.key.rank))
	}
	for i := range c.events {
		r := &c.events[i]
		span.AddEvent(r.Kind.String(), trace.WithTimestamp(wall(r.TsNs)), trace.WithAttributes(
			keyPeer.Int(int(r.Peer)), keyChannel.Int(int(r.Channel)), keyPath.Int(int(r.Path)),
			keyQP.Int64(int64(r.QP)), keyStatus.String(r.Status.String())))
		a.stats.Events++
	}

	slices.SortStableFunc(c.order, func(x, y *stepAgg) int { return cmp64(x.first, y.first) })
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
		if s.waitOpen > 0 {
			waitNs += s.last - s.waitSince
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
				keyWRID.Int64(int64(r.WrID & math.MaxInt64)),
				keyQP.Int64(int64(r.QP)),
				keyDir.String(dirOf(r)),
				keyBytes.Int64(int64(min(r.Bytes, math.MaxInt64))),
				keyDepth.Int64(int64(r.Depth)),
				keyPath.Int(int(r.Path)),
			}
			if r.Status != flowtel.StatusOK {
				ea = append(ea, keyStatus.String(r.Status.String()))
			}
			ss.AddEvent(r.Kind.String(), trace.WithTimestamp(wall(r.TsNs)), trace.WithAttributes(ea...))
			a.stats.Events++
		}
		ss.End(trace.WithTimestamp(wall(s.last)))
		a.stats.Steps++
	}
	span.End(trace.WithTimestamp(wall(end)))
	a.stats.Collectives++
}

func dirOf(r *flowtel.Record) string {
	if r.Kind == flowtel.KindCreditWait || r.Kind == flowtel.KindCreditGrant || !r.IsRecv() {
		return "send"
	}
	return "recv"
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
