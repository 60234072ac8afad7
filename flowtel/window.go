package flowtel

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Dir is the direction of a link, seen from the rank that records it.
type Dir uint8

// Link directions.
const (
	DirSend Dir = 0 // rank -> peer: sends posted by rank (WrID low bit 0)
	DirRecv Dir = 1 // peer -> rank: receives posted by rank (WrID low bit 1)
)

var dirNames = [...]string{DirSend: "send", DirRecv: "recv"}

func (d Dir) String() string { return codeName(dirNames[:], d, "dir") }

// LinkKey names one direction of one link: the records of rank about its
// traffic with peer on a channel and path. Send and receive traffic are kept
// apart by Dir, taken from the low bit of the WrID (see WRID): a WR record
// whose IsRecv is false belongs to DirSend, rank -> peer; one whose IsRecv is
// true to DirRecv, peer -> rank as received by rank. Credit waits are always
// DirSend.
type LinkKey struct {
	Rank    int32
	Peer    int32
	Channel uint16
	Path    Path
	Dir     Dir
}

func (k LinkKey) String() string {
	return fmt.Sprintf("%d->%d ch=%d path=%d %s", k.Rank, k.Peer, k.Channel, k.Path, k.Dir)
}

// same is k == *o, field by field: a fold writes its events' keys field by
// field, and a whole-struct comparison would read them back wide, which
// stalls on store forwarding.
func (k *LinkKey) same(o *LinkKey) bool {
	return k.Rank == o.Rank && k.Peer == o.Peer && k.Channel == o.Channel && k.Path == o.Path && k.Dir == o.Dir
}

func linkKeyOf(rec *Record, d Dir) LinkKey {
	return LinkKey{Rank: rec.Rank, Peer: rec.Peer, Channel: rec.Channel, Path: rec.Path, Dir: d}
}

func (k LinkKey) compare(o LinkKey) int {
	switch {
	case k.Rank != o.Rank:
		return cmpInt(int64(k.Rank), int64(o.Rank))
	case k.Peer != o.Peer:
		return cmpInt(int64(k.Peer), int64(o.Peer))
	case k.Channel != o.Channel:
		return cmpInt(int64(k.Channel), int64(o.Channel))
	case k.Path != o.Path:
		return cmpInt(int64(k.Path), int64(o.Path))
	}
	return cmpInt(int64(k.Dir), int64(o.Dir))
}

func cmpInt(a, b int64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// EnvWindow is the environment variable that sizes the Window.
const EnvWindow = "VCCL_TELEMETRY_WINDOW"

// Window defaults.
const (
	DefaultWindowN = 1024
	DefaultWindowT = 100 * time.Millisecond
	// MaxWindowN bounds N (memory: 32 bytes per completion per link).
	MaxWindowN = 1 << 20
)

// WindowConfig sizes a Window. A link's window holds its last N completions
// that are also no older than T: both bounds apply, whichever is tighter.
type WindowConfig struct {
	N int           // completions kept per link (0: DefaultWindowN)
	T time.Duration // time span kept per link (0: DefaultWindowT)
}

func (c WindowConfig) withDefaults() WindowConfig {
	if c.N <= 0 {
		c.N = DefaultWindowN
	}
	if c.N > MaxWindowN {
		c.N = MaxWindowN
	}
	if c.T <= 0 {
		c.T = DefaultWindowT
	}
	return c
}

func (c WindowConfig) String() string { return fmt.Sprintf("N=%d,T=%s", c.N, c.T) }

// ParseWindowEnv parses a VCCL_TELEMETRY_WINDOW value.
//
// The value is a comma-separated list of at most two items, each either
// key=value or a bare value:
//
//	N=1024,T=50ms   keyed (keys are case-insensitive, any order)
//	1024,50ms       bare: an integer is N, a Go duration (with its unit:
//	                ns, us or µs, ms, s, m) is T
//	N=4096          one item: the other keeps its default
//	""              empty or blank: all defaults
//
// N must be in [1, MaxWindowN] and T positive. Omitted items take the
// defaults (DefaultWindowN, DefaultWindowT). Errors name the offending item.
func ParseWindowEnv(s string) (WindowConfig, error) {
	cfg := WindowConfig{N: DefaultWindowN, T: DefaultWindowT}
	s = strings.TrimSpace(s)
	if s == "" {
		return cfg, nil
	}
	seen := make(map[string]bool, 2)
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return cfg, fmt.Errorf("flowtel: %s=%q: empty item (want e.g. \"N=1024,T=50ms\")", EnvWindow, s)
		}
		key, val, keyed := strings.Cut(item, "=")
		key, val = strings.ToUpper(strings.TrimSpace(key)), strings.TrimSpace(val)
		if !keyed {
			val = key
			if _, err := strconv.Atoi(val); err == nil {
				key = "N"
			} else if _, err := time.ParseDuration(item); err == nil {
				key, val = "T", item
			} else {
				return cfg, fmt.Errorf("flowtel: %s=%q: %q is neither a count N (e.g. 1024) nor a duration T (e.g. 50ms)", EnvWindow, s, item)
			}
		}
		if seen[key] {
			return cfg, fmt.Errorf("flowtel: %s=%q: %s given twice", EnvWindow, s, key)
		}
		seen[key] = true
		switch key {
		case "N":
			n, err := strconv.Atoi(val)
			if err != nil {
				return cfg, fmt.Errorf("flowtel: %s=%q: N=%q is not an integer", EnvWindow, s, val)
			}
			if n < 1 || n > MaxWindowN {
				return cfg, fmt.Errorf("flowtel: %s=%q: N=%d out of range [1, %d]", EnvWindow, s, n, MaxWindowN)
			}
			cfg.N = n
		case "T":
			d, err := time.ParseDuration(val)
			if err != nil {
				return cfg, fmt.Errorf("flowtel: %s=%q: T=%q is not a duration with a unit (e.g. 50ms, 200us): %v", EnvWindow, s, val, err)
			}
			if d <= 0 {
				return cfg, fmt.Errorf("flowtel: %s=%q: T=%s must be positive", EnvWindow, s, d)
			}
			cfg.T = d
		default:
			return cfg, fmt.Errorf("flowtel: %s=%q: unknown key %q (want N or T)", EnvWindow, s, key)
		}
	}
	return cfg, nil
}

// LinkStats is the state of one link direction over its window.
//
// Completions, Bytes, Failed, bandwidth and latency cover the completions
// (KindWC records) in the window: the link's last N completions whose time is
// in [now-T, now]. Backlog, OutstandingBytes, PendingWRs and CreditWaiting are
// the link's state at its latest record; CreditWaitNs is measured over
// [now-T, now].
type LinkStats struct {
	Key LinkKey

	Completions int    // completions in the window
	Failed      int    // of which failed (error or flushed; a retransmitted WR was delivered)
	Bytes       uint64 // bytes of those completions

	// BandwidthBps is the rate the link completed bytes at, in bytes per
	// second: the bytes of every completion in the window but the oldest,
	// divided by the time from the oldest completion to the newest (SpanNs).
	// With a single completion (SpanNs 0) it is that WR's bytes over its
	// latency, when known; otherwise 0. Idle time after the newest
	// completion does not lower it; LastNs shows how fresh it is.
	BandwidthBps float64
	SpanNs       int64

	// WR latency, from wr_post to its wc, over the completions in the
	// window whose post was seen (LatencySamples of them). Percentiles are
	// nearest-rank: the smallest latency with at least p% of the samples at
	// or below it.
	LatencySamples int
	LatP50Ns       int64
	LatP99Ns       int64
	LatMaxNs       int64

	// Backlog is the Depth of each of the link's QPs at its latest record,
	// summed. Depth is what the transport reports, per QP: it counts sends
	// and receives together (transport.Core does), so both directions of a
	// link over the same QPs show the same Backlog. PendingWRs and
	// OutstandingBytes are this direction's own, from pairing: the posts
	// seen whose completion has not been seen, and their bytes.
	Backlog          uint32
	OutstandingBytes uint64
	PendingWRs       int

	// CreditWaitNs is the time within [now-T, now] during which at least
	// one send of the link waited for credit (from its KindCreditWait to
	// the KindCreditGrant with its WrID); overlapping waits count once, and
	// a wait still open counts up to now. CreditWaiting: one is open now.
	CreditWaitNs  int64
	CreditWaiting bool

	LastNs int64 // time of the link's latest record

	// Pairing trouble since the window started (cumulative, not windowed):
	// completions whose post was never seen, and posts dropped because a
	// later completion on their QP showed their own completion was lost.
	Unmatched uint64
	Orphaned  uint64
}

// WindowOption configures a Window.
type WindowOption func(*Window)

// WithWindowClock makes Snapshot read "now" from clk. Without it, Snapshot
// uses the time of the latest record the window has seen (event time, which
// suits replays of recorded traces).
func WithWindowClock(clk *Clock) WindowOption {
	return func(w *Window) { w.clock, w.hasClock = clk, true }
}

// Window keeps sliding per-link statistics from WR records: bandwidth, WR
// latency, backlog and credit waits (see LinkStats). It is a view over a
// Fold, which pairs each wc with its wr_post and each credit wait with its
// grant (see Fold for the rules, and how pairing survives lost records).
//
// Window is a Sink, so it can be attached to a Collector. All methods are safe
// for concurrent use; updates and snapshots take one mutex. Updating does not
// allocate once every link and QP has been seen and its buffers have grown.
type Window struct {
	cfg      WindowConfig
	clock    *Clock
	hasClock bool

	mu      sync.Mutex
	fold    *Fold
	view    windowView
	tee     windowTee
	scratch []int64
}

// windowTee hands the fold's events to the window's view and, during
// FoldInto, to another handler.
type windowTee struct {
	view *windowView
	also Handler
}

func (t *windowTee) Posted(x *Transfer) {
	t.view.Posted(x)
	if t.also != nil {
		t.also.Posted(x)
	}
}

func (t *windowTee) Completed(x *Transfer) {
	t.view.Completed(x)
	if t.also != nil {
		t.also.Completed(x)
	}
}

func (t *windowTee) WaitBegan(x *CreditWait) {
	t.view.WaitBegan(x)
	if t.also != nil {
		t.also.WaitBegan(x)
	}
}

func (t *windowTee) WaitEnded(x *CreditWait) {
	t.view.WaitEnded(x)
	if t.also != nil {
		t.also.WaitEnded(x)
	}
}

func (t *windowTee) CallBegan(x *Call) {
	if t.also != nil {
		t.also.CallBegan(x)
	}
}

func (t *windowTee) CallEnded(x *Call) {
	if t.also != nil {
		t.also.CallEnded(x)
	}
}

func (t *windowTee) PathChanged(x *PathChange) {
	if t.also != nil {
		t.also.PathChanged(x)
	}
}

func (t *windowTee) Gap(x *Gap) {
	if t.also != nil {
		t.also.Gap(x)
	}
}

func (t *windowTee) Lost(x *Lost) {
	t.view.Lost(x)
	if t.also != nil {
		t.also.Lost(x)
	}
}

// windowView is the Window's state, kept from the fold's events.
type windowView struct {
	NopHandler
	n      int // completions kept per link
	links  map[LinkKey]*linkState
	sorted []*linkState // links ordered by key
	qps    []*winQP     // by the fold's QPIndex
	lost   uint64
}

type sample struct {
	ts     int64
	lat    int64 // -1: the post was not seen
	bytes  uint64
	failed bool
}

type linkState struct {
	key       LinkKey
	samples   FIFO[sample]
	waits     WaitSpans
	qds       []*qpDir // the QP directions feeding this link
	lastNs    int64
	unmatched uint64
	orphaned  uint64
}

// winQP is a QP as of its latest event: the depth the transport reported,
// which counts both directions, and each direction's pending posts.
type winQP struct {
	depth uint32
	dir   [2]qpDir
}

type qpDir struct {
	qp        *winQP
	link      *linkState
	pending   int
	pendBytes uint64
}

// NewWindow returns a window sized by cfg (zero fields take the defaults).
func NewWindow(cfg WindowConfig, opts ...WindowOption) *Window {
	w := &Window{cfg: cfg.withDefaults()}
	w.view.init(w.cfg.N)
	w.tee.view = &w.view
	w.fold = NewFold(&w.tee, FoldConfig{GapNs: -1})
	for _, o := range opts {
		o(w)
	}
	return w
}

func (v *windowView) init(n int) {
	*v = windowView{n: n, links: make(map[LinkKey]*linkState)}
}

// Config returns the window's size.
func (w *Window) Config() WindowConfig { return w.cfg }

// Add updates the window with one record.
func (w *Window) Add(rec *Record) {
	w.mu.Lock()
	w.fold.AddRecord(rec)
	w.mu.Unlock()
}

// Update updates the window with recs, in order.
func (w *Window) Update(recs []Record) {
	w.mu.Lock()
	w.fold.Add(recs)
	w.mu.Unlock()
}

// FoldInto is Update that also hands every event of the window's fold to
// h, and returns the fold's counters: a consumer that needs the same
// events (the Prometheus exporter beside the live endpoint's window) then
// pays for no fold of its own, which costs a rank bound to one core as
// much as its view. h must not call the window.
func (w *Window) FoldInto(h Handler, recs []Record) FoldStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tee.also = h
	w.fold.Add(recs)
	w.tee.also = nil
	return w.fold.Stats()
}

// Consume implements Sink: it is Update.
func (w *Window) Consume(_ context.Context, recs []Record) error {
	w.Update(recs)
	return nil
}

// Shutdown implements Sink; the window keeps its state.
func (w *Window) Shutdown(context.Context) error { return nil }

// Lost returns the sum of the KindLost records the window has seen: records
// it never got.
func (w *Window) Lost() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.view.lost
}

// Reset forgets every link.
func (w *Window) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.view.init(w.cfg.N)
	w.fold = NewFold(&w.tee, FoldConfig{GapNs: -1})
}

// qpDir returns the state of a QP direction, moving it to link k if its
// latest event is about another link (a fault-tolerant QP changed path).
func (v *windowView) qpDir(idx uint32, k *LinkKey) *qpDir {
	for int(idx) >= len(v.qps) {
		v.qps = append(v.qps, nil)
	}
	q := v.qps[idx]
	if q == nil {
		q = &winQP{}
		q.dir[DirSend].qp, q.dir[DirRecv].qp = q, q
		v.qps[idx] = q
	}
	qd := &q.dir[k.Dir]
	if qd.link == nil || !qd.link.key.same(k) {
		if old := qd.link; old != nil {
			old.qds = slices.DeleteFunc(old.qds, func(x *qpDir) bool { return x == qd })
		}
		l := v.link(*k)
		qd.link = l
		l.qds = append(l.qds, qd)
	}
	return qd
}

func (v *windowView) link(key LinkKey) *linkState {
	l := v.links[key]
	if l == nil {
		l = &linkState{key: key}
		v.links[key] = l
		i, _ := slices.BinarySearchFunc(v.sorted, key, func(a *linkState, k LinkKey) int { return a.key.compare(k) })
		v.sorted = slices.Insert(v.sorted, i, l)
	}
	return l
}

func (v *windowView) transfer(t *Transfer, ts int64) *linkState {
	qd := v.qpDir(t.QPIndex, &t.Link)
	qd.qp.depth, qd.pending, qd.pendBytes = t.Depth, t.Pending, t.PendingBytes
	l := qd.link
	l.orphaned += uint64(t.Orphans)
	l.lastNs = max(l.lastNs, ts)
	return l
}

func (v *windowView) Posted(t *Transfer) { v.transfer(t, t.PostNs) }

func (v *windowView) Completed(t *Transfer) {
	l := v.transfer(t, t.DoneNs)
	s := sample{ts: t.DoneNs, lat: -1, bytes: t.Bytes, failed: t.Failed()}
	if lat, ok := t.LatencyNs(); ok {
		s.lat = lat
	} else {
		l.unmatched++
	}
	l.samples.PushBounded(s, v.n)
}

func (v *windowView) WaitBegan(cw *CreditWait) {
	qd := v.qpDir(cw.QPIndex, &cw.Link)
	qd.qp.depth = cw.Depth
	l := qd.link
	l.waits.Began(cw)
	l.lastNs = max(l.lastNs, cw.FromNs)
}

func (v *windowView) WaitEnded(cw *CreditWait) {
	qd := v.qpDir(cw.QPIndex, &cw.Link)
	l := qd.link
	if cw.Granted {
		qd.qp.depth = cw.Depth
		l.lastNs = max(l.lastNs, cw.ToNs)
	}
	l.waits.Ended(cw)
}

func (v *windowView) Lost(x *Lost) { v.lost += x.Records }

// Snapshot returns the statistics of every link, ordered by key, as of now:
// the window's clock if it has one (WithWindowClock), else the time of the
// latest record seen.
func (w *Window) Snapshot() []LinkStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendSnapshot(nil, w.nowLocked())
}

// SnapshotAt is Snapshot as of time now (ns, on the records' time base).
func (w *Window) SnapshotAt(now int64) []LinkStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendSnapshot(nil, now)
}

// AppendSnapshot appends to dst the statistics of every link as of now and
// returns the extended slice; reusing dst avoids allocating.
func (w *Window) AppendSnapshot(dst []LinkStats, now int64) []LinkStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendSnapshot(dst, now)
}

// Link returns the statistics of one link as of now, and whether the window
// has seen it.
func (w *Window) Link(key LinkKey, now int64) (LinkStats, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.view.links[key]
	if l == nil {
		return LinkStats{Key: key}, false
	}
	return w.stats(l, now), true
}

// Now returns the time Snapshot would use.
func (w *Window) Now() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nowLocked()
}

func (w *Window) nowLocked() int64 {
	if w.hasClock {
		return w.clock.Now()
	}
	return w.fold.MaxTs()
}

func (w *Window) appendSnapshot(dst []LinkStats, now int64) []LinkStats {
	for _, l := range w.view.sorted {
		dst = append(dst, w.stats(l, now))
	}
	return dst
}

func (w *Window) stats(l *linkState, now int64) LinkStats {
	start := now - int64(w.cfg.T)
	st := LinkStats{
		Key:       l.key,
		LastNs:    l.lastNs,
		Unmatched: l.unmatched,
		Orphaned:  l.orphaned,
	}

	lats := w.scratch[:0]
	var (
		oldest       = int64(1<<63 - 1)
		oldestBytes  uint64
		newest       = int64(-1 << 63)
		singleLat    int64
		singleBytes  uint64
		haveInWindow bool
	)
	for i := range l.samples.Len() {
		s := l.samples.At(i)
		if s.ts < start || s.ts > now {
			continue
		}
		haveInWindow = true
		st.Completions++
		st.Bytes += s.bytes
		if s.failed {
			st.Failed++
		}
		if s.lat >= 0 {
			lats = append(lats, s.lat)
		}
		if s.ts < oldest {
			oldest, oldestBytes = s.ts, s.bytes
		}
		if s.ts > newest {
			newest = s.ts
		}
		singleLat, singleBytes = s.lat, s.bytes
	}
	if haveInWindow {
		if newest > oldest {
			st.SpanNs = newest - oldest
			st.BandwidthBps = float64(st.Bytes-oldestBytes) * 1e9 / float64(st.SpanNs)
		} else if st.Completions == 1 && singleLat > 0 {
			st.BandwidthBps = float64(singleBytes) * 1e9 / float64(singleLat)
		}
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		st.LatencySamples = len(lats)
		st.LatP50Ns = nearestRank(lats, 50)
		st.LatP99Ns = nearestRank(lats, 99)
		st.LatMaxNs = lats[len(lats)-1]
	}
	w.scratch = lats[:0]

	var backlog uint64
	for _, qd := range l.qds {
		backlog += uint64(qd.qp.depth)
		st.OutstandingBytes += qd.pendBytes
		st.PendingWRs += qd.pending
	}
	st.Backlog = uint32(min(backlog, 1<<32-1))

	// Credit waits: the time at least one send waited, overlapping waits
	// counted once.
	st.CreditWaitNs = l.waits.Within(start, now)
	_, st.CreditWaiting = l.waits.Open()
	return st
}

// nearestRank returns the p-th percentile of sorted by the nearest-rank
// method: the value at rank ceil(p/100 * n).
func nearestRank(sorted []int64, p int) int64 {
	n := len(sorted)
	r := (p*n + 99) / 100
	if r < 1 {
		r = 1
	}
	return sorted[r-1]
}
