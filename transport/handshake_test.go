package transport

import (
	"bytes"
	"context"
	"errors"
	"github.com/vccl-go/vccl/internal/bounded"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/internal/syncbuf"
)

func testAcceptor(t *testing.T, cfg AcceptorConfig) (*Acceptor, *syncbuf.Buffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	cfg.Log = slog.New(slog.NewTextHandler(logs, nil))
	a := NewAcceptorConfig(ln, cfg)
	t.Cleanup(func() { a.Close() })
	return a, logs
}

func dialKey(ctx context.Context, a *Acceptor, token, key string) (net.Conn, error) {
	c, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		return nil, err
	}
	if err := DialHandshake(ctx, c, token, key); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// A link's key, claimed: without the token, with a wrong one, and by a
// second dialler with the right one, nobody else gets it.
func TestKeyHijackRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, logs := testAcceptor(t, AcceptorConfig{Token: "job", LogEvery: time.Nanosecond})
	const key = "uid/0/0-1/secret"

	// No token (the old protocol, or an empty token) and a wrong one.
	raw, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	raw.Write(append([]byte("VCCL\x01\x00\x00"), byte(len(key)), 0))
	raw.Write([]byte(key))
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(raw); len(b) == 0 || b[0] == 0 {
		t.Fatalf("a version-1 hello with no token got %q, want a refusal", b)
	}
	raw.Close()
	for _, tok := range []string{"", "wrong"} {
		if _, err := dialKey(ctx, a, tok, key); !errors.Is(err, ErrBadToken) {
			t.Fatalf("dial with token %q: %v, want ErrBadToken", tok, err)
		}
	}
	// The right token: the first dialler claims the key, a second is
	// refused, and Accept hands out the first.
	first, err := dialKey(ctx, a, "job", key)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if _, err := dialKey(ctx, a, "job", key); !errors.Is(err, ErrKeyClaimed) {
		t.Fatalf("a second dialler of the key: %v, want ErrKeyClaimed", err)
	}
	got, err := a.Accept(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	first.Write([]byte("ping"))
	buf := make([]byte, 4)
	got.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(got, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("Accept handed out another connection than the first dialler's: %q, %v", buf, err)
	}
	// Even after Accept took it, the key stays claimed.
	if _, err := dialKey(ctx, a, "job", key); !errors.Is(err, ErrKeyClaimed) {
		t.Fatalf("a dialler of an accepted key: %v, want ErrKeyClaimed", err)
	}
	if l := logs.String(); !strings.Contains(l, "job token mismatch") || !strings.Contains(l, "refused connection") {
		t.Errorf("refusals not logged:\n%s", l)
	}
	if strings.Contains(logs.String(), "wrong") {
		t.Errorf("the log shows a token:\n%s", logs)
	}
}

// With RepeatKeys (ft's reconnections) a key may arrive again.
func TestRepeatKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, _ := testAcceptor(t, AcceptorConfig{Token: "job", RepeatKeys: true})
	for range 3 {
		c, err := dialKey(ctx, a, "job", "k")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got, err := a.Accept(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		got.Close()
	}
}

// The dialler checks the listener's proof: it never hands a link to a
// listener of another job, and never sends the token.
func TestDialerChecksListener(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, _ := testAcceptor(t, AcceptorConfig{Token: "other-job"})
	if _, err := dialKey(ctx, a, "my-job-token", "k"); !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), "does not hold") {
		t.Fatalf("dial to a listener of another job: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(time.Second))
		b, _ := io.ReadAll(c)
		got <- b
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	DialHandshake(short, c, "my-job-token", "k")
	c.Close()
	if b := <-got; bytes.Contains(b, []byte("my-job-token")) || len(b) == 0 {
		t.Fatalf("the dialler sent %q", b)
	}
}

// Strangers that connect and say nothing: past MaxHandshakes they wait in
// the kernel's backlog (a dialler with the token then waits, it does not
// fail); from a host other than this one, past the per-host cap they are
// closed at once; a flood of refusals costs a log line per interval.
func TestAcceptorPreAuthCapped(t *testing.T) {
	bounded.Check(t, bounded.Issue31, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		a, logs := testAcceptor(t, AcceptorConfig{Token: "job"})
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range MaxHandshakes + 50 {
			c, err := net.Dial("tcp", a.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		deadline := time.Now().Add(5 * time.Second)
		for a.inHandshake.Load() < MaxHandshakes && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := a.inHandshake.Load(); n != MaxHandshakes {
			t.Fatalf("%d connections in the handshake, want the cap, %d", n, MaxHandshakes)
		}
		// A dialler with the token waits for a slot, and gets one when the
		// strangers go.
		done := make(chan error, 1)
		go func() {
			c, err := dialKey(ctx, a, "job", "k")
			if c != nil {
				c.Close()
			}
			done <- err
		}()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
		if err := <-done; err != nil {
			t.Fatalf("a dialler with the token after the flood: %v", err)
		}

		if ip := nonLoopbackIP(); ip != "" {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
			if err != nil {
				t.Fatal(err)
			}
			b := NewAcceptor(ln, "job", slog.New(slog.NewTextHandler(io.Discard, nil)))
			defer b.Close()
			for range MaxHandshakesPerHost + 20 {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
			}
			for i, c := range conns[MaxHandshakesPerHost:] {
				c.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("connection %d from %s, past the per-host cap of %d, is held open", MaxHandshakesPerHost+i, ip, MaxHandshakesPerHost)
				}
			}
		}
		var wg sync.WaitGroup
		for range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dialKey(ctx, a, "wrong", "k")
			}()
		}
		wg.Wait()
		if lines := strings.Count(logs.String(), "refused connection"); lines > 2 || len(logs.String()) > 4096 {
			t.Fatalf("%d refusal lines:\n%s", lines, logs)
		}
	})
}

func nonLoopbackIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			return ipn.IP.String()
		}
	}
	return ""
}

// FuzzReadHello: any bytes a stranger sends before the handshake end in a
// hello or an error, never a panic, and never a field beyond its bound.
func FuzzReadHello(f *testing.F) {
	f.Add([]byte("VCCL\x02" + strings.Repeat("n", 16) + "\x03\x00key"))
	f.Add([]byte("VCCL\x02" + strings.Repeat("n", 16) + "\xff\xff"))
	f.Add([]byte("VCCL\x01\x00\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		key, nonce, err := readHello(bytes.NewReader(data))
		if err != nil {
			return
		}
		if len(key) > maxHelloField || len(nonce) != 16 {
			t.Fatalf("key of %d bytes, nonce of %d", len(key), len(nonce))
		}
	})
}

// FuzzDialAnswer: whatever a listener answers, the dialler ends with nil
// or an error within its deadline, and never panics.
func FuzzDialAnswer(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{2, 5, 0, 'n', 'o', 'p', 'e', '!'})
	f.Add(append([]byte{0}, make([]byte, 48)...))
	f.Add([]byte{3, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, answer []byte) {
		c1, c2 := net.Pipe()
		defer c1.Close()
		c2.SetDeadline(time.Now().Add(time.Second))
		go io.Copy(io.Discard, c2)
		go func() {
			c2.Write(answer)
			c2.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := DialHandshake(ctx, c1, "tok", "k"); err == nil {
			t.Fatalf("a handshake with a listener that proved nothing succeeded (answer %x)", answer)
		}
	})
}

// Once SetupDeadline's stop returns, the connection keeps no deadline, even
// when ctx ended just before: a cancellation already under way finishes
// before the clear, not after it (where it would fail every later read).
func TestSetupDeadlineStopIsFinal(t *testing.T) {
	for i := range 300 {
		c1, c2 := net.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		stop := SetupDeadline(ctx, c1)
		cancel()
		stop()
		stop() // twice is once
		runtime.Gosched()
		go c2.Write([]byte{1})
		if _, err := c1.Read(make([]byte, 1)); err != nil {
			t.Fatalf("round %d: a read after stop: %v", i, err)
		}
		c1.Close()
		c2.Close()
	}
}

// A connection Accept handed out is its caller's alone: the handshake
// that admitted it touches its deadline no more, neither clearing the one
// the caller set (a backend's setup bound) nor setting a past one when the
// acceptor closes.
func TestAcceptedConnLeftAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 30 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := NewAcceptorConfig(ln, AcceptorConfig{Token: "job", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		c, err := dialKey(ctx, a, "job", "k")
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.Accept(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		got.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		for a.inHandshake.Load() > 0 && ctx.Err() == nil {
			runtime.Gosched()
		}
		// Nothing to read: the caller's deadline, not a cleared one (a
		// read that would block until the guard closes it) ends the read.
		guard := time.AfterFunc(5*time.Second, func() { got.Close() })
		var ne net.Error
		if _, err := got.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("round %d: a read past the caller's deadline: %v, want a timeout", i, err)
		}
		guard.Stop()
		a.Close()
		runtime.Gosched()
		got.SetReadDeadline(time.Time{})
		c.Write([]byte("ping"))
		buf := make([]byte, 4)
		if _, err := io.ReadFull(got, buf); err != nil {
			t.Fatalf("round %d: the accepted connection after the acceptor closed: %v", i, err)
		}
		c.Close()
		got.Close()
	}
}
