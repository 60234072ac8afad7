package tcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/internal/sock"
)

// Name is the backend's name.
const Name = "tcp"

// EnvSocketIfname names the network interfaces VCCL's sockets use, as a
// comma list (NCCL_SOCKET_IFNAME's counterpart); this backend uses the first.
const EnvSocketIfname = "VCCL_SOCKET_IFNAME"

// Backend is the TCP backend. Its zero value is ready to use.
type Backend struct {
	// Interface is a comma list of interfaces (Config.Interfaces,
	// VCCL_SOCKET_IFNAME): the first is the one Listen("") listens on and
	// Dial binds its local address to. Empty: loopback.
	Interface string
	// SockBuf, when positive, sets SO_SNDBUF and SO_RCVBUF of every
	// connection (the kernel caps it at net.core.{w,r}mem_max); negative
	// leaves the kernel's autotuning alone. Zero sets localBuf on a
	// connection within the host from a process bound to CPUs of its own,
	// where the kernel allows that much, and leaves the others to
	// autotuning (see localBuf). Config.SockBuf is VCCL_TCP_SOCKBUF's value.
	SockBuf int
	// Congestion is the TCP congestion control of every connection (Linux;
	// Config.Congestion, VCCL_TCP_CONGESTION). Empty: a connection within
	// the host uses reno and any other the kernel's default (see localReno).
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
	first, _, _ := strings.Cut(b.Interface, ",")
	return strings.TrimSpace(first)
}

// Listen listens on lc.Addr, or, when it is "", on port 0 of the address of
// Backend.Interface's first interface (127.0.0.1 when none is named).
func (b Backend) Listen(ctx context.Context, lc transport.ListenConfig) (transport.Listener, error) {
	addr := lc.Addr
	if addr == "" {
		var err error
		if addr, err = sock.ListenAddr(b.ifname()); err != nil {
			return nil, ifnameErr(err)
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
	name := b.ifname()
	conn, err := sock.Dial(ctx, name, addr)
	if err != nil && name != "" {
		return nil, ifnameErr(err)
	} else if err != nil {
		return nil, fmt.Errorf("tcp: %w", err)
	}
	if err := transport.DialHandshake(ctx, conn, cfg.Token, key); err != nil {
		conn.Close()
		return nil, err
	}
	return b.open(conn, cfg)
}

// open sets a connection up and starts its QP; it closes the connection
// when either fails.
func (b Backend) open(conn *net.TCPConn, cfg transport.Config) (transport.QP, error) {
	err := SetupConn(conn, b.Congestion, b.SockBuf)
	var q *QP
	if err == nil {
		q, err = newQP(conn, cfg)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

// ifnameErr says that err came from the interface VCCL_SOCKET_IFNAME (or
// Backend.Interface) names.
func ifnameErr(err error) error {
	return fmt.Errorf("tcp: %w (named by %s or Backend.Interface)", err, EnvSocketIfname)
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
	return l.b.open(conn, cfg)
}

func (l *listener) Close() error { return l.acc.Close() }
