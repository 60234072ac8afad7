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

// tag says which operation and step a work request belongs to.
type tag struct {
	seq   uint64
	step  uint32
	op    collective.Op
	dtype collective.Datatype
}

// wr is one side of a work request.
type wr struct {
	r      *rank
	peer   int
	qp     uint32
	recv   bool
	call   bool // not a transfer: the call's end on its rank's stream (called)
	bytes  int
	id     uint64
	tag    tag
	postTs int64 // when the request that queued it started (flowtel.Monotonic)
}

// wrGroup is the work requests one completion event finishes.
type wrGroup struct {
	ev    cuda.Event
	wrs   []wr
	owner *rank       // whose stream the event is on
	si    int         // which stream (rank.fly index)
	st    cuda.Stream // that stream
}

// stamp writes w's record of kind at ts, through the primitive every
// execution path's records go through (flowtel.WRFields).
func (g *Group) stamp(w *wr, kind flowtel.Kind, ts int64) {
	rec := w.r.rec
	r := rec.Reserve()
	if r == nil {
		return
	}
	q, t := w.r.qps[w.qp], &w.tag
	f := &q.wrf
	f.Seq, f.Step, f.Op, f.Dtype = t.seq, t.step, t.op, t.dtype
	f.Put(r, ts, kind, flowtel.StatusOK, w.id, w.bytes, q.depth)
	rec.Commit()
}

// stampCall writes the coll_begin or coll_end of w, a call's end marker,
// through the primitive every execution path's records go through
// (flowtel.CallFields).
func (g *Group) stampCall(w *wr, kind flowtel.Kind, ts int64) {
	rec := w.r.rec
	r := rec.Reserve()
	if r == nil {
		return
	}
	t, f := &w.tag, &w.r.callf
	f.Seq, f.Bytes, f.Rank, f.Comm, f.Parts = t.seq, uint64(w.bytes), int32(w.r.global), g.cfg.Comm, 1
	f.Op, f.Algo, f.Dtype = t.op, collective.AlgoDirect, t.dtype
	f.Put(r, ts, kind, flowtel.StatusOK)
	rec.Commit()
}

// called marks the end of call t, of bytes (its payload as nccl-tests
// counts it), on rank r's stream, after everything queued for it: the
// call's coll_begin is stamped with the request's start, as its transfers'
// posts are, and its coll_end when the GPU has run the call on r, as its
// transfers' completions are. The proxy's context is r's.
func (g *Group) called(r *rank, t tag, bytes int) error {
	t.step = 0
	return g.post(r, r.user, t, wr{r: r, peer: -1, call: true, bytes: bytes})
}

// post hands the work requests of work just queued on stream s of rank
// owner to telemetry (off: nothing). They join the stream's open group,
// which has no completion event yet: the next sweep (or a mark on the same
// stream) closes it by recording one event after everything queued so
// far, which completes all its requests at once. A busy proxy sweeps only
// every PollBusy, so an event per request would buy no finer wc stamps,
// and recording it was what telemetry cost at 1 MiB; an idle proxy sweeps
// every PollEvery, closing groups as soon as work stops arriving. The
// proxy's context is owner's.
func (g *Group) post(owner *rank, s cuda.Stream, t tag, wrs ...wr) error {
	if !g.tel {
		return nil
	}
	si := owner.streamIndex(s)
	grp := owner.open[si]
	if grp == nil {
		g.telMu.Lock()
		if n := len(owner.grpFree); n > 0 {
			grp = owner.grpFree[n-1]
			owner.grpFree = owner.grpFree[:n-1]
		}
		g.telMu.Unlock()
		if grp == nil {
			grp = &wrGroup{}
		}
		grp.owner, grp.si, grp.st = owner, si, s
		owner.open[si] = grp
		g.inflight.Add(1) // open groups count, so that sweeps run and close them
	}
	for _, w := range wrs {
		w.tag, w.postTs = t, g.reqTs // the request's start: no clock read per request
		grp.wrs = append(grp.wrs, w)
	}
	if len(grp.wrs) >= maxOpen {
		return g.closeOpen(owner, si)
	}
	return nil
}

// maxOpen bounds an open group, so that a long burst still completes in
// pieces.
const maxOpen = 256

// closeOpen records the completion event of owner's open group on stream
// si and hands the group to the sweeps. The proxy's context is owner's.
func (g *Group) closeOpen(owner *rank, si int) error {
	grp := owner.open[si]
	if grp == nil {
		return nil
	}
	owner.open[si] = nil
	var ev cuda.Event
	g.telMu.Lock()
	if n := len(owner.evFree); n > 0 {
		ev = owner.evFree[n-1]
		owner.evFree = owner.evFree[:n-1]
	}
	g.telMu.Unlock()
	if ev == 0 {
		var err error
		if ev, err = cuda.NewEvent(cuda.EventDisableTiming); err != nil {
			return err
		}
	}
	grp.ev = ev
	if err := ev.Record(grp.st); err != nil {
		return err
	}
	// Handed over only once recorded: a query of an event not yet
	// recorded would say it had fired.
	g.telMu.Lock()
	g.posted = append(g.posted, grp)
	g.telMu.Unlock()
	return nil
}

// mark records an event on s after the work just queued there and returns
// it, for other streams to wait on. With telemetry off that is fixed (none
// when fixed is 0); with telemetry on it is a pooled event that also
// completes the given work requests (and the stream's open group): one
// event serves both the ordering and the telemetry. The proxy's context is
// owner's.
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
	si := owner.streamIndex(s)
	if err := g.post(owner, s, t, wrs...); err != nil {
		return 0, err
	}
	grp := owner.open[si]
	if err := g.closeOpen(owner, si); err != nil {
		return 0, err
	}
	if grp == nil { // closed by post at maxOpen: order on a fresh event
		if fixed == 0 {
			return 0, nil
		}
		return fixed, fixed.Record(s)
	}
	return grp.ev, nil
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
	// Close the open groups: one event per stream after what is queued.
	for _, r := range g.ranks {
		for si, grp := range r.open {
			if grp == nil || use(r) != nil {
				continue
			}
			g.closeOpen(r, si)
		}
	}
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
		for i := range grp.wrs {
			w := &grp.wrs[i]
			if w.call {
				if !g.diag.NoRecords {
					g.stampCall(w, flowtel.KindCollBegin, w.postTs+off)
				}
				continue
			}
			q := w.r.qps[w.qp]
			if q == nil {
				q = &qpState{}
				q.wrf.Rank, q.wrf.Peer, q.wrf.QP, q.wrf.Comm, q.wrf.Algo = int32(w.r.global), int32(w.peer), w.qp, g.cfg.Comm, collective.AlgoDirect
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
				g.stamp(w, flowtel.KindWRPost, w.postTs+off)
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
				for i := range grp.wrs {
					w := &grp.wrs[i]
					if w.call {
						if !g.diag.NoRecords {
							g.stampCall(w, flowtel.KindCollEnd, now)
						}
						continue
					}
					w.r.qps[w.qp].depth--
					if !g.diag.NoRecords {
						g.stamp(w, flowtel.KindWC, now)
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
			clear(grp.wrs)
			*grp = wrGroup{wrs: grp.wrs[:0]}
			r.grpFree = append(r.grpFree, grp)
		}
		g.telMu.Unlock()
		g.inflight.Add(-int64(len(freed)))
	}
	g.lastPoll.Store(flowtel.Monotonic())
}

// pollWhileBusy is the sweep of a request that waits for a peer process
// (a mailbox handshake): every PollBusy, as between back-to-back requests.
// The idle rule would sweep in every handshake, where each sweep's event
// queries compete with the request's own driver calls (BENCHMARKS.md has
// its cost at 1 MiB).
func (g *Group) pollWhileBusy(now int64) {
	if now-g.lastPoll.Load() >= int64(g.cfg.PollBusy) {
		g.pollTelemetry(g.use)
	}
}

// maybePoll sweeps when the proxy's last request ended PollEvery ago
// and PollEvery has passed since the last sweep, or when
// PollBusy has passed since the last sweep.
func (g *Group) maybePoll(now int64) {
	since := now - g.lastPoll.Load()
	if since >= int64(g.cfg.PollBusy) || (since >= int64(g.cfg.PollEvery) && now-g.reqEnd >= int64(g.cfg.PollEvery)) {
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
