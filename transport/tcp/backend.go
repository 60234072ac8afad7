package tcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/vccl-go/vccl/transport"
)

// Name is the backend's name.
const Name = "tcp"

// EnvSocketIfname names the network interfaces VCCL's sockets use, as a
// comma list (NCCL_SOCKET_IFNAME's counterpart); this backend uses the first.
const EnvSocketIfname = "VCCL_SOCKET_IFNAME"

// Backend is the TCP backend. Its zero value is ready to use.
type Backend struct {
	// Interface, when set, overrides VCCL_SOCKET_IFNAME: the first name of
	// this comma list is the interface Listen("") listens on and Dial binds
	// its local address to.
	Interface string
	// SockBuf, when positive, sets SO_SNDBUF and SO_RCVBUF of every
	// connection (the kernel caps it at net.core.{w,r}mem_max); negative
	// leaves the kernel's autotuning alone. Zero takes VCCL_TCP_SOCKBUF
	// (bytes, or -1), and with that unset too sets 4 MiB on a
	// connection within the host from a process bound to CPUs of its own,
	// where the kernel allows that much, and leaves the others to
	// autotuning (see localBuf).
	SockBuf int
	// Congestion, when set, overrides VCCL_TCP_CONGESTION: the TCP
	// congestion control of every connection (Linux). With neither set, a
	// connection within the host uses reno and any other the kernel's
	// default (see localReno).
	Congestion string
	// Logger receives refused connections (slog.Default when nil).
	Logger *slog.Logger
}

var _ transport.Backend = Backend{}

// Name returns "tcp".
func (Backend) Name() string { return Name }

// Capabilities: TCP reaches any host through a kernel socket, and Poll
// reads the socket itself while its owner spins.
func (Backend) Capabilities() transport.Capabilities {
	return transport.Capabilities{Reach: transport.ReachNetwork, StreamSocket: true, PollProgresses: true}
}

// ifname returns the interface to use, or "" for none.
func (b Backend) ifname() string {
	list := b.Interface
	if list == "" {
		list = os.Getenv(EnvSocketIfname)
	}
	first, _, _ := strings.Cut(list, ",")
	return strings.TrimSpace(first)
}

// Listen listens on lc.Addr, or, when it is "", on port 0 of the address of
// the VCCL_SOCKET_IFNAME interface (127.0.0.1 when none is named).
func (b Backend) Listen(ctx context.Context, lc transport.ListenConfig) (transport.Listener, error) {
	addr := lc.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
		if name := b.ifname(); name != "" {
			ip, err := interfaceAddr(name, 0)
			if err != nil {
				return nil, err
			}
			addr = netip.AddrPortFrom(ip, 0).String()
		}
	}
	var lcfg net.ListenConfig
	ln, err := lcfg.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: listen on %s: %w", addr, err)
	}
	return &listener{b: b, acc: transport.NewAcceptor(ln, lc.Token, b.Logger)}, nil
}

// Dial connects to the listener at addr under key and returns the QP once
// the listener has checked the handshake. With an interface named, the
// connection leaves from that interface's address.
func (b Backend) Dial(ctx context.Context, addr, key string, cfg transport.Config) (transport.QP, error) {
	var d net.Dialer
	target := addr
	if name := b.ifname(); name != "" {
		// Resolve first, so the local address is of the family dialled.
		remote, err := resolve(ctx, addr)
		if err != nil {
			return nil, err
		}
		fam := 4
		if remote.Addr().Is6() {
			fam = 6
		}
		ip, err := interfaceAddr(name, fam)
		if err != nil {
			return nil, err
		}
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, 0))
		target = remote.String()
	}
	c, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		if d.LocalAddr != nil {
			return nil, fmt.Errorf("tcp: dial %s from %s: %w", addr, d.LocalAddr, err)
		}
		return nil, fmt.Errorf("tcp: dial %s: %w", addr, err)
	}
	conn := c.(*net.TCPConn)
	if err := transport.DialHandshake(ctx, conn, cfg.Token, key); err != nil {
		conn.Close()
		return nil, err
	}
	if err := b.setup(conn); err != nil {
		conn.Close()
		return nil, err
	}
	q, err := newQP(conn, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

func (b Backend) setup(conn *net.TCPConn) error {
	if err := conn.SetNoDelay(true); err != nil {
		return fmt.Errorf("tcp: TCP_NODELAY on %s: %w", conn.LocalAddr(), err)
	}
	if err := SetCongestion(conn, b.Congestion); err != nil {
		return err
	}
	buf := b.SockBuf
	if buf == 0 {
		var err error
		if buf, err = envSockBuf(); err != nil {
			return err
		}
	}
	if buf == 0 {
		buf = localSockBuf(conn)
	}
	if buf > 0 {
		if err := conn.SetWriteBuffer(buf); err != nil {
			return fmt.Errorf("tcp: SO_SNDBUF on %s: %w", conn.LocalAddr(), err)
		}
		if err := conn.SetReadBuffer(buf); err != nil {
			return fmt.Errorf("tcp: SO_RCVBUF on %s: %w", conn.LocalAddr(), err)
		}
	}
	return nil
}

// InterfaceAddr returns an address of the named interface: of family fam (4
// or 6), or for fam 0 the first IPv4 address, else the first IPv6 one. It is
// how Listen and Dial pick their addresses; transport/ft uses it for its
// second interface.
func InterfaceAddr(name string, fam int) (netip.Addr, error) { return interfaceAddr(name, fam) }

// Resolve returns the IP address and port addr (host:port) stands for.
func Resolve(ctx context.Context, addr string) (netip.AddrPort, error) { return resolve(ctx, addr) }

// resolve returns the IP address and port addr stands for.
func resolve(ctx context.Context, addr string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("tcp: bad address %q: %w", addr, err)
	}
	pn, err := net.DefaultResolver.LookupPort(ctx, "tcp", port)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("tcp: bad port in %q: %w", addr, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if lerr != nil {
			return netip.AddrPort{}, fmt.Errorf("tcp: resolve %q: %w", host, lerr)
		}
		if len(ips) == 0 {
			return netip.AddrPort{}, fmt.Errorf("tcp: resolve %q: no address", host)
		}
		ip = ips[0]
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(pn)), nil
}

// interfaceAddr returns an address of the named interface: of family fam (4
// or 6), or for fam 0 the first IPv4 address, else the first IPv6 one.
// Global IPv6 addresses are preferred to link-local ones, which carry the
// interface as their zone.
func interfaceAddr(name string, fam int) (netip.Addr, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("tcp: interface %q named by %s (or Backend.Interface): %w", name, EnvSocketIfname, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("tcp: addresses of interface %q: %w", name, err)
	}
	var v4, v6, v6ll netip.Addr
	for _, a := range addrs {
		pfx, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := pfx.Addr().Unmap()
		switch {
		case ip.Is4():
			if !v4.IsValid() {
				v4 = ip
			}
		case ip.IsLinkLocalUnicast():
			if !v6ll.IsValid() {
				v6ll = ip.WithZone(name)
			}
		default:
			if !v6.IsValid() {
				v6 = ip
			}
		}
	}
	if !v6.IsValid() {
		v6 = v6ll
	}
	switch {
	case fam == 4 && v4.IsValid():
		return v4, nil
	case fam == 6 && v6.IsValid():
		return v6, nil
	case fam == 0 && v4.IsValid():
		return v4, nil
	case fam == 0 && v6.IsValid():
		return v6, nil
	}
	what := "no IP address"
	if fam != 0 {
		what = fmt.Sprintf("no IPv%d address", fam)
	}
	return netip.Addr{}, fmt.Errorf("tcp: interface %q named by %s (or Backend.Interface) has %s (addresses: %v)", name, EnvSocketIfname, what, addrs)
}

type listener struct {
	b   Backend
	acc *transport.Acceptor
}

func (l *listener) Addr() string { return l.acc.Addr().String() }

// Accept returns the QP of the next connection dialled under key.
func (l *listener) Accept(ctx context.Context, key string, cfg transport.Config) (transport.QP, error) {
	c, err := l.acc.Accept(ctx, key)
	if err != nil {
		return nil, err
	}
	conn, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, errors.New("tcp: accepted a connection that is not TCP")
	}
	if err := l.b.setup(conn); err != nil {
		conn.Close()
		return nil, err
	}
	q, err := newQP(conn, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

func (l *listener) Close() error { return l.acc.Close() }
