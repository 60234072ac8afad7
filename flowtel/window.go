package flowtel

import (
	"context"
	"fmt"
	"os"
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

func (d Dir) String() string {
	switch d {
	case DirSend:
		return "send"
	case DirRecv:
		return "recv"
	}
	return fmt.Sprintf("dir(%d)", uint8(d))
}

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
	var haveN, haveT bool
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
		switch key {
		case "N":
			if haveN {
				return cfg, fmt.Errorf("flowtel: %s=%q: N given twice", EnvWindow, s)
			}
			haveN = true
			n, err := strconv.Atoi(val)
			if err != nil {
				return cfg, fmt.Errorf("flowtel: %s=%q: N=%q is not an integer", EnvWindow, s, val)
			}
			if n < 1 || n > MaxWindowN {
				return cfg, fmt.Errorf("flowtel: %s=%q: N=%d out of range [1, %d]", EnvWindow, s, n, MaxWindowN)
			}
			cfg.N = n
		case "T":
			if haveT {
				return cfg, fmt.Errorf("flowtel: %s=%q: T given twice", EnvWindow, s)
			}
			haveT = true
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

// WindowConfigFromEnv parses VCCL_TELEMETRY_WINDOW (defaults when unset).
func WindowConfigFromEnv() (WindowConfig, error) { return ParseWindowEnv(os.Getenv(EnvWindow)) }

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
// latency, backlog and credit waits (see LinkStats).
//
// A wc is paired with its wr_post by WrID through a FIFO per QP and
// direction, since a QP completes its sends in order and its receives in
// order. When records were lost (a KindLost gap), pairing resynchronises on
// the WrIDs: posts older than the completion at hand are dropped as orphans,
// and a completion older than every pending post counts without a latency.
// Credit waits are kept per QP in a FIFO as well, since a QP grants credit
// to its waiting sends in posting order: a KindCreditGrant closes the wait
// with its WrID, and waits older than it, or not older than a completed send,
// lost their grant and are dropped rather than guessed.
//
// Window is a Sink, so it can be attached to a Collector. All methods are safe
// for concurrent use; updates and snapshots take one mutex. Updating does not
// allocate once every link and QP has been seen and its buffers have grown.
type Window struct {
	cfg      WindowConfig
	clock    *Clock
	hasClock bool

	mu      sync.Mutex
	links   map[LinkKey]*linkState
	sorted  []*linkState // links ordered by key
	qps     map[uint64]*qpState
	qpCache [qpCacheSize]qpCacheEntry // direct-mapped, in front of qps
	maxTs   int64
	lost    uint64
	scratch []int64
}

type sample struct {
	ts     int64
	lat    int64 // -1: the post was not seen
	bytes  uint64
	failed bool
}

type interval struct{ from, to int64 }

type pendingWR struct {
	wrID  uint64
	ts    int64
	bytes uint64
}

type linkState struct {
	key       LinkKey
	samples   ring[sample]
	waits     ring[interval] // finished credit waits, overlapping ones merged
	qds       []*qpDir       // the QP directions feeding this link
	outBytes  uint64
	pending   int
	lastNs    int64
	unmatched uint64
	orphaned  uint64
}

type qpDir struct {
	qp    *qpState
	link  *linkState
	fifo  ring[pendingWR]
	waits ring[openWait] // sends waiting for credit, oldest first (send direction only)
}

type openWait struct {
	wrID uint64
	ts   int64
}

const qpCacheSize = 256

type qpCacheEntry struct {
	key uint64
	qp  *qpState
}

type qpState struct {
	dir   [2]qpDir
	depth uint32 // Depth of the QP's latest record
}

// maxPending bounds a QP direction's FIFO of posts awaiting completion; past
// it the oldest is dropped as an orphan.
const maxPending = 1 << 16

// NewWindow returns a window sized by cfg (zero fields take the defaults).
func NewWindow(cfg WindowConfig, opts ...WindowOption) *Window {
	w := &Window{
		cfg:   cfg.withDefaults(),
		links: make(map[LinkKey]*linkState),
		qps:   make(map[uint64]*qpState),
	}
	for _, o := range opts {
		o(w)
	}
	return w
}

// Config returns the window's size.
func (w *Window) Config() WindowConfig { return w.cfg }

// Add updates the window with one record.
func (w *Window) Add(rec *Record) {
	w.mu.Lock()
	w.add(rec)
	w.mu.Unlock()
}

// Update updates the window with recs, in order.
func (w *Window) Update(recs []Record) {
	w.mu.Lock()
	for i := range recs {
		w.add(&recs[i])
	}
	w.mu.Unlock()
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
	return w.lost
}

// Reset forgets every link.
func (w *Window) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.links = make(map[LinkKey]*linkState)
	w.sorted = nil
	w.qps = make(map[uint64]*qpState)
	w.qpCache = [qpCacheSize]qpCacheEntry{}
	w.maxTs = 0
	w.lost = 0
}

func (w *Window) add(rec *Record) {
	if rec.TsNs > w.maxTs {
		w.maxTs = rec.TsNs
	}
	switch rec.Kind {
	case KindWRPost:
		d := Dir(rec.WrID & 1)
		qd := w.qpDir(rec, d)
		l := w.linkOf(qd, rec, d)
		if qd.fifo.n == maxPending {
			old := qd.fifo.popFront()
			l.outBytes -= old.bytes
			l.pending--
			l.orphaned++
		}
		qd.fifo.push(pendingWR{wrID: rec.WrID, ts: rec.TsNs, bytes: rec.Bytes}, maxPending)
		l.outBytes += rec.Bytes
		l.pending++
		qd.qp.depth = rec.Depth
		l.lastNs = max(l.lastNs, rec.TsNs)

	case KindWC:
		d := Dir(rec.WrID & 1)
		qd := w.qpDir(rec, d)
		l := w.linkOf(qd, rec, d)
		// Posts older than this completion lost their own completion.
		for qd.fifo.n > 0 && qd.fifo.front().wrID < rec.WrID {
			old := qd.fifo.popFront()
			l.outBytes -= old.bytes
			l.pending--
			l.orphaned++
		}
		// A retransmitted WR was delivered (on another path): not a failure.
		s := sample{ts: rec.TsNs, lat: -1, bytes: rec.Bytes, failed: rec.Status != StatusOK && rec.Status != StatusRetransmitted}
		if qd.fifo.n > 0 && qd.fifo.front().wrID == rec.WrID {
			p := qd.fifo.popFront()
			s.lat = rec.TsNs - p.ts
			if s.bytes == 0 {
				s.bytes = p.bytes
			}
			l.outBytes -= p.bytes
			l.pending--
		} else {
			l.unmatched++
		}
		l.samples.push(s, w.cfg.N)
		// A completed send had its credit: a wait still open for it, or
		// for an older send, lost its grant. Drop it rather than guess.
		for qd.waits.n > 0 && qd.waits.front().wrID <= rec.WrID {
			qd.waits.popFront()
		}
		qd.qp.depth = rec.Depth
		l.lastNs = max(l.lastNs, rec.TsNs)

	case KindCreditWait:
		qd := w.qpDir(rec, DirSend)
		l := w.linkOf(qd, rec, DirSend)
		if qd.waits.n == 0 || rec.WrID > qd.waits.back().wrID { // else a duplicate
			if qd.waits.n == maxPending {
				qd.waits.popFront()
			}
			qd.waits.push(openWait{wrID: rec.WrID, ts: rec.TsNs}, maxPending)
		}
		qd.qp.depth = rec.Depth
		l.lastNs = max(l.lastNs, rec.TsNs)

	case KindCreditGrant:
		qd := w.qpDir(rec, DirSend)
		l := w.linkOf(qd, rec, DirSend)
		// Credit comes in posting order: older waits lost their grant.
		for qd.waits.n > 0 && qd.waits.front().wrID < rec.WrID {
			qd.waits.popFront()
		}
		if qd.waits.n > 0 && qd.waits.front().wrID == rec.WrID {
			wt := qd.waits.popFront()
			l.addWait(wt.ts, rec.TsNs, w.cfg.N)
		}
		qd.qp.depth = rec.Depth
		l.lastNs = max(l.lastNs, rec.TsNs)

	case KindLost:
		w.lost += rec.Bytes
	}
}

func (w *Window) qpDir(rec *Record, d Dir) *qpDir {
	k := uint64(uint32(rec.Rank))<<32 | uint64(rec.QP)
	e := &w.qpCache[(uint64(rec.QP)^uint64(rec.Rank)*0x9e37)%qpCacheSize]
	if e.qp != nil && e.key == k {
		return &e.qp.dir[d]
	}
	q := w.qps[k]
	if q == nil {
		q = &qpState{}
		q.dir[0].qp, q.dir[1].qp = q, q
		w.qps[k] = q
	}
	e.key, e.qp = k, q
	return &q.dir[d]
}

func (w *Window) linkOf(qd *qpDir, rec *Record, d Dir) *linkState {
	if l := qd.link; l != nil && l.key.Rank == rec.Rank && l.key.Peer == rec.Peer &&
		l.key.Channel == rec.Channel && l.key.Path == rec.Path {
		return l
	}
	key := linkKeyOf(rec, d)
	l := w.links[key]
	if l == nil {
		l = &linkState{key: key}
		w.links[key] = l
		i, _ := slices.BinarySearchFunc(w.sorted, key, func(a *linkState, k LinkKey) int { return a.key.compare(k) })
		w.sorted = slices.Insert(w.sorted, i, l)
	}
	if qd.link != l {
		if old := qd.link; old != nil {
			// The QP moved to another link (unusual).
			old.qds = slices.DeleteFunc(old.qds, func(x *qpDir) bool { return x == qd })
		}
		qd.link = l
		l.qds = append(l.qds, qd)
	}
	return l
}

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
	l := w.links[key]
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
	return w.maxTs
}

func (w *Window) appendSnapshot(dst []LinkStats, now int64) []LinkStats {
	for _, l := range w.sorted {
		dst = append(dst, w.stats(l, now))
	}
	return dst
}

func (w *Window) stats(l *linkState, now int64) LinkStats {
	start := now - int64(w.cfg.T)
	st := LinkStats{
		Key:              l.key,
		OutstandingBytes: l.outBytes,
		PendingWRs:       l.pending,
		LastNs:           l.lastNs,
		Unmatched:        l.unmatched,
		Orphaned:         l.orphaned,
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
	for i := range l.samples.n {
		s := l.samples.at(i)
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
	}
	st.Backlog = uint32(min(backlog, 1<<32-1))

	// Credit waits: the time at least one send waited, so overlapping
	// waits count once. Finished waits are stored merged; the oldest wait
	// still open covers every later one, up to now.
	lastTo := int64(-1 << 63)
	for i := range l.waits.n {
		iv := l.waits.at(i)
		st.CreditWaitNs += overlap(iv.from, iv.to, start, now)
		lastTo = max(lastTo, iv.to)
	}
	openFrom := int64(1<<63 - 1)
	for _, qd := range l.qds {
		if qd.waits.n > 0 {
			st.CreditWaiting = true
			openFrom = min(openFrom, qd.waits.front().ts)
		}
	}
	if st.CreditWaiting {
		st.CreditWaitNs += overlap(max(openFrom, lastTo), now, start, now)
	}
	return st
}

// addWait stores a finished credit wait, merging it into the previous one
// when they overlap.
func (l *linkState) addWait(from, to int64, bound int) {
	to = max(to, from)
	if l.waits.n > 0 {
		last := l.waits.back()
		if from <= last.to && to >= last.from {
			last.from, last.to = min(last.from, from), max(last.to, to)
			return
		}
	}
	l.waits.push(interval{from: from, to: to}, bound)
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

func overlap(a, b, lo, hi int64) int64 {
	a, b = max(a, lo), min(b, hi)
	if b > a {
		return b - a
	}
	return 0
}

// ring is a FIFO that grows (doubling) up to a bound and then overwrites its
// oldest element.
type ring[T any] struct {
	buf  []T
	head int // index of the oldest element
	n    int
}

func (r *ring[T]) push(v T, bound int) {
	if r.n == len(r.buf) {
		if len(r.buf) < bound {
			r.grow(min(max(2*len(r.buf), 16), bound))
		} else {
			r.buf[r.head] = v
			r.head++
			if r.head == len(r.buf) {
				r.head = 0
			}
			return
		}
	}
	i := r.head + r.n
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	r.buf[i] = v
	r.n++
}

func (r *ring[T]) grow(c int) {
	buf := make([]T, c)
	k := copy(buf, r.buf[r.head:])
	copy(buf[k:], r.buf[:r.head])
	r.buf, r.head = buf, 0
}

func (r *ring[T]) front() *T { return &r.buf[r.head] }

func (r *ring[T]) back() *T { return r.at(r.n - 1) }

func (r *ring[T]) popFront() T {
	v := r.buf[r.head]
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
	return v
}

// at returns the i-th oldest element.
func (r *ring[T]) at(i int) *T {
	j := r.head + i
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return &r.buf[j]
}
