package collective

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/jobauth"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/ft"
	"github.com/vccl-go/vccl/transport/tcp"
)

// Environment variables a launcher or user sets; options given to New take
// precedence. The README keeps the table of every variable and its default.
const (
	EnvTransport = "VCCL_TRANSPORT"     // auto (default), loop, shm or tcp
	EnvAlgo      = "VCCL_ALGO"          // auto (default), ring, tree, rd or direct
	EnvChannels  = "VCCL_NCHANNELS"     // channels (parallel rings), default 1
	EnvChunk     = "VCCL_CHUNK_SIZE"    // pipeline chunk in bytes, default 512 KiB
	EnvCheck     = "VCCL_CHECK"         // signature check: 1 (default) or 0
	EnvTimeout   = "VCCL_TIMEOUT"       // deadline of calls without one, default 5m
	EnvIfname    = "VCCL_SOCKET_IFNAME" // interface(s) for TCP
)

// EnvFT set to 1 gives TCP links a hot-standby backup path (transport/ft).
const EnvFT = "VCCL_FAULT_TOLERANCE"

// The job token: VCCL_JOB_TOKEN, or VCCL_JOB_TOKEN_FILE naming a file that
// holds it, authenticates every connection of the job. A job whose store or
// transport address is not loopback refuses to start without one, unless
// VCCL_INSECURE_NO_TOKEN=1 says the network is trusted.
const (
	EnvToken     = jobauth.TokenVar
	EnvTokenFile = jobauth.TokenFileVar
	EnvInsecure  = jobauth.InsecureVar
)

// Defaults.
const (
	DefaultTimeout = 5 * time.Minute
	DefaultChunk   = 512 << 10
)

// Option configures a communicator.
type Option func(*options)

type options struct {
	rank, size int
	rankSet    bool
	master     string
	token      string
	transport  string
	backend    transport.Backend // WithBackend's; used where transport names it
	channels   int
	algo       Algorithm
	chunk      int
	check      bool
	timeout    time.Duration
	telemetry  bool
	collector  *flowtel.Collector
	attach     bool // run the registered TelemetryAttachers
	logger     *slog.Logger
	ifname     string
	sock       tcp.Config // socket options of tcp and ft links (Interfaces is ifname's)
	ft         bool
	ftParams   ft.Params
	clock      flowtel.ClockSource
	hostID     string // overrides host detection (tests)
	errs       []error
	insecure   bool // run without a token on addresses that are not loopback
	served     bool // the store at master is served already (WithServedStore)
}

// WithRank sets this process's rank and the world size.
func WithRank(rank, size int) Option {
	return func(o *options) { o.rank, o.size, o.rankSet = rank, size, true }
}

// WithMaster sets the rendezvous address host:port (rank 0 serves it).
func WithMaster(addr string) Option { return func(o *options) { o.master = addr } }

// WithServedStore says that the rendezvous store at WithMaster's address
// is served already, by the process that made the job's id (as a C API's
// unique id is, like NCCL's root): rank 0 dials it as every rank does
// instead of serving it.
func WithServedStore() Option { return func(o *options) { o.served = true } }

// WithToken sets the job token every connection of the job proves it holds
// (default: VCCL_JOB_TOKEN or VCCL_JOB_TOKEN_FILE).
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithInsecureNoToken(true) lets the job run without a token although its
// store or transport addresses are not loopback: anyone who reaches them
// could join, abort or read the job. Only for a network where every host is
// trusted (VCCL_INSECURE_NO_TOKEN=1).
func WithInsecureNoToken(on bool) Option { return func(o *options) { o.insecure = on } }

// WithTransport forces a transport: "loop", "shm", "tcp" or "auto".
func WithTransport(name string) Option { return func(o *options) { o.transport = name } }

// WithChannels sets the number of channels (parallel rings, each with its own
// progress engine and connections).
func WithChannels(n int) Option { return func(o *options) { o.channels = n } }

// WithAlgorithm forces an algorithm where the operation supports it.
func WithAlgorithm(a Algorithm) Option { return func(o *options) { o.algo = a } }

// WithChunkSize sets the pipeline chunk in bytes.
func WithChunkSize(n int) Option { return func(o *options) { o.chunk = n } }

// WithSignatureCheck switches the cross-rank call check on or off.
func WithSignatureCheck(on bool) Option { return func(o *options) { o.check = on } }

// WithTimeout sets the deadline for calls whose context has none, and for
// bootstrap.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithTelemetry switches flow telemetry on or off (default: VCCL_TELEMETRY).
func WithTelemetry(on bool) Option { return func(o *options) { o.telemetry = on } }

// WithCollector sends telemetry to c (and switches it on). Without it a
// communicator with telemetry on makes its own, reachable with Collector.
func WithCollector(c *flowtel.Collector) Option {
	return func(o *options) { o.collector, o.telemetry = c, true }
}

// WithTelemetryAttachers(false) keeps the attachers registered with
// RegisterTelemetry off this communicator, for a program that attaches its
// exporters itself (telemetry.Attach) and would otherwise get them twice.
// Default true.
func WithTelemetryAttachers(on bool) Option { return func(o *options) { o.attach = on } }

// WithLogger sets where the communicator logs.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithSocketInterface names the interface(s) TCP binds to (VCCL_SOCKET_IFNAME).
func WithSocketInterface(ifname string) Option { return func(o *options) { o.ifname = ifname } }

// WithFaultTolerance gives every TCP link a primary path on the first
// interface of WithSocketInterface and a connected hot-standby backup on the
// second (transport/ft): a failed path is detected, its unacknowledged
// work requests are replayed on the backup, and traffic returns when the
// primary heals (VCCL_FAULT_TOLERANCE). Every rank must agree. Off, it
// costs nothing.
func WithFaultTolerance(on bool) Option { return func(o *options) { o.ft = on } }

// defaultOptions is the configuration the environment, read through getenv,
// gives before options: each layer's variables parsed by its own parser
// (tcp.ParseConfig, ft.ParamsFromEnv, flowtel's), into values that New
// passes down. Errors name the variable and wait for validate.
func defaultOptions(getenv func(string) string) options {
	o := options{channels: 1, chunk: DefaultChunk, check: true, timeout: DefaultTimeout,
		attach: true, logger: slog.Default(), transport: "auto"}
	var err error
	if o.telemetry, err = flowtel.ParseEnabled(getenv(flowtel.EnvTelemetry)); err != nil {
		o.errs = append(o.errs, fmt.Errorf("collective: %w", err))
	}
	if o.clock, err = flowtel.ParseClockSource(getenv(flowtel.EnvClock)); err != nil {
		o.errs = append(o.errs, fmt.Errorf("collective: %w", err))
	}
	if o.sock, err = tcp.ParseConfig(getenv); err != nil {
		o.errs = append(o.errs, fmt.Errorf("collective: %w", err))
	}
	o.ifname = o.sock.Interfaces
	if o.ftParams, err = ft.ParamsFromEnv(getenv); err != nil {
		o.errs = append(o.errs, fmt.Errorf("collective: %w", err))
	}
	if v := getenv(EnvTransport); v != "" {
		o.transport = strings.ToLower(strings.TrimSpace(v))
	}
	envVar(&o, getenv, EnvAlgo, &o.algo, func(v string) (Algorithm, error) {
		return ParseAlgorithm(strings.ToLower(strings.TrimSpace(v)))
	})
	envVar(&o, getenv, EnvChannels, &o.channels, strconv.Atoi)
	envVar(&o, getenv, EnvChunk, &o.chunk, parseBytes)
	envVar(&o, getenv, EnvCheck, &o.check, strconv.ParseBool)
	envVar(&o, getenv, EnvTimeout, &o.timeout, parseTimeout)
	tok, err := bootstrap.TokenFromEnv(getenv)
	o.token = tok
	if err != nil {
		o.errs = append(o.errs, fmt.Errorf("collective: %w", err))
	}
	envVar(&o, getenv, EnvInsecure, &o.insecure, strconv.ParseBool)
	envVar(&o, getenv, EnvFT, &o.ft, strconv.ParseBool)
	return o
}

// envVar parses the variable name, when set, into *dst. A bad value still
// stores what parse returned; validate reports the error before New uses it.
func envVar[T any](o *options, getenv func(string) string, name string, dst *T, parse func(string) (T, error)) {
	if v := getenv(name); v != "" {
		x, err := parse(v)
		*dst = x
		o.addErr(name, v, err)
	}
}

// parseTimeout accepts a Go duration or a whole number of seconds.
func parseTimeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		if secs, err2 := strconv.Atoi(v); err2 == nil {
			return time.Duration(secs) * time.Second, nil
		}
	}
	return d, err
}

func (o *options) addErr(name, value string, err error) {
	if err != nil {
		o.errs = append(o.errs, fmt.Errorf("collective: %s=%q: %w", name, value, err))
	}
}

func (o *options) validate() error {
	if len(o.errs) > 0 {
		return o.errs[0]
	}
	switch {
	case o.size < 1:
		return fmt.Errorf("collective: world size %d, want at least 1", o.size)
	case o.rank < 0 || o.rank >= o.size:
		return fmt.Errorf("collective: rank %d out of range for world size %d", o.rank, o.size)
	case o.channels < 1 || o.channels > 64:
		return fmt.Errorf("collective: %d channels, want 1 to 64", o.channels)
	case o.chunk < 64:
		return fmt.Errorf("collective: chunk size %d bytes, want at least 64", o.chunk)
	case o.timeout <= 0:
		return fmt.Errorf("collective: timeout %v, want a positive duration", o.timeout)
	case len(o.token) > jobauth.MaxToken:
		return fmt.Errorf("collective: the job token is longer than %d bytes", jobauth.MaxToken)
	}
	if o.transport != "auto" && !o.knowsBackend(o.transport) {
		return fmt.Errorf("collective: unknown transport %q (want auto, loop, shm or tcp)", o.transport)
	}
	return nil
}

// parseBytes reads sizes like 4096, 64K, 16M, 1G.
func parseBytes(s string) (int, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "B"), "I")
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("not a byte size")
	}
	return n * mult, nil
}

// needToken refuses to go on without a job token when what (the rendezvous
// store, a transport listener) is at addr, which is not loopback.
func (o *options) needToken(ctx context.Context, what, addr string) error {
	if o.token != "" || o.insecure || jobauth.IsLoopback(ctx, addr) {
		return nil
	}
	return &NoTokenError{What: what, Addr: addr}
}

// needTokenForInterfaces refuses to go on without a job token when TCP
// would listen on an interface of ifnames (VCCL_SOCKET_IFNAME) that has an
// address other than loopback: checked before the store, so that every
// rank says so, not only the first to listen.
func (o *options) needTokenForInterfaces(ctx context.Context) error {
	if o.token != "" || o.insecure || o.ifname == "" ||
		o.transport != "auto" && o.backendNamed(o.transport).Capabilities().Reach < transport.ReachNetwork {
		return nil
	}
	for _, name := range strings.Split(o.ifname, ",") {
		name = strings.TrimSpace(name)
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			continue // the transport says what is wrong with it
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() {
				return &NoTokenError{What: "the tcp transport (" + EnvIfname + "=" + o.ifname + ")", Addr: name + " " + ipn.IP.String()}
			}
		}
	}
	return nil
}

// NoTokenError: the job would listen on an address other hosts can reach
// with no token to tell its ranks from anyone else.
type NoTokenError struct {
	What string // "the rendezvous store", "the tcp transport"
	Addr string
}

func (e *NoTokenError) Error() string {
	return fmt.Sprintf("collective: %s is at %s, which is not loopback, and no job token is set: anyone who reaches it could join, abort or read this job. "+
		"Set %s to a secret every rank shares (for example %s=$(openssl rand -hex 16); vcclrun makes one), or %s to a file holding it; "+
		"on a network where every host is trusted, %s=1 runs without one",
		e.What, e.Addr, EnvToken, EnvToken, EnvTokenFile, EnvInsecure)
}
