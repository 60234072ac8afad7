package ce

import (
	"context"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// Queue pair ids on a rank: 0 is the local compute queue (reduction
// kernels, peer = the rank itself); transfers with peer p use 1+2p for the
// first copy stream (ce) and 2+2p for the second (gat), so each QP completes
// in order, as the Window's FIFO pairing expects.
func qpCompute() uint32        { return 0 }
func qpCE(peer int) uint32     { return uint32(1 + 2*peer) }
func qpGather(peer int) uint32 { return uint32(2 + 2*peer) }
func (g *Group) qpFor(s cuda.Stream, r *rank, peer int) uint32 {
	if s == r.gat {
		return qpGather(peer)
	}
	return qpCE(peer)
}

// tag says which operation and step a work request belongs to.
type tag struct {
	seq   uint64
	step  uint32
	op    collective.Op
	dtype collective.Datatype
}

// wr is one side of a work request.
type wr struct {
	r     *rank
	peer  int
	qp    uint32
	recv  bool
	bytes int
	id    uint64
}

// wrGroup is the work requests one completion event finishes.
type wrGroup struct {
	ev     cuda.Event
	tag    tag
	n      int
	wrs    [2]wr
	owner  *rank // whose stream the event is on
	si     int   // which stream (rank.fly index)
	postTs int64 // when the request that queued the work started (flowtel.Monotonic)
}

func (g *Group) stamp(w *wr, kind flowtel.Kind, t *tag, ts int64) {
	q := w.r.qps[w.qp]
	rec := flowtel.Record{
		TsNs: ts, Kind: kind, Status: flowtel.StatusOK,
		Rank: int32(w.r.global), Peer: int32(w.peer), QP: w.qp, Comm: g.cfg.Comm,
		CollSeq: t.seq, Step: t.step, Op: uint8(t.op), Algo: uint8(collective.AlgoDirect), Dtype: uint8(t.dtype),
		WrID: w.id, Bytes: uint64(w.bytes), Depth: uint32(max(q.depth, 0)),
	}
	w.r.rec.Record(&rec)
}

// post writes the wr_post records of work just queued on stream s of rank
// owner and records a completion event after it. Telemetry off: nothing.
// The proxy's context is owner's.
func (g *Group) post(owner *rank, s cuda.Stream, t tag, wrs ...wr) error {
	_, err := g.mark(owner, s, 0, t, wrs...)
	return err
}

// mark records an event on s after the work just queued there and returns
// it, for other streams to wait on. With telemetry off that is fixed (none
// when fixed is 0); with telemetry on it is a pooled event that also
// completes the given work requests: one event serves both the ordering
// and the telemetry. Here the proxy only takes the time, the event and a
// group from the free lists and hands the group over; the next sweep
// (pollTelemetry) writes the wr_post records, in the order the groups were
// posted, and the wc records once the event has fired, so records cost
// nothing on the path that queues work.
func (g *Group) mark(owner *rank, s cuda.Stream, fixed cuda.Event, t tag, wrs ...wr) (cuda.Event, error) {
	if !g.tel {
		if fixed == 0 {
			return 0, nil
		}
		if g.diag.PooledEvents && len(owner.evFree) > 0 {
			owner.rot++
			fixed = owner.evFree[owner.rot%len(owner.evFree)]
		}
		return fixed, fixed.Record(s)
	}
	var grp *wrGroup
	var ev cuda.Event
	g.telMu.Lock()
	if n := len(owner.grpFree); n > 0 {
		grp = owner.grpFree[n-1]
		owner.grpFree = owner.grpFree[:n-1]
	}
	if n := len(owner.evFree); n > 0 {
		ev = owner.evFree[n-1]
		owner.evFree = owner.evFree[:n-1]
	}
	g.telMu.Unlock()
	if grp == nil {
		grp = &wrGroup{}
	}
	if ev == 0 {
		var err error
		if ev, err = cuda.NewEvent(cuda.EventDisableTiming); err != nil {
			return 0, err
		}
	}
	grp.tag, grp.owner, grp.si, grp.ev = t, owner, owner.streamIndex(s), ev
	grp.n = copy(grp.wrs[:], wrs)
	grp.postTs = g.reqTs // the request's start: no clock read per mark
	if err := ev.Record(s); err != nil {
		return 0, err
	}
	// Handed over only once recorded: a query of an event not yet
	// recorded would say it had fired.
	g.telMu.Lock()
	g.posted = append(g.posted, grp)
	g.telMu.Unlock()
	g.inflight.Add(1)
	return ev, nil
}

// pollTelemetry is one sweep, on the calling thread (the proxy; sweeps are
// serialized by sweepMu, so one goroutine at a time writes records). It writes the
// wr_post records of the groups posted since the last sweep, then the wc
// records of those whose events have fired. Each stream completes in
// order: a stream with several groups pending is asked first about its
// newest (when that one has fired, so have all, and one query retires them
// all), then from its oldest on, stopping at the first that has not fired.
// use makes a rank's context current on the calling thread.
func (g *Group) pollTelemetry(use func(*rank) error) {
	g.sweepMu.Lock()
	defer g.sweepMu.Unlock()
	g.telMu.Lock()
	batch := g.posted
	g.posted = g.postedSpare[:0]
	g.telMu.Unlock()
	// postTs is on the host's monotonic clock; records are on each
	// recorder's (shifted onto the job's time base): one offset per rank
	// and sweep.
	var offs [8]int64
	var offOK [8]bool
	for _, grp := range batch {
		off := int64(0)
		if ri := grp.owner.idx; ri < len(offs) {
			if !offOK[ri] {
				offs[ri], offOK[ri] = grp.owner.rec.Now()-flowtel.Monotonic(), true
			}
			off = offs[ri]
		} else {
			off = grp.owner.rec.Now() - flowtel.Monotonic()
		}
		for i := 0; i < grp.n; i++ {
			w := &grp.wrs[i]
			q := w.r.qps[w.qp]
			if q == nil {
				q = &qpState{}
				w.r.qps[w.qp] = q
			}
			if w.recv {
				w.id = flowtel.WRID(q.recvSeq, true)
				q.recvSeq++
			} else {
				w.id = flowtel.WRID(q.sendSeq, false)
				q.sendSeq++
			}
			q.depth++
			if !g.diag.NoRecords {
				g.stamp(w, flowtel.KindWRPost, &grp.tag, grp.postTs+off)
			}
		}
		r := grp.owner
		r.fly[grp.si] = append(r.fly[grp.si], grp)
		r.nfly++
	}
	clear(batch)
	g.postedSpare = batch[:0]
	var freed []*wrGroup
	for _, r := range g.ranks {
		if r.nfly == 0 {
			continue
		}
		if use(r) != nil {
			continue
		}
		var now int64
		for si := range r.fly {
			q := r.fly[si]
			if len(q) == 0 {
				continue
			}
			upto := 0 // groups known to have completed
			if len(q) > 1 {
				if done, err := q[len(q)-1].ev.Query(); done || err != nil {
					upto = len(q)
				}
			}
			if upto == 0 {
				for upto < len(q) {
					done, err := q[upto].ev.Query()
					if !done && err == nil {
						break
					}
					upto++
				}
			}
			if upto == 0 {
				continue
			}
			if now == 0 {
				now = r.rec.Now()
			}
			for _, grp := range q[:upto] {
				for i := 0; i < grp.n; i++ {
					w := &grp.wrs[i]
					w.r.qps[w.qp].depth--
					if !g.diag.NoRecords {
						g.stamp(w, flowtel.KindWC, &grp.tag, now)
					}
				}
				freed = append(freed, grp)
			}
			clear(q[:upto])
			r.nfly -= upto
			if upto == len(q) {
				r.fly[si] = q[:0] // reuse the backing array
			} else {
				r.fly[si] = q[upto:]
			}
		}
	}
	if len(freed) > 0 {
		g.telMu.Lock()
		for _, grp := range freed {
			r := grp.owner
			r.evFree = append(r.evFree, grp.ev)
			*grp = wrGroup{}
			r.grpFree = append(r.grpFree, grp)
		}
		g.telMu.Unlock()
		g.inflight.Add(-int64(len(freed)))
	}
	g.lastPoll.Store(flowtel.Monotonic())
}

// maybePoll sweeps when the proxy's last request started PollEvery ago
// and PollEvery has passed since the last sweep, or when
// PollBusy has passed since the last sweep.
func (g *Group) maybePoll(now int64) {
	since := now - g.lastPoll.Load()
	if since >= int64(g.cfg.PollBusy) || (since >= int64(g.cfg.PollEvery) && now-g.reqTs >= int64(g.cfg.PollEvery)) {
		g.pollTelemetry(g.use)
	}
}

// Diagnostics switch parts of telemetry off or on, to measure what each
// costs (vccl-gpubench's telemetry sweep); not for normal use.
type Diagnostics struct {
	// NoRecords keeps the completion events and their polling but writes
	// no records.
	NoRecords bool
	// PooledEvents orders operations with the pool's events in rotation,
	// as telemetry does, even with telemetry off (not polled; needs a
	// Collector in the Config, which makes the pool).
	PooledEvents bool
}

// SetDiagnostics sets the diagnostics for later operations, once the queued
// work has drained.
func (g *Group) SetDiagnostics(d Diagnostics) {
	g.Synchronize(context.Background())
	g.do(func() error {
		g.sweepMu.Lock() // the sweeps read diag
		g.diag = d
		g.sweepMu.Unlock()
		return nil
	})
}
