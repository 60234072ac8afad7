package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"github.com/vccl-go/vccl/internal/syncbuf"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testToken = "job-token-for-tests"

// testCtx bounds a whole test: nothing may wait past it.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// parkHook reports every key a request parks on.
func parkHook(ch chan<- string) ServerOption {
	return func(s *Server) { s.onPark = func(k string) { ch <- k } }
}

func startServer(t *testing.T, opts ...ServerOption) (*Server, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	opts = append([]ServerOption{WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))}, opts...)
	s, err := Serve(testCtx(t), "127.0.0.1:0", testToken, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, logs
}

func dial(t *testing.T, ctx context.Context, s *Server, rank int) *Client {
	t.Helper()
	c, err := Dial(ctx, s.Addr().String(), testToken, rank)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitPark waits (within ctx) for a request to park on key.
func waitPark(t *testing.T, ctx context.Context, parked <-chan string, key string) {
	t.Helper()
	for {
		select {
		case k := <-parked:
			if k == key {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no request parked on %q: %v", key, ctx.Err())
		}
	}
}

func TestSetGetAdd(t *testing.T) {
	ctx := testCtx(t)
	s, _ := startServer(t)
	c := dial(t, ctx, s, 0)

	if err := c.Set(ctx, "a", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "a"); err != nil || string(v) != "hello" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if err := c.Set(ctx, "a", []byte("again")); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("second Set: err = %v, want ErrKeyExists", err)
	}
	if v, _ := c.Get(ctx, "a"); string(v) != "hello" {
		t.Fatalf("Get after a refused second Set = %q, want the first value", v)
	}
	if err := c.Set(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "empty"); err != nil || len(v) != 0 {
		t.Fatalf("Get empty = %q, %v", v, err)
	}
	for i, want := range []int64{5, 3, 3} {
		delta := []int64{5, -2, 0}[i]
		if got, err := c.Add(ctx, "ctr", delta); err != nil || got != want {
			t.Fatalf("Add(%d) = %d, %v; want %d", delta, got, err, want)
		}
	}
	if v, _ := c.Get(ctx, "ctr"); string(v) != "3" {
		t.Fatalf("Get counter = %q, want \"3\"", v)
	}
	_, err := c.Add(ctx, "a", 1)
	if err == nil || !strings.Contains(err.Error(), "not an integer") {
		t.Fatalf("Add on a non-counter: err = %v", err)
	}
	if err := c.Wait(ctx, "a", "ctr", "empty"); err != nil {
		t.Fatal(err)
	}
}

func TestGetWaitsForSet(t *testing.T) {
	ctx := testCtx(t)
	parked := make(chan string, 16)
	s, _ := startServer(t, parkHook(parked))
	getter, setter := dial(t, ctx, s, 1), dial(t, ctx, s, 0)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := getter.Get(short, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get of a missing key: err = %v, want deadline exceeded", err)
	}

	got := make(chan []byte, 1)
	go func() {
		v, err := getter.Get(ctx, "k")
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	waitPark(t, ctx, parked, "k")
	if err := setter.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if string(v) != "v" {
			t.Fatalf("Get = %q", v)
		}
	case <-ctx.Done():
		t.Fatal("Get not woken by Set")
	}
}

func TestWaitForAllKeys(t *testing.T) {
	ctx := testCtx(t)
	parked := make(chan string, 16)
	s, _ := startServer(t, parkHook(parked))
	w, setter := dial(t, ctx, s, 1), dial(t, ctx, s, 0)

	setter.Set(ctx, "a", nil)
	done := make(chan error, 1)
	go func() { done <- w.Wait(ctx, "a", "b", "c", "b") }()
	waitPark(t, ctx, parked, "c")
	setter.Set(ctx, "b", nil)
	// The waiter's connection answers requests in order, and a reply to a
	// wait woken by "b" would be queued before the reply to this one.
	if err := roundTrip(ctx, w); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("Wait returned (%v) with c still missing", err)
	default:
	}
	setter.Set(ctx, "c", nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// roundTrip makes one request through c's connection and waits for it.
func roundTrip(ctx context.Context, c *Client) error {
	_, _, err := c.ClockOffset(ctx, 1)
	return err
}

func TestCancelledGetIsUnparked(t *testing.T) {
	ctx := testCtx(t)
	parked := make(chan string, 16)
	s, _ := startServer(t, parkHook(parked))
	c := dial(t, ctx, s, 0)

	gctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := c.Get(gctx, "never"); done <- err }()
	waitPark(t, ctx, parked, "never")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Get: err = %v", err)
	}
	// The cancel was written before Get returned, so once this later
	// request is answered the server has processed it.
	if err := roundTrip(ctx, c); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	n := len(s.waiters)
	s.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d keys still have parked requests after cancel", n)
	}
}

func TestConcurrentAdd(t *testing.T) {
	ctx := testCtx(t)
	s, _ := startServer(t)
	const ranks, adds = 4, 50
	var wg sync.WaitGroup
	seen := make([]atomic.Bool, ranks*adds+1)
	for r := range ranks {
		c := dial(t, ctx, s, r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range adds {
				v, err := c.Add(ctx, "n", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if v < 1 || v > ranks*adds || seen[v].Swap(true) {
					t.Errorf("Add returned %d twice or out of range", v)
				}
			}
		}()
	}
	wg.Wait()
	c := dial(t, ctx, s, ranks)
	if v, _ := c.Get(ctx, "n"); string(v) != fmt.Sprint(ranks*adds) {
		t.Fatalf("counter = %s, want %d", v, ranks*adds)
	}
}

func TestBarrier(t *testing.T) {
	ctx := testCtx(t)
	s, _ := startServer(t)
	const ranks, rounds = 4, 3
	var entered [rounds]atomic.Int32
	var wg sync.WaitGroup
	for r := range ranks {
		c := dial(t, ctx, s, r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range rounds {
				entered[g].Add(1)
				if err := c.Barrier(ctx, "step", ranks); err != nil {
					t.Error(err)
					return
				}
				if n := entered[g].Load(); n != ranks {
					t.Errorf("rank %d left barrier %d with %d of %d ranks entered", r, g, n, ranks)
				}
			}
		}()
	}
	wg.Wait()
	c := dial(t, ctx, s, ranks)
	if err := c.Barrier(ctx, "x", 0); err == nil {
		t.Fatal("Barrier with n=0 succeeded")
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := c.Barrier(short, "lonely", 2)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 of 2 arrived") {
		t.Fatalf("incomplete barrier: err = %v", err)
	}
}

func TestTokenMismatch(t *testing.T) {
	ctx := testCtx(t)
	s, logs := startServer(t)
	start := time.Now()
	_, err := Dial(ctx, s.Addr().String(), "another-job", 3)
	if !errors.Is(err, ErrTokenMismatch) {
		t.Fatalf("Dial with a wrong token: err = %v, want ErrTokenMismatch", err)
	}
	if !strings.Contains(err.Error(), "rank 3") || !strings.Contains(err.Error(), s.Addr().String()) {
		t.Errorf("error does not name rank and server: %v", err)
	}
	t.Logf("client sees: %v", err)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusal took %v: Dial retried a permanent error", d)
	}
	// The server logs before it writes the refusal, so the line is there.
	l := logs.String()
	for _, want := range []string{"refused connection", "reason=\"job token mismatch\"", "rank=3", "remote=127.0.0.1:"} {
		if !strings.Contains(l, want) {
			t.Errorf("server log lacks %q:\n%s", want, l)
		}
	}
	if strings.Contains(l, "another-job") || strings.Contains(l, testToken) {
		t.Errorf("server log shows a token:\n%s", l)
	}
	// The server is still fine for the right token.
	c := dial(t, ctx, s, 0)
	if err := c.Set(ctx, "k", nil); err != nil {
		t.Fatal(err)
	}
}

func TestDialRetriesUntilServerStarts(t *testing.T) {
	ctx := testCtx(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	type res struct {
		c   *Client
		err error
	}
	got := make(chan res, 1)
	go func() {
		c, err := Dial(ctx, addr, testToken, 1)
		got <- res{c, err}
	}()
	s, err := Serve(ctx, addr, testToken)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	defer s.Close()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	if err := r.c.Set(ctx, "k", nil); err != nil {
		t.Fatal(err)
	}
}

func TestDialGivesUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	_, err = Dial(ctx, addr, testToken, 2)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rank 2 could not reach") || !strings.Contains(err.Error(), "last error") {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
}

// pendingGet starts a server and a client of rank whose Get of a key that
// nobody sets is parked on the server, and returns the Get's outcome.
func pendingGet(t *testing.T, ctx context.Context, rank int) (*Server, *Client, <-chan error) {
	t.Helper()
	parked := make(chan string, 16)
	s, _ := startServer(t, parkHook(parked))
	c := dial(t, ctx, s, rank)
	done := make(chan error, 1)
	go func() { _, err := c.Get(ctx, "never"); done <- err }()
	waitPark(t, ctx, parked, "never")
	return s, c, done
}

func TestServerCloseFailsPendingCalls(t *testing.T) {
	ctx := testCtx(t)
	s, c, done := pendingGet(t, ctx, 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrServerClosed) {
			t.Fatalf("pending Get: err = %v, want ErrServerClosed", err)
		}
		t.Log(err)
	case <-ctx.Done():
		t.Fatal("pending Get hangs after the server closed")
	}
	if err := c.Set(ctx, "k", nil); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Set after close: err = %v, want ErrServerClosed", err)
	}
}

func TestClientClose(t *testing.T) {
	ctx := testCtx(t)
	_, c, done := pendingGet(t, ctx, 0)
	c.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("pending Get after Close: err = %v", err)
	}
	if err := c.Set(ctx, "k", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set after Close: err = %v", err)
	}
	c.Close() // twice is fine
}

// A client that dies (with a parked request), one that sends garbage and one
// that never says hello do not disturb the others or Close.
func TestBadClientsDoNotDisturbOthers(t *testing.T) {
	ctx := testCtx(t)
	parked := make(chan string, 16)
	s, logs := startServer(t, parkHook(parked))
	good := dial(t, ctx, s, 0)

	dead := dial(t, ctx, s, 1)
	go dead.Get(ctx, "k")
	waitPark(t, ctx, parked, "k")
	dead.nc.Close() // abrupt: no goodbye

	garbage, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer garbage.Close()
	garbage.Write([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	// The server logs, then hangs up: reading until EOF (or a reset, as
	// it closes with our bytes unread) orders the two.
	dl, _ := ctx.Deadline()
	garbage.SetReadDeadline(dl)
	if _, err := io.ReadAll(garbage); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("garbage connection not closed by the server: %v", err)
	}

	silent, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	// A client that authenticates and then breaks the protocol.
	rogue := dial(t, ctx, s, 2)
	rogue.wmu.Lock()
	rogue.nc.Write(appendFrame(nil, &message{op: opOK, id: 1}))
	rogue.wmu.Unlock()

	if err := good.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := good.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if _, err := rogue.Get(ctx, "k"); !errors.Is(err, ErrConnLost) {
		t.Fatalf("rogue client: err = %v, want ErrConnLost", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Close hangs on a connection that never said hello")
	}
	if !strings.Contains(logs.String(), "no valid hello") {
		t.Errorf("garbage connection not logged:\n%s", logs)
	}
}

func TestServeStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	s, err := Serve(ctx, "127.0.0.1:0", testToken)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, testCtx(t), s, 0)
	cancel()
	err = c.Wait(testCtx(t), "never")
	if !errors.Is(err, ErrServerClosed) {
		t.Fatalf("err = %v, want ErrServerClosed", err)
	}
	s.Close()
}

func TestClockOffsetInProcess(t *testing.T) {
	ctx := testCtx(t)
	s, _ := startServer(t)
	c := dial(t, ctx, s, 1)
	off, errNs, err := c.ClockOffset(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	// One clock on both sides: the true offset is 0, and the server read it
	// between t0 and t1, so |offset| ≤ rtt/2 exactly.
	if off < -errNs || off > errNs {
		t.Errorf("offset %d ns outside ±%d ns", off, errNs)
	}
	if errNs <= 0 || errNs > int64(50*time.Millisecond) {
		t.Errorf("error bound %d ns, want small and positive", errNs)
	}
	t.Logf("offset %d ns ± %d ns", off, errNs)
	if _, _, err := c.ClockOffset(ctx, 0); err == nil {
		t.Error("ClockOffset(0 rounds) succeeded")
	}
}
