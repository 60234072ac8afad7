package prom

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vccl-go/vccl/flowtel"
)

// Defaults.
const (
	DefaultMaxLinks = 1024
	DefaultMaxComms = 16
	DefaultLinger   = 100 * time.Millisecond

	// maxPending bounds the posts waiting for their completion per QP and
	// direction, and maxOpen the collectives waiting for their end.
	maxPending = 1 << 16
	maxOpen    = 4096
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
	linger    time.Duration
	now       func() time.Time
}

// WithWorldSize sets the world size of communicators not registered with
// AddComm (bus bandwidth needs it).
func WithWorldSize(n int) Option { return func(c *config) { c.worldSize = n } }

// WithMaxLinks bounds the links kept apart (default DefaultMaxLinks); the
// traffic of further links is reported with peer="other".
func WithMaxLinks(n int) Option { return func(c *config) { c.maxLinks = n } }

// WithMaxComms bounds the communicators kept apart (default
// DefaultMaxComms); further ones are reported as comm="other".
func WithMaxComms(n int) Option { return func(c *config) { c.maxComms = n } }

// WithLinger sets how long a collective that ran on fewer channels than its
// communicator has waits, once its parts have ended, for a late part.
// Default DefaultLinger.
func WithLinger(d time.Duration) Option { return func(c *config) { c.linger = d } }

// Collector is a flowtel.Sink and a prometheus.Collector. See the package
// documentation for its metrics.
type Collector struct {
	cfg config

	busBW, algBW, execTime *prometheus.HistogramVec
	collBytes, collCount   *prometheus.CounterVec

	linkBytes, linkWRs       *prometheus.CounterVec
	linkLatency              *prometheus.HistogramVec
	linkBacklog              *prometheus.GaugeVec
	linkCreditWait           *prometheus.CounterVec
	failovers, failbacks     *prometheus.CounterVec
	linkDowns, linkUps       *prometheus.CounterVec
	lost                     prometheus.Counter
	all                      []prometheus.Collector
	sizes                    atomic.Pointer[map[uint32]int] // copy on write
	sizesMu                  sync.Mutex
	mu                       sync.Mutex // the state below: Consume, and the sweep in Collect
	st                       state
	collsObserved, collsLate atomic.Uint64
}

var (
	_ flowtel.Sink         = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)

// Histogram buckets.
var (
	bwBuckets      = prometheus.ExponentialBuckets(1.0/64, 2, 17) // 1/64 .. 1024 GB/s
	execBuckets    = prometheus.ExponentialBuckets(1, 4, 13)      // 1µs .. 16.8s, in µs
	latencyBuckets = prometheus.ExponentialBuckets(1e-6, 4, 13)   // 1µs .. 16.8s, in s
	collLabels     = []string{"comm", "rank", "collective", "algorithm", "message_size"}
	linkLabels     = []string{"comm", "rank", "peer", "channel", "path"}
	linkDirLabels  = append(append([]string(nil), linkLabels...), "direction")
)

// New returns a collector. Register it with a prometheus.Registerer, or
// serve it with Handler; feed it with flowtel.Collector.AddSink.
func New(opts ...Option) *Collector {
	cfg := config{maxLinks: DefaultMaxLinks, maxComms: DefaultMaxComms, linger: DefaultLinger, now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.maxLinks = max(cfg.maxLinks, 1)
	cfg.maxComms = max(cfg.maxComms, 1)
	if cfg.linger <= 0 {
		cfg.linger = DefaultLinger
	}
	hist := func(name, help string, buckets []float64, labels []string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	c := &Collector{
		cfg:       cfg,
		busBW:     hist("vccl_bus_bandwidth_gbs", "Bus bandwidth of collectives in GB/s (nccl-tests' busbw).", bwBuckets, collLabels),
		algBW:     hist("vccl_algorithm_bandwidth_gbs", "Algorithm bandwidth of collectives in GB/s: payload over execution time.", bwBuckets, collLabels),
		execTime:  hist("vccl_collective_exec_time_microseconds", "Execution time of collectives, coll_begin to coll_end, in microseconds.", execBuckets, collLabels),
		collBytes: counter("vccl_collective_bytes_total", "Payload bytes of collectives that ended ok.", collLabels),
		collCount: counter("vccl_collectives_total", "Collectives ended, by status.", append(append([]string(nil), collLabels...), "status")),

		linkBytes:      counter("vccl_link_bytes_total", "Bytes of work requests completed ok on a link.", linkDirLabels),
		linkWRs:        counter("vccl_link_wrs_total", "Work requests completed on a link, by status.", append(append([]string(nil), linkDirLabels...), "status")),
		linkLatency:    hist("vccl_link_wr_latency_seconds", "Work request latency on a link, wr_post to wc, in seconds.", latencyBuckets, linkDirLabels),
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

// Collect implements prometheus.Collector. It first observes the
// collectives whose linger has passed.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	c.sweep(false)
	c.mu.Unlock()
	for _, m := range c.all {
		m.Collect(ch)
	}
}

// Consume updates the metrics from recs. It never blocks for long: it holds
// the collector's lock while it walks recs, which a scrape takes only to
// observe lingering collectives.
func (c *Collector) Consume(_ context.Context, recs []flowtel.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range recs {
		c.add(&recs[i])
	}
	c.sweep(false)
	return nil
}

// Flush observes every collective whose parts have all ended, without
// waiting for its linger.
func (c *Collector) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(true)
}

// Shutdown observes what has ended; the metrics stay readable.
func (c *Collector) Shutdown(context.Context) error {
	c.Flush()
	return nil
}

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
	return Stats{Collectives: c.collsObserved.Load(), Late: c.collsLate.Load(), Links: len(c.st.links), Folded: c.st.folded}
}

// state ---------------------------------------------------------------------

type linkKey struct {
	comm    uint32
	rank    int32
	peer    int32
	channel uint16
	path    uint8
}

type qpKey struct {
	comm uint32
	rank int32
	qp   uint32
	path uint8
	recv bool
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

// link holds a link's resolved series and its credit-wait state.
type link struct {
	bytes     [2]prometheus.Counter
	wrs       [2][4]prometheus.Counter // by direction and status; resolved lazily
	latency   [2]prometheus.Observer
	backlog   prometheus.Gauge
	credit    prometheus.Counter
	labels    []string // comm, rank, peer, channel, path
	waitOpen  int
	waitSince int64
}

type post struct {
	wrID uint64
	ts   int64
}

// fifo is the posts of one QP and direction awaiting their completion.
type fifo struct {
	q    []post
	head int
}

type coll struct {
	key             collKey
	op, algo        uint8
	begun, ended    int
	begin, end      int64
	bytes, endBytes uint64
	status          flowtel.Status
	closedAt        time.Time
	closing         bool
}

type collSeries struct {
	busBW, algBW, exec prometheus.Observer
	bytes              prometheus.Counter
	count              [4]prometheus.Counter
	labels             []string
}

type collSeriesKey struct {
	comm     uint32
	rank     int32
	op, algo uint8
	size     uint8
}

type state struct {
	links    map[linkKey]*link
	other    map[linkKey]*link // folded links, keyed with peer -1
	pending  map[qpKey]*fifo
	open     map[collKey]*coll
	closing  map[collKey]*coll
	recent   map[collKey]struct{}
	recentQ  []collKey
	channels map[commRank]int
	series   map[collSeriesKey]*collSeries
	comms    map[uint32]string // comm label values
	folded   uint64
}

func (s *state) init() {
	s.links = map[linkKey]*link{}
	s.other = map[linkKey]*link{}
	s.pending = map[qpKey]*fifo{}
	s.open = map[collKey]*coll{}
	s.closing = map[collKey]*coll{}
	s.recent = map[collKey]struct{}{}
	s.channels = map[commRank]int{}
	s.series = map[collSeriesKey]*collSeries{}
	s.comms = map[uint32]string{}
}

func (c *Collector) commLabel(id uint32) string {
	if l, ok := c.st.comms[id]; ok {
		return l
	}
	l := Other
	if len(c.st.comms) < c.cfg.maxComms {
		l = fmt.Sprintf("%08x", id)
	}
	c.st.comms[id] = l
	return l
}

// link returns the series of the link r is about, folding links beyond the
// bound into peer="other".
func (c *Collector) link(r *flowtel.Record) *link {
	k := linkKey{r.Comm, r.Rank, r.Peer, r.Channel, uint8(r.Path)}
	if l := c.st.links[k]; l != nil {
		return l
	}
	peer := strconv.Itoa(int(r.Peer))
	m := c.st.links
	if len(c.st.links) >= c.cfg.maxLinks {
		c.st.folded++
		k.peer = -1
		if l := c.st.other[k]; l != nil {
			return l
		}
		peer, m = Other, c.st.other
	}
	lv := []string{c.commLabel(r.Comm), strconv.Itoa(int(r.Rank)), peer, strconv.Itoa(int(r.Channel)), strconv.Itoa(int(r.Path))}
	l := &link{labels: lv}
	l.backlog = c.linkBacklog.WithLabelValues(lv...)
	l.credit = c.linkCreditWait.WithLabelValues(lv...)
	m[k] = l
	return l
}

var dirNames = [2]string{"send", "recv"}

// dir resolves the link's series of direction d (0 send, 1 recv) on first
// use, so a link used one way exports no series for the other.
func (c *Collector) dir(l *link, d int) {
	if l.bytes[d] == nil {
		dl := append(append([]string(nil), l.labels...), dirNames[d])
		l.bytes[d] = c.linkBytes.WithLabelValues(dl...)
		l.latency[d] = c.linkLatency.WithLabelValues(dl...)
	}
}

func (c *Collector) wrCounter(l *link, d int, st flowtel.Status) prometheus.Counter {
	i := int(st)
	if i >= len(l.wrs[d]) {
		i = int(flowtel.StatusError)
	}
	if l.wrs[d][i] == nil {
		l.wrs[d][i] = c.linkWRs.WithLabelValues(append(append([]string(nil), l.labels...), dirNames[d], flowtel.Status(i).String())...)
	}
	return l.wrs[d][i]
}

func (c *Collector) add(r *flowtel.Record) {
	switch r.Kind {
	case flowtel.KindWRPost, flowtel.KindWC, flowtel.KindCreditWait, flowtel.KindCreditGrant:
		c.addWR(r)
	case flowtel.KindCollBegin, flowtel.KindCollEnd:
		c.addColl(r)
	case flowtel.KindFailover:
		c.failovers.WithLabelValues(c.link(r).labels...).Inc()
	case flowtel.KindFailback:
		c.failbacks.WithLabelValues(c.link(r).labels...).Inc()
	case flowtel.KindLinkDown:
		c.linkDowns.WithLabelValues(c.link(r).labels...).Inc()
	case flowtel.KindLinkUp:
		c.linkUps.WithLabelValues(c.link(r).labels...).Inc()
	case flowtel.KindLost:
		c.lost.Add(float64(r.Bytes))
	}
}

func (c *Collector) addWR(r *flowtel.Record) {
	l := c.link(r)
	l.backlog.Set(float64(r.Depth))
	d := 0
	if r.IsRecv() {
		d = 1
	}
	switch r.Kind {
	case flowtel.KindWRPost:
		k := qpKey{r.Comm, r.Rank, r.QP, uint8(r.Path), d == 1}
		f := c.st.pending[k]
		if f == nil {
			f = &fifo{}
			c.st.pending[k] = f
		}
		if len(f.q)-f.head >= maxPending {
			f.head++ // the oldest post lost its completion
		}
		if f.head > 0 && f.head == len(f.q) {
			f.q, f.head = f.q[:0], 0
		} else if f.head > len(f.q)/2 && f.head > 64 {
			n := copy(f.q, f.q[f.head:])
			f.q, f.head = f.q[:n], 0
		}
		f.q = append(f.q, post{r.WrID, r.TsNs})
	case flowtel.KindWC:
		c.dir(l, d)
		c.wrCounter(l, d, r.Status).Inc()
		if r.Status == flowtel.StatusOK {
			l.bytes[d].Add(float64(r.Bytes))
		}
		f := c.st.pending[qpKey{r.Comm, r.Rank, r.QP, uint8(r.Path), d == 1}]
		if f == nil {
			return
		}
		// A QP completes each direction in order: posts before this one
		// whose completions were not seen are orphans (lost records).
		for f.head < len(f.q) && f.q[f.head].wrID < r.WrID {
			f.head++
		}
		if f.head < len(f.q) && f.q[f.head].wrID == r.WrID {
			if lat := r.TsNs - f.q[f.head].ts; lat >= 0 {
				l.latency[d].Observe(float64(lat) / 1e9)
			}
			f.head++
		}
	case flowtel.KindCreditWait:
		if l.waitOpen == 0 {
			l.waitSince = r.TsNs
		}
		l.waitOpen++
	case flowtel.KindCreditGrant:
		if l.waitOpen > 0 {
			l.waitOpen--
			if l.waitOpen == 0 && r.TsNs > l.waitSince {
				l.credit.Add(float64(r.TsNs-l.waitSince) / 1e9)
			}
		}
	}
}

func (c *Collector) addColl(r *flowtel.Record) {
	k := collKey{r.Comm, r.Rank, r.CollSeq}
	if _, ok := c.st.recent[k]; ok {
		c.collsLate.Add(1)
		return
	}
	o := c.st.open[k]
	if o == nil {
		if len(c.st.open) >= maxOpen {
			// Begins whose end never came (lost): forget them all.
			clear(c.st.open)
			clear(c.st.closing)
		}
		o = &coll{key: k, op: uint8(r.Op), algo: uint8(r.Algo)}
		c.st.open[k] = o
	}
	cr := commRank{r.Comm, r.Rank}
	if r.Kind == flowtel.KindCollBegin {
		if o.begun == 0 || r.TsNs < o.begin {
			o.begin = r.TsNs
		}
		o.begun++
		o.op, o.algo = uint8(r.Op), uint8(r.Algo)
		o.bytes += r.Bytes
		o.closing = false
		delete(c.st.closing, k)
		if n := int(r.Channel) + 1; n > c.st.channels[cr] {
			c.st.channels[cr] = n
		}
		return
	}
	if o.ended == 0 || r.TsNs > o.end {
		o.end = r.TsNs
	}
	o.ended++
	o.endBytes += r.Bytes
	o.status = max(o.status, r.Status)
	if o.ended >= o.begun {
		if o.begun >= c.st.channels[cr] {
			c.observe(o)
			return
		}
		o.closing, o.closedAt = true, c.cfg.now()
		c.st.closing[k] = o
	}
}

func (c *Collector) sweep(force bool) {
	now := c.cfg.now()
	for _, o := range c.st.closing {
		if force || now.Sub(o.closedAt) >= c.cfg.linger {
			c.observe(o)
		}
	}
}

// observe records a finished collective and forgets it.
func (c *Collector) observe(o *coll) {
	delete(c.st.open, o.key)
	delete(c.st.closing, o.key)
	c.st.recent[o.key] = struct{}{}
	c.st.recentQ = append(c.st.recentQ, o.key)
	if len(c.st.recentQ) > 4096 {
		delete(c.st.recent, c.st.recentQ[0])
		c.st.recentQ = c.st.recentQ[1:]
	}
	c.collsObserved.Add(1)

	bytes := max(o.bytes, o.endBytes)
	sk := collSeriesKey{o.key.comm, o.key.rank, o.op, o.algo, sizeBucket(bytes)}
	s := c.st.series[sk]
	if s == nil {
		lv := []string{c.commLabel(o.key.comm), strconv.Itoa(int(o.key.rank)),
			flowtel.Op(o.op).String(), flowtel.Algorithm(o.algo).String(), sizeLabel(sk.size)}
		s = &collSeries{labels: lv,
			busBW: c.busBW.WithLabelValues(lv...), algBW: c.algBW.WithLabelValues(lv...),
			exec: c.execTime.WithLabelValues(lv...), bytes: c.collBytes.WithLabelValues(lv...)}
		c.st.series[sk] = s
	}
	st := min(int(o.status), len(s.count)-1)
	if s.count[st] == nil {
		s.count[st] = c.collCount.WithLabelValues(append(append([]string(nil), s.labels...), flowtel.Status(st).String())...)
	}
	s.count[st].Inc()
	if o.status != flowtel.StatusOK || o.begun == 0 || o.ended < o.begun {
		return
	}
	s.bytes.Add(float64(bytes))
	d := o.end - o.begin
	if d <= 0 {
		return
	}
	s.exec.Observe(float64(d) / 1e3)
	if bytes == 0 {
		return
	}
	algbw := float64(bytes) / float64(d) // bytes per ns = GB/s
	s.algBW.Observe(algbw)
	if n := c.worldSize(o.key.comm); n > 0 {
		if f := flowtel.BusBWFactor(flowtel.Op(o.op), n); f > 0 {
			s.busBW.Observe(algbw * f)
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
