package bootstrap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/jobauth"
)

// helloTimeout bounds how long an accepted connection may take to finish
// the handshake; a connection that says nothing is dropped.
const helloTimeout = 5 * time.Second

// writeTimeout bounds one write to a client: a client that stops reading for
// this long is disconnected rather than allowed to pile up replies.
const writeTimeout = 30 * time.Second

// Limits of the server. A stranger (no token yet) holds at most a slot of
// the handshake gate for helloTimeout; a client with the token is bounded by
// the store's and its connection's limits.
const (
	// MaxHandshakes is how many connections may be in the handshake at
	// once (more wait in the kernel's backlog), and MaxHandshakesPerHost
	// from one remote host other than this one (more are closed at once).
	MaxHandshakes        = 128
	MaxHandshakesPerHost = 32
	// MaxObservers bounds the observers (ObserverRank) connected at once.
	MaxObservers = 16
	// MaxStoreBytes bounds the keys and values the store holds in all.
	MaxStoreBytes = 64 << 20
	// MaxPending bounds the gets and waits one connection may have parked.
	MaxPending = 4096
	// maxQueued bounds the replies queued for a client that does not read
	// them; past it the client is disconnected.
	maxQueued = 16 << 20
)

// ObserverRank is the rank a client that is no rank of the job presents
// (vccl-top): it may read public keys (PublicKey) and the clock, and write
// nothing.
const ObserverRank = math.MaxInt32

// Access rules the server enforces, whatever the client:
//
//   - a key is written once: a second Set of it fails (ErrKeyExists); Add
//     counts on a key that holds an integer;
//   - a key whose last segment is "@R" (RankKey) is written only by the
//     connection authenticated as rank R;
//   - a rank is held by one connection at a time, and with WithWorldSize
//     only ranks of the job (and ObserverRank) may connect;
//   - an observer writes nothing and reads only public keys.
//
// So once the ranks of a job have connected, a client that holds the token
// can neither claim a rank nor change what a rank wrote.

// UIDKey is the key under which rank 0 publishes the communicator's unique
// id; it is public, so observers (vccl-top) may read it.
const UIDKey = "vccl/pub/uid"

// RankKey is a key only rank may write: base + "/@" + rank.
func RankKey(base string, rank int) string { return base + "/@" + strconv.Itoa(rank) }

// keyOwner returns the rank a key is bound to, if any; malformed says that
// its last segment starts with "@" but is no rank.
func keyOwner(key string) (rank int32, bound, malformed bool) {
	last := key[strings.LastIndexByte(key, '/')+1:]
	if !strings.HasPrefix(last, "@") {
		return 0, false, false
	}
	n, err := strconv.ParseInt(last[1:], 10, 32)
	if err != nil || n < 0 || n == ObserverRank || strconv.FormatInt(n, 10) != last[1:] {
		return 0, false, true
	}
	return int32(n), true, false
}

// PublicKey reports whether observers may read key: it starts with "pub/"
// or has a segment "pub" ("vccl/pub/uid", "vccl/UID/pub/live/@3").
func PublicKey(key string) bool {
	return strings.HasPrefix(key, "pub/") || strings.Contains(key, "/pub/")
}

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

// WithWorldSize admits only ranks 0 to n-1 (and observers).
func WithWorldSize(n int) ServerOption { return func(s *Server) { s.world = n } }

// Server is the rendezvous key-value store, hosted by rank 0. Keys are
// written once or counted with Add; gets and waits block until their keys
// exist. It serves each client connection on its own goroutine, and parks a
// waiting request on the keys it waits for until a set or add of one of them
// wakes it: nothing polls.
type Server struct {
	ln    net.Listener
	key   []byte // the token's store key
	log   *slog.Logger
	world int // ranks admitted: 0 to world-1; 0: any

	gate    jobauth.Gate
	refused jobauth.LogLimiter

	mu        sync.Mutex
	kv        map[string][]byte
	bytes     int // of keys and values in kv
	waiters   map[string]map[*waiter]struct{}
	conns     map[*sconn]struct{}
	ranks     map[int32]*sconn      // rank → its connection (not observers)
	observers int                   // observer connections
	hello     map[net.Conn]struct{} // accepted, handshake not finished
	closed    bool

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
// store to clients that prove they hold token. The server lives until Close
// is called or ctx is done, whichever comes first.
func Serve(ctx context.Context, addr string, token string, opts ...ServerOption) (*Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: listen on %s: %w", addr, err)
	}
	s := &Server{
		ln:      ln,
		key:     jobauth.Key(token, jobauth.PurposeStore),
		log:     slog.Default(),
		gate:    jobauth.Gate{Max: MaxHandshakes, PerHost: MaxHandshakesPerHost},
		kv:      make(map[string][]byte),
		waiters: make(map[string]map[*waiter]struct{}),
		conns:   make(map[*sconn]struct{}),
		ranks:   make(map[int32]*sconn),
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
		// A slot first: past MaxHandshakes, connections wait in the
		// kernel's backlog (Close frees every slot: it closes the
		// connections in the handshake).
		s.gate.Slot(nil)
		nc, err := s.ln.Accept()
		if err != nil {
			s.gate.Free()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary failures (out of file descriptors, …): back
			// off briefly instead of spinning, then keep serving.
			s.logRefused("bootstrap: accept failed", "addr", s.ln.Addr().String(), "err", err)
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			<-t.C
			continue
		}
		backoff = 0
		remote := nc.RemoteAddr().String()
		host, ok := s.gate.Host(remote)
		if !ok {
			// Too many from one host mid-handshake: drop this one at
			// once rather than hold a descriptor for it.
			s.gate.Free()
			nc.Close()
			s.logRefused("bootstrap: refused connection", "remote", remote, "reason", "too many connections in the handshake from its host")
			continue
		}
		release := func() { host(); s.gate.Free() }
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			release()
			nc.Close()
			return
		}
		s.hello[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(nc, release)
	}
}

// logRefused logs a refusal, at most one line per interval: a flood of
// strangers costs a line every ten seconds, which says how many it hides.
func (s *Server) logRefused(msg string, args ...any) {
	ok, hidden := s.refused.Allow()
	if !ok {
		return
	}
	if hidden > 0 {
		args = append(args, "refused_since_last_line", hidden)
	}
	s.log.Warn(msg, args...)
}

// handshake authenticates nc: it returns the rank the client proved it may
// claim, or why it refused (already logged and answered).
func (s *Server) handshake(nc net.Conn, remote string) (int32, error) {
	nc.SetDeadline(time.Now().Add(helloTimeout))
	m, err := readMessageMax(nc, maxHelloFrame)
	if err != nil {
		s.logRefused("bootstrap: refused connection", "remote", remote, "reason", "no valid hello", "err", err)
		return 0, err
	}
	refuse := func(code byte, reason string) error {
		s.logRefused("bootstrap: refused connection", "remote", remote, "rank", m.rank, "reason", reason)
		reply := message{op: opErr, code: code, text: reason}
		nc.Write(appendFrame(nil, &reply)) // best effort, under the hello deadline
		return errors.New(reason)
	}
	switch {
	case m.op != opHello:
		return 0, refuse(codeProtocol, fmt.Sprintf("first message is op %#x, not hello", m.op))
	case m.version != protoVersion:
		return 0, refuse(codeVersion, fmt.Sprintf("protocol version %d, server speaks %d", m.version, protoVersion))
	case len(m.value) != jobauth.NonceSize:
		return 0, refuse(codeProtocol, fmt.Sprintf("hello nonce of %d bytes, want %d", len(m.value), jobauth.NonceSize))
	}
	nc1 := append([]byte(nil), m.value...)
	ns := jobauth.Nonce()
	var rb [4]byte
	binary.BigEndian.PutUint32(rb[:], uint32(m.rank))
	chall := message{op: opChall, value: append(ns, jobauth.Proof(s.key, "store-server", nc1, ns, rb[:])...)}
	if _, err := nc.Write(appendFrame(nil, &chall)); err != nil {
		return 0, err
	}
	a, err := readMessageMax(nc, maxHelloFrame)
	if err != nil {
		s.logRefused("bootstrap: refused connection", "remote", remote, "rank", m.rank, "reason", "no proof of the job token", "err", err)
		return 0, err
	}
	if a.op != opAuth || !jobauth.Equal(a.value, jobauth.Proof(s.key, "store-client", nc1, ns, rb[:])) {
		return 0, refuse(codeToken, "job token mismatch")
	}
	// Only now, to a client that holds the token, is the job's size
	// anything to go by.
	if m.rank < 0 || (s.world > 0 && int(m.rank) >= s.world && m.rank != ObserverRank) {
		return 0, refuse(codeRank, fmt.Sprintf("rank %d is not a rank of this job (%d ranks)", m.rank, s.world))
	}
	return m.rank, nil
}

// serveConn runs the handshake and then reads requests until the connection
// ends. It is the one goroutine per client connection (plus the writer it
// starts, which only drains that connection's replies).
func (s *Server) serveConn(nc net.Conn, release func()) {
	defer s.wg.Done()
	remote := nc.RemoteAddr().String()
	rank, err := s.handshake(nc, remote)
	release()
	s.mu.Lock()
	delete(s.hello, nc)
	closed := s.closed
	s.mu.Unlock()
	if closed || err != nil {
		nc.Close()
		return
	}

	c := &sconn{s: s, nc: nc, rank: rank, remote: remote, wake: make(chan struct{}, 1), pending: make(map[uint64]*waiter)}
	s.mu.Lock()
	var why string
	var code byte
	switch {
	case s.closed:
		s.mu.Unlock()
		nc.Close()
		return
	case rank == ObserverRank && s.observers >= MaxObservers:
		why, code = fmt.Sprintf("%d observers are connected already", MaxObservers), codeLimit
	case rank != ObserverRank && s.ranks[rank] != nil:
		why, code = fmt.Sprintf("rank %d is connected already (from %s)", rank, s.ranks[rank].remote), codeRank
	}
	if why != "" {
		s.mu.Unlock()
		s.logRefused("bootstrap: refused connection", "remote", remote, "rank", rank, "reason", why)
		nc.Write(appendFrame(nil, &message{op: opErr, code: code, text: why}))
		nc.Close()
		return
	}
	if rank == ObserverRank {
		s.observers++
	} else {
		s.ranks[rank] = c
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
	if c.rank == ObserverRank {
		s.observers--
	} else if s.ranks[c.rank] == c {
		delete(s.ranks, c.rank)
	}
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

// parkUnlock parks w unless its connection has MaxPending requests waiting
// already (then it reports false), and unlocks s.mu. A repeated request id
// leaves the first one parked.
func (s *Server) parkUnlock(w *waiter) bool {
	if len(w.c.pending) >= MaxPending {
		s.mu.Unlock()
		return false
	}
	if _, dup := w.c.pending[w.id]; !dup {
		s.parkLocked(w)
	}
	s.mu.Unlock()
	if s.onPark != nil {
		for _, k := range w.keys {
			s.onPark(k)
		}
	}
	return true
}

// storeLocked sets key and wakes the requests parked on it. The replies are
// queued on their connections' writers, so a slow or dead client cannot hold
// up the connection that did the set.
func (s *Server) storeLocked(key string, value []byte) {
	if old, ok := s.kv[key]; ok {
		s.bytes -= len(key) + len(old)
	}
	s.bytes += len(key) + len(value)
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

// allowed checks that c may do op on keys, and answers the request with
// an error when it may not.
func (s *Server) allowed(c *sconn, m *message) bool {
	deny := func(code byte, format string, args ...any) bool {
		c.send(&message{op: opErr, id: m.id, code: code, text: fmt.Sprintf(format, args...)})
		return false
	}
	observer := c.rank == ObserverRank
	switch m.op {
	case opSet, opAdd:
		if observer {
			return deny(codeDenied, "an observer may not write (key %.64q)", m.key)
		}
		owner, bound, malformed := keyOwner(m.key)
		if malformed {
			return deny(codeDenied, "key %.64q ends in @ but names no rank", m.key)
		}
		if bound && owner != c.rank {
			return deny(codeDenied, "key %.64q belongs to rank %d, not rank %d", m.key, owner, c.rank)
		}
	case opGet:
		if observer && !PublicKey(m.key) {
			return deny(codeDenied, "an observer may read only public keys, not %.64q", m.key)
		}
	case opWait:
		if observer {
			for _, k := range m.keys {
				if !PublicKey(k) {
					return deny(codeDenied, "an observer may read only public keys, not %.64q", k)
				}
			}
		}
	}
	return true
}

// handle serves one request from c.
func (s *Server) handle(c *sconn, m *message) {
	errReply := func(code byte, format string, args ...any) {
		c.send(&message{op: opErr, id: m.id, code: code, text: fmt.Sprintf(format, args...)})
	}
	if !s.allowed(c, m) {
		return
	}
	switch m.op {
	case opSet:
		s.mu.Lock()
		if _, ok := s.kv[m.key]; ok {
			s.mu.Unlock()
			errReply(codeExists, "key %.64q is set already (keys are written once)", m.key)
			return
		}
		if s.bytes+len(m.key)+len(m.value) > MaxStoreBytes {
			s.mu.Unlock()
			errReply(codeLimit, "the store holds %d bytes: no room for %d more", s.bytes, len(m.key)+len(m.value))
			return
		}
		// m.value aliases the frame just read, which nothing else holds.
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
		if !s.parkUnlock(&waiter{c: c, id: m.id, op: opGet, keys: []string{m.key}}) {
			errReply(codeLimit, "%d requests of this connection wait already", MaxPending)
		}
	case opAdd:
		s.mu.Lock()
		var cur int64
		if v, ok := s.kv[m.key]; ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				s.mu.Unlock()
				errReply(codeNotNumber, "add to key %.64q: its value %.32q is not an integer", m.key, v)
				return
			}
			cur = n
		} else if s.bytes+len(m.key)+20 > MaxStoreBytes {
			s.mu.Unlock()
			errReply(codeLimit, "the store holds %d bytes: no room for key %.64q", s.bytes, m.key)
			return
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
		if !s.parkUnlock(&waiter{c: c, id: m.id, op: opWait, keys: missing, missing: len(missing)}) {
			errReply(codeLimit, "%d requests of this connection wait already", MaxPending)
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
		if m.op == opHello || m.op == opChall || m.op == opAuth || m.op >= opOK {
			c.s.log.Warn("bootstrap: dropping client after protocol error", "remote", c.remote, "rank", c.rank, "op", m.op)
			return fmt.Errorf("unexpected op %#x", m.op)
		}
		c.s.handle(c, &m)
	}
}

// send queues a frame for the writer; it never blocks on the network. A
// client that lets more than maxQueued bytes of replies pile up (asking for
// a large value again and again without reading) is disconnected.
func (c *sconn) send(m *message) {
	c.omu.Lock()
	if !c.closing {
		c.out = appendFrame(c.out, m)
		if len(c.out) > maxQueued {
			c.out, c.closing = nil, true
			c.nc.Close() // the reader sees it and drops the client
		}
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
