package bootstrap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/jobauth"
)

var (
	// ErrTokenMismatch: the server refused the connection because the client
	// presented another job's token (two jobs sharing a port, or a stale
	// VCCL_JOB_TOKEN). Dial does not retry it.
	ErrTokenMismatch = errors.New("job token mismatch")
	// ErrServerClosed: the rendezvous server was closed; calls pending then
	// and every later call fail with it.
	ErrServerClosed = errors.New("rendezvous server closed")
	// ErrConnLost: the connection to the server broke (server process died,
	// network failure, protocol error).
	ErrConnLost = errors.New("connection to rendezvous server lost")
	// ErrClosed: the client was closed with Close.
	ErrClosed = errors.New("client closed")
	// ErrKeyExists: a Set of a key that is set already (keys are written
	// once).
	ErrKeyExists = errors.New("key is set already")
	// ErrDenied: the server refused a request this connection's rank may
	// not make (a key bound to another rank; a write or a private key of
	// an observer).
	ErrDenied = errors.New("not allowed")
	// ErrRankTaken: the server refused the connection because the rank it
	// claimed is connected already, or is no rank of the job. Dial does
	// not retry it.
	ErrRankTaken = errors.New("rank taken or out of range")
	// ErrLimit: the store, or the connection, is at one of its limits.
	ErrLimit = errors.New("store limit reached")
)

// handshakeTimeout bounds the hello exchange of one connection attempt when
// the caller's context has no earlier deadline.
const handshakeTimeout = 10 * time.Second

// Dial backoff between connection attempts.
const (
	dialBackoffMin = 10 * time.Millisecond
	dialBackoffMax = 500 * time.Millisecond
)

// Client is one rank's connection to the rendezvous server. It is safe for
// concurrent use: calls are multiplexed over the connection, so a Get that
// waits does not hold up a Set from another goroutine.
type Client struct {
	nc   net.Conn
	addr string
	rank int

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan result
	err     error // why the client is unusable; nil while it works

	readerDone chan struct{}
}

type result struct {
	m   message
	err error
}

// Dial connects to the server at addr as rank (or ObserverRank), proving it
// holds token without sending it, and checking that the server holds it
// too. Rank 0 may
// start its server after the others dial, so Dial retries refused or failed
// connections with a short backoff until ctx is done. A server that refuses
// the token (ErrTokenMismatch), the rank (ErrRankTaken) or the protocol
// version is not retried.
func Dial(ctx context.Context, addr, token string, rank int) (*Client, error) {
	if rank < 0 || rank > 1<<31-1 {
		return nil, fmt.Errorf("bootstrap: dial %s: rank %d out of range", addr, rank)
	}
	key := jobauth.Key(token, jobauth.PurposeStore)
	var d net.Dialer
	backoff := dialBackoffMin
	var lastErr error
	for {
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			var c *Client
			c, err = handshake(ctx, nc, addr, key, rank)
			if err == nil {
				return c, nil
			}
			if errors.Is(err, ErrTokenMismatch) || errors.Is(err, ErrRankTaken) || errors.Is(err, errPermanent) {
				return nil, err
			}
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
		// Jitter spreads many ranks' retries over the interval.
		wait := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
		backoff = min(2*backoff, dialBackoffMax)
	}
	return nil, fmt.Errorf("bootstrap: rank %d could not reach the rendezvous server at %s: %w (last error: %v)", rank, addr, context.Cause(ctx), lastErr)
}

// errPermanent marks handshake refusals that retrying cannot cure.
var errPermanent = errors.New("refused")

func handshake(ctx context.Context, nc net.Conn, addr string, key []byte, rank int) (*Client, error) {
	if err := clientHandshake(ctx, nc, addr, key, rank); err != nil {
		return nil, err
	}
	c := &Client{
		nc:         nc,
		addr:       addr,
		rank:       rank,
		pending:    make(map[uint64]chan result),
		nextID:     1,
		readerDone: make(chan struct{}),
	}
	go c.readLoop()
	return c, nil
}

// clientHandshake runs the client's side of the handshake on nc; on error
// nc is closed.
func clientHandshake(ctx context.Context, nc net.Conn, addr string, key []byte, rank int) error {
	deadline := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) error {
		stop()
		nc.Close()
		return err
	}
	refused := func(m *message) error {
		switch m.code {
		case codeToken:
			return fmt.Errorf("bootstrap: the server at %s refused rank %d: %w (check VCCL_JOB_TOKEN: is another job using this address?)", addr, rank, ErrTokenMismatch)
		case codeRank:
			return fmt.Errorf("bootstrap: the server at %s refused rank %d: %s: %w", addr, rank, m.text, ErrRankTaken)
		case codeVersion, codeProtocol:
			return fmt.Errorf("bootstrap: the server at %s refused rank %d: %s: %w", addr, rank, m.text, errPermanent)
		default:
			return fmt.Errorf("bootstrap: the server at %s refused rank %d: %s", addr, rank, m.text)
		}
	}
	// exchange sends req and reads the reply, which must be want.
	exchange := func(req *message, want byte) (message, error) {
		if _, err := nc.Write(appendFrame(nil, req)); err != nil {
			return message{}, fmt.Errorf("bootstrap: hello to %s: %w", addr, err)
		}
		m, err := readMessageMax(nc, maxHelloFrame)
		if err != nil {
			return message{}, fmt.Errorf("bootstrap: hello to %s: %w", addr, err)
		}
		switch m.op {
		case want:
			return m, nil
		case opErr:
			return message{}, refused(&m)
		case opBye:
			return message{}, fmt.Errorf("bootstrap: hello to %s: %w", addr, ErrServerClosed)
		default:
			return message{}, fmt.Errorf("bootstrap: hello to %s: unexpected reply op %#x", addr, m.op)
		}
	}
	nc1 := jobauth.Nonce()
	m, err := exchange(&message{op: opHello, version: protoVersion, rank: int32(rank), value: nc1}, opChall)
	if err != nil {
		return fail(err)
	}
	var rb [4]byte
	binary.BigEndian.PutUint32(rb[:], uint32(rank))
	if len(m.value) != jobauth.NonceSize+jobauth.ProofSize {
		return fail(fmt.Errorf("bootstrap: hello to %s: challenge of %d bytes: %w", addr, len(m.value), errPermanent))
	}
	ns, proof := m.value[:jobauth.NonceSize], m.value[jobauth.NonceSize:]
	if !jobauth.Equal(proof, jobauth.Proof(key, "store-server", nc1, ns, rb[:])) {
		// Say so with an empty proof (a real proof would let a server
		// that is not ours test guesses of the token offline), and wait
		// for the refusal, so that the server has logged it.
		nc.Write(appendFrame(nil, &message{op: opAuth}))
		readMessageMax(nc, maxHelloFrame)
		return fail(fmt.Errorf("bootstrap: rank %d: the server at %s does not hold this job's token: %w (check VCCL_JOB_TOKEN: is another job using this address?)", rank, addr, ErrTokenMismatch))
	}
	if _, err := exchange(&message{op: opAuth, value: jobauth.Proof(key, "store-client", nc1, ns, rb[:])}, opOK); err != nil {
		return fail(err)
	}
	if !stop() {
		nc.Close()
		return fmt.Errorf("bootstrap: hello to %s: %w", addr, context.Cause(ctx))
	}
	nc.SetDeadline(time.Time{})
	return nil
}

// Rank returns the rank the client presented.
func (c *Client) Rank() int { return c.rank }

// Close closes the connection. Pending calls fail with ErrClosed. The server's
// store is unaffected. It is safe to call more than once.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	<-c.readerDone
	return nil
}

// fail makes the client unusable with err (the first error wins), fails the
// pending calls and closes the connection.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	err = c.err
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, ch := range pending {
		ch <- result{err: err}
	}
	c.nc.Close()
}

func (c *Client) readLoop() {
	defer close(c.readerDone)
	for {
		m, err := readMessage(c.nc)
		if err != nil {
			c.fail(fmt.Errorf("%w (%s): %v", ErrConnLost, c.addr, err))
			return
		}
		switch m.op {
		case opBye:
			c.fail(fmt.Errorf("%w (%s)", ErrServerClosed, c.addr))
			return
		case opOK, opErr:
		default:
			c.fail(fmt.Errorf("%w (%s): unexpected op %#x from server", ErrConnLost, c.addr, m.op))
			return
		}
		c.mu.Lock()
		ch := c.pending[m.id]
		delete(c.pending, m.id)
		c.mu.Unlock()
		if ch != nil { // nil: the caller gave up (context) before the reply came
			ch <- result{m: m}
		}
	}
}

// call sends req and waits for its reply within ctx.
func (c *Client) call(ctx context.Context, req message) (message, error) {
	if err := ctx.Err(); err != nil {
		return message{}, context.Cause(ctx)
	}
	ch := make(chan result, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return message{}, err
	}
	req.id = c.nextID
	c.nextID++
	c.pending[req.id] = ch
	c.mu.Unlock()

	frame := appendFrame(nil, &req)
	c.wmu.Lock()
	if d, ok := ctx.Deadline(); ok {
		c.nc.SetWriteDeadline(d)
	} else {
		c.nc.SetWriteDeadline(time.Time{})
	}
	_, werr := c.nc.Write(frame)
	c.wmu.Unlock()
	if werr != nil {
		// A partial write leaves the stream unusable.
		c.fail(fmt.Errorf("%w (%s): %v", ErrConnLost, c.addr, werr))
	}

	select {
	case r := <-ch:
		if r.err != nil {
			return message{}, r.err
		}
		if r.m.op == opErr {
			switch r.m.code {
			case codeExists:
				return message{}, fmt.Errorf("server: %s: %w", r.m.text, ErrKeyExists)
			case codeDenied:
				return message{}, fmt.Errorf("server: %s: %w", r.m.text, ErrDenied)
			case codeLimit:
				return message{}, fmt.Errorf("server: %s: %w", r.m.text, ErrLimit)
			}
			return message{}, fmt.Errorf("server: %s", r.m.text)
		}
		return r.m, nil
	case <-ctx.Done():
		c.mu.Lock()
		_, stillPending := c.pending[req.id]
		delete(c.pending, req.id)
		c.mu.Unlock()
		if stillPending && (req.op == opGet || req.op == opWait) {
			// Unpark it on the server; best effort, never blocks long.
			c.cancel(req.id)
		}
		return message{}, context.Cause(ctx)
	}
}

func (c *Client) cancel(id uint64) {
	frame := appendFrame(nil, &message{op: opCancel, id: id})
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.nc.Write(frame); err != nil {
		go c.fail(fmt.Errorf("%w (%s): %v", ErrConnLost, c.addr, err))
	}
}

func checkSize(keys []string, value []byte) error {
	if n := frameSize(keys, value); n > MaxFrame {
		return fmt.Errorf("bootstrap: request of %d bytes exceeds the %d-byte limit", n, MaxFrame)
	}
	return nil
}

// Set stores value under key, waking every Get and Wait for it. A key is
// written once: setting it again fails with ErrKeyExists. A key made by
// RankKey(…, r) may be set only by rank r.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	if err := checkSize([]string{key}, value); err != nil {
		return err
	}
	if _, err := c.call(ctx, message{op: opSet, key: key, value: value}); err != nil {
		return fmt.Errorf("bootstrap: set %q: %w", key, err)
	}
	return nil
}

// Get returns the value of key, waiting until some rank sets it or ctx is
// done.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkSize([]string{key}, nil); err != nil {
		return nil, err
	}
	m, err := c.call(ctx, message{op: opGet, key: key})
	if err != nil {
		return nil, fmt.Errorf("bootstrap: get %q: %w", key, err)
	}
	return m.value, nil
}

// Add atomically adds delta to the integer counter at key (absent counts as
// 0) and returns the new value. The counter is stored as decimal text, so Get
// and Wait see it like any other key; adding to a key holding something else
// is an error.
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkSize([]string{key}, nil); err != nil {
		return 0, err
	}
	m, err := c.call(ctx, message{op: opAdd, key: key, num: delta})
	if err != nil {
		return 0, fmt.Errorf("bootstrap: add %q: %w", key, err)
	}
	return m.num, nil
}

// Wait returns when every key exists, or with an error when ctx is done first.
func (c *Client) Wait(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	if err := checkSize(keys, nil); err != nil {
		return err
	}
	if _, err := c.call(ctx, message{op: opWait, keys: keys}); err != nil {
		return fmt.Errorf("bootstrap: wait for %d keys: %w", len(keys), err)
	}
	return nil
}

// Barrier returns when n ranks have entered the barrier called name. The same
// name can be used again (for the next barrier) as long as every rank passes
// it the same number of times with the same n: each pass of n arrivals is one
// generation, with its own release key.
func (c *Client) Barrier(ctx context.Context, name string, n int) error {
	if n < 1 {
		return fmt.Errorf("bootstrap: barrier %q: n = %d, need at least 1", name, n)
	}
	v, err := c.Add(ctx, "barrier/"+name+"/count", 1)
	if err != nil {
		return fmt.Errorf("bootstrap: barrier %q: %w", name, err)
	}
	gen := (v - 1) / int64(n)
	release := "barrier/" + name + "/release/" + strconv.FormatInt(gen, 10)
	if v%int64(n) == 0 {
		if err := c.Set(ctx, release, nil); err != nil {
			return fmt.Errorf("bootstrap: barrier %q: %w", name, err)
		}
		return nil
	}
	if err := c.Wait(ctx, release); err != nil {
		return fmt.Errorf("bootstrap: barrier %q (%d of %d arrived when rank %d entered): %w", name, (v-1)%int64(n)+1, n, c.rank, err)
	}
	return nil
}

// ClockOffset estimates the offset of the server's monotonic clock from this
// process's (both flowtel.Monotonic): it makes rounds round trips asking for
// the server's clock and keeps the one with the smallest round-trip time,
// whose midpoint best matches the instant the server read its clock. The
// offset is server - local, so local + offset is on the server's (rank 0's)
// time base; errNs = rtt/2 bounds its error.
func (c *Client) ClockOffset(ctx context.Context, rounds int) (offsetNs, errNs int64, err error) {
	if rounds < 1 {
		return 0, 0, fmt.Errorf("bootstrap: clock offset: rounds = %d, need at least 1", rounds)
	}
	best := int64(-1)
	for range rounds {
		t0 := flowtel.Monotonic()
		m, err := c.call(ctx, message{op: opClock})
		t1 := flowtel.Monotonic()
		if err != nil {
			return 0, 0, fmt.Errorf("bootstrap: clock offset: %w", err)
		}
		rtt := t1 - t0
		if best < 0 || rtt < best {
			best = rtt
			offsetNs = m.num - (t0 + rtt/2)
		}
	}
	return offsetNs, (best + 1) / 2, nil
}
