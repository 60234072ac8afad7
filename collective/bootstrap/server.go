package bootstrap

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// helloTimeout bounds how long an accepted connection may take to present
// its hello; a connection that says nothing is dropped.
const helloTimeout = 10 * time.Second

// writeTimeout bounds one write to a client: a client that stops reading for
// this long is disconnected rather than allowed to pile up replies.
const writeTimeout = 30 * time.Second

// ServerOption configures Serve.
type ServerOption func(*Server)

// WithLogger sets the logger the server reports refused and broken
// connections to (default slog.Default()).
func WithLogger(l *slog.Logger) ServerOption {
	return func(s *Server) {
		if l != nil {
			s.log = l
		}
	}
}

// Server is the rendezvous key-value store, hosted by rank 0. Keys are
// written once or counted with Add; gets and waits block until their keys
// exist. It serves each client connection on its own goroutine, and parks a
// waiting request on the keys it waits for until a set or add of one of them
// wakes it: nothing polls.
type Server struct {
	ln    net.Listener
	token string
	log   *slog.Logger

	mu      sync.Mutex
	kv      map[string][]byte
	waiters map[string]map[*waiter]struct{}
	conns   map[*sconn]struct{}
	hello   map[net.Conn]struct{} // accepted, handshake not finished
	closed  bool

	onPark func(key string) // test hook: a request parked on key (called without s.mu)

	wg        sync.WaitGroup
	closeOnce sync.Once
	stopCtx   func() bool
}

// waiter is a parked get or wait request.
type waiter struct {
	c       *sconn
	id      uint64
	op      byte     // opGet or opWait
	keys    []string // the keys it is parked on
	missing int      // keys not yet set (wait)
}

// Serve listens on addr (host:port; port 0 picks a free one) and serves the
// store to clients that present token. The server lives until Close is
// called or ctx is done, whichever comes first.
func Serve(ctx context.Context, addr string, token string, opts ...ServerOption) (*Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: listen on %s: %w", addr, err)
	}
	s := &Server{
		ln:      ln,
		token:   token,
		log:     slog.Default(),
		kv:      make(map[string][]byte),
		waiters: make(map[string]map[*waiter]struct{}),
		conns:   make(map[*sconn]struct{}),
		hello:   make(map[net.Conn]struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	s.stopCtx = context.AfterFunc(ctx, func() { s.Close() })
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server: it stops accepting, tells every connected client
// that the server is closing (their pending and later calls fail with
// ErrServerClosed), and returns when every connection goroutine has ended.
// It is safe to call more than once.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.stopCtx != nil {
			s.stopCtx()
		}
		s.mu.Lock()
		s.closed = true
		conns := make([]*sconn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		for nc := range s.hello {
			nc.Close()
		}
		s.mu.Unlock()
		if e := s.ln.Close(); e != nil && !errors.Is(e, net.ErrClosed) {
			err = e
		}
		for _, c := range conns {
			c.shutdown(true)
		}
	})
	s.wg.Wait()
	return err
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary failures (out of file descriptors, …): back
			// off briefly instead of spinning, then keep serving.
			s.log.Warn("bootstrap: accept failed", "addr", s.ln.Addr().String(), "err", err)
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			<-t.C
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.hello[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(nc)
	}
}

// serveConn runs the handshake and then reads requests until the connection
// ends. It is the one goroutine per client connection (plus the writer it
// starts, which only drains that connection's replies).
func (s *Server) serveConn(nc net.Conn) {
	defer s.wg.Done()
	remote := nc.RemoteAddr().String()

	nc.SetDeadline(time.Now().Add(helloTimeout))
	m, err := readMessageMax(nc, maxHelloFrame)
	s.mu.Lock()
	delete(s.hello, nc)
	closed := s.closed
	s.mu.Unlock()
	if closed {
		nc.Close()
		return
	}
	if err != nil {
		s.log.Warn("bootstrap: refused connection", "remote", remote, "reason", "no valid hello", "err", err)
		nc.Close()
		return
	}
	refuse := func(code byte, reason string) {
		s.log.Warn("bootstrap: refused connection", "remote", remote, "rank", m.rank, "reason", reason)
		reply := message{op: opErr, code: code, text: reason}
		nc.Write(appendFrame(nil, &reply)) // best effort, under the hello deadline
		nc.Close()
	}
	switch {
	case m.op != opHello:
		refuse(codeProtocol, fmt.Sprintf("first message is op %#x, not hello", m.op))
		return
	case m.version != protoVersion:
		refuse(codeVersion, fmt.Sprintf("protocol version %d, server speaks %d", m.version, protoVersion))
		return
	case subtle.ConstantTimeCompare(m.value, []byte(s.token)) != 1:
		refuse(codeToken, "job token mismatch")
		return
	}

	c := &sconn{s: s, nc: nc, rank: m.rank, remote: remote, wake: make(chan struct{}, 1), pending: make(map[uint64]*waiter)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	nc.SetDeadline(time.Time{})
	c.send(&message{op: opOK})
	s.wg.Add(1)
	go c.writeLoop()

	err = c.readLoop()
	s.dropConn(c)
	c.shutdown(false)
	if s.isClosed() {
		return
	}
	s.log.Debug("bootstrap: client disconnected", "remote", remote, "rank", c.rank, "err", err)
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// dropConn forgets a connection and every request it had parked.
func (s *Server) dropConn(c *sconn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	for _, w := range c.pending {
		s.unparkLocked(w)
	}
	c.pending = nil
}

// unparkLocked removes w from every key it is parked on and from its
// connection's pending set.
func (s *Server) unparkLocked(w *waiter) {
	for _, k := range w.keys {
		if set := s.waiters[k]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(s.waiters, k)
			}
		}
	}
	if w.c.pending != nil {
		delete(w.c.pending, w.id)
	}
}

// park registers w on keys (all absent from the store).
func (s *Server) parkLocked(w *waiter) {
	for _, k := range w.keys {
		set := s.waiters[k]
		if set == nil {
			set = make(map[*waiter]struct{})
			s.waiters[k] = set
		}
		set[w] = struct{}{}
	}
	w.c.pending[w.id] = w
}

// storeLocked sets key and wakes the requests parked on it. The replies are
// queued on their connections' writers, so a slow or dead client cannot hold
// up the connection that did the set.
func (s *Server) storeLocked(key string, value []byte) {
	s.kv[key] = value
	set := s.waiters[key]
	if set == nil {
		return
	}
	delete(s.waiters, key)
	for w := range set {
		switch w.op {
		case opGet:
			delete(w.c.pending, w.id)
			w.c.send(&message{op: opOK, id: w.id, value: value})
		case opWait:
			w.missing--
			if w.missing == 0 {
				s.unparkLocked(w)
				w.c.send(&message{op: opOK, id: w.id})
			}
		}
	}
}

// handle serves one request from c.
func (s *Server) handle(c *sconn, m *message) {
	errReply := func(code byte, format string, args ...any) {
		c.send(&message{op: opErr, id: m.id, code: code, text: fmt.Sprintf(format, args...)})
	}
	switch m.op {
	case opSet:
		s.mu.Lock()
		s.storeLocked(m.key, m.value)
		s.mu.Unlock()
		c.send(&message{op: opOK, id: m.id})
	case opGet:
		s.mu.Lock()
		if v, ok := s.kv[m.key]; ok {
			s.mu.Unlock()
			c.send(&message{op: opOK, id: m.id, value: v})
			return
		}
		if _, dup := c.pending[m.id]; !dup {
			s.parkLocked(&waiter{c: c, id: m.id, op: opGet, keys: []string{m.key}})
		}
		s.mu.Unlock()
		if s.onPark != nil {
			s.onPark(m.key)
		}
	case opAdd:
		s.mu.Lock()
		var cur int64
		if v, ok := s.kv[m.key]; ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				s.mu.Unlock()
				errReply(codeNotNumber, "add to key %q: its value %.32q is not an integer", m.key, v)
				return
			}
			cur = n
		}
		cur += m.num
		s.storeLocked(m.key, strconv.AppendInt(nil, cur, 10))
		s.mu.Unlock()
		c.send(&message{op: opOK, id: m.id, num: cur})
	case opWait:
		s.mu.Lock()
		var missing []string
		seen := make(map[string]bool, len(m.keys))
		for _, k := range m.keys {
			if _, ok := s.kv[k]; !ok && !seen[k] {
				seen[k] = true
				missing = append(missing, k)
			}
		}
		if len(missing) == 0 {
			s.mu.Unlock()
			c.send(&message{op: opOK, id: m.id})
			return
		}
		if _, dup := c.pending[m.id]; !dup {
			s.parkLocked(&waiter{c: c, id: m.id, op: opWait, keys: missing, missing: len(missing)})
		}
		s.mu.Unlock()
		if s.onPark != nil {
			for _, k := range missing {
				s.onPark(k)
			}
		}
	case opClock:
		c.send(&message{op: opOK, id: m.id, num: flowtel.Monotonic()})
	case opCancel:
		s.mu.Lock()
		if w := c.pending[m.id]; w != nil {
			s.unparkLocked(w)
		}
		s.mu.Unlock()
	default:
		errReply(codeProtocol, "unexpected op %#x", m.op)
	}
}

// sconn is the server's side of one client connection.
type sconn struct {
	s      *Server
	nc     net.Conn
	rank   int32
	remote string

	pending map[uint64]*waiter // parked requests; guarded by s.mu

	omu     sync.Mutex
	out     []byte // encoded frames waiting for the writer
	closing bool   // writer flushes out, then closes nc
	wake    chan struct{}
}

func (c *sconn) readLoop() error {
	for {
		m, err := readMessage(c.nc)
		if err != nil {
			return err
		}
		if m.op == opHello || m.op >= opOK {
			c.s.log.Warn("bootstrap: dropping client after protocol error", "remote", c.remote, "rank", c.rank, "op", m.op)
			return fmt.Errorf("unexpected op %#x", m.op)
		}
		c.s.handle(c, &m)
	}
}

// send queues a frame for the writer; it never blocks on the network.
func (c *sconn) send(m *message) {
	c.omu.Lock()
	if !c.closing {
		c.out = appendFrame(c.out, m)
	}
	c.omu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// shutdown makes the writer close the connection once it has flushed what is
// queued (and, with bye, a last frame telling the client the server closes).
func (c *sconn) shutdown(bye bool) {
	c.omu.Lock()
	if !c.closing {
		if bye {
			c.out = appendFrame(c.out, &message{op: opBye})
		}
		c.closing = true
	}
	c.omu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *sconn) writeLoop() {
	defer c.s.wg.Done()
	defer c.nc.Close()
	var buf []byte
	for range c.wake {
		c.omu.Lock()
		buf, c.out = c.out, buf[:0]
		closing := c.closing
		c.omu.Unlock()
		if len(buf) > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := c.nc.Write(buf); err != nil {
				// The reader sees the closed connection and drops
				// the client; nothing else is disturbed.
				return
			}
		}
		if closing {
			if tc, ok := c.nc.(*net.TCPConn); ok {
				tc.CloseWrite() // the client reads the bye, then EOF
			}
			return
		}
	}
}
