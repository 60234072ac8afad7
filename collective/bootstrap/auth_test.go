package bootstrap

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"github.com/vccl-go/vccl/internal/bounded"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/internal/jobauth"
)

// The token never travels: what a client sends to a listener that is not
// the store holds no byte run of it.
func TestHandshakeNeverSendsToken(t *testing.T) {
	ctx := testCtx(t)
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
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	Dial(short, ln.Addr().String(), testToken, 1)
	b := <-got
	if len(b) == 0 {
		t.Fatal("the client sent nothing")
	}
	if bytes.Contains(b, []byte(testToken)) || bytes.Contains(b, []byte(testToken[:8])) {
		t.Fatalf("the hello carries the token: %q", b)
	}
}

// The attacks of issue 31 on the abort board and on a rank's bootstrap
// record, made against a job of two ranks that have connected: each is
// refused, and neither the abort nor the record changes.
func TestStoreAttacksRefused(t *testing.T) {
	ctx := testCtx(t)
	s, err := Serve(ctx, "127.0.0.1:0", testToken, WithWorldSize(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := s.Addr().String()
	r0, r1 := dial(t, ctx, s, 0), dial(t, ctx, s, 1)
	info1 := RankKey("vccl/job/info", 1)
	if err := r1.Set(ctx, info1, []byte("rank 1's addresses")); err != nil {
		t.Fatal(err)
	}
	abort := "vccl/job/abort"

	t.Run("no token", func(t *testing.T) {
		// A raw connection that skips the handshake and writes the
		// abort straight away, as the old protocol's empty token let it.
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write(appendFrame(nil, &message{op: opHello, version: 1, rank: 1, value: nil}))
		nc.Write(appendFrame(nil, &message{op: opSet, id: 1, key: abort, value: []byte("1 injected")}))
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, err := readMessage(nc)
		if err != nil || m.op != opErr {
			t.Fatalf("the server answered %+v, %v; want a refusal", m, err)
		}
		if _, err := readMessage(nc); err == nil {
			t.Fatal("the connection stays open after the refusal")
		}
		// And with the empty token through the real client.
		if _, err := Dial(ctx, addr, "", ObserverRank); !errors.Is(err, ErrTokenMismatch) {
			t.Fatalf("Dial with no token: %v, want ErrTokenMismatch", err)
		}
	})
	t.Run("wrong token", func(t *testing.T) {
		for _, rank := range []int{0, 1, 2, ObserverRank} {
			if _, err := Dial(ctx, addr, "guessed", rank); !errors.Is(err, ErrTokenMismatch) {
				t.Fatalf("Dial as rank %d with a wrong token: %v, want ErrTokenMismatch", rank, err)
			}
		}
	})
	t.Run("right token, second writer", func(t *testing.T) {
		// Claim a rank that is connected, or none of the job's.
		for _, rank := range []int{0, 1, 2, 1 << 20} {
			if _, err := Dial(ctx, addr, testToken, rank); !errors.Is(err, ErrRankTaken) {
				t.Fatalf("Dial as rank %d while the job's ranks are connected: %v, want ErrRankTaken", rank, err)
			}
		}
		// An observer writes nothing and reads no private key.
		obs, err := Dial(ctx, addr, testToken, ObserverRank)
		if err != nil {
			t.Fatal(err)
		}
		defer obs.Close()
		if err := obs.Set(ctx, abort, []byte("1 injected")); !errors.Is(err, ErrDenied) {
			t.Fatalf("observer's Set of the abort key: %v, want ErrDenied", err)
		}
		if _, err := obs.Add(ctx, abort+"/n", 1); !errors.Is(err, ErrDenied) {
			t.Fatalf("observer's Add: %v, want ErrDenied", err)
		}
		if _, err := obs.Get(ctx, info1); !errors.Is(err, ErrDenied) {
			t.Fatalf("observer's Get of a rank's record: %v, want ErrDenied", err)
		}
		// A rank may not write another's record, nor its own twice.
		if err := r0.Set(ctx, info1, []byte("the attacker's address")); !errors.Is(err, ErrDenied) {
			t.Fatalf("rank 0 writing rank 1's record: %v, want ErrDenied", err)
		}
		if err := r1.Set(ctx, info1, []byte("again")); !errors.Is(err, ErrKeyExists) {
			t.Fatalf("rank 1 writing its record twice: %v, want ErrKeyExists", err)
		}
		if err := r0.Set(ctx, RankKey("x", 2), nil); !errors.Is(err, ErrDenied) {
			t.Fatalf("rank 0 writing a key of rank 2: %v, want ErrDenied", err)
		}
		if err := r0.Set(ctx, "x/@abc", nil); !errors.Is(err, ErrDenied) {
			t.Fatalf("a key ending in @ with no rank: %v, want ErrDenied", err)
		}
		// The first abort stands; a second writer cannot replace it.
		if err := r1.Set(ctx, abort, []byte("1")); err != nil {
			t.Fatal(err)
		}
		if err := r0.Set(ctx, abort, []byte("0")); !errors.Is(err, ErrKeyExists) {
			t.Fatalf("a second abort: %v, want ErrKeyExists", err)
		}
	})
	if v, err := r0.Get(ctx, info1); err != nil || string(v) != "rank 1's addresses" {
		t.Fatalf("rank 1's record after the attacks: %q, %v", v, err)
	}
	if v, err := r0.Get(ctx, abort); err != nil || string(v) != "1" {
		t.Fatalf("the abort key after the attacks: %q, %v", v, err)
	}
	// The observer can read what is public.
	if err := r0.Set(ctx, UIDKey, []byte("cafe")); err != nil {
		t.Fatal(err)
	}
	obs, err := Dial(ctx, addr, testToken, ObserverRank)
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	if v, err := obs.Get(ctx, UIDKey); err != nil || string(v) != "cafe" {
		t.Fatalf("observer's Get of the uid: %q, %v", v, err)
	}
}

// A rank is held by one connection at a time: once it leaves, it may come
// back.
func TestRankReconnects(t *testing.T) {
	ctx := testCtx(t)
	s, _ := startServer(t)
	c, err := Dial(ctx, s.Addr().String(), testToken, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, s.Addr().String(), testToken, 3); !errors.Is(err, ErrRankTaken) || !strings.Contains(err.Error(), "connected already") {
		t.Fatalf("a second connection as rank 3: %v", err)
	}
	c.Close()
	// The server learns of the close when it reads EOF: retry within ctx.
	for {
		c2, err := Dial(ctx, s.Addr().String(), testToken, 3)
		if err == nil {
			c2.Close()
			return
		}
		if !errors.Is(err, ErrRankTaken) || ctx.Err() != nil {
			t.Fatal(err)
		}
	}
}

// heapAfterGC is the live heap after a collection.
func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// nonLoopbackIP returns an IPv4 address of this host that is not loopback,
// or "".
func nonLoopbackIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			return ipn.IP.String()
		}
	}
	return ""
}

// Strangers that connect and say nothing: past MaxHandshakes they wait in
// the kernel's backlog, holding nothing of the server's; from one host
// other than this one, past MaxHandshakesPerHost they are closed at once;
// and the refusals cost a log line per interval, not one each.
func TestPreAuthConnectionsCapped(t *testing.T) {
	bounded.Check(t, bounded.Issue31, func(t *testing.T) {
		ctx := testCtx(t)
		start := time.Now()
		s, logs := startServer(t)
		r0 := dial(t, ctx, s, 0)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range MaxHandshakes + 50 {
			c, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		// Let the server take what it will: once it has MaxHandshakes, a
		// round trip of a rank already connected still works, and it holds
		// no more.
		deadline := time.Now().Add(5 * time.Second)
		for {
			s.mu.Lock()
			held := len(s.hello)
			s.mu.Unlock()
			if held > MaxHandshakes {
				t.Fatalf("the server holds %d connections in the handshake, cap %d", held, MaxHandshakes)
			}
			if held == MaxHandshakes || time.Now().After(deadline) {
				t.Logf("%d silent connections: the server holds %d in the handshake", len(conns), held)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := roundTrip(ctx, r0); err != nil {
			t.Fatal(err)
		}
		for _, c := range conns {
			c.Close()
		}
		conns = nil

		if ip := nonLoopbackIP(); ip != "" {
			s2, err := Serve(ctx, net.JoinHostPort(ip, "0"), testToken)
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			for range MaxHandshakesPerHost + 20 {
				c, err := net.Dial("tcp", s2.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
			}
			// The ones past the cap (accepted in order) are closed at once.
			for i, c := range conns[MaxHandshakesPerHost:] {
				c.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("connection %d from %s, past the per-host cap of %d, is held open", MaxHandshakesPerHost+i, ip, MaxHandshakesPerHost)
				}
			}
		} else {
			t.Log("no address but loopback: the per-host cap is not exercised")
		}
		// Forty wrong tokens: a line or two.
		for range 40 {
			Dial(ctx, s.Addr().String(), "wrong", ObserverRank)
		}
		lines := strings.Count(logs.String(), "refused connection")
		if lines > 2 || len(logs.String()) > 4096 {
			t.Fatalf("%d refusal lines, %d bytes of log:\n%s", lines, len(logs.String()), logs)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v", d)
		}
	})
}

// A client with the token declaring frames of MaxFrame that it never sends
// costs the server what it sends, not what it declares.
func TestDeclaredFrameCostsWhatArrives(t *testing.T) {
	bounded.Check(t, bounded.Issue31, func(t *testing.T) {
		ctx := testCtx(t)
		s, _ := startServer(t)
		const clients = 64
		before := heapAfterGC()
		var cs []*Client
		for r := range clients {
			c := dial(t, ctx, s, r)
			cs = append(cs, c)
			var hdr [4]byte
			binary.BigEndian.PutUint32(hdr[:], MaxFrame)
			c.wmu.Lock()
			c.nc.Write(append(hdr[:], opSet, 0, 0, 0, 0, 0, 0, 0, 1))
			c.wmu.Unlock()
		}
		// Each connection's reader is blocked in the body: a round trip on a
		// fresh connection orders the writes above before the measurement.
		probe := dial(t, ctx, s, clients)
		if err := roundTrip(ctx, probe); err != nil {
			t.Fatal(err)
		}
		grew := int64(heapAfterGC()) - int64(before)
		if grew > clients*MaxFrame/4 {
			t.Fatalf("%d stalled frames of %d bytes grew the heap by %d bytes", clients, MaxFrame, grew)
		}
		t.Logf("%d stalled %d-byte frames: heap +%d KiB", clients, MaxFrame, grew>>10)
		for _, c := range cs {
			c.Close()
		}
	})
}

// A client that asks for a large value again and again without reading the
// replies is disconnected, rather than let the server queue them.
func TestUnreadRepliesBounded(t *testing.T) {
	bounded.Check(t, bounded.Issue31, func(t *testing.T) {
		ctx := testCtx(t)
		s, _ := startServer(t)
		w := dial(t, ctx, s, 0)
		big := bytes.Repeat([]byte("x"), MaxFrame-64)
		if err := w.Set(ctx, "big", big); err != nil {
			t.Fatal(err)
		}
		nc, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		// The client's side of the handshake, and no reader: the replies
		// pile up.
		if err := clientHandshake(ctx, nc, s.Addr().String(), jobauth.Key(testToken, jobauth.PurposeStore), 1); err != nil {
			t.Fatal(err)
		}
		var frames []byte
		for i := range 64 {
			frames = appendFrame(frames, &message{op: opGet, id: uint64(i + 1), key: "big"})
		}
		nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Write(frames); err != nil {
			t.Fatal(err)
		}
		// The server drops the client once its queue passes the bound.
		deadline := time.Now().Add(5 * time.Second)
		for {
			s.mu.Lock()
			n := len(s.conns)
			s.mu.Unlock()
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server still serves a client with %d MiB of unread replies", 64*MaxFrame>>20)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func TestTokenFromEnv(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("  s3cret \nsecond line\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, tc := range []struct {
		env     func(string) string
		want    string
		wantErr string
	}{
		{env(), "", ""},
		{env(TokenVar, "abc"), "abc", ""},
		{env(TokenFileVar, file), "s3cret", ""},
		{env(TokenVar, "abc", TokenFileVar, file), "", "set one"},
		{env(TokenFileVar, empty), "", "holds no token"},
		{env(TokenFileVar, filepath.Join(dir, "missing")), "", TokenFileVar},
		{env(TokenVar, strings.Repeat("x", 2000)), "", "longer than"},
	} {
		got, err := TokenFromEnv(tc.env)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("an error shows the token: %v", err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("TokenFromEnv = %q, %v; want %q", got, err, tc.want)
		}
	}
	e, err := FromEnv(env("RANK", "0", "WORLD_SIZE", "1", TokenFileVar, file))
	if err != nil || e.Token != "s3cret" {
		t.Fatalf("FromEnv with a token file: %+v, %v", e, err)
	}
}
