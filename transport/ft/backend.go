package ft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/internal/sock"
	"github.com/vccl-go/vccl/transport/tcp"
)

// Name is the backend's name.
const Name = "ft"

// Paths is the number of paths of a link: the primary and its backup.
const Paths = 2

// Backend is the fault-tolerant TCP backend. Its zero value is ready to use:
// both paths then go over loopback, with the default thresholds. It reads
// no environment: collective.New passes what VCCL_SOCKET_IFNAME,
// VCCL_TCP_* (tcp.ParseConfig) and VCCL_FT_* (ParamsFromEnv) say.
type Backend struct {
	// Interfaces is a comma list (tcp.Config.Interfaces): the first name
	// carries the primary path, the second the backup. With one name both
	// paths use it; with none, loopback.
	Interfaces string
	// Params tunes failure detection; zero fields take the defaults.
	Params Params
	// SockBuf and Congestion are the socket buffer and congestion control
	// of every connection, as tcp.Backend's fields of those names: one rule
	// for both transports (tcp.SetupConn).
	SockBuf    int
	Congestion string
	// Logger receives path changes and refused connections (slog.Default
	// when nil).
	Logger *slog.Logger

	faults *faults // tests break paths through it; nil otherwise
}

// faults is how tests take paths down without root: a blackholed path
// neither sends nor reads and looks unacknowledged, and dials of a path
// marked down fail.
type faults struct {
	down [Paths]atomic.Bool
}

var _ transport.Backend = Backend{}

// Name returns "ft".
func (Backend) Name() string { return Name }

// Capabilities: ft reaches any host over TCP; goroutines on Go's network
// poller move the data of both paths, so Poll only collects completions.
func (Backend) Capabilities() transport.Capabilities {
	return transport.Capabilities{Reach: transport.ReachNetwork, StreamSocket: true}
}

func (b Backend) logger() *slog.Logger {
	if b.Logger != nil {
		return b.Logger
	}
	return slog.Default()
}

// ifnames returns the interface of each path ("" for none).
func (b Backend) ifnames() [Paths]string {
	var out [Paths]string
	names := strings.Split(b.Interfaces, ",")
	for i := range out {
		if i < len(names) {
			out[i] = strings.TrimSpace(names[i])
		} else {
			out[i] = out[0]
		}
	}
	return out
}

func (b Backend) params() (Params, error) {
	p := b.Params.merge(DefaultParams())
	return p, p.Validate()
}

// Listen listens once per path. lc.Addr may name both listen addresses
// ("a,b") or one, used for both; when it is "", each path listens on port 0
// of its interface's address (127.0.0.1 without one). The listener's Addr is
// the pair "primary,backup" that Dial takes.
func (b Backend) Listen(ctx context.Context, lc transport.ListenConfig) (transport.Listener, error) {
	prm, err := b.params()
	if err != nil {
		return nil, err
	}
	var addrs [Paths]string
	if lc.Addr != "" {
		parts := strings.Split(lc.Addr, ",")
		if len(parts) > Paths {
			return nil, fmt.Errorf("ft: listen address %q names more than %d addresses", lc.Addr, Paths)
		}
		for i := range addrs {
			addrs[i] = strings.TrimSpace(parts[min(i, len(parts)-1)])
		}
	} else {
		for i, name := range b.ifnames() {
			if addrs[i], err = sock.ListenAddr(name); err != nil {
				return nil, fmt.Errorf("ft: path %d: %w", i, err)
			}
		}
	}
	l := &listener{b: b, prm: prm}
	var lcfg net.ListenConfig
	for i, a := range addrs {
		ln, err := lcfg.Listen(ctx, "tcp", a)
		if err != nil {
			for _, acc := range l.acc[:i] {
				acc.Close()
			}
			return nil, fmt.Errorf("ft: listen on %s (path %d): %w", a, i, err)
		}
		// A path reconnects under its link's key: keys repeat. The key
		// carries the link's secret (collective derives it from both
		// ranks' bootstrap records), so only the link's ranks know it.
		l.acc[i] = transport.NewAcceptorConfig(ln, transport.AcceptorConfig{Token: lc.Token, Log: b.Logger, RepeatKeys: true})
	}
	return l, nil
}

// listener accepts links: one connection per path, matched by key. It stays
// open after Close while links it accepted live, since their dialler
// reconnects failed paths through it.
type listener struct {
	b   Backend
	prm Params
	acc [Paths]*transport.Acceptor

	mu     sync.Mutex
	refs   int
	closed bool
	gone   bool // acceptors closed
}

func (l *listener) Addr() string {
	return l.acc[0].Addr().String() + "," + l.acc[1].Addr().String()
}

func pathKey(key string, path int) string { return fmt.Sprintf("%s/ft%d", key, path) }

// Accept returns the link dialled under key, once both of its paths arrived.
func (l *listener) Accept(ctx context.Context, key string, cfg transport.Config) (transport.QP, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: ft listener %s", transport.ErrClosed, l.Addr())
	}
	l.refs++ // held while accepting, then by the QP
	l.mu.Unlock()
	var gens [Paths]uint64
	conns, err := eachPath(func(i int) (conn *net.TCPConn, err error) {
		conn, gens[i], err = l.acceptPath(ctx, key, i)
		return conn, err
	})
	if err != nil {
		l.release()
		return nil, err
	}
	q, err := newQP(cfg, qpSetup{b: l.b, prm: l.prm, key: key, conns: conns, gens: gens, ifnames: l.b.ifnames(),
		accs: l.acc, release: sync.OnceFunc(l.release)})
	if err != nil {
		l.release()
		return nil, err
	}
	return q, nil
}

// acceptPath accepts path i of the link key and reads its hello.
func (l *listener) acceptPath(ctx context.Context, key string, i int) (*net.TCPConn, uint64, error) {
	c, err := l.acc[i].Accept(ctx, pathKey(key, i))
	if err != nil {
		return nil, 0, fmt.Errorf("ft: path %d: %w", i, err)
	}
	return l.b.hello(ctx, c, i)
}

// release drops one reference; the acceptors close with the last one after
// Close.
func (l *listener) release() {
	l.mu.Lock()
	l.refs--
	done := l.closed && l.refs == 0 && !l.gone
	if done {
		l.gone = true
	}
	l.mu.Unlock()
	if done {
		l.closeAcceptors()
	}
}

func (l *listener) closeAcceptors() {
	for _, a := range l.acc {
		a.Close()
	}
}

// Close stops accepting new links. The sockets stay open for the
// reconnections of links already accepted, until the last of them closes.
func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	done := l.refs == 0 && !l.gone
	if done {
		l.gone = true
	}
	l.mu.Unlock()
	if done {
		l.closeAcceptors()
	}
	return nil
}

// Dial connects both paths of a link to the listener whose Addr is addr
// ("primary,backup") and returns the QP once both are up.
func (b Backend) Dial(ctx context.Context, addr, key string, cfg transport.Config) (transport.QP, error) {
	prm, err := b.params()
	if err != nil {
		return nil, err
	}
	remote, err := splitAddrs(addr)
	if err != nil {
		return nil, err
	}
	ifn := b.ifnames()
	conns, err := eachPath(func(i int) (*net.TCPConn, error) {
		return b.dialPath(ctx, ifn[i], remote[i], key, i, 1, cfg.Token)
	})
	if err != nil {
		return nil, err
	}
	return newQP(cfg, qpSetup{b: b, prm: prm, key: key, conns: conns, gens: [Paths]uint64{1, 1},
		ifnames: ifn, remote: remote, dialer: true})
}

// eachPath runs connect for every path at once and returns the
// connections; when any fails, it closes the others and returns the
// errors joined.
func eachPath(connect func(i int) (*net.TCPConn, error)) ([Paths]*net.TCPConn, error) {
	var conns [Paths]*net.TCPConn
	errs := make([]error, Paths)
	var wg sync.WaitGroup
	for i := range Paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[i], errs[i] = connect(i)
		}()
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
	return conns, err
}

func splitAddrs(addr string) ([Paths]string, error) {
	var out [Paths]string
	parts := strings.Split(addr, ",")
	if len(parts) != Paths {
		return out, fmt.Errorf("ft: %q is not a pair of addresses \"primary,backup\" (is fault tolerance on for every rank?)", addr)
	}
	for i := range out {
		out[i] = strings.TrimSpace(parts[i])
	}
	return out, nil
}

// dialPath connects path i (generation gen) to addr, leaving from interface
// ifname when one is named, and sends its hello.
func (b Backend) dialPath(ctx context.Context, ifname, addr, key string, i int, gen uint64, token string) (*net.TCPConn, error) {
	if b.faults != nil && b.faults.down[i].Load() {
		return nil, fmt.Errorf("ft: path %d: dial %s: link down (test fault)", i, addr)
	}
	conn, err := sock.Dial(ctx, ifname, addr)
	if err != nil {
		return nil, fmt.Errorf("ft: path %d: %w", i, err)
	}
	fail := func(err error) (*net.TCPConn, error) {
		conn.Close()
		return nil, err
	}
	if err := transport.DialHandshake(ctx, conn, token, pathKey(key, i)); err != nil {
		return fail(fmt.Errorf("ft: path %d: %w", i, err))
	}
	if err := b.setup(conn, i); err != nil {
		return fail(err)
	}
	var h [HeaderSize]byte
	PutHeader(h[:], Header{Type: FrameHello, Aux: uint32(i), Seq: gen})
	if dl, ok := ctx.Deadline(); ok {
		conn.SetWriteDeadline(dl)
	}
	if _, err := conn.Write(h[:]); err != nil {
		return fail(fmt.Errorf("ft: path %d: hello to %s: %w", i, addr, err))
	}
	conn.SetWriteDeadline(time.Time{})
	return conn, nil
}

// setup gives path i's connection the socket options of tcp's
// (tcp.SetupConn): one rule for both transports.
func (b Backend) setup(conn *net.TCPConn, i int) error {
	if err := tcp.SetupConn(conn, b.Congestion, b.SockBuf); err != nil {
		return fmt.Errorf("ft: path %d: %w", i, err)
	}
	return nil
}
