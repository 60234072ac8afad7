// Package transporttest is the conformance suite of the transport contract.
// Every backend runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.Factory{Backend: tcp.Backend{}, Kill: kill})
//	}
//
// It checks ordering, zero-length, 1-byte, large and unaligned buffers,
// thousands of outstanding WRs, credit-based flow control and its telemetry,
// close while busy, a peer that dies mid-transfer, posting to a closed QP, a
// receive buffer too small, the job-token handshake, and receives reduced
// on arrival where the backend implements transport.Reducer. It also holds
// the helpers the backends' own tests share.
package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
)

// Factory is what a backend hands the suite.
type Factory struct {
	Backend transport.Backend
	// ListenAddr is the address the suite listens on ("" for the default).
	ListenAddr string
	// Kill makes q's end die as a crashed process would: its connection is
	// severed with no goodbye and nothing is flushed. Nil skips the test.
	Kill func(q transport.QP)
	// Large is the size of the large-transfer test (default 8 MiB).
	Large int
}

// Deadline bounds every wait in the suite.
const Deadline = 20 * time.Second

// Run runs the whole suite against f.
func Run(t *testing.T, f Factory) {
	if f.Large == 0 {
		f.Large = 8 << 20
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"Ordering", testOrdering},
		{"Sizes", testSizes},
		{"ManyOutstanding", testManyOutstanding},
		{"Bidirectional", testBidirectional},
		{"CreditTelemetry", testCreditTelemetry},
		{"RecvTooSmall", testRecvTooSmall},
		{"PostAfterClose", testPostAfterClose},
		{"CloseWhileBusy", testCloseWhileBusy},
		{"PeerDeath", testPeerDeath},
		{"MemoryRegion", testMemoryRegion},
		{"BadToken", testBadToken},
		{"AcceptDeadline", testAcceptDeadline},
		{"ReducedReceive", testReducedReceive},
		{"TeedSend", testTeedSend},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}

// RunIPs runs the suite over IPv4 (f as given) and, where this host has an
// IPv6 loopback, over IPv6 ([::1]); the socket backends run it so.
func RunIPs(t *testing.T, f Factory) {
	t.Run("IPv4", func(t *testing.T) { Run(t, f) })
	t.Run("IPv6", func(t *testing.T) {
		ln, err := net.Listen("tcp", "[::1]:0")
		if err != nil {
			t.Skipf("no IPv6 loopback here: %v", err)
		}
		ln.Close()
		f.ListenAddr = "[::1]:0"
		Run(t, f)
	})
}

// LoopbackIfname returns the name of an up loopback interface, or skips the
// test.
func LoopbackIfname(t testing.TB) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Skipf("no interfaces: %v", err)
	}
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagLoopback != 0 && ifi.Flags&net.FlagUp != 0 {
			return ifi.Name
		}
	}
	t.Skip("no loopback interface")
	return ""
}

// Pair is two connected QPs with their recorders' rings.
type Pair struct {
	A, B         transport.QP
	RingA, RingB *flowtel.Ring
	NotA, NotB   *transport.Notifier
}

// Connect dials a fresh listener and returns the connected pair, closed at
// the end of the test. Telemetry is on for both ends.
func Connect(t testing.TB, f Factory) *Pair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Deadline)
	defer cancel()
	ln, err := f.Backend.Listen(ctx, transport.ListenConfig{Addr: f.ListenAddr, Token: "tok"})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	p := &Pair{NotA: transport.NewNotifier(), NotB: transport.NewNotifier()}
	p.RingA, _ = flowtel.NewRing(1 << 16)
	p.RingB, _ = flowtel.NewRing(1 << 16)
	cfgA := transport.Config{Rank: 0, Peer: 1, QPID: 1, Comm: 7, Token: "tok",
		Recorder: flowtel.NewRecorder(p.RingA, nil), Notifier: p.NotA}
	cfgB := transport.Config{Rank: 1, Peer: 0, QPID: 2, Comm: 7, Token: "tok",
		Recorder: flowtel.NewRecorder(p.RingB, nil), Notifier: p.NotB}
	type res struct {
		qp  transport.QP
		err error
	}
	accepted := make(chan res, 1)
	go func() {
		qp, err := ln.Accept(ctx, "k", cfgB)
		accepted <- res{qp, err}
	}()
	p.A, err = f.Backend.Dial(ctx, ln.Addr(), "k", cfgA)
	if err != nil {
		t.Fatalf("dial %s: %v", ln.Addr(), err)
	}
	r := <-accepted
	if r.err != nil {
		t.Fatalf("accept: %v", r.err)
	}
	p.B = r.qp
	t.Cleanup(func() {
		p.A.Close()
		p.B.Close()
	})
	return p
}

// WaitN polls q until n completions arrived or the deadline passed.
func WaitN(t testing.TB, q transport.QP, n *transport.Notifier, want int) []transport.WC {
	t.Helper()
	out := make([]transport.WC, 0, want)
	buf := make([]transport.WC, 64)
	deadline := time.NewTimer(Deadline)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond) // a backstop, not a pass condition
	defer tick.Stop()
	for len(out) < want {
		k := q.Poll(buf[:min(len(buf), want-len(out))])
		out = append(out, buf[:k]...)
		if k > 0 {
			continue
		}
		select {
		case <-n.C():
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%s: %d of %d completions after %v", q.Info().Backend, len(out), want, Deadline)
		}
	}
	return out
}

// Exchange sends msg from a to b and returns the receive completion.
func exchange(t *testing.T, p *Pair, msg []byte, recvSize int) ([]byte, transport.WC, transport.WC) {
	t.Helper()
	dst := make([]byte, recvSize)
	if err := p.B.PostRecv(transport.WR{ID: 2, Buf: dst}); err != nil {
		t.Fatal(err)
	}
	if err := p.A.PostSend(transport.WR{ID: 1, Buf: msg}); err != nil {
		t.Fatal(err)
	}
	sc := WaitN(t, p.A, p.NotA, 1)[0]
	rc := WaitN(t, p.B, p.NotB, 1)[0]
	return dst, sc, rc
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

func testOrdering(t *testing.T, f Factory) {
	p := Connect(t, f)
	const n = 200
	dsts := make([][]byte, n)
	for i := range n {
		dsts[i] = make([]byte, 64+i)
		if err := p.B.PostRecv(transport.WR{ID: uint64(1000 + i), Buf: dsts[i]}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if err := p.A.PostSend(transport.WR{ID: uint64(i), Buf: pattern(64+i, byte(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i, wc := range WaitN(t, p.A, p.NotA, n) {
		if wc.ID != uint64(i) || wc.Op != transport.OpSend || wc.Status != flowtel.StatusOK {
			t.Fatalf("send completion %d = %+v, want id %d ok", i, wc, i)
		}
	}
	for i, wc := range WaitN(t, p.B, p.NotB, n) {
		if wc.ID != uint64(1000+i) || wc.Op != transport.OpRecv || wc.Status != flowtel.StatusOK || wc.Bytes != 64+i {
			t.Fatalf("recv completion %d = %+v, want id %d with %d bytes", i, wc, 1000+i, 64+i)
		}
		if !bytes.Equal(dsts[i], pattern(64+i, byte(i))) {
			t.Fatalf("message %d corrupted or out of order", i)
		}
	}
}

func testSizes(t *testing.T, f Factory) {
	p := Connect(t, f)
	big := pattern(f.Large+13, 3)
	cases := []struct {
		name     string
		msg      []byte
		recvSize int
	}{
		{"zero", []byte{}, 0},
		{"zero-into-nonempty", []byte{}, 16},
		{"one", []byte{0x5a}, 1},
		{"one-into-larger", []byte{0xa5}, 4096},
		{"unaligned", pattern(4096+3, 9)[1:], 8192 + 7},
		{"large-unaligned", big[5 : f.Large+5], f.Large},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst, sc, rc := exchange(t, p, tc.msg, tc.recvSize)
			if sc.Status != flowtel.StatusOK || rc.Status != flowtel.StatusOK {
				t.Fatalf("send %v (%v), recv %v (%v)", sc.Status, sc.Err, rc.Status, rc.Err)
			}
			if rc.Bytes != len(tc.msg) || sc.Bytes != len(tc.msg) {
				t.Fatalf("completed %d/%d bytes, sent %d", sc.Bytes, rc.Bytes, len(tc.msg))
			}
			if !bytes.Equal(dst[:rc.Bytes], tc.msg) {
				t.Fatalf("payload of %d bytes corrupted", len(tc.msg))
			}
		})
	}
}

func testManyOutstanding(t *testing.T, f Factory) {
	p := Connect(t, f)
	const n = 5000
	// Sends first: every one of them waits for credit.
	for i := range n {
		msg := []byte(fmt.Sprintf("m%06d", i))
		if err := p.A.PostSend(transport.WR{ID: uint64(i), Buf: msg}); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.A.Outstanding(); got != n {
		t.Fatalf("Outstanding = %d after %d sends, want %d", got, n, n)
	}
	dsts := make([][]byte, n)
	for i := range n {
		dsts[i] = make([]byte, 16)
		if err := p.B.PostRecv(transport.WR{ID: uint64(i), Buf: dsts[i]}); err != nil {
			t.Fatal(err)
		}
	}
	WaitN(t, p.A, p.NotA, n)
	for i, wc := range WaitN(t, p.B, p.NotB, n) {
		want := fmt.Sprintf("m%06d", i)
		if wc.ID != uint64(i) || string(dsts[i][:wc.Bytes]) != want {
			t.Fatalf("recv %d: id %d payload %q, want %q", i, wc.ID, dsts[i][:wc.Bytes], want)
		}
	}
	if p.A.Outstanding() != 0 || p.B.Outstanding() != 0 {
		t.Fatalf("Outstanding after all polled: %d, %d", p.A.Outstanding(), p.B.Outstanding())
	}
}

func testBidirectional(t *testing.T, f Factory) {
	p := Connect(t, f)
	const n, size = 300, 3000
	run := func(q transport.QP, no *transport.Notifier, seed byte) error {
		dsts := make([][]byte, n)
		for i := range n {
			dsts[i] = make([]byte, size)
			if err := q.PostRecv(transport.WR{ID: uint64(i), Buf: dsts[i]}); err != nil {
				return err
			}
			if err := q.PostSend(transport.WR{ID: uint64(n + i), Buf: pattern(size, seed+byte(i))}); err != nil {
				return err
			}
		}
		wcs := WaitN(t, q, no, 2*n)
		recvs := 0
		for _, wc := range wcs {
			if wc.Status != flowtel.StatusOK {
				return fmt.Errorf("completion %+v", wc)
			}
			if wc.Op == transport.OpRecv {
				if wc.ID != uint64(recvs) {
					return fmt.Errorf("recv %d completed as %d", recvs, wc.ID)
				}
				recvs++
			}
		}
		other := 1 - seed/100
		for i := range n {
			if !bytes.Equal(dsts[i], pattern(size, other*100+byte(i))) {
				return fmt.Errorf("message %d corrupted", i)
			}
		}
		return nil
	}
	errc := make(chan error, 1)
	go func() { errc <- run(p.B, p.NotB, 100) }()
	if err := run(p.A, p.NotA, 0); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func drain(r *flowtel.Ring) []flowtel.Record {
	out := make([]flowtel.Record, r.Len())
	return out[:r.Drain(out)]
}

// testCreditTelemetry's sends are larger than the backends' eager limits
// (tcp 64 KiB, shm 16 KiB): a send that small moves before its receive is
// posted, and a backend may record no credit_wait for it.
func testCreditTelemetry(t *testing.T, f Factory) {
	p := Connect(t, f)
	drain(p.RingA)
	const big = 128 << 10
	tag := transport.Tag{CollSeq: 42, Step: 3, Op: 1, Algo: 2, Dtype: 3}
	if err := p.A.PostSend(transport.WR{ID: 1, Buf: make([]byte, big+100), Tag: tag}); err != nil {
		t.Fatal(err)
	}
	if err := p.A.PostSend(transport.WR{ID: 2, Buf: make([]byte, big+200), Tag: tag}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		p.B.PostRecv(transport.WR{ID: uint64(i), Buf: make([]byte, big+256)})
	}
	WaitN(t, p.A, p.NotA, 2)
	recs := drain(p.RingA)
	var kinds []string
	posts := map[uint64]flowtel.Record{}
	waits, grants := 0, 0
	for _, r := range recs {
		kinds = append(kinds, r.Kind.String())
		if r.Rank != 0 || r.Peer != 1 || r.QP != 1 || r.Comm != 7 {
			t.Errorf("record %v: wrong link labels", r)
		}
		switch r.Kind {
		case flowtel.KindWRPost:
			posts[r.WrID] = r
			if r.CollSeq != 42 || r.Step != 3 || r.Op != 1 || r.Algo != 2 || r.Dtype != 3 {
				t.Errorf("wr_post %v lost its tag", r)
			}
		case flowtel.KindWC:
			post, ok := posts[r.WrID]
			if !ok {
				t.Errorf("wc %v has no wr_post", r)
			} else if r.TsNs < post.TsNs || r.Bytes != post.Bytes {
				t.Errorf("wc %v does not match post %v", r, post)
			}
		case flowtel.KindCreditWait:
			waits++
		case flowtel.KindCreditGrant:
			grants++
		}
	}
	if len(posts) != 2 || waits == 0 {
		t.Fatalf("records %v: want 2 wr_post and credit_wait for sends posted before any receive", kinds)
	}
	if p0 := posts[flowtel.WRID(0, false)]; p0.Depth != 1 {
		t.Errorf("first wr_post depth = %d, want 1", p0.Depth)
	}
	if p1 := posts[flowtel.WRID(1, false)]; p1.Depth != 2 {
		t.Errorf("second wr_post depth = %d, want 2", p1.Depth)
	}
	if grants != waits {
		t.Errorf("%d credit_wait but %d credit_grant in %v", waits, grants, kinds)
	}
}

func testRecvTooSmall(t *testing.T, f Factory) {
	p := Connect(t, f)
	_, sc, rc := exchange(t, p, make([]byte, 1000), 10)
	for _, wc := range []transport.WC{sc, rc} {
		if wc.Status != flowtel.StatusError || !errors.Is(wc.Err, transport.ErrTooLarge) {
			t.Fatalf("%s completion %v (%v), want ErrTooLarge", wc.Op, wc.Status, wc.Err)
		}
		if msg := wc.Err.Error(); !strings.Contains(msg, "1000") || !strings.Contains(msg, "10 bytes") {
			t.Fatalf("error %q does not name both sizes", msg)
		}
	}
	// The QP stays usable afterwards.
	dst, sc, rc := exchange(t, p, []byte("after"), 16)
	if sc.Status != flowtel.StatusOK || rc.Status != flowtel.StatusOK || string(dst[:rc.Bytes]) != "after" {
		t.Fatalf("exchange after a too-small receive: %v/%v %q", sc.Err, rc.Err, dst[:rc.Bytes])
	}
}

func testPostAfterClose(t *testing.T, f Factory) {
	p := Connect(t, f)
	if err := p.A.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := p.A.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := p.A.PostSend(transport.WR{Buf: []byte("x")}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("PostSend on closed QP = %v, want ErrClosed", err)
	}
	if err := p.A.PostRecv(transport.WR{Buf: make([]byte, 1)}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("PostRecv on closed QP = %v, want ErrClosed", err)
	}
	// The survivor's WRs fail; they do not hang.
	p.B.PostRecv(transport.WR{ID: 9, Buf: make([]byte, 8)})
	wc := WaitN(t, p.B, p.NotB, 1)[0]
	if wc.Status == flowtel.StatusOK || wc.Err == nil {
		t.Fatalf("receive from a closed peer completed %v", wc.Status)
	}
}

func testCloseWhileBusy(t *testing.T, f Factory) {
	p := Connect(t, f)
	const n = 500
	for i := range n {
		p.A.PostSend(transport.WR{ID: uint64(i), Buf: make([]byte, 32<<10)})
		if i%2 == 0 {
			p.B.PostRecv(transport.WR{ID: uint64(i), Buf: make([]byte, 32<<10)})
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- p.A.Close() }()
	// Every WR of both ends completes: ok, flushed or error, never lost.
	wa := WaitN(t, p.A, p.NotA, n)
	wb := WaitN(t, p.B, p.NotB, n/2)
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	for _, wc := range append(wa, wb...) {
		if wc.Status != flowtel.StatusOK && wc.Err == nil {
			t.Fatalf("completion %+v has a status but no error", wc)
		}
	}
}

func testPeerDeath(t *testing.T, f Factory) {
	if f.Kill == nil {
		t.Skip("backend has no way to kill a peer")
	}
	before := runtime.NumGoroutine()
	p := Connect(t, f)
	// A transfer in flight: B receives a large message, A dies midway.
	for i := range 4 {
		p.B.PostRecv(transport.WR{ID: uint64(i), Buf: make([]byte, f.Large)})
	}
	p.A.PostSend(transport.WR{ID: 1, Buf: make([]byte, f.Large)})
	f.Kill(p.A)
	start := time.Now()
	wcs := WaitN(t, p.B, p.NotB, 4)
	failed := 0
	for _, wc := range wcs {
		if wc.Status != flowtel.StatusOK {
			failed++
			if !errors.Is(wc.Err, transport.ErrPeerDead) {
				t.Errorf("completion error %v, want ErrPeerDead", wc.Err)
			}
		}
	}
	if failed < 3 {
		t.Fatalf("%d of 4 receives failed after the peer died", failed)
	}
	t.Logf("peer death seen in %v", time.Since(start))
	// Posting on after the death fails with a completion, not a hang.
	p.B.PostSend(transport.WR{ID: 5, Buf: []byte("late")})
	if wc := WaitN(t, p.B, p.NotB, 1)[0]; wc.Status == flowtel.StatusOK {
		t.Fatalf("send to a dead peer succeeded")
	}
	p.B.Close()
	// No goroutine outlives the QPs.
	deadline := time.Now().Add(Deadline)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines leaked:\n%s", runtime.NumGoroutine()-before, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

func testMemoryRegion(t *testing.T, f Factory) {
	p := Connect(t, f)
	region := make([]byte, 4096)
	mr, err := transport.Register(region)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.A.PostSend(transport.WR{Buf: make([]byte, 8), MR: mr}); !errors.Is(err, transport.ErrMRMismatch) {
		t.Fatalf("WR outside its region: %v, want ErrMRMismatch", err)
	}
	copy(region[100:], "registered")
	dst := make([]byte, 4096)
	dmr, _ := transport.Register(dst)
	p.B.PostRecv(transport.WR{ID: 1, Buf: dst[7:], MR: dmr})
	p.A.PostSend(transport.WR{ID: 1, Buf: region[100:110], MR: mr})
	WaitN(t, p.A, p.NotA, 1)
	if wc := WaitN(t, p.B, p.NotB, 1)[0]; wc.Status != flowtel.StatusOK || string(dst[7:17]) != "registered" {
		t.Fatalf("registered transfer: %v %q", wc.Err, dst[7:17])
	}
}

// listen starts f's listener with the job token given; the listener and
// the context close with the test.
func listen(t *testing.T, f Factory, token string) (context.Context, transport.Listener) {
	ctx, cancel := context.WithTimeout(context.Background(), Deadline)
	t.Cleanup(cancel)
	ln, err := f.Backend.Listen(ctx, transport.ListenConfig{Addr: f.ListenAddr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ctx, ln
}

func testBadToken(t *testing.T, f Factory) {
	ctx, ln := listen(t, f, "right")
	qp, err := f.Backend.Dial(ctx, ln.Addr(), "k", transport.Config{Token: "wrong"})
	if err == nil {
		qp.Close()
		t.Fatal("dial with a wrong job token succeeded")
	}
	if !errors.Is(err, transport.ErrBadToken) {
		t.Fatalf("dial with a wrong token: %v, want ErrBadToken", err)
	}
}

func testAcceptDeadline(t *testing.T, f Factory) {
	ctx, ln := listen(t, f, "t")
	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := ln.Accept(short, "nobody", transport.Config{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("accept with no dialler: %v, want a deadline error", err)
	}
}

// testReducedReceive checks WR.Reduce on backends that implement
// transport.Reducer: large, unaligned and in-place messages land reduced,
// in pieces cut at multiples of transport.ReducePiece, and nothing past the
// message is touched.
func testReducedReceive(t *testing.T, f Factory) {
	p := Connect(t, f)
	r, ok := p.B.(transport.Reducer)
	if !ok || !r.ReducesOnReceive() {
		t.Skip("backend does not reduce on receive")
	}
	add := func(buf []byte) transport.ReduceFunc {
		return func(dst, msg, src []byte) {
			if off := cap(buf) - cap(dst); off%transport.ReducePiece != 0 || len(msg) != len(dst) || len(src) != len(dst) {
				t.Errorf("piece at offset %d: dst %d, msg %d, src %d bytes", off, len(dst), len(msg), len(src))
				return
			}
			for i := range dst {
				dst[i] = msg[i] + src[i]
			}
		}
	}
	for _, tc := range []struct {
		name     string
		n, slack int
		inPlace  bool
	}{
		{"small", 100, 7, false},
		{"large-unaligned", f.Large + 13, 64, false},
		{"large-in-place", f.Large + 5, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := pattern(tc.n, 5)
			src := pattern(tc.n+tc.slack, 6)
			buf := pattern(tc.n+tc.slack, 7)
			if tc.inPlace {
				copy(buf, src)
				src = buf
			}
			want := make([]byte, len(buf))
			copy(want, buf)
			for i := range tc.n {
				want[i] = msg[i] + src[i]
			}
			if err := p.B.PostRecv(transport.WR{ID: 2, Buf: buf, Reduce: add(buf), Src: src}); err != nil {
				t.Fatal(err)
			}
			if err := p.A.PostSend(transport.WR{ID: 1, Buf: msg}); err != nil {
				t.Fatal(err)
			}
			sc := WaitN(t, p.A, p.NotA, 1)[0]
			rc := WaitN(t, p.B, p.NotB, 1)[0]
			if sc.Status != flowtel.StatusOK || rc.Status != flowtel.StatusOK || rc.Bytes != tc.n {
				t.Fatalf("send %v (%v), recv %v (%v) of %d bytes", sc.Status, sc.Err, rc.Status, rc.Err, rc.Bytes)
			}
			if !bytes.Equal(buf, want) {
				t.Fatalf("reduced receive of %d bytes: wrong bytes", tc.n)
			}
		})
	}
	if err := p.B.PostRecv(transport.WR{ID: 3, Buf: make([]byte, 64), Reduce: add(nil), Src: make([]byte, 63)}); err == nil {
		t.Fatal("a reduced receive with a source shorter than its buffer was accepted")
	}
}

// testTeedSend checks WR.Tee on backends that implement transport.Teer: by
// a send's completion its tee holds the payload, whatever path the send
// took (small, large and unaligned, several in flight), and a tee whose
// length differs from the buffer's is refused.
func testTeedSend(t *testing.T, f Factory) {
	p := Connect(t, f)
	tr, ok := p.A.(transport.Teer)
	if !ok || !tr.TeesOnSend() {
		t.Skip("backend does not tee sends")
	}
	for _, n := range []int{1, 100, f.Large + 13} {
		const k = 3
		var msgs, tees, dsts [k][]byte
		for i := range k {
			msgs[i], tees[i], dsts[i] = pattern(n, byte(i+1)), make([]byte, n), make([]byte, n)
			if err := p.B.PostRecv(transport.WR{ID: uint64(i), Buf: dsts[i]}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range k {
			if err := p.A.PostSend(transport.WR{ID: uint64(i), Buf: msgs[i], Tee: tees[i]}); err != nil {
				t.Fatal(err)
			}
		}
		for _, wc := range WaitN(t, p.A, p.NotA, k) {
			if wc.Status != flowtel.StatusOK {
				t.Fatalf("teed send %d of %d bytes: %v (%v)", wc.ID, n, wc.Status, wc.Err)
			}
			if i := wc.ID; !bytes.Equal(tees[i], msgs[i]) {
				t.Fatalf("teed send %d of %d bytes completed with its tee unwritten", i, n)
			}
		}
		for _, wc := range WaitN(t, p.B, p.NotB, k) {
			if wc.Status != flowtel.StatusOK || !bytes.Equal(dsts[wc.ID], msgs[wc.ID]) {
				t.Fatalf("receive %d of a teed send of %d bytes: %v (%v), data equal %v", wc.ID, n, wc.Status, wc.Err, bytes.Equal(dsts[wc.ID], msgs[wc.ID]))
			}
		}
	}
	if err := p.A.PostSend(transport.WR{ID: 9, Buf: make([]byte, 64), Tee: make([]byte, 63)}); err == nil {
		t.Fatal("a send with a tee shorter than its buffer was accepted")
	}
}
