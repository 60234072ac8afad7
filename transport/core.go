package transport

import (
	"sync"
	"sync/atomic"

	"github.com/vccl-go/vccl/flowtel"
)

// Core is the bookkeeping every backend shares: the completion queue that
// backend goroutines fill and the owner drains, the outstanding-WR depth, and
// the telemetry records. Backends embed or hold one per QP.
//
// Methods marked owner run on the QP's owner goroutine, the single producer
// of its Recorder; Complete and Granted may be called from any goroutine, and
// their records are written by the owner at its next Poll, stamped with the
// time the event happened.
type Core struct {
	cfg     Config
	backend string

	dead    atomic.Pointer[error] // why the connection is gone, once it is
	path    atomic.Uint32         // path stamped on records (SetPath); starts at cfg.Path
	npend   atomic.Int32          // events in pending; lets an idle Poll skip the lock
	mu      sync.Mutex
	pending []event
	spare   []event

	// Owner-local.
	ready   []event // drained from pending, not yet returned
	readyAt int
	depth   int
	sendSeq uint64
	recvSeq uint64
	wrf     flowtel.WRFields // the records' fields, the QP's set once (flowtel/put.go says why)
}

type event struct {
	wc    WC
	telID uint64
	tag   Tag
	grant bool         // a credit grant for a waiting send, not a completion
	link  flowtel.Kind // a link event (KindLinkDown, …), not a completion
	path  flowtel.Path // the path its record carries
	recSt flowtel.Status
	bytes int
}

// NewCore returns the core of a QP of the named backend.
func NewCore(backend string, cfg Config) *Core {
	c := &Core{cfg: cfg, backend: backend}
	c.path.Store(uint32(cfg.Path))
	c.wrf.Rank, c.wrf.Peer, c.wrf.QP, c.wrf.Comm, c.wrf.Channel = cfg.Rank, cfg.Peer, cfg.QPID, cfg.Comm, cfg.Channel
	return c
}

// SetPath sets the path (0 primary, 1 backup) that records carry from now
// on: those of posts and credit waits, and of completions queued by Complete.
// Backends with several paths (transport/ft) call it when traffic moves.
// Any goroutine.
func (c *Core) SetPath(p flowtel.Path) { c.path.Store(uint32(p)) }

// Path returns the path records carry now.
func (c *Core) Path() flowtel.Path { return flowtel.Path(c.path.Load()) }

// Config returns the QP's configuration.
func (c *Core) Config() Config { return c.cfg }

// Info returns the QP's description with the given addresses.
func (c *Core) Info(local, remote string) Info {
	return Info{Backend: c.backend, Rank: c.cfg.Rank, Peer: c.cfg.Peer, QPID: c.cfg.QPID,
		Channel: c.cfg.Channel, Path: c.cfg.Path, Local: local, Remote: remote}
}

// Now returns the time on the QP's telemetry time base.
func (c *Core) Now() int64 { return c.cfg.Recorder.Now() }

// Check is how every backend's PostSend and PostRecv begin: it refuses,
// before anything is accounted, a WR on a closed QP (ErrClosed), one whose
// buffer is outside its memory region, whose tee has another length, or
// that is longer than MaxMessage.
func (c *Core) Check(wr *WR, closed bool) error {
	if closed {
		return ErrClosed
	}
	return checkWR(wr)
}

// Admit is Check, then Posted for the WR it accepts. Owner only.
func (c *Core) Admit(op Opcode, wr *WR, closed bool) (uint64, error) {
	if err := c.Check(wr, closed); err != nil {
		return 0, err
	}
	return c.Posted(op, wr), nil
}

// Fail queues the completion of a WR that will not move (status st, error
// err): one posted on a QP already flushed, or lost with its link. Any
// goroutine.
func (c *Core) Fail(op Opcode, wr *WR, telID uint64, st flowtel.Status, err error) {
	c.Complete(WC{ID: wr.ID, Op: op, Status: st, Err: err}, telID, wr.Tag)
}

// Posted accounts a WR just accepted by PostSend or PostRecv and returns its
// telemetry id, which the backend hands back to Complete. Owner only.
func (c *Core) Posted(op Opcode, wr *WR) uint64 {
	var id uint64
	if op == OpRecv {
		id = flowtel.WRID(c.recvSeq, true)
		c.recvSeq++
	} else {
		id = flowtel.WRID(c.sendSeq, false)
		c.sendSeq++
	}
	c.depth++
	if c.cfg.Recorder.Enabled() {
		c.stamp(flowtel.KindWRPost, flowtel.StatusOK, 0, c.Path(), id, &wr.Tag, len(wr.Buf))
	}
	return id
}

// CreditWait records that the send with telemetry id telID found no credit
// and waits. Owner only.
func (c *Core) CreditWait(telID uint64, wr *WR) {
	if c.cfg.Recorder.Enabled() {
		c.stamp(flowtel.KindCreditWait, flowtel.StatusOK, 0, c.Path(), telID, &wr.Tag, len(wr.Buf))
	}
}

// Granted notes that the waiting send telID got its credit. Any goroutine.
func (c *Core) Granted(telID uint64, tag Tag, bytes int) { c.GrantedAt(telID, tag, bytes, 0) }

// GrantedAt is Granted for a credit seen at ts (0: now), a reading from
// Stamp that other events seen at the same moment share. Any goroutine.
func (c *Core) GrantedAt(telID uint64, tag Tag, bytes int, ts int64) {
	if !c.cfg.Recorder.Enabled() {
		return
	}
	if ts == 0 {
		ts = c.Now()
	}
	c.push(event{telID: telID, tag: tag, grant: true, bytes: bytes, path: c.Path(), wc: WC{TsNs: ts}})
}

// Stamp returns *ts, after setting it to the time now if it is 0 and
// records are kept; with telemetry off it stays 0 and no clock is read.
// A backend that sees several events at one moment (the frames of one
// socket read, the sends of one write) stamps them all with one reading:
// a clock read costs several times a record (24-40 ns through a VM's
// kvm-clock), and a small exchange over TCP sees a credit, an eager send's
// completion and a receive's in one read. The caller resets *ts to 0 when
// the moment has passed (its next read or write); the reading is taken at
// the first event handled, so a later one is stamped early by the
// handling of those before it. Only for events of WRs posted before the
// reading, or a completion could precede its post. Any goroutine that
// owns *ts.
func (c *Core) Stamp(ts *int64) int64 {
	if *ts == 0 && c.cfg.Recorder.Enabled() {
		*ts = c.Now()
	}
	return *ts
}

// Complete queues a completion for the owner to poll. Any goroutine.
func (c *Core) Complete(wc WC, telID uint64, tag Tag) {
	c.CompleteOn(wc, telID, tag, c.Path(), wc.Status)
}

// CompleteOn is Complete for a backend with several paths: the completion's
// record carries path and status recSt (flowtel.StatusRetransmitted for a WR
// that was replayed on another path), while the WC the owner polls keeps
// wc.Status. Any goroutine. With telemetry off (or paused) it reads no
// clock: nothing would use the time, and a clock read is a visible share
// of a small call's CPU.
func (c *Core) CompleteOn(wc WC, telID uint64, tag Tag, path flowtel.Path, recSt flowtel.Status) {
	if wc.TsNs == 0 && c.cfg.Recorder.Enabled() {
		wc.TsNs = c.Now()
	}
	c.push(event{wc: wc, telID: telID, tag: tag, path: path, recSt: recSt})
	c.cfg.Notifier.Signal()
}

// LinkEvent queues a link record (flowtel.KindLinkDown, KindLinkUp,
// KindFailover or KindFailback) about path, stamped now and written by the
// owner at its next Poll; bytes is what moved with it (the bytes a failover
// replays). Nothing is queued with telemetry off. Any goroutine.
func (c *Core) LinkEvent(kind flowtel.Kind, path flowtel.Path, bytes int) {
	if !c.cfg.Recorder.Enabled() {
		return
	}
	c.push(event{link: kind, path: path, bytes: bytes, wc: WC{TsNs: c.Now()}})
}

func (c *Core) push(e event) {
	c.mu.Lock()
	c.pending = append(c.pending, e)
	c.npend.Add(1)
	c.mu.Unlock()
}

// Poll moves completions into dst, writing their records, which it
// publishes together at its end. Owner only.
func (c *Core) Poll(dst []WC) int {
	if c.readyAt == len(c.ready) {
		if c.npend.Load() == 0 {
			return 0
		}
		c.mu.Lock()
		c.ready, c.pending = c.pending, c.spare[:0]
		c.npend.Store(0)
		c.mu.Unlock()
		c.readyAt = 0
	}
	n := 0
	wrote := false
	for n < len(dst) && c.readyAt < len(c.ready) {
		e := &c.ready[c.readyAt]
		c.readyAt++
		if e.grant {
			wrote = c.write(flowtel.KindCreditGrant, flowtel.StatusOK, e.wc.TsNs, e.path, e.telID, &e.tag, e.bytes) || wrote
			continue
		}
		if e.link != 0 {
			wrote = c.write(e.link, flowtel.StatusOK, e.wc.TsNs, e.path, 0, &e.tag, e.bytes) || wrote
			continue
		}
		c.depth--
		if c.cfg.Recorder.Enabled() {
			wrote = c.write(flowtel.KindWC, e.recSt, e.wc.TsNs, e.path, e.telID, &e.tag, e.wc.Bytes) || wrote
		}
		dst[n] = e.wc
		n++
	}
	if wrote {
		c.cfg.Recorder.Commit()
	}
	if c.readyAt == len(c.ready) {
		// Hand the drained slice back for the next swap.
		clear(c.ready)
		c.spare = c.ready[:0]
		c.ready = c.ready[:0]
		c.readyAt = 0
	}
	return n
}

// SetDead records that the connection is gone and why; the first reason
// sticks. Any goroutine. It wakes the owner, which learns it from Err even
// with nothing outstanding.
func (c *Core) SetDead(err error) {
	if c.dead.CompareAndSwap(nil, &err) {
		c.cfg.Notifier.Signal()
	}
}

// Err returns why the connection is gone, or nil while it is up.
func (c *Core) Err() error {
	if p := c.dead.Load(); p != nil {
		return *p
	}
	return nil
}

// Outstanding returns the WRs posted and not yet polled. Owner only.
func (c *Core) Outstanding() int { return c.depth }

// stamp writes a record in place in the ring and publishes it.
func (c *Core) stamp(kind flowtel.Kind, st flowtel.Status, ts int64, path flowtel.Path, id uint64, tag *Tag, bytes int) {
	if c.write(kind, st, ts, path, id, tag, bytes) {
		c.cfg.Recorder.Commit()
	}
}

// write writes a record in place in the ring, through the primitive every
// execution path's records go through (flowtel.WRFields), for the caller
// to publish (Recorder.Commit); it reports whether it did (not when the
// recorder is off or its ring full).
func (c *Core) write(kind flowtel.Kind, st flowtel.Status, ts int64, path flowtel.Path, id uint64, tag *Tag, bytes int) bool {
	rec := c.cfg.Recorder
	r := rec.Reserve()
	if r == nil {
		return false
	}
	if ts == 0 {
		ts = rec.Stamp()
	}
	w := &c.wrf
	w.Seq, w.Step, w.Op, w.Algo, w.Dtype, w.Path = tag.CollSeq, tag.Step, tag.Op, tag.Algo, tag.Dtype, path
	w.Put(r, ts, kind, st, id, bytes, c.depth)
	return true
}
