package tcp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/affinity"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

func connect(t *testing.T, b Backend, addr string) *transporttest.Pair {
	t.Helper()
	return transporttest.Connect(t, transporttest.Factory{Backend: b, ListenAddr: addr})
}

func checkTransfer(t *testing.T, p *transporttest.Pair, msg []byte) {
	t.Helper()
	dst := make([]byte, len(msg)+8)
	p.B.PostRecv(transport.WR{ID: 1, Buf: dst})
	p.A.PostSend(transport.WR{ID: 2, Buf: msg})
	sc := transporttest.WaitN(t, p.A, p.NotA, 1)[0]
	rc := transporttest.WaitN(t, p.B, p.NotB, 1)[0]
	if sc.Err != nil || rc.Err != nil || !bytes.Equal(dst[:rc.Bytes], msg) {
		t.Fatalf("transfer: send %v, recv %v, got %q", sc.Err, rc.Err, dst[:rc.Bytes])
	}
}

func TestListenDefaultAddr(t *testing.T) {
	t.Setenv(EnvSocketIfname, "vcclnope0") // the backend reads no environment
	p := connect(t, Backend{}, "")
	if info := p.A.Info(); !strings.HasPrefix(info.Remote, "127.0.0.1:") || info.Backend != Name {
		t.Fatalf("default listener: %+v, want 127.0.0.1", info)
	}
	checkTransfer(t, p, []byte("default"))
}

func TestInterface(t *testing.T) {
	lo := transporttest.LoopbackIfname(t)
	for _, tc := range []struct {
		name string
		b    Backend
	}{
		{"one", Backend{Interface: lo}},
		{"list", Backend{Interface: lo + ",vcclnope1"}}, // the first is used
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := connect(t, tc.b, "")
			a, b := p.A.Info(), p.B.Info()
			if !strings.HasPrefix(a.Local, "127.") || !strings.HasPrefix(b.Local, "127.") {
				t.Fatalf("interface %s: dialled %s -> %s, accepted on %s", lo, a.Local, a.Remote, b.Local)
			}
			checkTransfer(t, p, []byte("via "+lo))
		})
	}
}

func TestInterfaceIPv6(t *testing.T) {
	lo := transporttest.LoopbackIfname(t)
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	ln.Close()
	p := connect(t, Backend{Interface: lo}, "[::1]:0")
	if a := p.A.Info(); !strings.HasPrefix(a.Local, "[::1]:") {
		t.Fatalf("dial over IPv6 bound to %s, want [::1]", a.Local)
	}
	checkTransfer(t, p, []byte("six"))
}

func TestMissingInterface(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), transporttest.Deadline)
	defer cancel()
	bad := Backend{Interface: "vcclnope0,lo"}
	if _, err := bad.Listen(ctx, transport.ListenConfig{}); err == nil || !strings.Contains(err.Error(), `"vcclnope0"`) {
		t.Fatalf("listen on a missing interface: %v, want an error naming it", err)
	}
	ln, err := Backend{}.Listen(ctx, transport.ListenConfig{Addr: "127.0.0.1:0", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := bad.Dial(ctx, ln.Addr(), "k", transport.Config{Token: "t"}); err == nil || !strings.Contains(err.Error(), `"vcclnope0"`) {
		t.Fatalf("dial from a missing interface: %v, want an error naming it", err)
	}
	if _, err := (Backend{Interface: "vcclnope2"}).Dial(ctx, ln.Addr(), "k", transport.Config{Token: "t"}); err == nil ||
		!strings.Contains(err.Error(), `"vcclnope2"`) || !strings.Contains(err.Error(), EnvSocketIfname) {
		t.Fatalf("dial from a missing interface: %v, want an error naming it and %s", err, EnvSocketIfname)
	}
}

// Peer death fails the survivor's sends waiting for credit as well as its
// receives, names the peer, and later posts fail the same way.
func TestPeerDeathFailsEverything(t *testing.T) {
	p := connect(t, Backend{}, "")
	for i := range 3 {
		p.B.PostSend(transport.WR{ID: uint64(i), Buf: []byte("no credit")})
		p.B.PostRecv(transport.WR{ID: uint64(10 + i), Buf: make([]byte, 8)})
	}
	peer := p.A.Info().Local
	kill(p.A)
	wcs := transporttest.WaitN(t, p.B, p.NotB, 6)
	wcs = append(wcs, lateFailures(t, p.B, p.NotB)...)
	sends, recvs := 0, 0
	for _, wc := range wcs {
		if wc.Status != flowtel.StatusError || !errors.Is(wc.Err, transport.ErrPeerDead) || !strings.Contains(wc.Err.Error(), peer) {
			t.Fatalf("completion %+v: want a peer-dead error naming %s", wc, peer)
		}
		// Each direction completes in posting order.
		if wc.Op == transport.OpSend {
			if wc.ID != uint64(sends) && wc.ID != 100 {
				t.Fatalf("send %d completed as %d", sends, wc.ID)
			}
			sends++
		} else {
			if wc.ID != uint64(10+recvs) && wc.ID != 101 {
				t.Fatalf("receive %d completed as %d", recvs, wc.ID)
			}
			recvs++
		}
	}
	if p.B.Outstanding() != 0 {
		t.Fatalf("%d WRs outstanding after the peer died", p.B.Outstanding())
	}
}

func lateFailures(t *testing.T, q transport.QP, n *transport.Notifier) []transport.WC {
	if err := q.PostSend(transport.WR{ID: 100, Buf: []byte("late")}); err != nil {
		t.Fatalf("post after peer death: %v, want a completion instead", err)
	}
	if err := q.PostRecv(transport.WR{ID: 101, Buf: make([]byte, 4)}); err != nil {
		t.Fatalf("post after peer death: %v, want a completion instead", err)
	}
	return transporttest.WaitN(t, q, n, 2)
}

// Close flushes the QP's own WRs, in posting order, as flushed.
func TestCloseFlushesOwn(t *testing.T) {
	p := connect(t, Backend{}, "")
	for i := range 4 {
		p.A.PostSend(transport.WR{ID: uint64(i), Buf: make([]byte, 100)})
		p.A.PostRecv(transport.WR{ID: uint64(10 + i), Buf: make([]byte, 100)})
	}
	if err := p.A.Close(); err != nil {
		t.Fatal(err)
	}
	next := map[transport.Opcode]uint64{transport.OpSend: 0, transport.OpRecv: 10}
	for _, wc := range transporttest.WaitN(t, p.A, p.NotA, 8) {
		if wc.Status != flowtel.StatusFlushed || !errors.Is(wc.Err, transport.ErrClosed) {
			t.Fatalf("completion %+v: want flushed with ErrClosed", wc)
		}
		if wc.ID != next[wc.Op] {
			t.Fatalf("%s %d completed out of order (as %d)", wc.Op, next[wc.Op], wc.ID)
		}
		next[wc.Op]++
	}
	if err := p.A.PostSend(transport.WR{Buf: []byte("x")}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("post after close: %v", err)
	}
}

// Sizes around the read-ahead buffer exercise both the copy of bytes read
// with a header and the direct read into the receive buffer, with many
// frames in flight and a too-large send in the middle.
func TestMixedSizesInFlight(t *testing.T) {
	p := connect(t, Backend{}, "")
	sizes := []int{0, 1, 15, 16, 17, readAhead - HeaderSize - 1, readAhead - HeaderSize, readAhead - 1, readAhead,
		readAhead + 1, 3 * readAhead, 65535, 65536, 1 << 20, 7, 0, 1<<20 + 3}
	const tooBig = 5
	dsts := postRecvs(p, sizes, tooBig)
	for i, n := range sizes {
		p.A.PostSend(transport.WR{ID: uint64(i), Buf: patternOf(n, byte(i))})
	}
	sc := transporttest.WaitN(t, p.A, p.NotA, len(sizes))
	rc := transporttest.WaitN(t, p.B, p.NotB, len(sizes))
	checkMessages(t, sizes, tooBig, dsts, sc, rc)
}

// postRecvs posts on p.B a receive for each size, one byte short for the
// message tooBig, and returns their buffers.
func postRecvs(p *transporttest.Pair, sizes []int, tooBig int) [][]byte {
	dsts := make([][]byte, len(sizes))
	for i, n := range sizes {
		dsts[i] = make([]byte, n)
		if i == tooBig {
			dsts[i] = dsts[i][:n-1]
		}
		p.B.PostRecv(transport.WR{ID: uint64(i), Buf: dsts[i]})
	}
	return dsts
}

// checkMessages checks the completions of messages i of sizes[i] bytes
// (patternOf(n, i)) sent into postRecvs' buffers: in order, intact, and
// message tooBig failed on both sides with the same too-large error.
func checkMessages(t *testing.T, sizes []int, tooBig int, dsts [][]byte, sc, rc []transport.WC) {
	t.Helper()
	for i, n := range sizes {
		if sc[i].ID != uint64(i) || rc[i].ID != uint64(i) {
			t.Fatalf("completion %d: send %d recv %d", i, sc[i].ID, rc[i].ID)
		}
		if i == tooBig {
			if !errors.Is(sc[i].Err, transport.ErrTooLarge) || sc[i].Err.Error() != rc[i].Err.Error() {
				t.Fatalf("too-large message: send %v, recv %v", sc[i].Err, rc[i].Err)
			}
			continue
		}
		if sc[i].Err != nil || rc[i].Err != nil || rc[i].Bytes != n || !bytes.Equal(dsts[i], patternOf(n, byte(i))) {
			t.Fatalf("message %d of %d bytes: send %v recv %v (%d bytes)", i, n, sc[i].Err, rc[i].Err, rc[i].Bytes)
		}
	}
}

func patternOf(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// A peer that breaks the framing kills the QP with a clear error.
func TestProtocolError(t *testing.T) {
	eager := func(seq uint32, n uint64) []byte {
		return AppendHeader(nil, Header{Type: FrameData, Flags: FlagEager, Seq: seq, Len: n})
	}
	var tooMany []byte // eager frames, one over the window, before any receive
	for i := range eagerWindow + 1 {
		tooMany = append(tooMany, eager(uint32(i), 0)...)
	}
	for _, tc := range []struct {
		name   string
		noRecv bool // post no receive: the frames arrive ahead of it
		frame  []byte
		want   string
	}{
		{"garbage", false, []byte("GET / HTTP/1.1\r\n"), "magic"},
		{"data without receive", true, AppendHeader(nil, Header{Type: FrameData, Len: 1}), "no receive posted"},
		{"credit out of sequence", false, AppendHeader(nil, Header{Type: FrameCredit, Seq: 5}), "credit frame 5, want 0"},
		{"data longer than its credited receive", false, AppendHeader(nil, Header{Type: FrameData, Len: 9}), "for a receive of 8 bytes"},
		{"eager over the limit", true, eager(0, eagerMax+1), "over the 69632-byte limit"},
		{"too many eager", true, tooMany, "over 16 messages ahead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), transporttest.Deadline)
			defer cancel()
			ln, err := Backend{}.Listen(ctx, transport.ListenConfig{Token: "t"})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			raw, err := net.Dial("tcp", ln.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			if err := transport.DialHandshake(ctx, raw, "t", "k"); err != nil {
				t.Fatal(err)
			}
			no := transport.NewNotifier()
			q, err := ln.Accept(ctx, "k", transport.Config{Notifier: no})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if !tc.noRecv {
				q.PostRecv(transport.WR{ID: 1, Buf: make([]byte, 8)})
			}
			raw.Write(tc.frame)
			if tc.noRecv {
				// Something must be outstanding to fail; a send without
				// credit waits (1 MiB: too large to go ahead of it).
				q.PostSend(transport.WR{ID: 2, Buf: make([]byte, 1<<20)})
			}
			wc := transporttest.WaitN(t, q, no, 1)[0]
			if !errors.Is(wc.Err, transport.ErrPeerDead) || !strings.Contains(wc.Err.Error(), "protocol error") ||
				!strings.Contains(wc.Err.Error(), tc.want) {
				t.Fatalf("completion error %v, want a peer-dead protocol error mentioning %q", wc.Err, tc.want)
			}
		})
	}
}

// Small sends posted before their receives go ahead of their credits; the
// receiver keeps them until the receives come, including one too large for
// its receive, which fails at both ends while the others land.
// waitEarly polls q until n eager messages wait there for their receives.
func waitEarly(t *testing.T, q *QP, n int) {
	t.Helper()
	pollUntil(t, q, n, "eager messages arrived ahead of their receives", func() int { return q.early.Len() })
}

// pollUntil polls q until count, read under q.mu, reaches n.
func pollUntil(t *testing.T, q *QP, n int, what string, count func() int) {
	t.Helper()
	deadline := time.Now().Add(transporttest.Deadline)
	for {
		q.Poll(nil)
		q.mu.Lock()
		got := count()
		q.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d %s", got, n, what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestEagerAheadOfReceives(t *testing.T) {
	p := connect(t, Backend{}, "")
	sizes := []int{0, 1, 100, readAhead + 5, eagerMax, 3000, 77}
	const tooBig = 3
	for i, n := range sizes {
		if err := p.A.PostSend(transport.WR{ID: uint64(i), Buf: patternOf(n, byte(i))}); err != nil {
			t.Fatal(err)
		}
	}
	// All of them are written before any credit exists: their bytes are
	// at the receiver, which holds them as early messages.
	waitEarly(t, p.B.(*QP), len(sizes))
	dsts := postRecvs(p, sizes, tooBig)
	rc := transporttest.WaitN(t, p.B, p.NotB, len(sizes))
	sc := transporttest.WaitN(t, p.A, p.NotA, len(sizes))
	checkMessages(t, sizes, tooBig, dsts, sc, rc)
}

// A receive filled by an eager message completes before its credit is
// written; the receiver may then finish and close at once (a rank leaving
// after its last collective). The sender's eager send, whose data arrived,
// must still complete: Close writes the credits it owes first.
func TestCloseWritesOwedCredits(t *testing.T) {
	for round := range 20 {
		p := connect(t, Backend{}, "")
		msg := patternOf(100, byte(round))
		if err := p.A.PostSend(transport.WR{ID: 1, Buf: msg}); err != nil {
			t.Fatal(err)
		}
		waitEarly(t, p.B.(*QP), 1)
		dst := make([]byte, len(msg))
		p.B.PostRecv(transport.WR{ID: 1, Buf: dst})
		rc := transporttest.WaitN(t, p.B, p.NotB, 1)[0]
		p.B.Close()
		sc := transporttest.WaitN(t, p.A, p.NotA, 1)[0]
		if rc.Err != nil || !bytes.Equal(dst, msg) {
			t.Fatalf("round %d: receive %v", round, rc.Err)
		}
		if sc.Err != nil {
			t.Fatalf("round %d: the send whose data arrived failed when the receiver closed: %v", round, sc.Err)
		}
	}
}

// While its owner spins, a QP's messages arrive through Poll alone, and a
// receive's credit goes out with the next Poll; once spinning stops, the
// reader goroutine reads again and signals the notifier, and a receive's
// credit goes out at once. The messages are too large to go ahead of their
// credits.
func TestSpinning(t *testing.T) {
	p := connect(t, Backend{}, "")
	qb := p.B.(*QP)
	qb.SetSpinning(true)
	const size = 1 << 20
	msg := patternOf(size, 1)
	dst := make([]byte, size)
	p.B.PostRecv(transport.WR{ID: 1, Buf: dst})
	p.A.PostSend(transport.WR{ID: 2, Buf: msg})
	if wc := pollOne(t, qb, "no completion while spinning"); wc.Err != nil || wc.Bytes != size || !bytes.Equal(dst, msg) {
		t.Fatalf("spinning receive: %v, %d bytes", wc.Err, wc.Bytes)
	}
	transporttest.WaitN(t, p.A, p.NotA, 1)
	select { // a completion's stale signal
	case <-p.NotB.C():
	default:
	}
	qb.SetSpinning(false)
	// Nobody polls B now: only its reader goroutine can see the message.
	msg = patternOf(size, 2)
	p.B.PostRecv(transport.WR{ID: 3, Buf: dst})
	p.A.PostSend(transport.WR{ID: 4, Buf: msg})
	select {
	case <-p.NotB.C():
	case <-time.After(transporttest.Deadline):
		t.Fatal("the reader goroutine did not signal a message after spinning stopped")
	}
	wcs := make([]transport.WC, 2)
	if n := qb.Poll(wcs); n != 1 || wcs[0].Err != nil || !bytes.Equal(dst, msg) {
		t.Fatalf("after spinning: %d completions, %v", n, wcs[0].Err)
	}
}

// pollOne polls q until it returns a completion, within the test deadline.
func pollOne(t *testing.T, q transport.QP, what string) transport.WC {
	t.Helper()
	wcs := make([]transport.WC, 1)
	deadline := time.Now().Add(transporttest.Deadline)
	for q.Poll(wcs) == 0 {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
	}
	return wcs[0]
}

// Err reports a lost peer, and the notifier wakes the owner, even with no WR
// outstanding; an end's own Close is not a lost peer.
func TestErrReportsPeerDeath(t *testing.T) {
	p := connect(t, Backend{}, "")
	a, b := p.A.(*QP), p.B.(*QP)
	if a.Err() != nil || b.Err() != nil {
		t.Fatalf("Err on a live pair: %v, %v", a.Err(), b.Err())
	}
	peer := a.Info().Local
	kill(a)
	deadline := time.NewTimer(transporttest.Deadline)
	defer deadline.Stop()
	for b.Err() == nil {
		select {
		case <-p.NotB.C():
		case <-deadline.C:
			t.Fatal("peer death not reported by Err")
		}
	}
	if err := b.Err(); !errors.Is(err, transport.ErrPeerDead) || !strings.Contains(err.Error(), peer) {
		t.Fatalf("Err = %v, want ErrPeerDead naming %s", err, peer)
	}
	b.Close()
	q := connect(t, Backend{}, "")
	q.A.Close()
	if err := q.A.(*QP).Err(); err != nil {
		t.Fatalf("Err after own Close = %v, want nil", err)
	}
}

func TestSockBuf(t *testing.T) {
	p := connect(t, Backend{SockBuf: 1 << 20}, "")
	checkTransfer(t, p, patternOf(3<<20, 1))
}

// A connection within the host uses reno unless a congestion control is
// named; a name the kernel does not know fails the connection, naming it.
func TestCongestion(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("TCP_CONGESTION is Linux's")
	}
	t.Setenv(EnvCongestion, "cubic") // the backend reads no environment
	ccOf := func(qp transport.QP) string {
		t.Helper()
		name, err := congestionOf(qp.(*QP).sock.fd)
		if err != nil {
			t.Fatalf("TCP_CONGESTION: %v", err)
		}
		return name
	}
	p := connect(t, Backend{}, "")
	if a, b := ccOf(p.A), ccOf(p.B); a != "reno" || b != "reno" {
		t.Fatalf("loopback congestion control %q and %q, want reno at both ends", a, b)
	}
	checkTransfer(t, p, patternOf(3<<20, 2))

	if err := dialErr(t, Backend{Congestion: "no-such-cc"}); err == nil || !strings.Contains(err.Error(), `"no-such-cc"`) || !strings.Contains(err.Error(), EnvCongestion) {
		t.Fatalf("Dial with congestion control no-such-cc: %v, want an error naming it and %s", err, EnvCongestion)
	}
}

// dialErr dials a fresh listener with b, and returns the dial's error (a
// bad setting fails the dialler's set-up).
func dialErr(t *testing.T, b Backend) error {
	t.Helper()
	ln, err := Backend{}.Listen(t.Context(), transport.ListenConfig{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go ln.Accept(t.Context(), "k", transport.Config{})
	_, err = b.Dial(t.Context(), ln.Addr(), "k", transport.Config{Token: "tok"})
	return err
}

// A connection within the host gets localBuf when this process is bound to
// CPUs of its own (go test under taskset -c 0) and the kernel allows it,
// else autotuning; a negative SockBuf always leaves autotuning alone.
func TestLocalSockBuf(t *testing.T) {
	rcvbuf := func(qp transport.QP) int {
		t.Helper()
		n, err := unix.GetsockoptInt(qp.(*QP).sock.fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	p := connect(t, Backend{}, "")
	a, b := rcvbuf(p.A), rcvbuf(p.B)
	if bufAllowed(localBuf) && affinity.LauncherBound() {
		if a < localBuf || b < localBuf {
			t.Fatalf("bound, loopback: SO_RCVBUF %d and %d, want at least %d", a, b, localBuf)
		}
	} else if a >= localBuf || b >= localBuf {
		t.Fatalf("unbound or capped: SO_RCVBUF %d and %d, want autotuning's start (below %d)", a, b, localBuf)
	}
	checkTransfer(t, p, patternOf(9<<20, 3))
	p = connect(t, Backend{SockBuf: -1}, "")
	if a := rcvbuf(p.A); a >= localBuf {
		t.Fatalf("SockBuf -1: SO_RCVBUF %d, want the kernel's default (below %d)", a, localBuf)
	}
	p = connect(t, Backend{SockBuf: 100000}, "")
	if a := rcvbuf(p.A); runtime.GOOS == "linux" && a != 2*100000 {
		t.Fatalf("SockBuf 100000: SO_RCVBUF %d, want %d (the kernel doubles it)", a, 2*100000)
	}
}

// ParseConfig reads the three variables, and its errors name the variable.
func TestParseConfig(t *testing.T) {
	transporttest.RunEnvCases(t, "ParseConfig", ParseConfig, []transporttest.EnvCase[Config]{
		{Name: "unset"},
		{Name: "all", Env: map[string]string{EnvSocketIfname: " eth0,eth1 ", EnvCongestion: "cubic", EnvSockBuf: "100000"},
			Want: Config{Interfaces: "eth0,eth1", Congestion: "cubic", SockBuf: 100000}},
		{Name: "autotuning", Env: map[string]string{EnvSockBuf: "-1"}, Want: Config{SockBuf: -1}},
		{Name: "not a number", Env: map[string]string{EnvSockBuf: "big"}, WantErr: EnvSockBuf},
		{Name: "zero", Env: map[string]string{EnvSockBuf: "0"}, WantErr: EnvSockBuf},
		{Name: "below -1", Env: map[string]string{EnvSockBuf: "-2"}, WantErr: EnvSockBuf},
	})
}

// Sends flagged More wait for the send posted after them, and all go in
// one write; one whose follower never comes goes with the next Poll.
func TestMoreHoldsSends(t *testing.T) {
	p := connect(t, Backend{}, "")
	qa := p.A.(*QP)
	const size = eagerMax + 1 // not eager: each needs its credit
	dsts := make([][]byte, 4)
	for i := range dsts {
		dsts[i] = make([]byte, size)
		p.B.PostRecv(transport.WR{ID: uint64(i), Buf: dsts[i]})
	}
	pollUntil(t, qa, len(dsts), "credits arrived", func() int { return qa.credits.Len() })
	post := func(i int, more bool) {
		if err := p.A.PostSend(transport.WR{ID: uint64(i), Buf: patternOf(size, byte(i)), More: more}); err != nil {
			t.Fatal(err)
		}
	}
	post(0, true)
	post(1, true)
	qa.mu.Lock()
	held := qa.sends.Len()
	qa.mu.Unlock()
	if held != 2 {
		t.Fatalf("%d of 2 sends flagged More still queued, want both held for the next post", held)
	}
	post(2, false)
	post(3, true)
	if n := qa.Poll(make([]transport.WC, 4)); n > 4 {
		t.Fatalf("%d completions", n)
	}
	rc := transporttest.WaitN(t, p.B, p.NotB, len(dsts))
	for i, wc := range rc {
		if wc.ID != uint64(i) || wc.Err != nil || !bytes.Equal(dsts[i], patternOf(size, byte(i))) {
			t.Fatalf("receive %d: id %d, %v", i, wc.ID, wc.Err)
		}
	}
}

// A spinning owner keeps the batch the socket did not take and writes the
// rest from its own Polls; when spinning stops, or the QP closes, the
// writer goroutine takes it over. The message is far larger than the
// socket buffers, and the receiver reads only when the test says so.
func TestSpinningOwnerKeepsFullBatch(t *testing.T) {
	const size = 32 << 20
	msg := patternOf(size, 7)
	// held connects a pair, posts msg on A while both ends spin and B
	// does not read, and returns once A holds the unwritten rest.
	held := func(t *testing.T) (*transporttest.Pair, []byte) {
		p := connect(t, Backend{}, "")
		qa, qb := p.A.(*QP), p.B.(*QP)
		qa.SetSpinning(true)
		qb.SetSpinning(true) // B's reader goroutine parks
		waitParked(t, qb)
		dst := make([]byte, size)
		p.B.PostRecv(transport.WR{ID: 1, Buf: dst})
		qb.Poll(nil) // writes the credit
		pollUntil(t, qa, 1, "credits arrived", func() int { return qa.credits.Len() })
		if err := p.A.PostSend(transport.WR{ID: 2, Buf: msg}); err != nil {
			t.Fatal(err)
		}
		qa.mu.Lock()
		kept, handed := qa.wheld.Load(), qa.handoff
		qa.mu.Unlock()
		if !kept || handed {
			t.Fatalf("a %d-byte send the socket cannot take: kept by the spinning owner %v, handed to the writer %v", size, kept, handed)
		}
		return p, dst
	}
	wcs := make([]transport.WC, 1)

	t.Run("owner writes on", func(t *testing.T) {
		p, dst := held(t)
		deadline := time.Now().Add(transporttest.Deadline)
		sent, got := false, false
		for !sent || !got {
			if time.Now().After(deadline) {
				t.Fatalf("send done %v, receive done %v", sent, got)
			}
			if p.A.Poll(wcs) == 1 {
				if wcs[0].Err != nil {
					t.Fatalf("send: %v", wcs[0].Err)
				}
				sent = true
			}
			if p.B.Poll(wcs) == 1 {
				got = true
				if wcs[0].Err != nil || !bytes.Equal(dst, msg) {
					t.Fatalf("receive: %v", wcs[0].Err)
				}
			}
		}
	})

	t.Run("spinning stops", func(t *testing.T) {
		p, dst := held(t)
		p.A.(*QP).SetSpinning(false)
		// Nobody polls A from here: only its writer goroutine can
		// finish the send.
		if wc := pollOne(t, p.B, "the receive did not complete after the sender stopped spinning"); wc.Err != nil || !bytes.Equal(dst, msg) {
			t.Fatalf("receive: %v", wc.Err)
		}
		if sc := transporttest.WaitN(t, p.A, p.NotA, 1)[0]; sc.Err != nil {
			t.Fatalf("send: %v", sc.Err)
		}
	})

	t.Run("close", func(t *testing.T) {
		p, _ := held(t)
		closed := make(chan struct{})
		go func() {
			p.A.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(transporttest.Deadline):
			t.Fatal("Close hung on the batch its spinning owner kept")
		}
		if n := p.A.Poll(wcs); n != 1 || !errors.Is(wcs[0].Err, transport.ErrClosed) {
			t.Fatalf("after Close: %d completions, %v; want the send flushed", n, wcs[0].Err)
		}
	})
}

// A reader goroutine waiting in poll(2) when its owner starts spinning
// leaves the wait at once, to park until spinning stops: left there, every
// message arriving would wake it, each time taking the CPU from the owner
// that reads the message.
func TestSpinningKicksWaitingReader(t *testing.T) {
	p := connect(t, Backend{}, "")
	qb := p.B.(*QP)
	waitFor := func(want bool, what string) {
		t.Helper()
		deadline := time.Now().Add(transporttest.Deadline)
		for qb.rwaiting.Load() != want {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
			runtime.Gosched()
		}
	}
	waitFor(true, "the reader goroutine of an owner that does not spin never waited in poll")
	qb.SetSpinning(true)
	waitFor(false, "the reader goroutine stayed in poll after its owner started spinning")
	msg := patternOf(100, 3)
	dst := make([]byte, len(msg))
	p.B.PostRecv(transport.WR{ID: 1, Buf: dst})
	p.A.PostSend(transport.WR{ID: 2, Buf: msg})
	if wc := pollOne(t, qb, "no completion while spinning"); wc.Err != nil || !bytes.Equal(dst, msg) {
		t.Fatalf("receive: %v", wc.Err)
	}
	if qb.rwaiting.Load() {
		t.Fatal("the reader goroutine went back to poll while its owner spins")
	}
}

// waitParked waits until q's reader goroutine has parked for its spinning
// owner: one that read the spinning flag just before it went up may still
// take the socket's next bytes, which a test that wants only Polls to read
// must not let it (on a loaded machine it did).
func waitParked(t *testing.T, q *QP) {
	t.Helper()
	deadline := time.Now().Add(transporttest.Deadline)
	for !q.rparked.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the reader goroutine of a spinning owner never parked")
		}
		runtime.Gosched()
	}
}
