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
	"sync/atomic"
	"time"

	"github.com/vccl-go/vccl/internal/jobauth"
)

// The connection handshake of the stream-socket backends (tcp, shm, ft):
//
//	dialler  → "VCCL", version 2, nonce nd (16 bytes), key length u16, key
//	listener → 0, nonce nl (16 bytes), proof HMAC(k, "accept", nd, nl, key)
//	           (or a refusal: code, reason length u16, reason)
//	dialler  → proof HMAC(k, "dial", nd, nl, key) (32 bytes)
//	listener → 0, 0, 0 (or a refusal)
//
// where k is the job token's transport key (internal/jobauth). The token
// never travels; each side checks the other's proof, so a dialler never
// hands its data to a listener of another job either. The listener then
// hands the connection to whoever accepts that key. A key is claimed once
// (unless the acceptor lets keys repeat, for reconnections): a second
// connection presenting it is refused, so nobody can take a link that its
// rank already dialled.
const (
	helloMagic       = "VCCL"
	helloVersion     = 2 // version 1 sent the token itself
	handshakeTimeout = 10 * time.Second
	maxHelloField    = 4096
)

// Refusal codes of the listener's answers.
const (
	refuseProtocol = 1 // not a handshake this listener speaks
	refuseToken    = 2 // the dialler does not hold the job token
	refuseKey      = 3 // the key is claimed already, or too many wait
)

// Limits of an Acceptor.
const (
	// MaxHandshakes bounds the connections in the handshake at once (more
	// wait in the kernel's backlog), and MaxHandshakesPerHost those from
	// one remote host other than this one (more are closed at once).
	MaxHandshakes        = 64
	MaxHandshakesPerHost = 16
	// MaxUnaccepted bounds the connections that finished their handshake
	// but wait for an Accept of their key.
	MaxUnaccepted = 1024
	// acceptorHelloTimeout bounds a stranger's handshake on the listener.
	acceptorHelloTimeout = 5 * time.Second
)

// DialHandshake presents key on a freshly dialled conn, proving it holds
// token, checks the listener's proof and waits for its answer, within ctx.
func DialHandshake(ctx context.Context, conn net.Conn, token, key string) error {
	if len(key) > maxHelloField {
		return fmt.Errorf("transport: handshake key longer than %d bytes", maxHelloField)
	}
	k := jobauth.Key(token, jobauth.PurposeTransport)
	stop := SetupDeadline(ctx, conn)
	defer stop()
	nd := jobauth.Nonce()
	msg := make([]byte, 0, 7+len(nd)+len(key))
	msg = append(msg, helloMagic...)
	msg = append(msg, helloVersion)
	msg = append(msg, nd...)
	msg = binary.LittleEndian.AppendUint16(msg, uint16(len(key)))
	msg = append(msg, key...)
	if _, err := conn.Write(msg); err != nil {
		return CtxErr(ctx, fmt.Errorf("transport: handshake with %s: %w", conn.RemoteAddr(), err))
	}
	if err := readAnswer(conn, key); err != nil {
		return CtxErr(ctx, err)
	}
	chall := make([]byte, jobauth.NonceSize+jobauth.ProofSize)
	if _, err := io.ReadFull(conn, chall); err != nil {
		return CtxErr(ctx, fmt.Errorf("transport: handshake with %s: no challenge: %w", conn.RemoteAddr(), err))
	}
	nl, proof := chall[:jobauth.NonceSize], chall[jobauth.NonceSize:]
	if !jobauth.Equal(proof, jobauth.Proof(k, "accept", nd, nl, []byte(key))) {
		// Tell it with a proof of zeros (a real one would let a listener
		// that is not ours test guesses of the token offline).
		conn.Write(make([]byte, jobauth.ProofSize))
		readAnswer(conn, key)
		return fmt.Errorf("%w: %s does not hold this job's token (key %q)", ErrBadToken, conn.RemoteAddr(), key)
	}
	if _, err := conn.Write(jobauth.Proof(k, "dial", nd, nl, []byte(key))); err != nil {
		return CtxErr(ctx, fmt.Errorf("transport: handshake with %s: %w", conn.RemoteAddr(), err))
	}
	var ok [3]byte
	if err := readAnswer(conn, key); err != nil {
		return CtxErr(ctx, err)
	}
	if _, err := io.ReadFull(conn, ok[:2]); err != nil {
		return CtxErr(ctx, fmt.Errorf("transport: handshake with %s: no answer: %w", conn.RemoteAddr(), err))
	}
	return nil
}

// readAnswer reads the status byte of a listener's answer: nil for 0, the
// refusal it starts otherwise.
func readAnswer(conn net.Conn, key string) error {
	var code [1]byte
	if _, err := io.ReadFull(conn, code[:]); err != nil {
		return fmt.Errorf("transport: handshake with %s: no answer: %w", conn.RemoteAddr(), err)
	}
	if code[0] == 0 {
		return nil
	}
	var n [2]byte
	io.ReadFull(conn, n[:])
	reason := make([]byte, min(binary.LittleEndian.Uint16(n[:]), 512))
	io.ReadFull(conn, reason)
	switch code[0] {
	case refuseToken:
		return fmt.Errorf("%w: %s refused key %q: %s", ErrBadToken, conn.RemoteAddr(), key, reason)
	case refuseKey:
		return fmt.Errorf("%w: %s refused key %q: %s", ErrKeyClaimed, conn.RemoteAddr(), key, reason)
	}
	return fmt.Errorf("transport: %s refused key %q: %s", conn.RemoteAddr(), key, reason)
}

// SetupDeadline bounds an exchange that sets a connection up (this
// handshake, a backend's own setup messages): it applies ctx's deadline, at
// most the handshake timeout away, to conn and unblocks conn if ctx is
// cancelled; the returned func clears both, once, whatever its callers.
// When it returns, no cancellation can reach conn any more: a connection
// handed on after it (to Accept, to a queue pair) keeps no deadline, even
// if ctx ends at that moment. (context.AfterFunc's stop does not wait for a
// function already started, which would set the past deadline after the
// clear and fail every later read of a healthy connection.)
func SetupDeadline(ctx context.Context, conn net.Conn) func() {
	d, ok := ctx.Deadline()
	if !ok || time.Until(d) > handshakeTimeout {
		d = time.Now().Add(handshakeTimeout)
	}
	conn.SetDeadline(d)
	unblocked := make(chan struct{})
	stopAfter := context.AfterFunc(ctx, func() {
		conn.SetDeadline(time.Unix(1, 0))
		close(unblocked)
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			if !stopAfter() {
				<-unblocked
			}
			conn.SetDeadline(time.Time{})
		})
	}
}

// CtxErr returns err, wrapped behind ctx's error once ctx is done, so that
// errors.Is finds the cancellation or deadline that caused an I/O error.
func CtxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

// AcceptorConfig configures an Acceptor.
type AcceptorConfig struct {
	Token string       // the job token diallers must prove they hold
	Log   *slog.Logger // refused connections, one line per interval at most (slog.Default when nil)
	// RepeatKeys lets a key arrive again after it was claimed (ft paths
	// reconnecting under their link's key); otherwise a second arrival of
	// a key is refused.
	RepeatKeys bool
	// Check, when set, vets a connection before its handshake (shm: the
	// peer's user); an error refuses it.
	Check func(net.Conn) error
	// LogEvery is the least time between two refusal lines (default 10s).
	LogEvery time.Duration
}

// Acceptor accepts stream connections, checks their handshake and routes each
// to the Accept call waiting for its key.
type Acceptor struct {
	ln      net.Listener
	key     []byte // the token's transport key
	cfg     AcceptorConfig
	log     *slog.Logger
	gate    jobauth.Gate
	refused jobauth.LogLimiter

	inHandshake atomic.Int32 // connections in the handshake (tests)

	conns   Rendezvous[net.Conn] // stopped when the listener stops
	claimed map[string]bool      // keys that arrived (not with RepeatKeys); under conns' lock
	stop    context.CancelFunc
	ctx     context.Context // cancelled by Close, ending pending handshakes
	wg      sync.WaitGroup
}

// NewAcceptor starts accepting on ln. Refused connections are logged to log
// (slog.Default when nil) with the reason, one line per interval at most.
func NewAcceptor(ln net.Listener, token string, log *slog.Logger) *Acceptor {
	return NewAcceptorConfig(ln, AcceptorConfig{Token: token, Log: log})
}

// NewAcceptorConfig starts accepting on ln as cfg says.
func NewAcceptorConfig(ln net.Listener, cfg AcceptorConfig) *Acceptor {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	a := &Acceptor{ln: ln, key: jobauth.Key(cfg.Token, jobauth.PurposeTransport), cfg: cfg, log: log,
		gate:    jobauth.Gate{Max: MaxHandshakes, PerHost: MaxHandshakesPerHost},
		claimed: map[string]bool{}}
	a.refused.Interval = cfg.LogEvery
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
		// A slot first: past MaxHandshakes, connections wait in the
		// kernel's backlog (Close ends every handshake, freeing theirs).
		a.gate.Slot(nil)
		conn, err := a.ln.Accept()
		if err != nil {
			a.gate.Free()
			a.conns.Stop(fmt.Errorf("%w: listener %s stopped: %v", ErrClosed, a.ln.Addr(), err))
			return
		}
		host, ok := a.gate.Host(conn.RemoteAddr().String())
		if !ok {
			a.gate.Free()
			a.logRefused(conn, "", "too many connections in the handshake from its host")
			conn.Close()
			continue
		}
		release := func() { host(); a.gate.Free() }
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer release()
			a.handshake(conn)
		}()
	}
}

func (a *Acceptor) handshake(conn net.Conn) {
	a.inHandshake.Add(1)
	defer a.inHandshake.Add(-1)
	ctx, cancel := context.WithTimeout(a.ctx, acceptorHelloTimeout)
	defer cancel()
	stop := SetupDeadline(ctx, conn)
	defer stop()
	if a.cfg.Check != nil {
		if err := a.cfg.Check(conn); err != nil {
			a.refuse(conn, refuseProtocol, err.Error(), "")
			return
		}
	}
	key, nd, err := readHello(conn)
	if err != nil {
		a.refuse(conn, refuseProtocol, err.Error(), "")
		return
	}
	nl := jobauth.Nonce()
	msg := append([]byte{0}, nl...)
	msg = append(msg, jobauth.Proof(a.key, "accept", nd, nl, []byte(key))...)
	if _, err := conn.Write(msg); err != nil {
		conn.Close()
		return
	}
	proof := make([]byte, jobauth.ProofSize)
	if _, err := io.ReadFull(conn, proof); err != nil {
		a.refuse(conn, refuseToken, "no proof of the job token", key)
		return
	}
	if !jobauth.Equal(proof, jobauth.Proof(a.key, "dial", nd, nl, []byte(key))) {
		a.refuse(conn, refuseToken, "job token mismatch", key)
		return
	}
	var why string
	err = a.conns.Offer(key, conn, func(waiting int) error {
		switch {
		case !a.cfg.RepeatKeys && a.claimed[key]:
			why = "key claimed already: another connection presented it first"
		case waiting >= MaxUnaccepted:
			why = fmt.Sprintf("%d connections wait to be accepted already", MaxUnaccepted)
		}
		if why != "" {
			return errors.New(why)
		}
		if _, err := conn.Write([]byte{0, 0, 0}); err != nil {
			return err
		}
		// The connection is Accept's from here: clear this handshake's
		// deadline now, before Accept sets its own, not after.
		stop()
		if !a.cfg.RepeatKeys {
			a.claimed[key] = true
		}
		return nil
	})
	switch {
	case why != "":
		a.refuse(conn, refuseKey, why, key)
	case err != nil: // the listener stopped, or the dialler left
		conn.Close()
	}
}

func (a *Acceptor) logRefused(conn net.Conn, key, reason string) {
	ok, hidden := a.refused.Allow()
	if !ok {
		return
	}
	args := []any{"remote", conn.RemoteAddr().String(), "key", key, "reason", reason}
	if hidden > 0 {
		args = append(args, "refused_since_last_line", hidden)
	}
	a.log.Warn("vccl: refused connection", args...)
}

func (a *Acceptor) refuse(conn net.Conn, code byte, reason, key string) {
	a.logRefused(conn, key, reason)
	msg := append([]byte{code}, binary.LittleEndian.AppendUint16(nil, uint16(len(reason)))...)
	conn.Write(append(msg, reason...))
	conn.Close()
}

// readHello reads the dialler's hello: the key it asks for and its nonce.
func readHello(r io.Reader) (key string, nonce []byte, err error) {
	var hdr [5 + jobauth.NonceSize + 2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", nil, fmt.Errorf("short handshake: %w", err)
	}
	if string(hdr[:4]) != helloMagic {
		return "", nil, fmt.Errorf("not a VCCL handshake (magic %q)", hdr[:4])
	}
	if hdr[4] != helloVersion {
		return "", nil, fmt.Errorf("handshake version %d, want %d", hdr[4], helloVersion)
	}
	n := int(binary.LittleEndian.Uint16(hdr[5+jobauth.NonceSize:]))
	if n > maxHelloField {
		return "", nil, fmt.Errorf("handshake key of %d bytes exceeds %d", n, maxHelloField)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", nil, fmt.Errorf("short handshake: %w", err)
	}
	return string(b), append([]byte(nil), hdr[5:5+jobauth.NonceSize]...), nil
}

// Accept returns the next connection that presented key, waiting within ctx.
func (a *Acceptor) Accept(ctx context.Context, key string) (net.Conn, error) {
	return a.conns.Take(ctx, key, a.ln.Addr().String())
}

// Close stops accepting and closes connections nobody accepted.
func (a *Acceptor) Close() error {
	err := a.ln.Close()
	a.stop()
	a.wg.Wait()
	for _, c := range a.conns.Drain() {
		c.Close()
	}
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
