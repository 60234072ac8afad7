package collective

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/internal/syncbuf"
	"github.com/vccl-go/vccl/transport"
)

func TestNewOverTCPStoreAndClockOffset(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	comms := newStoreJob(t, ctx, 3, WithToken("secret"), WithTransport("tcp"))
	for _, c := range comms {
		if c.UID() != comms[0].UID() || c.ID() != comms[0].ID() {
			t.Fatalf("rank %d has communicator %s, rank 0 %s", c.Rank(), c.UID(), comms[0].UID())
		}
		// One kernel, one monotonic clock: the offset is 0, not a
		// measurement of it (bootstrap's tests measure one).
		if off, e := c.Clock().Offset(), c.Clock().ErrorNs(); off != 0 || e != 0 {
			t.Errorf("rank %d clock offset %dns ± %dns on one host, want 0 ± 0", c.Rank(), off, e)
		}
	}
	if err := runOnAll(comms, func(c *Comm) error {
		buf := []float64{1}
		return AllReduce(ctx, c, buf, buf, Sum)
	}); err != nil {
		t.Fatal(err)
	}
}

// closeAtEnd closes the communicators of comms that were made when the
// test ends.
func closeAtEnd(t testing.TB, comms []*Comm) {
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	})
}

// newStoreJob starts n ranks as goroutines that meet through rank 0's
// rendezvous store at a free address, as a launcher's processes would; they
// close when the test ends.
func newStoreJob(t *testing.T, ctx context.Context, n int, opts ...Option) []*Comm {
	t.Helper()
	addr := freeAddr(t)
	comms, errs := eachRank(n, func(r int) (*Comm, error) {
		return New(ctx, append([]Option{WithRank(r, n), WithMaster(addr)}, opts...)...)
	})
	closeAtEnd(t, comms)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return comms
}

func TestWrongJobTokenRefused(t *testing.T) {
	ctx := testCtx(t, 2*time.Second)
	addr := freeAddr(t)
	var logged syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, tok := range []string{"right", "wrong"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := New(ctx, WithRank(r, 2), WithMaster(addr), WithToken(tok), WithLogger(log))
			if err == nil {
				c.Abort()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "token") {
		t.Fatalf("rank with the wrong token: %v, want a token error", errs[1])
	}
	if errs[0] == nil {
		t.Fatal("rank 0 formed a job without rank 1")
	}
	if !strings.Contains(logged.String(), "token") {
		t.Fatalf("refusal not logged with its reason; log:\n%s", logged.String())
	}
}

func TestFaultToleranceMustAgree(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	addr := freeAddr(t)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := New(ctx, WithRank(r, 2), WithMaster(addr), WithTransport("tcp"), WithFaultTolerance(r == 0))
			if err == nil {
				c.Abort()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	// Every rank fails; the one that sees every rank's settings first names
	// the mismatch (if that is rank 0, the store closes under the other).
	named := false
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d joined a job whose ranks disagree on fault tolerance", r)
		}
		named = named || strings.Contains(err.Error(), "fault tolerance")
	}
	if !named {
		t.Errorf("no rank named the fault-tolerance mismatch: %v", errs)
	}
}

// A store served before the ranks start (a C API's unique id serves it in
// the process that made the id): with WithServedStore rank 0 dials it
// instead of serving its address again.
func TestServedStore(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	const token = "served-store-test-token"
	srv, err := bootstrap.Serve(ctx, "127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	addr := srv.Addr().String()
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = New(ctx, WithRank(r, 2), WithMaster(addr), WithToken(token), WithServedStore(), WithTelemetry(false))
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	out := make([][]int32, 2)
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[r] = []int32{int32(r + 1), 10}
			errs[r] = AllReduce(ctx, comms[r], out[r], out[r], Sum)
		}()
	}
	wg.Wait()
	for r := range comms {
		if errs[r] != nil || out[r][0] != 3 || out[r][1] != 20 {
			t.Errorf("rank %d: %v %v", r, out[r], errs[r])
		}
		comms[r].Close()
	}
}

// The attacks of issue 31 on a running job whose ranks share a token: an
// abort posted through the store, and a link's connection key claimed,
// each without the token, with a wrong one, and by a second writer with the
// right one. Every attempt is refused and the job runs on, unaborted.
func TestAbortAndHijackRefused(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	const token = "the-job's-secret"
	comms := newStoreJob(t, ctx, 2, WithToken(token), WithTransport("tcp"), WithFaultTolerance(true))
	master := comms[0].opts.master
	uid := comms[0].UID()
	abortKey := "vccl/" + uid + "/abort"
	allReduce := func() error {
		return runOnAll(comms, func(c *Comm) error {
			buf := []float64{1}
			if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
				return err
			}
			if buf[0] != 2 {
				return fmt.Errorf("sum %v, want 2", buf[0])
			}
			return nil
		})
	}
	if err := allReduce(); err != nil {
		t.Fatal(err)
	}

	t.Run("abort without the token", func(t *testing.T) {
		// The protocol before tokens were proved: a hello with the empty
		// token, then the abort.
		nc, err := net.Dial("tcp", master)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		frame := func(body []byte) []byte { return binary.BigEndian.AppendUint32(nil, uint32(len(body))) }
		hello := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0}
		set := append([]byte{2, 0, 0, 0, 0, 0, 0, 0, 1}, binary.BigEndian.AppendUint32(nil, uint32(len(abortKey)))...)
		set = append(set, abortKey...)
		set = append(binary.BigEndian.AppendUint32(set, 12), "1 injected!!"...)
		nc.Write(append(frame(hello), hello...))
		nc.Write(append(frame(set), set...))
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(nc)
		if len(b) < 5 || b[4] != 0x82 {
			t.Fatalf("the store answered % x, want a refusal (op 0x82)", b)
		}
	})
	t.Run("abort with a wrong token", func(t *testing.T) {
		for _, rank := range []int{1, bootstrap.ObserverRank} {
			if _, err := bootstrap.Dial(ctx, master, "guessed", rank); !errors.Is(err, bootstrap.ErrTokenMismatch) {
				t.Fatalf("rank %d with a wrong token: %v", rank, err)
			}
		}
	})
	t.Run("abort by a second writer with the token", func(t *testing.T) {
		for _, rank := range []int{0, 1, 2} {
			if _, err := bootstrap.Dial(ctx, master, token, rank); !errors.Is(err, bootstrap.ErrRankTaken) {
				t.Fatalf("claiming rank %d of a running job: %v, want ErrRankTaken", rank, err)
			}
		}
		obs, err := bootstrap.Dial(ctx, master, token, bootstrap.ObserverRank)
		if err != nil {
			t.Fatal(err)
		}
		defer obs.Close()
		if _, err := obs.Add(ctx, abortKey+"/n", 1); !errors.Is(err, bootstrap.ErrDenied) {
			t.Fatalf("an observer bumping the abort counter: %v", err)
		}
		if err := obs.Set(ctx, abortKey, []byte("1 0")); !errors.Is(err, bootstrap.ErrDenied) {
			t.Fatalf("an observer posting an abort: %v", err)
		}
		// Rank 0's own connection cannot post rank 1's cause either.
		if err := comms[0].Store().Set(ctx, bootstrap.RankKey(abortKey+"/cause", 1), []byte("injected")); !errors.Is(err, bootstrap.ErrDenied) {
			t.Fatalf("rank 0 writing rank 1's cause: %v", err)
		}
	})

	// The link between the ranks: rank 1 listens (ft keeps its listener
	// for reconnections), rank 0 dialled under the link's key.
	addrs := strings.Split(comms[0].peers[1].Addrs["tcp"], ",")
	realKey := linkKey(uid, 0, 0, 1, comms[0].peers[0].Secret, comms[0].peers[1].Secret) + "/ft0"
	guessed := fmt.Sprintf("%s/0/0-1/ft0", uid) // the key before link secrets
	dialLink := func(tok, key string) (net.Conn, error) {
		nc, err := net.Dial("tcp", addrs[0])
		if err != nil {
			return nil, err
		}
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := transport.DialHandshake(hctx, nc, tok, key); err != nil {
			nc.Close()
			return nil, err
		}
		return nc, nil
	}
	t.Run("hijack without the token", func(t *testing.T) {
		if _, err := dialLink("", realKey); !errors.Is(err, transport.ErrBadToken) {
			t.Fatalf("claiming the link with no token: %v", err)
		}
	})
	t.Run("hijack with a wrong token", func(t *testing.T) {
		if _, err := dialLink("guessed", realKey); !errors.Is(err, transport.ErrBadToken) {
			t.Fatalf("claiming the link with a wrong token: %v", err)
		}
	})
	t.Run("hijack by a second writer with the token", func(t *testing.T) {
		// The predictable key of old names no link now: the connection is
		// authenticated but no link ever takes it.
		nc, err := dialLink(token, guessed)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if err := allReduce(); err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, _ := nc.Read(make([]byte, 64)); n > 0 {
			t.Fatalf("the attacker's connection under the old key received %d bytes", n)
		}
	})
	if err := allReduce(); err != nil {
		t.Fatalf("the job after the attacks: %v", err)
	}
	short, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	if v, err := comms[0].Store().Get(short, abortKey+"/n"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an abort was counted: %q, %v", v, err)
	}
}

// An empty token on an address other hosts can reach refuses to start, with
// the message that says how to set one and how to opt out.
func TestEmptyTokenOffLoopbackRefused(t *testing.T) {
	t.Setenv(EnvToken, "")
	t.Setenv(EnvTokenFile, "")
	t.Setenv(EnvInsecure, "")
	ctx := testCtx(t, 10*time.Second)
	start := time.Now()
	_, err := New(ctx, WithRank(1, 2), WithMaster("192.0.2.1:29500"))
	var nt *NoTokenError
	if !errors.As(err, &nt) {
		t.Fatalf("New with a non-loopback store and no token: %v, want a NoTokenError", err)
	}
	for _, want := range []string{"192.0.2.1:29500", "not loopback", EnvToken, EnvTokenFile, EnvInsecure + "=1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("refused after %v: it should not wait for anything", d)
	}
	t.Log(err)

	// The launcher's environment, through NewFromEnv.
	for k, v := range map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "192.0.2.1", "MASTER_PORT": "29500"} {
		t.Setenv(k, v)
	}
	if _, err := NewFromEnv(ctx); !errors.As(err, &nt) {
		t.Fatalf("NewFromEnv: %v, want a NoTokenError", err)
	}
	// With a token (here a file), or the opt-out, it goes on to dial (and
	// fails for other reasons within a short deadline).
	tf := t.TempDir() + "/token"
	os.WriteFile(tf, []byte("s3cret\n"), 0o600)
	t.Setenv(EnvTokenFile, tf)
	short, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	if _, err := NewFromEnv(short); err == nil || errors.As(err, &nt) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("NewFromEnv with a token file: %v", err)
	}
	t.Setenv(EnvTokenFile, "")
	t.Setenv(EnvInsecure, "1")
	short3, cancel3 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel3()
	if _, err := NewFromEnv(short3); err == nil || errors.As(err, &nt) {
		t.Fatalf("NewFromEnv with %s=1: %v", EnvInsecure, err)
	}
}

// A transport that listens on an interface other hosts reach needs a token
// too, even when the store is on loopback.
func TestEmptyTokenTransportOffLoopbackRefused(t *testing.T) {
	t.Setenv(EnvToken, "")
	t.Setenv(EnvTokenFile, "")
	t.Setenv(EnvInsecure, "")
	ifname := nonLoopbackInterface()
	if ifname == "" {
		t.Skip("no interface with an IPv4 address other than loopback")
	}
	ctx := testCtx(t, 10*time.Second)
	addr := freeAddr(t)
	errs := make([]error, 2)
	done := make(chan struct{})
	for r := range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			c, err := New(ctx, WithRank(r, 2), WithMaster(addr), WithTransport("tcp"), WithSocketInterface(ifname), WithTimeout(5*time.Second))
			if err == nil {
				c.Abort()
			}
			errs[r] = err
		}()
	}
	<-done
	<-done
	var nt *NoTokenError
	for r, err := range errs {
		if !errors.As(err, &nt) || !strings.Contains(err.Error(), "tcp transport") {
			t.Errorf("rank %d: %v, want a NoTokenError for the tcp transport", r, err)
		}
	}
	t.Log(errs)
}

func nonLoopbackInterface() string {
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 || ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				return ifc.Name
			}
		}
	}
	return ""
}
