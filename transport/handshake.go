package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// The connection handshake of the stream-socket backends (tcp, shm): the
// dialler presents the job token and the connection key; the listener checks
// the token, answers, and hands the connection to whoever accepts that key.
const (
	helloMagic       = "VCCL"
	helloVersion     = 1
	handshakeTimeout = 10 * time.Second
	maxHelloField    = 4096
)

// DialHandshake presents token and key on a freshly dialled conn and waits
// for the listener's answer, within ctx.
func DialHandshake(ctx context.Context, conn net.Conn, token, key string) error {
	if len(token) > maxHelloField || len(key) > maxHelloField {
		return fmt.Errorf("transport: handshake token or key longer than %d bytes", maxHelloField)
	}
	stop := deadlineFrom(ctx, conn)
	defer stop()
	msg := make([]byte, 0, 9+len(token)+len(key))
	msg = append(msg, helloMagic...)
	msg = append(msg, helloVersion)
	msg = binary.LittleEndian.AppendUint16(msg, uint16(len(token)))
	msg = append(msg, token...)
	msg = binary.LittleEndian.AppendUint16(msg, uint16(len(key)))
	msg = append(msg, key...)
	if _, err := conn.Write(msg); err != nil {
		return ctxErr(ctx, fmt.Errorf("transport: handshake with %s: %w", conn.RemoteAddr(), err))
	}
	var hdr [3]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return ctxErr(ctx, fmt.Errorf("transport: handshake with %s: no answer: %w", conn.RemoteAddr(), err))
	}
	if hdr[0] == 0 {
		return nil
	}
	reason := make([]byte, binary.LittleEndian.Uint16(hdr[1:]))
	io.ReadFull(conn, reason)
	if hdr[0] == 2 {
		return fmt.Errorf("%w: %s refused key %q: %s", ErrBadToken, conn.RemoteAddr(), key, reason)
	}
	return fmt.Errorf("transport: %s refused key %q: %s", conn.RemoteAddr(), key, reason)
}

// deadlineFrom applies ctx's deadline (or the handshake timeout) to conn and
// unblocks conn if ctx is cancelled; the returned func clears both.
func deadlineFrom(ctx context.Context, conn net.Conn) func() {
	d, ok := ctx.Deadline()
	if !ok || time.Until(d) > handshakeTimeout {
		d = time.Now().Add(handshakeTimeout)
	}
	conn.SetDeadline(d)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		conn.SetDeadline(time.Time{})
	}
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

// Acceptor accepts stream connections, checks their handshake and routes each
// to the Accept call waiting for its key.
type Acceptor struct {
	ln    net.Listener
	token string
	log   *slog.Logger

	mu      sync.Mutex
	arrived map[string][]net.Conn
	waiters map[string]chan struct{}
	err     error // set when the listener stops
	stop    context.CancelFunc
	ctx     context.Context // cancelled by Close, ending pending handshakes
	wg      sync.WaitGroup
}

// NewAcceptor starts accepting on ln. Refused connections are logged to log
// (slog.Default when nil) with the reason.
func NewAcceptor(ln net.Listener, token string, log *slog.Logger) *Acceptor {
	if log == nil {
		log = slog.Default()
	}
	a := &Acceptor{ln: ln, token: token, log: log, arrived: map[string][]net.Conn{},
		waiters: map[string]chan struct{}{}}
	a.ctx, a.stop = context.WithCancel(context.Background())
	a.wg.Add(1)
	go a.loop()
	return a
}

// Addr returns the listening address.
func (a *Acceptor) Addr() net.Addr { return a.ln.Addr() }

func (a *Acceptor) loop() {
	defer a.wg.Done()
	for {
		conn, err := a.ln.Accept()
		if err != nil {
			a.mu.Lock()
			a.err = fmt.Errorf("%w: listener %s stopped: %v", ErrClosed, a.ln.Addr(), err)
			for _, w := range a.waiters {
				close(w)
			}
			a.waiters = map[string]chan struct{}{}
			a.mu.Unlock()
			return
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.handshake(conn)
		}()
	}
}

func (a *Acceptor) handshake(conn net.Conn) {
	ctx, cancel := context.WithTimeout(a.ctx, handshakeTimeout)
	defer cancel()
	stop := deadlineFrom(ctx, conn)
	key, token, err := readHello(conn)
	switch {
	case err != nil:
		a.refuse(conn, 1, err.Error(), "")
		stop()
		return
	case token != a.token:
		a.refuse(conn, 2, "job token mismatch", key)
		stop()
		return
	}
	if _, err := conn.Write([]byte{0, 0, 0}); err != nil {
		stop()
		conn.Close()
		return
	}
	stop()
	a.mu.Lock()
	if a.err != nil {
		a.mu.Unlock()
		conn.Close()
		return
	}
	a.arrived[key] = append(a.arrived[key], conn)
	if w, ok := a.waiters[key]; ok {
		close(w)
		delete(a.waiters, key)
	}
	a.mu.Unlock()
}

func (a *Acceptor) refuse(conn net.Conn, code byte, reason, key string) {
	a.log.Warn("vccl: refused connection", "remote", conn.RemoteAddr().String(), "key", key, "reason", reason)
	msg := append([]byte{code}, binary.LittleEndian.AppendUint16(nil, uint16(len(reason)))...)
	conn.Write(append(msg, reason...))
	conn.Close()
}

func readHello(r io.Reader) (key, token string, err error) {
	var hdr [7]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", "", fmt.Errorf("short handshake: %w", err)
	}
	if string(hdr[:4]) != helloMagic {
		return "", "", fmt.Errorf("not a VCCL handshake (magic %q)", hdr[:4])
	}
	if hdr[4] != helloVersion {
		return "", "", fmt.Errorf("handshake version %d, want %d", hdr[4], helloVersion)
	}
	readField := func(n int) (string, error) {
		if n > maxHelloField {
			return "", fmt.Errorf("handshake field of %d bytes exceeds %d", n, maxHelloField)
		}
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return string(b), err
	}
	if token, err = readField(int(binary.LittleEndian.Uint16(hdr[5:]))); err != nil {
		return "", "", err
	}
	var kl [2]byte
	if _, err := io.ReadFull(r, kl[:]); err != nil {
		return "", "", err
	}
	key, err = readField(int(binary.LittleEndian.Uint16(kl[:])))
	return key, token, err
}

// Accept returns the next connection that presented key, waiting within ctx.
func (a *Acceptor) Accept(ctx context.Context, key string) (net.Conn, error) {
	for {
		a.mu.Lock()
		if q := a.arrived[key]; len(q) > 0 {
			conn := q[0]
			if len(q) == 1 {
				delete(a.arrived, key)
			} else {
				a.arrived[key] = q[1:]
			}
			a.mu.Unlock()
			return conn, nil
		}
		if a.err != nil {
			err := a.err
			a.mu.Unlock()
			return nil, err
		}
		w, ok := a.waiters[key]
		if !ok {
			w = make(chan struct{})
			a.waiters[key] = w
		}
		a.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w %q on %s: %w", ErrNotAccepted, key, a.ln.Addr(), ctx.Err())
		}
	}
}

// Close stops accepting and closes connections nobody accepted.
func (a *Acceptor) Close() error {
	err := a.ln.Close()
	a.stop()
	a.wg.Wait()
	a.mu.Lock()
	for _, q := range a.arrived {
		for _, c := range q {
			c.Close()
		}
	}
	a.arrived = map[string][]net.Conn{}
	a.mu.Unlock()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
