package otel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/vccl-go/vccl/flowtel"
)

// Environment variables read by New (besides the standard OTEL_* ones).
const (
	// EnvWREvents is the fraction of collectives, 0 to 1, whose WR records
	// become span events (default 0).
	EnvWREvents = "VCCL_OTEL_WR_EVENTS"
)

// Defaults.
const (
	DefaultServiceName      = "vccl"
	DefaultMaxOpen          = 4096
	DefaultMaxEventsPerStep = 128 // the SDK's default OTEL_SPAN_EVENT_COUNT_LIMIT

	// ScopeName is the instrumentation scope of the spans.
	ScopeName = "github.com/vccl-go/vccl/exporter/otel"
)

// Comm is what the exporter needs to know of a communicator;
// *collective.Comm has these methods.
type Comm interface {
	ID() uint32            // the id records carry in Record.Comm
	UID() string           // the full unique id, the same on every rank
	Size() int             // world size
	Clock() *flowtel.Clock // the clock its records are stamped with
}

// Rank is a communicator with this process's rank in it; *collective.Comm
// is one.
type Rank interface {
	Comm
	Rank() int
}

// Option configures an Exporter.
type Option func(*config)

type config struct {
	tp        trace.TracerProvider
	spanExp   sdktrace.SpanExporter
	protocol  string // "", "grpc", "http/protobuf", "stdout", "none"
	stdout    io.Writer
	res       *resource.Resource
	rankAttrs []attribute.KeyValue
	wrEvents  float64
	wrSet     bool
	worldSize int
	maxOpen   int
	maxEvents int
	batchOpts []sdktrace.BatchSpanProcessorOption
	getenv    func(string) string
}

// WithTracerProvider makes the exporter start its spans with tp instead of
// a provider of its own. The exporter then neither configures nor shuts tp
// down (Shutdown only flushes it, when it has a ForceFlush method), and
// trace ids are tp's: one trace per collective and rank.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithSpanExporter sends spans to e (through a batch span processor)
// instead of the exporter OTEL_TRACES_EXPORTER selects: an in-memory
// exporter in tests, say.
func WithSpanExporter(e sdktrace.SpanExporter) Option { return func(c *config) { c.spanExp = e } }

// WithProtocol selects the span exporter: "grpc" or "http/protobuf" (OTLP),
// "stdout" (the SDK's stdout exporter, as OTEL_TRACES_EXPORTER=console), or
// "none". Default: from OTEL_TRACES_EXPORTER and
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL.
func WithProtocol(p string) Option { return func(c *config) { c.protocol = p } }

// WithStdout sets where the stdout exporter writes (default os.Stdout).
func WithStdout(w io.Writer) Option { return func(c *config) { c.stdout = w } }

// WithResource sets the resource of the exporter's own provider (default:
// service.name "vccl", overridden by OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, plus the SDK's attributes and the host name).
func WithResource(r *resource.Resource) Option { return func(c *config) { c.res = r } }

// WithRank adds to the resource of the exporter's own provider what
// tells this process apart in its job: service.instance.id
// ("vccl-JOBID-rankR", as the rank's trace files are named), vccl.job.id
// (flowtel.JobID of c), vccl.rank and vccl.world_size. OTEL_RESOURCE_ATTRIBUTES
// still wins. It has no effect with WithResource or WithTracerProvider.
func WithRank(c Rank) Option {
	return func(cfg *config) {
		job := flowtel.JobID(c.ID())
		cfg.rankAttrs = []attribute.KeyValue{
			semconv.ServiceInstanceID(fmt.Sprintf("vccl-%s-rank%d", job, c.Rank())),
			keyJobID.String(job),
			keyRank.Int(c.Rank()),
			keyWorldSize.Int(c.Size()),
		}
	}
}

// WithWREvents sets the fraction (0 to 1) of collectives whose WR records
// become span events on their step spans. Default: VCCL_OTEL_WR_EVENTS (through WithEnv), or 0.
func WithWREvents(rate float64) Option {
	return func(c *config) { c.wrEvents, c.wrSet = rate, true }
}

// WithWorldSize sets the world size of communicators not registered with
// AddComm.
func WithWorldSize(n int) Option { return func(c *config) { c.worldSize = n } }

// WithMaxOpen bounds the collectives kept open; beyond it the oldest is
// exported as incomplete. Default DefaultMaxOpen.
func WithMaxOpen(n int) Option { return func(c *config) { c.maxOpen = n } }

// WithMaxEventsPerStep bounds the WR events kept per step span (the rest
// are counted in Stats). Default DefaultMaxEventsPerStep.
func WithMaxEventsPerStep(n int) Option { return func(c *config) { c.maxEvents = n } }

// WithBatchOptions passes options to the batch span processor of the
// exporter's own provider.
func WithBatchOptions(opts ...sdktrace.BatchSpanProcessorOption) Option {
	return func(c *config) { c.batchOpts = append(c.batchOpts, opts...) }
}

// WithEnv gives the exporter the environment, read through getenv by the
// program's configuration step (telemetry.ConfigFromEnv passes it): the
// OTEL_* variables that choose where spans go, and VCCL_OTEL_WR_EVENTS.
// Without it the exporter reads no environment of its own (the OTLP
// exporters of the OpenTelemetry SDK still read theirs).
func WithEnv(getenv func(string) string) Option { return func(c *config) { c.getenv = getenv } }

// Exporter is a flowtel.Sink that builds OpenTelemetry spans from records.
// See the package documentation.
type Exporter struct {
	cfg    config
	tp     trace.TracerProvider
	ownTP  *sdktrace.TracerProvider // nil with WithTracerProvider
	tracer trace.Tracer

	mu   sync.Mutex
	asm  *assembler
	shut bool

	parents parents // callers' spans by call, from CallStarted
}

var _ flowtel.Sink = (*Exporter)(nil)

// New returns an exporter configured by opts (and the environment WithEnv
// gives). It does
// not connect anywhere: the OTLP exporters connect lazily.
func New(ctx context.Context, opts ...Option) (*Exporter, error) {
	cfg := config{maxOpen: DefaultMaxOpen, maxEvents: DefaultMaxEventsPerStep, getenv: func(string) string { return "" }}
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.wrSet {
		if v := strings.TrimSpace(cfg.getenv(EnvWREvents)); v != "" {
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || r < 0 || r > 1 {
				return nil, fmt.Errorf("otel: %s=%q: want a fraction from 0 to 1", EnvWREvents, v)
			}
			cfg.wrEvents = r
		}
	}
	if cfg.wrEvents < 0 || cfg.wrEvents > 1 {
		return nil, fmt.Errorf("otel: WR event rate %v: want a fraction from 0 to 1", cfg.wrEvents)
	}
	if cfg.maxOpen < 1 {
		cfg.maxOpen = DefaultMaxOpen
	}
	if cfg.maxEvents < 0 {
		cfg.maxEvents = 0
	}
	e := &Exporter{cfg: cfg}
	if cfg.tp != nil {
		e.tp = cfg.tp
	} else {
		tp, err := newProvider(ctx, &cfg)
		if err != nil {
			return nil, err
		}
		e.tp, e.ownTP = tp, tp
	}
	e.tracer = e.tp.Tracer(ScopeName, trace.WithInstrumentationVersion("1"), trace.WithSchemaURL(semconv.SchemaURL))
	e.asm = newAssembler(&e.cfg, e.tracer, &e.parents)
	e.parents.max = cfg.maxOpen
	return e, nil
}

// newProvider builds the exporter's own tracer provider.
func newProvider(ctx context.Context, cfg *config) (*sdktrace.TracerProvider, error) {
	se := cfg.spanExp
	if se == nil {
		var err error
		se, err = spanExporterFromEnv(ctx, cfg)
		if err != nil {
			return nil, err
		}
	}
	res := cfg.res
	if res == nil {
		var err error
		res, err = resource.New(ctx,
			resource.WithAttributes(semconv.ServiceName(DefaultServiceName)),
			resource.WithAttributes(cfg.rankAttrs...),
			resource.WithTelemetrySDK(),
			resource.WithHost(),
			resource.WithProcessPID(),
			resource.WithProcessExecutableName(),
			resource.WithProcessRuntimeName(),
			resource.WithProcessRuntimeVersion(),
			resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: last, so they win
		)
		if err != nil && res == nil {
			return nil, fmt.Errorf("otel: resource: %w", err)
		}
	}
	popts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(idGenerator{}),
	}
	if se != nil {
		popts = append(popts, sdktrace.WithBatcher(se, cfg.batchOpts...))
	}
	return sdktrace.NewTracerProvider(popts...), nil
}

// spanExporterFromEnv picks the span exporter: WithProtocol, else
// OTEL_TRACES_EXPORTER and the OTLP protocol variables. It returns nil for
// "none".
func spanExporterFromEnv(ctx context.Context, cfg *config) (sdktrace.SpanExporter, error) {
	p := strings.ToLower(strings.TrimSpace(cfg.protocol))
	if p == "" && strings.EqualFold(strings.TrimSpace(cfg.getenv("OTEL_SDK_DISABLED")), "true") {
		p = "none"
	}
	if p == "" {
		switch x := strings.ToLower(strings.TrimSpace(cfg.getenv("OTEL_TRACES_EXPORTER"))); x {
		case "", "otlp":
		case "console", "stdout":
			p = "stdout"
		case "none":
			p = "none"
		default:
			return nil, fmt.Errorf("otel: OTEL_TRACES_EXPORTER=%q: want otlp, console or none", x)
		}
	}
	if p == "" {
		p = strings.ToLower(strings.TrimSpace(cfg.getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")))
		if p == "" {
			p = strings.ToLower(strings.TrimSpace(cfg.getenv("OTEL_EXPORTER_OTLP_PROTOCOL")))
		}
		if p == "" {
			p = "http/protobuf" // the specification's default
		}
	}
	switch p {
	case "grpc":
		u, err := otlpEndpoint(cfg.getenv, true)
		if err != nil {
			return nil, err
		}
		if u == "" {
			return otlptracegrpc.New(ctx)
		}
		return otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(u))
	case "http/protobuf", "http":
		u, err := otlpEndpoint(cfg.getenv, false)
		if err != nil {
			return nil, err
		}
		if u == "" {
			return otlptracehttp.New(ctx)
		}
		return otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u))
	case "stdout", "console":
		w := cfg.stdout
		if w == nil {
			w = os.Stdout
		}
		return stdouttrace.New(stdouttrace.WithWriter(w))
	case "none":
		return nil, nil
	case "http/json":
		return nil, errors.New("otel: OTLP protocol http/json is not supported by the Go exporters; use grpc or http/protobuf")
	}
	return nil, fmt.Errorf("otel: unknown OTLP protocol %q: want grpc, http/protobuf, stdout or none", p)
}

// otlpEndpoint returns the URL spans go to as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// or else OTEL_EXPORTER_OTLP_ENDPOINT gives it, or "" when neither is set
// (the exporter's default then: http://localhost:4318/v1/traces,
// localhost:4317 for gRPC). It reads them as the specification does, where
// the Go exporters alone differ: an endpoint without a scheme
// ("localhost:4318") is plain HTTP, as in the other SDKs (the Go exporters
// take "localhost" for its scheme, and then TLS), unless
// OTEL_EXPORTER_OTLP_[TRACES_]INSECURE is false. Over HTTP the general
// variable is a base URL, to which /v1/traces is appended; the traces one
// is used as it is. A gRPC endpoint of another scheme (unix:) is left to the
// exporter.
func otlpEndpoint(getenv func(string) string, grpc bool) (string, error) {
	name := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	v := strings.TrimSpace(getenv(name))
	base := v == ""
	if base {
		name = "OTEL_EXPORTER_OTLP_ENDPOINT"
		v = strings.TrimSpace(getenv(name))
	}
	if v == "" {
		return "", nil
	}
	raw := v
	if !strings.Contains(v, "://") && !(grpc && strings.HasPrefix(strings.ToLower(v), "unix:")) {
		scheme := "http"
		insecure := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE"))
		if insecure == "" {
			insecure = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_INSECURE"))
		}
		if strings.EqualFold(insecure, "false") {
			scheme = "https"
		}
		v = scheme + "://" + v
	}
	u, err := url.Parse(v)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host == "" {
		err = errors.New("no host")
	}
	if err != nil {
		return "", fmt.Errorf("otel: %s=%q: want a URL such as http://localhost:4318 (%v)", name, raw, err)
	}
	switch u.Scheme = strings.ToLower(u.Scheme); u.Scheme {
	case "http", "https":
	default:
		if grpc {
			return "", nil
		}
		return "", fmt.Errorf("otel: %s=%q: want an http:// or https:// URL", name, raw)
	}
	if base && !grpc {
		u.Path = path.Join("/", u.Path, "v1/traces")
	}
	return u.String(), nil
}

// AddComm registers a communicator: its world size, its clock (to map record
// times to wall-clock time) and its unique id (to salt trace ids). Records
// of unregistered communicators use WithWorldSize and the host's clock.
func (e *Exporter) AddComm(c Comm) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asm.addComm(c.ID(), commInfo{size: c.Size(), uid: c.UID(), epoch: epochOf(c.Clock())})
}

// CallStarted records the span in ctx, if any, as the parent of the span
// of call seq of rank in communicator comm: that collective's span is then
// a child of the caller's, in the caller's trace, rather than a root. It
// has collective.CallObserver's signature; the telemetry package passes it
// to Comm.ObserveCalls. It runs on the call's path: without a span in ctx
// it costs a context lookup, with one a short critical section.
func (e *Exporter) CallStarted(ctx context.Context, comm uint32, rank int, seq uint64) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	e.parents.put(collKey{comm, int32(rank), seq}, sc)
}

// parents holds the callers' span contexts of calls whose spans are not
// yet built, at most max of them: a call whose records never come (lost,
// or a communicator without this exporter) is forgotten after max newer
// ones.
type parents struct {
	mu   sync.Mutex
	max  int
	m    map[collKey]trace.SpanContext
	keys []collKey // ring, oldest at head
	head int
}

func (p *parents) put(k collKey, sc trace.SpanContext) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[collKey]trace.SpanContext{}
	}
	if len(p.keys) < p.max {
		p.keys = append(p.keys, k)
	} else {
		delete(p.m, p.keys[p.head])
		p.keys[p.head] = k
		p.head = (p.head + 1) % len(p.keys)
	}
	p.m[k] = sc
}

// take returns and forgets the parent of k. Its key stays in the ring
// until overwritten: deleting from a map is what bounds it.
func (p *parents) take(k collKey) (trace.SpanContext, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sc, ok := p.m[k]
	if ok {
		delete(p.m, k)
	}
	return sc, ok
}

// Consume turns records into span state and ends the spans of finished
// collectives. It never blocks on the export.
func (e *Exporter) Consume(_ context.Context, recs []flowtel.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.shut {
		return nil
	}
	for i := range recs {
		e.asm.add(&recs[i])
	}
	return nil
}

// Flush flushes the span processor (with the exporter's own provider, or
// one with a ForceFlush method). A collective's spans are ended as soon as
// its every part has ended.
func (e *Exporter) Flush(ctx context.Context) error { return e.forceFlush(ctx) }

func (e *Exporter) forceFlush(ctx context.Context) error {
	if f, ok := e.tp.(interface{ ForceFlush(context.Context) error }); ok {
		return f.ForceFlush(ctx)
	}
	return nil
}

// Shutdown exports every collective still open (those not ended as
// incomplete), then shuts the exporter's own provider down (flushing it),
// or flushes the provider given with WithTracerProvider. Later calls do
// nothing.
func (e *Exporter) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	if e.shut {
		e.mu.Unlock()
		return nil
	}
	e.asm.closeAll()
	e.shut = true
	e.mu.Unlock()
	if e.ownTP != nil {
		if err := e.ownTP.Shutdown(ctx); err != nil {
			return fmt.Errorf("otel: shutdown: %w", err)
		}
		return nil
	}
	return e.forceFlush(ctx)
}

// Stats are an Exporter's counters.
type Stats struct {
	Records      uint64 // records consumed
	Collectives  uint64 // collective spans ended
	Incomplete   uint64 // of which incomplete (begin or end not seen)
	Steps        uint64 // step spans ended
	Events       uint64 // span events added
	EventsCapped uint64 // WR events not added: over WithMaxEventsPerStep
	Evicted      uint64 // collectives exported early: more than WithMaxOpen were open
	Late         uint64 // records for a collective already exported
	Unattributed uint64 // WR records with no collective (coll_seq 0) or fault records with no open collective
	LostRecords  uint64 // records the collector reported lost (KindLost)
	Open         int    // collectives open now
}

// Stats returns the exporter's counters.
func (e *Exporter) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.asm.stats
	fs := e.asm.fold.Stats()
	s.Evicted += fs.Evicted
	s.Late += fs.LateCalls
	s.Open = len(e.asm.open)
	return s
}

// wall-clock mapping ---------------------------------------------------------

// epochOf returns what to add to a record time stamped with clk to get Unix
// nanoseconds on this host: the wall clock minus clk's reading now.
func epochOf(clk *flowtel.Clock) int64 {
	// Read the monotonic clock between two wall-clock reads and take their
	// midpoint, so the error is half the read time.
	w0 := time.Now().UnixNano()
	m := clk.Now()
	w1 := time.Now().UnixNano()
	return w0 + (w1-w0)/2 - m
}

// attribute keys.
var (
	keyComm        = attribute.Key("vccl.comm")
	keyJobID       = attribute.Key("vccl.job.id")
	keyCollSeq     = attribute.Key("vccl.coll_seq")
	keyP2P         = attribute.Key("vccl.p2p")
	keyOp          = attribute.Key("vccl.op")
	keyAlgo        = attribute.Key("vccl.algo")
	keyDtype       = attribute.Key("vccl.dtype")
	keyBytes       = attribute.Key("vccl.bytes")
	keyWorldSize   = attribute.Key("vccl.world_size")
	keyRank        = attribute.Key("vccl.rank")
	keyChannels    = attribute.Key("vccl.channels")
	keyAlgBW       = attribute.Key("vccl.algbw_gbps")
	keyBusBW       = attribute.Key("vccl.busbw_gbps")
	keyStatus      = attribute.Key("vccl.status")
	keyIncomplete  = attribute.Key("vccl.incomplete")
	keyLost        = attribute.Key("vccl.records_lost")
	keyPeer        = attribute.Key("vccl.peer")
	keyChannel     = attribute.Key("vccl.channel")
	keyStep        = attribute.Key("vccl.step")
	keyPath        = attribute.Key("vccl.path")
	keyFailedOver  = attribute.Key("vccl.failed_over")
	keySendBytes   = attribute.Key("vccl.send_bytes")
	keyRecvBytes   = attribute.Key("vccl.recv_bytes")
	keyWRs         = attribute.Key("vccl.wrs")
	keyCompletions = attribute.Key("vccl.completions")
	keyWRErrors    = attribute.Key("vccl.wr_errors")
	keyMaxDepth    = attribute.Key("vccl.max_depth")
	keyCreditWait  = attribute.Key("vccl.credit_wait_ns")
	keyWRID        = attribute.Key("vccl.wr_id")
	keyQP          = attribute.Key("vccl.qp")
	keyDir         = attribute.Key("vccl.dir")
	keyDepth       = attribute.Key("vccl.depth")
)
