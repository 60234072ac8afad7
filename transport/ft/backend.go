package ft

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/tcp"
)

// Name is the backend's name.
const Name = "ft"

// Paths is the number of paths of a link: the primary and its backup.
const Paths = 2

// helloTimeout bounds the wait for a new connection's hello frame.
const helloTimeout = 5 * time.Second

// Backend is the fault-tolerant TCP backend. Its zero value is ready to use:
// both paths then go over loopback (or the interfaces VCCL_SOCKET_IFNAME
// names), with the thresholds of the VCCL_FT_* variables.
type Backend struct {
	// Interfaces, when set, overrides VCCL_SOCKET_IFNAME: the first name of
	// this comma list carries the primary path, the second the backup. With
	// one name both paths use it; with none, loopback.
	Interfaces string
	// Params tunes failure detection; zero fields take the VCCL_FT_*
	// variables, then the defaults.
	Params Params
	// SockBuf, when positive, sets SO_SNDBUF and SO_RCVBUF of every
	// connection.
	SockBuf int
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
	list := b.Interfaces
	if list == "" {
		list = os.Getenv(tcp.EnvSocketIfname)
	}
	var out [Paths]string
	names := strings.Split(list, ",")
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
	env, err := ParamsFromEnv(os.Getenv)
	if err != nil {
		return Params{}, err
	}
	p := b.Params.merge(env)
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
			addrs[i] = "127.0.0.1:0"
			if name != "" {
				ip, err := tcp.InterfaceAddr(name, 0)
				if err != nil {
					return nil, err
				}
				addrs[i] = netip.AddrPortFrom(ip, 0).String()
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
	var conns [Paths]*net.TCPConn
	var gens [Paths]uint64
	errs := make([]error, Paths)
	var wg sync.WaitGroup
	for i := range Paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[i], gens[i], errs[i] = l.acceptPath(ctx, key, i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
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
	conn, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, 0, errors.New("ft: accepted a connection that is not TCP")
	}
	gen, err := readHello(ctx, conn, i)
	if err == nil {
		err = l.b.setup(conn)
	}
	if err != nil {
		conn.Close()
		return nil, 0, err
	}
	return conn, gen, nil
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
	var conns [Paths]*net.TCPConn
	errs := make([]error, Paths)
	var wg sync.WaitGroup
	for i := range Paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[i], errs[i] = b.dialPath(ctx, ifn[i], remote[i], key, i, 1, cfg.Token)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	return newQP(cfg, qpSetup{b: b, prm: prm, key: key, conns: conns, gens: [Paths]uint64{1, 1},
		ifnames: ifn, remote: remote, dialer: true})
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
	var d net.Dialer
	target := addr
	if ifname != "" {
		remote, err := tcp.Resolve(ctx, addr)
		if err != nil {
			return nil, err
		}
		fam := 4
		if remote.Addr().Is6() {
			fam = 6
		}
		ip, err := tcp.InterfaceAddr(ifname, fam)
		if err != nil {
			return nil, err
		}
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, 0))
		target = remote.String()
	}
	c, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, fmt.Errorf("ft: path %d: dial %s from %s: %w", i, addr, orLoopback(ifname), err)
	}
	conn := c.(*net.TCPConn)
	fail := func(err error) (*net.TCPConn, error) {
		conn.Close()
		return nil, err
	}
	if err := transport.DialHandshake(ctx, conn, token, pathKey(key, i)); err != nil {
		return fail(fmt.Errorf("ft: path %d: %w", i, err))
	}
	if err := b.setup(conn); err != nil {
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

func orLoopback(ifname string) string {
	if ifname == "" {
		return "the default interface"
	}
	return ifname
}

// readHello reads a connection's first frame, which names its path and
// generation, exactly (nothing after it is consumed).
func readHello(ctx context.Context, conn *net.TCPConn, want int) (uint64, error) {
	dl := time.Now().Add(helloTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	conn.SetReadDeadline(dl)
	defer conn.SetReadDeadline(time.Time{})
	var b [HeaderSize]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return 0, fmt.Errorf("ft: path %d: no hello from %s: %w", want, conn.RemoteAddr(), err)
	}
	h, err := DecodeHeader(b[:])
	if err != nil {
		return 0, fmt.Errorf("ft: path %d: hello from %s: %w", want, conn.RemoteAddr(), err)
	}
	if h.Type != FrameHello || int(h.Aux) != want {
		return 0, fmt.Errorf("ft: path %d: %s sent a %s frame for path %d instead of a hello", want, conn.RemoteAddr(), h.Type, h.Aux)
	}
	return h.Seq, nil
}

func (b Backend) setup(conn *net.TCPConn) error {
	if err := conn.SetNoDelay(true); err != nil {
		return fmt.Errorf("ft: TCP_NODELAY on %s: %w", conn.LocalAddr(), err)
	}
	// Reno within the host, as a tcp QP's connection: see tcp.SetCongestion.
	if err := tcp.SetCongestion(conn, ""); err != nil {
		return fmt.Errorf("ft: %w", err)
	}
	if b.SockBuf > 0 {
		if err := conn.SetWriteBuffer(b.SockBuf); err != nil {
			return fmt.Errorf("ft: SO_SNDBUF on %s: %w", conn.LocalAddr(), err)
		}
		if err := conn.SetReadBuffer(b.SockBuf); err != nil {
			return fmt.Errorf("ft: SO_RCVBUF on %s: %w", conn.LocalAddr(), err)
		}
	}
	return nil
}
