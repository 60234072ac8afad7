package prom

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vccl-go/vccl/flowtel"
)

// Defaults.
const (
	DefaultMaxLinks = 1024
	DefaultMaxComms = 16
)

// Label values used when a bound is reached.
const Other = "other"

// Comm is what the collector needs to know of a communicator;
// *collective.Comm has these methods.
type Comm interface {
	ID() uint32
	Size() int
}

// Option configures a Collector.
type Option func(*config)

type config struct {
	worldSize int
	maxLinks  int
	maxComms  int
	window    *flowtel.Window
}

// WithWorldSize sets the world size of communicators not registered with
// AddComm (bus bandwidth needs it).
func WithWorldSize(n int) Option { return func(c *config) { c.worldSize = n } }

// WithMaxLinks bounds the links kept apart (default DefaultMaxLinks); the
// traffic of further links is reported with peer="other".
func WithMaxLinks(n int) Option { return func(c *config) { c.maxLinks = n } }

// WithWindow folds the records with w's fold (flowtel.Window.FoldInto):
// the collector updates w as it consumes, and w must not be given records
// otherwise (not be a sink of its own). One fold then serves both, where
// each costs a rank bound to one core as much as its view.
func WithWindow(w *flowtel.Window) Option { return func(c *config) { c.window = w } }

// WithMaxComms bounds the communicators kept apart (default
// DefaultMaxComms); further ones are reported as comm="other".
func WithMaxComms(n int) Option { return func(c *config) { c.maxComms = n } }

// Collector is a flowtel.Sink and a prometheus.Collector. See the package
// documentation for its metrics.
type Collector struct {
	cfg config

	busBW, algBW, execTime *histVec
	collBytes, collCount   *prometheus.CounterVec

	linkBytes, linkWRs   *prometheus.CounterVec
	linkLatency          *histVec
	linkBacklog          *prometheus.GaugeVec
	linkCreditWait       *prometheus.CounterVec
	failovers, failbacks *prometheus.CounterVec
	linkDowns, linkUps   *prometheus.CounterVec
	lost                 prometheus.Counter
	all                  []prometheus.Collector
	sizes                atomic.Pointer[map[uint32]int] // copy on write
	sizesMu              sync.Mutex
	mu                   sync.Mutex    // the fold and the state below
	fold                 *flowtel.Fold // nil with WithWindow
	windowFold           flowtel.FoldStats
	st                   state
	dirty                []*link       // links with updates pending publication (under mu)
	dirtyColls           []*collSeries // the same for collective series
	collsObserved        atomic.Uint64
}

var (
	_ flowtel.Sink         = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)

// nTimeBuckets is the number of bounds of the time histograms.
const nTimeBuckets = 13

// Histogram buckets.
var (
	bwBuckets     = prometheus.ExponentialBuckets(1e9/64, 2, 17)         // 1/64 .. 1024 GB/s, in bytes/s
	timeBuckets   = prometheus.ExponentialBuckets(1e-6, 4, nTimeBuckets) // 1µs .. 16.8s, in s
	collLabels    = []string{"comm", "rank", "collective", "algorithm", "message_size"}
	linkLabels    = []string{"comm", "rank", "peer", "channel", "path"}
	linkDirLabels = append(append([]string(nil), linkLabels...), "direction")
)

// New returns a collector. Register it with a prometheus.Registerer, or
// serve it with Handler; feed it with flowtel.Collector.AddSink.
func New(opts ...Option) *Collector {
	cfg := config{maxLinks: DefaultMaxLinks, maxComms: DefaultMaxComms}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.maxLinks = max(cfg.maxLinks, 1)
	cfg.maxComms = max(cfg.maxComms, 1)
	hist := func(name, help string, buckets []float64, labels []string) *histVec {
		return &histVec{desc: prometheus.NewDesc(name, help, labels, nil), bounds: buckets}
	}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	c := &Collector{
		cfg:       cfg,
		busBW:     hist("vccl_bus_bandwidth_bytes_per_second", "Bus bandwidth of collectives in bytes per second (nccl-tests' busbw, which it prints in GB/s).", bwBuckets, collLabels),
		algBW:     hist("vccl_algorithm_bandwidth_bytes_per_second", "Algorithm bandwidth of collectives in bytes per second: payload over execution time.", bwBuckets, collLabels),
		execTime:  hist("vccl_collective_exec_time_seconds", "Execution time of collectives, coll_begin to coll_end, in seconds.", timeBuckets, collLabels),
		collBytes: counter("vccl_collective_bytes_total", "Payload bytes of collectives that ended ok.", collLabels),
		collCount: counter("vccl_collectives_total", "Collectives ended, by status.", append(append([]string(nil), collLabels...), "status")),

		linkBytes:      counter("vccl_link_bytes_total", "Bytes of work requests completed ok on a link.", linkDirLabels),
		linkWRs:        counter("vccl_link_wrs_total", "Work requests completed on a link, by status.", append(append([]string(nil), linkDirLabels...), "status")),
		linkLatency:    hist("vccl_link_wr_latency_seconds", "Work request latency on a link, wr_post to wc, in seconds.", timeBuckets, linkDirLabels),
		linkBacklog:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vccl_link_backlog_wrs", Help: "Work requests outstanding on a link's queue pair after its latest record."}, linkLabels),
		linkCreditWait: counter("vccl_link_credit_wait_seconds_total", "Time during which a send on the link waited for credit (backpressure).", linkLabels),
		failovers:      counter("vccl_link_failovers_total", "Failovers of a link from its primary path to its backup (path: the path moved to).", linkLabels),
		failbacks:      counter("vccl_link_failbacks_total", "Failbacks of a link to its primary path.", linkLabels),
		linkDowns:      counter("vccl_link_down_total", "Times a path of a link was declared dead.", linkLabels),
		linkUps:        counter("vccl_link_up_total", "Times a dead path of a link answered again.", linkLabels),
		lost:           prometheus.NewCounter(prometheus.CounterOpts{Name: "vccl_telemetry_lost_records_total", Help: "Telemetry records dropped before they reached the Prometheus collector."}),
	}
	c.all = []prometheus.Collector{c.busBW, c.algBW, c.execTime, c.collBytes, c.collCount,
		c.linkBytes, c.linkWRs, c.linkLatency, c.linkBacklog, c.linkCreditWait,
		c.failovers, c.failbacks, c.linkDowns, c.linkUps, c.lost}
	c.sizes.Store(&map[uint32]int{})
	c.st.init()
	if cfg.window == nil {
		c.fold = flowtel.NewFold((*view)(c), flowtel.FoldConfig{GapNs: -1})
	}
	return c
}

// AddComm registers a communicator's world size.
func (c *Collector) AddComm(comm Comm) {
	c.sizesMu.Lock()
	defer c.sizesMu.Unlock()
	old := *c.sizes.Load()
	m := make(map[uint32]int, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[comm.ID()] = comm.Size()
	c.sizes.Store(&m)
}

func (c *Collector) worldSize(comm uint32) int {
	if n, ok := (*c.sizes.Load())[comm]; ok {
		return n
	}
	return c.cfg.worldSize
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.all {
		m.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.all {
		m.Collect(ch)
	}
}

// Consume updates the metrics from recs. A scrape does not wait for the
// fold: the per-transfer link series are summed over the batch and
// published once at its end (a scrape sees whole batches), the others are
// safe for concurrent use.
func (c *Collector) Consume(_ context.Context, recs []flowtel.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.cfg.window; w != nil {
		c.windowFold = w.FoldInto((*view)(c), recs)
	} else {
		c.fold.Add(recs)
	}
	c.publish()
	return nil
}

// publish hands the link and collective updates summed over a batch to
// their series: an atomic update a series per batch, where one a transfer
// (and three histograms a call) cost as much as the fold itself (the 2-core
// VM's exporter profile, issue 34).
func (c *Collector) publish() {
	c.publishColls()
	if len(c.dirty) == 0 {
		return
	}
	c.linkLatency.mu.Lock()
	for _, l := range c.dirty {
		p := &l.pend
		for d := range p.bytes {
			if l.bytes[d] == nil {
				continue
			}
			if p.bytes[d] > 0 {
				l.bytes[d].Add(float64(p.bytes[d]))
			}
			for i, n := range p.wrs[d] {
				if n > 0 {
					l.wrs[d][i].Add(float64(n))
				}
			}
			l.latency[d].add(&p.lat[d])
		}
		if p.hasBacklog {
			l.backlog.Set(float64(p.backlog))
		}
		p.reset()
	}
	c.linkLatency.mu.Unlock()
	clear(c.dirty)
	c.dirty = c.dirty[:0]
}

func (c *Collector) publishColls() {
	if len(c.dirtyColls) == 0 {
		return
	}
	for _, s := range c.dirtyColls {
		p := &s.pend
		for i, n := range p.count {
			if n > 0 {
				s.count[i].Add(float64(n))
			}
		}
		if p.bytes > 0 {
			s.bytes.Add(float64(p.bytes))
		}
	}
	for h, v := range [...]*histVec{collBusBW: c.busBW, collAlgBW: c.algBW, collExec: c.execTime} {
		v.mu.Lock()
		for _, s := range c.dirtyColls {
			s.hist[h].add(&s.pend.hist[h])
		}
		v.mu.Unlock()
	}
	for _, s := range c.dirtyColls {
		s.pend.reset()
	}
	clear(c.dirtyColls)
	c.dirtyColls = c.dirtyColls[:0]
}

// touch marks l as having updates to publish and returns them.
func (c *Collector) touch(l *link) *pending {
	if !l.pend.dirty {
		l.pend.dirty = true
		c.dirty = append(c.dirty, l)
	}
	return &l.pend
}

// Shutdown implements flowtel.Sink; the metrics stay readable. Calls whose
// end never came are not observed: they have no time to report.
func (c *Collector) Shutdown(context.Context) error { return nil }

// Handler returns an HTTP handler serving the collector's metrics, with the
// Go runtime and process metrics, in the Prometheus text and OpenMetrics
// formats: mount it on /metrics.
func (c *Collector) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true})
}

// Stats are counters of the collector itself.
type Stats struct {
	Collectives uint64 // collectives observed
	Late        uint64 // collective records that came after their collective was observed
	Links       int    // links kept apart
	Folded      uint64 // records of links beyond WithMaxLinks (reported as peer="other")
}

// Stats returns the collector's own counters.
func (c *Collector) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	fs := c.windowFold
	if c.fold != nil {
		fs = c.fold.Stats()
	}
	return Stats{Collectives: c.collsObserved.Load(), Late: fs.LateCalls, Links: len(c.st.links), Folded: c.st.folded}
}

// state ---------------------------------------------------------------------

// view is the Collector as a handler of its fold's events (its methods are
// not the Collector's API).
type view Collector

var _ flowtel.Handler = (*view)(nil)

type linkKey struct {
	comm    uint32
	rank    int32
	peer    int32
	channel uint16
	path    flowtel.Path
}

// link holds a link's resolved series and its credit waits.
type link struct {
	key     linkKey
	bytes   [2]prometheus.Counter
	wrs     [2][4]prometheus.Counter // by direction and status; resolved lazily
	latency [2]*histSeries
	backlog prometheus.Gauge
	credit  prometheus.Counter
	labels  []string // comm, rank, peer, channel, path
	waits   flowtel.WaitSpans
	pend    pending // this batch's updates, published at its end
}

// pending are a link's updates of one batch, not yet published.
type pending struct {
	dirty      bool
	hasBacklog bool
	backlog    uint32
	bytes      [2]uint64
	wrs        [2][4]uint64
	lat        [2]histCounts // allocated with the direction's series (Collector.dir)
}

// reset empties p for the next batch, keeping its histograms' buckets.
func (p *pending) reset() {
	p.dirty, p.hasBacklog, p.backlog = false, false, 0
	p.bytes, p.wrs = [2]uint64{}, [2][4]uint64{}
	for d := range p.lat {
		clear(p.lat[d].buckets)
		p.lat[d].count, p.lat[d].sum = 0, 0
	}
}

// histVec is a histogram vector the collector sums per batch (a
// prometheus.Histogram takes atomic updates an observation) and a scrape
// reads under mu, which a batch holds only to publish.
type histVec struct {
	desc   *prometheus.Desc
	bounds []float64
	mu     sync.Mutex
	series []*histSeries
}

// histSeries is one series of a histVec, as published.
type histSeries struct {
	labels []string
	histCounts
}

// histCounts are a histogram's counts: per bucket of its bounds (not
// cumulative; above the last only in count), their number and sum.
type histCounts struct {
	buckets []uint64
	count   uint64
	sum     float64
}

func newHistCounts(bounds []float64) histCounts {
	return histCounts{buckets: make([]uint64, len(bounds))}
}

func (h *histCounts) observe(bounds []float64, v float64) {
	if i := bucketOf(bounds, v); i < len(h.buckets) {
		h.buckets[i]++
	}
	h.count++
	h.sum += v
}

// bucketOf is sort.SearchFloat64s(bounds, v), the first bound at or above
// v, searched from the lowest: the fold observes a few histograms a call,
// and small calls, whose values sit in the low buckets, find theirs in a
// few compares where the binary search's closure calls cost more. A value
// above every bound, or NaN, is past them all, as with the binary search.
func bucketOf(bounds []float64, v float64) int {
	if len(bounds) == 0 || !(v <= bounds[len(bounds)-1]) {
		return len(bounds)
	}
	i := 0
	for bounds[i] < v {
		i++
	}
	return i
}

func (h *histCounts) add(o *histCounts) {
	for i, n := range o.buckets {
		h.buckets[i] += n
	}
	h.count += o.count
	h.sum += o.sum
}

func (v *histVec) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

func (v *histVec) Collect(ch chan<- prometheus.Metric) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, s := range v.series {
		cum, n := make(map[float64]uint64, len(v.bounds)), uint64(0)
		for i, le := range v.bounds {
			n += s.buckets[i]
			cum[le] = n
		}
		ch <- prometheus.MustNewConstHistogram(v.desc, s.count, s.sum, cum, s.labels...)
	}
}

func (v *histVec) newSeries(labels []string) *histSeries {
	s := &histSeries{labels: labels, histCounts: newHistCounts(v.bounds)}
	v.mu.Lock()
	v.series = append(v.series, s)
	v.mu.Unlock()
	return s
}

// The histograms of a collective series.
const (
	collBusBW = iota
	collAlgBW
	collExec
)

type collSeries struct {
	hist   [3]*histSeries        // bus and algorithm bandwidth, execution time
	bytes  prometheus.Counter    //
	count  [3]prometheus.Counter // ok, error, flushed: the statuses a call ends with
	labels []string
	pend   collPending // this batch's updates, published at its end
}

// collPending are a collective series' updates of one batch.
type collPending struct {
	dirty bool
	count [3]uint64
	bytes uint64
	hist  [3]histCounts
}

func (p *collPending) reset() {
	p.dirty, p.count, p.bytes = false, [3]uint64{}, 0
	for i := range p.hist {
		clear(p.hist[i].buckets)
		p.hist[i].count, p.hist[i].sum = 0, 0
	}
}

type collSeriesKey struct {
	comm uint32
	rank int32
	op   flowtel.Op
	algo flowtel.Algorithm
	size uint8
}

type state struct {
	links  map[linkKey]*link
	other  map[linkKey]*link // folded links, keyed with peer -1
	byQP   []qpLink          // the link of each QP's latest event, by the fold's QPIndex
	series map[collSeriesKey]*collSeries
	// The series of the latest call observed: a rank's calls come in runs
	// of one kind and size, and the map lookup cost a small call's fold as
	// much as its five histogram observations (BenchmarkConsumeSmallCalls'
	// profile).
	lastKey    collSeriesKey
	lastSeries *collSeries
	comms      map[uint32]string // comm label values
	folded     uint64
}

func (s *state) init() {
	s.links = map[linkKey]*link{}
	s.other = map[linkKey]*link{}
	s.series = map[collSeriesKey]*collSeries{}
	s.comms = map[uint32]string{}
}

func (c *Collector) commLabel(id uint32) string {
	if l, ok := c.st.comms[id]; ok {
		return l
	}
	l := Other
	if len(c.st.comms) < c.cfg.maxComms {
		l = flowtel.JobID(id)
	}
	c.st.comms[id] = l
	return l
}

// link returns the series of link k, folding links beyond the bound into
// peer="other".
func (c *Collector) link(k linkKey) *link {
	if l := c.st.links[k]; l != nil {
		return l
	}
	peer := strconv.Itoa(int(k.peer))
	m := c.st.links
	if len(c.st.links) >= c.cfg.maxLinks {
		c.st.folded++
		k.peer = -1
		if l := c.st.other[k]; l != nil {
			return l
		}
		peer, m = Other, c.st.other
	}
	lv := []string{c.commLabel(k.comm), strconv.Itoa(int(k.rank)), peer, strconv.Itoa(int(k.channel)), strconv.Itoa(int(k.path))}
	l := &link{key: k, labels: lv}
	l.backlog = c.linkBacklog.WithLabelValues(lv...)
	l.credit = c.linkCreditWait.WithLabelValues(lv...)
	// The fault counters exist at 0 from the link's first record, so that
	// a rate over them is 0 rather than no data until the first fault.
	for _, v := range []*prometheus.CounterVec{c.failovers, c.failbacks, c.linkDowns, c.linkUps} {
		v.WithLabelValues(lv...)
	}
	m[k] = l
	return l
}

type qpLink struct {
	key linkKey
	l   *link
}

// qpLink returns the link of an event on the QP with the fold's index idx,
// remembering it per QP so that most events need no map lookup.
func (c *Collector) qpLink(idx uint32, comm uint32, lk flowtel.LinkKey) *link {
	k := linkKey{comm, lk.Rank, lk.Peer, lk.Channel, lk.Path}
	for int(idx) >= len(c.st.byQP) {
		c.st.byQP = append(c.st.byQP, qpLink{})
	}
	if q := &c.st.byQP[idx]; q.l != nil && q.key == k {
		return q.l
	}
	l := c.link(k)
	c.st.byQP[idx] = qpLink{k, l}
	return l
}

var dirNames = [2]string{"send", "recv"}

// dir resolves the link's series of direction d (0 send, 1 recv) on first
// use, so a link used one way exports no series for the other. The WR
// counters of every status start at 0 with it: failed WRs are then a rate
// of 0, not missing, until one fails.
func (c *Collector) dir(l *link, d flowtel.Dir) {
	if l.bytes[d] == nil {
		dl := append(append([]string(nil), l.labels...), dirNames[d])
		l.bytes[d] = c.linkBytes.WithLabelValues(dl...)
		l.latency[d] = c.linkLatency.newSeries(dl)
		l.pend.lat[d] = newHistCounts(timeBuckets)
		for i := range l.wrs[d] {
			l.wrs[d][i] = c.linkWRs.WithLabelValues(append(append([]string(nil), dl...), flowtel.Status(i).String())...)
		}
	}
}

// statusIndex is st's index in link.wrs: a status beyond them counts as an
// error.
func statusIndex(st flowtel.Status) int {
	if i := int(st); i < 4 {
		return i
	}
	return int(flowtel.StatusError)
}

func (v *view) Posted(t *flowtel.Transfer) {
	c := (*Collector)(v)
	p := c.touch(c.qpLink(t.QPIndex, t.Comm, t.Link))
	p.backlog, p.hasBacklog = t.Depth, true
}

func (v *view) Completed(t *flowtel.Transfer) {
	c := (*Collector)(v)
	l := c.qpLink(t.QPIndex, t.Comm, t.Link)
	d := t.Link.Dir
	c.dir(l, d)
	p := c.touch(l)
	p.backlog, p.hasBacklog = t.Depth, true
	p.wrs[d][statusIndex(t.Status)]++
	if t.Status == flowtel.StatusOK {
		p.bytes[d] += t.Bytes
	}
	if lat, ok := t.LatencyNs(); ok {
		p.lat[d].observe(timeBuckets, float64(lat)/1e9)
	}
}

func (v *view) WaitBegan(w *flowtel.CreditWait) {
	c := (*Collector)(v)
	l := c.qpLink(w.QPIndex, w.Comm, w.Link)
	p := c.touch(l)
	p.backlog, p.hasBacklog = w.Depth, true
	l.waits.Began(w)
}

func (v *view) WaitEnded(w *flowtel.CreditWait) {
	c := (*Collector)(v)
	l := c.qpLink(w.QPIndex, w.Comm, w.Link)
	if ns := l.waits.Ended(w); ns > 0 {
		l.credit.Add(float64(ns) / 1e9)
	}
}

func (v *view) PathChanged(p *flowtel.PathChange) {
	c := (*Collector)(v)
	lv := c.link(linkKey{p.Comm, p.Link.Rank, p.Link.Peer, p.Link.Channel, p.Link.Path}).labels
	switch p.Kind {
	case flowtel.KindFailover:
		c.failovers.WithLabelValues(lv...).Inc()
	case flowtel.KindFailback:
		c.failbacks.WithLabelValues(lv...).Inc()
	case flowtel.KindLinkDown:
		c.linkDowns.WithLabelValues(lv...).Inc()
	case flowtel.KindLinkUp:
		c.linkUps.WithLabelValues(lv...).Inc()
	}
}

func (v *view) Lost(x *flowtel.Lost) { v.lost.Add(float64(x.Records)) }

func (v *view) CallBegan(*flowtel.Call) {}

func (v *view) Gap(*flowtel.Gap) {}

// CallEnded observes a finished call. One whose end never came (its parts
// were not all seen) is not observed: it has no time to report.
func (v *view) CallEnded(o *flowtel.Call) {
	c := (*Collector)(v)
	if !o.Complete && o.Ended == 0 {
		return
	}
	c.collsObserved.Add(1)
	sk := collSeriesKey{o.Comm, o.Rank, o.Op, o.Algo, sizeBucket(o.Bytes)}
	s := c.st.lastSeries
	if s == nil || c.st.lastKey != sk {
		s = c.st.series[sk]
	}
	if s == nil {
		lv := []string{c.commLabel(o.Comm), strconv.Itoa(int(o.Rank)), o.Op.String(), o.Algo.String(), sizeLabel(sk.size)}
		s = &collSeries{labels: lv, bytes: c.collBytes.WithLabelValues(lv...)}
		for h, v := range [...]*histVec{collBusBW: c.busBW, collAlgBW: c.algBW, collExec: c.execTime} {
			s.hist[h] = v.newSeries(lv)
			s.pend.hist[h] = newHistCounts(v.bounds)
		}
		// Every status a call ends with starts at 0 with the series, so
		// that a failure rate is 0 rather than no data.
		for i := range s.count {
			s.count[i] = c.collCount.WithLabelValues(append(append([]string(nil), lv...), flowtel.Status(i).String())...)
		}
		c.st.series[sk] = s
	}
	c.st.lastKey, c.st.lastSeries = sk, s
	st := int(o.Status)
	if st >= len(s.count) { // no call ends retransmitted: take it for a failure
		st = int(flowtel.StatusError)
	}
	p := &s.pend
	if !p.dirty {
		p.dirty = true
		c.dirtyColls = append(c.dirtyColls, s)
	}
	p.count[st]++
	if o.Status != flowtel.StatusOK || !o.Complete {
		return
	}
	p.bytes += o.Bytes
	d := o.DurationNs()
	if d <= 0 {
		return
	}
	p.hist[collExec].observe(timeBuckets, float64(d)/1e9)
	if algbw := o.AlgBW(); algbw > 0 {
		p.hist[collAlgBW].observe(bwBuckets, algbw)
		if n := c.worldSize(o.Comm); n > 0 {
			if f := flowtel.BusBWFactor(o.Op, n); f > 0 {
				p.hist[collBusBW].observe(bwBuckets, algbw*f)
			}
		}
	}
}

// sizeBucket is the power-of-4 bucket of n: 0 for 0 bytes, 1+k for
// [4^k, 4^(k+1)), up to 17 for 4 GiB and more.
func sizeBucket(n uint64) uint8 {
	if n == 0 {
		return 0
	}
	k := 0
	for n >= 4 && k < 16 {
		n >>= 2
		k++
	}
	return uint8(k + 1)
}

// sizeLabel names a size bucket by its lower bound: 0B, 1B, 4B, … 1KiB, …
func sizeLabel(b uint8) string {
	if b == 0 {
		return "0B"
	}
	v := uint64(1) << (2 * (b - 1))
	for _, u := range []string{"B", "KiB", "MiB", "GiB"} {
		if v < 1024 || u == "GiB" {
			return strconv.FormatUint(v, 10) + u
		}
		v >>= 10
	}
	return ""
}

// SizeLabels lists the message_size label values, smallest first.
func SizeLabels() []string {
	out := make([]string, 18)
	for b := range out {
		out[b] = sizeLabel(uint8(b))
	}
	return out
}
