package live

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/flowtel"
)

// Environment variables.
const (
	// EnvAddr is where each rank serves: host:port, :port or a bare port
	// (on 127.0.0.1). With a port other than 0, rank r listens on port+r,
	// so the ranks of a host do not collide. "off" disables the endpoint.
	EnvAddr = "VCCL_TELEMETRY_ADDR"
	// EnvDir is the directory endpoints.json is written to (shared with
	// the Arrow exporter's traces).
	EnvDir = "VCCL_TELEMETRY_DIR"
)

// Defaults.
const (
	DefaultAddr           = "127.0.0.1:0"
	DefaultStreamInterval = 100 * time.Millisecond // 10 Hz
	MinStreamInterval     = 10 * time.Millisecond
	// EndpointsFile is the name of the endpoints file in the directory.
	EndpointsFile = "endpoints.json"
	// streamQueue bounds the published events waiting for one stream
	// client; past it the client misses events (counted).
	streamQueue = 256
	// writeTimeout bounds one write to a stream client.
	writeTimeout = 5 * time.Second
)

// Limits of a server: what a client, or many, can take of a rank's time.
const (
	// MaxStreams bounds the /v1/stream clients served at once; more are
	// answered 503 (Service Unavailable) with Retry-After.
	MaxStreams = 16
	// MaxConns bounds the connections open at once; more wait in the
	// kernel's backlog until one closes.
	MaxConns = 64
	// IdleTimeout closes a kept-alive connection that sends no request
	// for this long, and ReadTimeout one whose request headers take longer
	// to arrive.
	IdleTimeout = 30 * time.Second
	ReadTimeout = 10 * time.Second
)

// AddrFromEnv returns the address VCCL_TELEMETRY_ADDR asks rank to serve
// at, and false if it says "off".
func AddrFromEnv(getenv func(string) string, rank int) (string, bool, error) {
	return resolveAddr(getenv(EnvAddr), rank)
}

func resolveAddr(v string, rank int) (string, bool, error) {
	v = strings.TrimSpace(v)
	switch strings.ToLower(v) {
	case "":
		return DefaultAddr, true, nil
	case "off", "none", "false", "no":
		return "", false, nil
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		host, port = "127.0.0.1", v // a bare port
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", false, fmt.Errorf("live: %s=%q: want host:port, :port, a port or off", EnvAddr, v)
	}
	if p != 0 {
		p += rank
		if p > 65535 {
			return "", false, fmt.Errorf("live: %s=%q: port %d for rank %d is out of range", EnvAddr, v, p, rank)
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), true, nil
}

// Config configures a Server.
type Config struct {
	// Addr is the listen address (default DefaultAddr, a free port;
	// AddrFromEnv resolves VCCL_TELEMETRY_ADDR for a rank).
	Addr string
	// Info says who this rank is; the server fills URL, PID, the schema
	// version and the start time.
	Info Info
	// Window is the per-link window to serve. Nil: the server makes one
	// (sized by WindowConfig, its "now" read from Clock), which the caller
	// attaches to its collector (Server.Window); Start does, with the
	// records' sink (RecordSink). Given, whoever gave it feeds it, and
	// the records' sink too.
	Window *flowtel.Window
	// WindowConfig sizes the window the server makes (zero: flowtel's
	// defaults; telemetry passes VCCL_TELEMETRY_WINDOW's).
	WindowConfig flowtel.WindowConfig
	// Clock is the job's time base (the communicator's clock); nil: the
	// host's monotonic clock.
	Clock *flowtel.Clock
	// Collector, if set, has its counters served in /v1/info and in the
	// /metrics summary.
	Collector *flowtel.Collector
	// Metrics serves /metrics (the Prometheus exporter's handler). Nil: a
	// short text summary, until SetMetrics installs one.
	Metrics http.Handler
	// StreamInterval is the default time between two window snapshots on
	// /v1/stream (default DefaultStreamInterval; a client may ask for
	// another with ?interval=, at least MinStreamInterval).
	StreamInterval time.Duration
	// Dir is where Announce writes endpoints.json (none if empty;
	// telemetry passes VCCL_TELEMETRY_DIR).
	Dir string
	// Logger logs what goes wrong in the background (default slog.Default).
	Logger *slog.Logger
	// Bearer, when set, is the credential every request must present
	// (Authorization: Bearer …); others get 401. Start sets it, from the
	// job token (jobauth.Bearer), when the endpoint listens on an address
	// other hosts reach and the job has a token.
	Bearer string
	// IdleTimeout closes a kept-alive connection idle this long (default
	// IdleTimeout).
	IdleTimeout time.Duration
}

// Server is one rank's live telemetry endpoint.
type Server struct {
	cfg      Config
	info     Info
	window   *flowtel.Window
	records  *recordRing
	ln       net.Listener
	srv      *http.Server
	url      string
	metrics  atomic.Pointer[http.Handler]
	seq      atomic.Uint64
	done     chan struct{} // closed by Close: streams end
	closeErr error
	once     sync.Once
	served   chan struct{} // closed when Serve returns

	snapMu   sync.Mutex // streams share a snapshot taken within MinStreamInterval
	snapAt   time.Time
	snapSeq  uint64
	snapData []byte

	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	extra   map[string]func() any
	bgWG    sync.WaitGroup // background publishing
	bgStop  context.CancelFunc
	bgCtx   context.Context
	pubDone chan struct{} // closed when publishing has finished
	pubErr  error
}

type subscriber struct {
	ch     chan event
	missed atomic.Uint64
}

type event struct {
	name string
	data []byte
}

// New listens and starts serving. Close stops it.
func New(cfg Config) (*Server, error) {
	if cfg.StreamInterval <= 0 {
		cfg.StreamInterval = DefaultStreamInterval
	}
	cfg.StreamInterval = max(cfg.StreamInterval, MinStreamInterval)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = IdleTimeout
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	win := cfg.Window
	if win == nil {
		win = flowtel.NewWindow(cfg.WindowConfig, flowtel.WithWindowClock(cfg.Clock))
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("live: rank %d cannot serve telemetry: %w", cfg.Info.Rank, err)
	}
	s := &Server{
		cfg:     cfg,
		window:  win,
		records: newRecordRing(DefaultRecordRing),
		ln:      ln,
		done:    make(chan struct{}),
		served:  make(chan struct{}),
		subs:    map[*subscriber]struct{}{},
		extra:   map[string]func() any{},
		pubDone: make(chan struct{}),
	}
	s.bgCtx, s.bgStop = context.WithCancel(context.Background())
	if cfg.Metrics != nil {
		s.metrics.Store(&cfg.Metrics)
	}
	s.url = "http://" + urlHost(ln.Addr())
	s.info = cfg.Info
	s.info.URL = s.url
	s.info.PID = os.Getpid()
	s.info.SchemaVersion = flowtel.SchemaVersion
	s.info.StartedUnixNs = time.Now().UnixNano()
	if s.info.Host == "" {
		s.info.Host, _ = os.Hostname()
	}
	s.info.Auth = cfg.Bearer != ""
	wc := win.Config()
	s.info.Window = WindowInfo{N: wc.N, TNs: int64(wc.T)}
	// No ReadTimeout: it would end /v1/stream's responses too.
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: ReadTimeout,
		IdleTimeout: cfg.IdleTimeout, MaxHeaderBytes: 16 << 10}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(limitListener(ln, MaxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("live: serving telemetry stopped", "rank", cfg.Info.Rank, "err", err)
		}
	}()
	return s, nil
}

// urlHost names a listen address for a URL: an unspecified IP becomes the
// host name.
func urlHost(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

// URL returns the endpoint's base URL (http://host:port).
func (s *Server) URL() string { return s.url }

// Addr returns the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Window returns the window the server serves; attach it to the collector
// (Collector.AddSink) when the server made it.
func (s *Server) Window() *flowtel.Window { return s.window }

// Endpoint describes this server for endpoints.json and the store.
func (s *Server) Endpoint() Endpoint {
	return Endpoint{Rank: s.info.Rank, URL: s.url, Host: s.info.Host, PID: s.info.PID}
}

// SetMetrics installs the handler of /metrics (the Prometheus exporter's);
// nil restores the text summary. Safe while serving.
func (s *Server) SetMetrics(h http.Handler) {
	if h == nil {
		s.metrics.Store(nil)
		return
	}
	s.metrics.Store(&h)
}

// AddInfo adds fn's value, as JSON, under name in /v1/info's "extra" (an
// exporter's counters, say). fn is called for every request.
func (s *Server) AddInfo(name string, fn func() any) {
	s.mu.Lock()
	s.extra[name] = fn
	s.mu.Unlock()
}

// Publish sends an event to every /v1/stream client: "event: NAME" with v
// as JSON data. It never blocks: a client that is behind misses events
// (counted in its stream's "missed" events). The analyzer publishes
// findings this way ("finding").
func (s *Server) Publish(name string, v any) error {
	if strings.ContainsAny(name, "\r\n") {
		return fmt.Errorf("live: event name %q has a line break", name)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("live: event %s: %w", name, err)
	}
	ev := event{name: name, data: data}
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		select {
		case sub.ch <- ev:
		default:
			sub.missed.Add(1)
		}
	}
	return nil
}

// Info returns what /v1/info serves.
func (s *Server) Info() Info {
	info := s.info
	if c := s.cfg.Collector; c != nil {
		info.Telemetry = telemetryOf(c.Stats())
		info.Telemetry.WindowLost = s.window.Lost()
	}
	s.mu.Lock()
	if len(s.extra) > 0 {
		info.Extra = make(map[string]any, len(s.extra))
		for k, fn := range s.extra {
			info.Extra[k] = fn()
		}
	}
	s.mu.Unlock()
	return info
}

// Snapshot takes a snapshot of the window: what /v1/windows serves.
func (s *Server) Snapshot() Snapshot {
	links := s.window.Snapshot()
	snap := Snapshot{
		Rank:   s.info.Rank,
		Seq:    s.seq.Add(1),
		NowNs:  s.window.Now(),
		Window: s.info.Window,
		Lost:   s.window.Lost(),
		Links:  make([]Link, len(links)),
	}
	for i := range links {
		snap.Links[i] = linkOf(&links[i])
	}
	return snap
}

// Handler returns the server's HTTP handler: /metrics, /v1/info,
// /v1/windows, /v1/stream and /v1/records (behind the bearer check when
// Config.Bearer is set).
func (s *Server) Handler() http.Handler {
	mux := s.mux()
	if s.cfg.Bearer == "" {
		return mux
	}
	want := []byte("Bearer " + s.cfg.Bearer)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="vccl"`)
			http.Error(w, "this endpoint wants the job's bearer (vccl-top derives it from VCCL_JOB_TOKEN)", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.Info()) })
	mux.HandleFunc("GET /v1/windows", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.Snapshot()) })
	mux.HandleFunc("GET /v1/stream", s.serveStream)
	mux.HandleFunc("GET /v1/records", s.serveRecords)
	mux.HandleFunc("GET /{$}", s.serveIndex)
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (s *Server) serveIndex(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "VCCL-Go live telemetry, rank %d of %d (communicator %s)\n\n", s.info.Rank, s.info.Size, s.info.UID)
	fmt.Fprintln(w, "/metrics     metrics (Prometheus text format)")
	fmt.Fprintln(w, "/v1/info     this rank, its clock and its telemetry counters (JSON)")
	fmt.Fprintln(w, "/v1/windows  per-link sliding windows now (JSON)")
	fmt.Fprintf(w, "/v1/stream   server-sent events: windows every %v (?interval=50ms), and findings\n", s.cfg.StreamInterval)
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if h := s.metrics.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	writeSummary(w, s.Info(), s.Snapshot())
}

// writeSummary writes the stand-in /metrics: a few gauges and counters in
// the Prometheus text format, prefixed vccl_live_ so that they never clash
// with the Prometheus exporter's names, each family whole and with its
// help and type, as promtool check metrics wants them.
func writeSummary(w io.Writer, info Info, snap Snapshot) {
	fmt.Fprintln(w, "# The Prometheus exporter is not attached to this endpoint: a summary of the live windows follows.")
	family := func(name, typ, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	family("vccl_live_info", "gauge", "This rank: 1, with its rank, world size, communicator and host as labels.")
	fmt.Fprintf(w, "vccl_live_info{rank=%q,size=%q,uid=%q,host=%q} 1\n", strconv.Itoa(info.Rank), strconv.Itoa(info.Size), info.UID, info.Host)
	if t := info.Telemetry; t != nil {
		family("vccl_live_records_drained_total", "counter", "Telemetry records the collector drained from the rings.")
		fmt.Fprintf(w, "vccl_live_records_drained_total %d\n", t.Drained)
		family("vccl_live_records_ring_dropped_total", "counter", "Telemetry records dropped because a ring was full.")
		fmt.Fprintf(w, "vccl_live_records_ring_dropped_total %d\n", t.RingDropped)
		family("vccl_live_sink_dropped_records_total", "counter", "Telemetry records a sink dropped.")
		for i, sk := range t.Sinks {
			fmt.Fprintf(w, "vccl_live_sink_dropped_records_total{sink=\"%d\",type=%q} %d\n", i, sk.Sink, sk.DroppedRecords)
		}
	}
	family("vccl_live_window_lost_records", "gauge", "Records the windows know were lost.")
	fmt.Fprintf(w, "vccl_live_window_lost_records %d\n", snap.Lost)
	labels := make([]string, len(snap.Links))
	for i, l := range snap.Links {
		labels[i] = fmt.Sprintf("rank=\"%d\",peer=\"%d\",channel=\"%d\",path=\"%d\",dir=%q", l.Rank, l.Peer, l.Channel, l.Path, l.Dir)
	}
	for _, f := range []struct {
		name, help string
		value      func(l *Link) float64
	}{
		{"vccl_live_link_window_bytes", "Bytes completed on the link within its window.", func(l *Link) float64 { return float64(l.Bytes) }},
		{"vccl_live_link_bandwidth_bytes_per_second", "The link's bandwidth over its window.", func(l *Link) float64 { return l.BandwidthBps }},
		{"vccl_live_link_latency_p99_seconds", "99th percentile of the link's work request latency within its window.", func(l *Link) float64 { return float64(l.LatP99Ns) / 1e9 }},
		{"vccl_live_link_backlog", "Work requests outstanding on the link.", func(l *Link) float64 { return float64(l.Backlog) }},
		{"vccl_live_link_credit_wait_seconds", "Time within the window a send on the link waited for credit.", func(l *Link) float64 { return float64(l.CreditWaitNs) / 1e9 }},
	} {
		if len(snap.Links) == 0 {
			break
		}
		family(f.name, "gauge", f.help)
		for i := range snap.Links {
			fmt.Fprintf(w, "%s{%s} %s\n", f.name, labels[i], strconv.FormatFloat(f.value(&snap.Links[i]), 'f', -1, 64))
		}
	}
}

// serveStream serves server-sent events: a "windows" event (a Snapshot)
// every interval, and every event Publish sends. A "missed" event reports
// published events this client lost because it was behind.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request) {
	interval := s.cfg.StreamInterval
	if v := r.URL.Query().Get("interval"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < MinStreamInterval {
			http.Error(w, fmt.Sprintf("interval=%q: want a duration of at least %v", v, MinStreamInterval), http.StatusBadRequest)
			return
		}
		interval = d
	}
	rc := http.NewResponseController(w)
	sub := &subscriber{ch: make(chan event, streamQueue)}
	s.mu.Lock()
	select {
	case <-s.done:
		s.mu.Unlock()
		http.Error(w, "the endpoint is closing", http.StatusServiceUnavailable)
		return
	default:
	}
	if len(s.subs) >= MaxStreams {
		s.mu.Unlock()
		w.Header().Set("Retry-After", "2")
		http.Error(w, fmt.Sprintf("%d streams are open already", MaxStreams), http.StatusServiceUnavailable)
		return
	}
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	defer func() {
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
	}()

	send := func(name string, id uint64, data []byte) bool {
		rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		var err error
		if id > 0 {
			_, err = fmt.Fprintf(w, "event: %s\nid: %d\ndata: %s\n\n", name, id, data)
		} else {
			_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
		}
		if err == nil {
			err = rc.Flush()
		}
		return err == nil
	}
	windows := func() bool {
		seq, data := s.streamSnapshot()
		return send("windows", seq, data)
	}
	// Tell the client to reconnect after a second, and send the first
	// snapshot at once.
	fmt.Fprintf(w, "retry: 1000\n\n")
	if !windows() {
		return
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var reported uint64
	for {
		select {
		case <-tick.C:
			if m := sub.missed.Load(); m != reported {
				data, _ := json.Marshal(map[string]uint64{"missed": m})
				if !send("missed", 0, data) {
					return
				}
				reported = m
			}
			if !windows() {
				return
			}
		case ev := <-sub.ch:
			if !send(ev.name, 0, ev.data) {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		}
	}
}

// streamSnapshot returns the encoded snapshot the streams send: one taken
// within the last MinStreamInterval if there is one, so that however many
// streams are open the window is read at most once per MinStreamInterval.
func (s *Server) streamSnapshot() (uint64, []byte) {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.snapData != nil && time.Since(s.snapAt) < MinStreamInterval {
		return s.snapSeq, s.snapData
	}
	snap := s.Snapshot()
	s.snapData, _ = json.Marshal(snap)
	s.snapSeq, s.snapAt = snap.Seq, time.Now()
	return s.snapSeq, s.snapData
}

// Go runs fn in the background until the server closes: fn's context ends
// at Close, which waits for fn to return.
func (s *Server) Go(fn func(ctx context.Context)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return // closed: fn would start after Close's wait
	default:
	}
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		fn(s.bgCtx)
	}()
}

// Close stops publishing and serving: streams end, then the server shuts
// down within ctx.
func (s *Server) Close(ctx context.Context) error {
	s.once.Do(func() {
		s.bgStop()
		s.mu.Lock()
		close(s.done)
		s.mu.Unlock()
		err := s.srv.Shutdown(ctx)
		if err != nil {
			s.srv.Close()
		}
		s.bgWG.Wait()
		s.closeErr = err
	})
	return s.closeErr
}

// Store is where ranks publish their endpoints: the rendezvous store
// (*bootstrap.Client has these methods). An alias, so that it is the type
// collective.Comm's Store method returns.
type Store = interface {
	Set(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
}

var _ Store = (*bootstrap.Client)(nil)

// StoreKey is the key rank publishes its endpoint under, for the
// communicator with unique id uid. It is public (observers such as vccl-top may read it) and bound to the
// rank: only that rank's store connection may write it, once.
func StoreKey(uid string, rank int) string {
	return bootstrap.RankKey("vccl/"+uid+"/pub/live", rank)
}

// PublishStore sets ep under StoreKey(uid, ep.Rank).
func PublishStore(ctx context.Context, st Store, uid string, ep Endpoint) error {
	b, _ := json.Marshal(ep)
	if err := st.Set(ctx, StoreKey(uid, ep.Rank), b); err != nil {
		return fmt.Errorf("live: publishing rank %d's endpoint: %w", ep.Rank, err)
	}
	return nil
}

// GatherStore waits for the endpoint of every rank of a communicator of
// size ranks in the store, within ctx.
func GatherStore(ctx context.Context, st Store, uid string, size int) ([]Endpoint, error) {
	eps := make([]Endpoint, size)
	for r := range size {
		b, err := st.Get(ctx, StoreKey(uid, r))
		if err != nil {
			return nil, fmt.Errorf("live: waiting for rank %d's endpoint: %w", r, err)
		}
		if err := json.Unmarshal(b, &eps[r]); err != nil {
			return nil, fmt.Errorf("live: rank %d's endpoint: %w", r, err)
		}
	}
	return eps, nil
}
