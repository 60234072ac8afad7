//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// The two-process tests re-run this test binary as the peer: the parent
// listens, starts the child with TestHelperProcess selected and the mode in
// the environment, and accepts the QP the child dials.
const (
	envHelper = "VCCL_SHM_HELPER" // mode: echo, slowecho, exchange, sink, source
	envAddr   = "VCCL_SHM_ADDR"
	envSize   = "VCCL_SHM_SIZE"
	envDepth  = "VCCL_SHM_DEPTH"
	envTel    = "VCCL_SHM_TEL"
	helperKey = "helper"
	helperTok = "helper-token"
	// helperLife bounds a helper that lost its parent some other way.
	helperLife = 2 * time.Minute
	slowEcho   = 100 * time.Microsecond
)

type peerEnd struct {
	qp   transport.QP
	not  *transport.Notifier
	ring *flowtel.Ring // telemetry ring, nil when off
}

type peerProc struct {
	cmd  *exec.Cmd
	ends []peerEnd
	peerEnd
}

// startPeer starts a helper in mode and returns the parent's end of the QP,
// closed (and the helper reaped) at the end of the test.
func startPeer(tb testing.TB, mode string, size, depth int, tel bool) *peerProc {
	return startPeers(tb, mode, size, depth, []bool{tel})
}

// startPeers starts a helper serving one QP per entry of tels (telemetry on
// or off at both ends of that QP).
func startPeers(tb testing.TB, mode string, size, depth int, tels []bool) *peerProc {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), transporttest.Deadline)
	defer cancel()
	ln, err := Backend{}.Listen(ctx, transport.ListenConfig{Token: helperTok})
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	p := &peerProc{}
	telEnv := make([]string, len(tels))
	for i, tel := range tels {
		telEnv[i] = strconv.FormatBool(tel)
	}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	p.cmd.Env = append(os.Environ(), envHelper+"="+mode, envAddr+"="+ln.Addr(),
		envSize+"="+strconv.Itoa(size), envDepth+"="+strconv.Itoa(depth), envTel+"="+strings.Join(telEnv, ","))
	p.cmd.Stdout, p.cmd.Stderr = os.Stderr, os.Stderr
	if err := p.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	tb.Cleanup(func() {
		for _, e := range p.ends {
			e.qp.Close()
		}
		select {
		case <-exited:
		case <-time.After(transporttest.Deadline):
			p.cmd.Process.Kill()
			<-exited
			tb.Errorf("helper %s did not exit after its QPs closed", mode)
		}
	})
	for i, tel := range tels {
		e := peerEnd{not: transport.NewNotifier()}
		cfg := transport.Config{Rank: 0, Peer: 1, QPID: uint32(1 + i), Token: helperTok, Notifier: e.not}
		if tel {
			e.ring, _ = flowtel.NewRing(1 << 16)
			cfg.Recorder = flowtel.NewRecorder(e.ring, nil)
		}
		e.qp, err = ln.Accept(ctx, fmt.Sprintf("%s-%d", helperKey, i), cfg)
		if err != nil {
			p.cmd.Process.Kill()
			tb.Fatalf("accepting the helper: %v", err)
		}
		p.ends = append(p.ends, e)
	}
	p.peerEnd = p.ends[0]
	return p
}

// TestHelperProcess is the peer of the two-process tests and benchmarks; it
// does nothing unless started by startPeer.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(envHelper)
	if mode == "" {
		t.Skip("the peer process of the two-process tests")
	}
	os.Exit(runHelper(mode))
}

// helperQP is the helper's side of one QP. Modes: echo sends every message
// back; exchange is a rank of a 2-rank all-reduce: it posts a receive and
// then sends its message, and does so again once both are done; sink receives, answering a 1-byte
// fence with 8 bytes; source sinks and also streams messages that carry a
// sequence number.
type helperQP struct {
	qp      transport.QP
	mode    string
	bufs    [][]byte // receive buffers
	srcs    [][]byte // source: one buffer per send in flight
	free    []int    // source: buffers ready to send
	seq     uint64
	ack     []byte
	xdone   int    // exchange: WRs of the round done
	xmsg    []byte // exchange: the message, as long as the first one received
	ring    *flowtel.Ring
	scratch []flowtel.Record
}

const helperSendTag = 1 << 32

func runHelper(mode string) int {
	size, _ := strconv.Atoi(os.Getenv(envSize))
	depth, _ := strconv.Atoi(os.Getenv(envDepth))
	depth = max(depth, 1)
	var hs []*helperQP
	for i, tel := range strings.Split(os.Getenv(envTel), ",") {
		h := &helperQP{mode: mode, ack: make([]byte, 8)}
		cfg := transport.Config{Rank: 1, Peer: 0, QPID: uint32(100 + i), Token: helperTok}
		if tel == "true" {
			h.ring, _ = flowtel.NewRing(1 << 16)
			cfg.Recorder = flowtel.NewRecorder(h.ring, nil)
		}
		ctx, cancel := context.WithTimeout(context.Background(), transporttest.Deadline)
		qp, err := Backend{}.Dial(ctx, os.Getenv(envAddr), fmt.Sprintf("%s-%d", helperKey, i), cfg)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 2
		}
		defer qp.Close()
		h.qp = qp
		for j := range depth {
			h.bufs = append(h.bufs, make([]byte, size))
			qp.PostRecv(transport.WR{ID: uint64(j), Buf: h.bufs[j]})
			if mode == "source" {
				h.srcs = append(h.srcs, make([]byte, size))
				h.free = append(h.free, j)
			}
		}
		hs = append(hs, h)
	}
	wcs := make([]transport.WC, 64)
	end := time.Now().Add(helperLife)
	for spins := 0; ; spins++ {
		for _, h := range hs {
			if rc := h.step(wcs); rc >= 0 {
				return rc
			}
		}
		if spins&0xffff == 0 && time.Now().After(end) {
			fmt.Fprintln(os.Stderr, "helper: lived too long")
			return 3
		}
	}
}

// exchange starts the next round once both WRs of this one are done: the
// first round's send waits for the first message, which sets its length.
func (h *helperQP) exchange() {
	if h.xdone < 2 {
		return
	}
	h.xdone = 0
	h.qp.PostRecv(transport.WR{ID: 0, Buf: h.bufs[0]})
	h.qp.PostSend(transport.WR{ID: 1, Buf: h.xmsg})
}

// step polls once; it returns an exit code when the helper is done, else -1.
func (h *helperQP) step(wcs []transport.WC) int {
	qp := h.qp
	for ; len(h.free) > 0; h.free = h.free[1:] {
		i := h.free[0]
		binary.LittleEndian.PutUint64(h.srcs[i], h.seq)
		qp.PostSend(transport.WR{ID: helperSendTag | uint64(i), Buf: h.srcs[i]})
		h.seq++
	}
	n := qp.Poll(wcs)
	for _, wc := range wcs[:n] {
		if wc.Status != flowtel.StatusOK {
			if errors.Is(wc.Err, transport.ErrPeerDead) {
				return 0 // the parent is done
			}
			fmt.Fprintf(os.Stderr, "helper %s: %v completion %v\n", h.mode, wc.Op, wc.Err)
			return 1
		}
		switch {
		case wc.Op == transport.OpSend && wc.ID&helperSendTag != 0:
			if i := int(wc.ID &^ helperSendTag); i < len(h.srcs) {
				h.free = append(h.free, i)
			}
		case wc.Op == transport.OpSend && h.mode == "exchange":
			h.xdone++
			h.exchange()
		case wc.Op == transport.OpSend: // an echo went out: its buffer receives again
			qp.PostRecv(transport.WR{ID: wc.ID, Buf: h.bufs[wc.ID]})
		case h.mode == "echo":
			qp.PostSend(transport.WR{ID: wc.ID, Buf: h.bufs[wc.ID][:wc.Bytes]})
		case h.mode == "exchange":
			if h.xmsg == nil {
				h.xmsg = make([]byte, wc.Bytes)
				h.xdone++ // the first round sends only once it knows the length
			}
			h.xdone++
			h.exchange()
		case h.mode == "slowecho": // a peer busy elsewhere: it answers after slowEcho
			for t0 := time.Now(); time.Since(t0) < slowEcho; {
			}
			qp.PostSend(transport.WR{ID: wc.ID, Buf: h.bufs[wc.ID][:wc.Bytes]})
		default:
			if wc.Bytes == 1 { // a fence: answer it
				qp.PostSend(transport.WR{ID: helperSendTag | 1<<20, Buf: h.ack})
			}
			qp.PostRecv(transport.WR{ID: wc.ID, Buf: h.bufs[wc.ID]})
		}
	}
	if h.ring != nil && h.ring.Len() > h.ring.Cap()/2 {
		h.scratch = drainRing(h.ring, h.scratch)
	}
	return -1
}

func drainRing(r *flowtel.Ring, scratch []flowtel.Record) []flowtel.Record {
	if len(scratch) < r.Cap() {
		scratch = make([]flowtel.Record, r.Cap())
	}
	r.Drain(scratch)
	return scratch
}

func shmLeftovers(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "vccl") {
			out = append(out, e.Name())
		}
	}
	return out
}

func mapsMention(t *testing.T, what string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), what)
}

// TestTwoProcessKill kills the peer process mid-transfer, in both
// directions, and checks that every outstanding WR of the survivor fails
// with ErrPeerDead promptly, that later WRs fail the same way, and that
// nothing of the segment is left.
func TestTwoProcessKill(t *testing.T) {
	if before := shmLeftovers(t); len(before) > 0 {
		t.Logf("already in /dev/shm: %v", before)
	}
	const size, depth = 4 << 20, 4
	p := startPeer(t, "source", size, depth, false)
	qp := p.qp
	if !mapsMention(t, "vccl-shm") {
		t.Fatalf("the segment is not mapped in this process")
	}
	recvBufs := make([][]byte, depth)
	for i := range recvBufs {
		recvBufs[i] = make([]byte, size)
		qp.PostRecv(transport.WR{ID: uint64(i), Buf: recvBufs[i]})
	}
	src := make([]byte, size)
	for i := range 2 * depth {
		qp.PostSend(transport.WR{ID: 100 + uint64(i), Buf: src})
	}
	// Stream until a few messages from the helper arrived intact.
	want := uint64(0)
	for want < 8 {
		for _, wc := range transporttest.WaitN(t, qp, p.not, 1) {
			if wc.Status != flowtel.StatusOK {
				t.Fatalf("%v completion before the kill: %v", wc.Op, wc.Err)
			}
			if wc.Op == transport.OpSend {
				qp.PostSend(transport.WR{ID: wc.ID, Buf: src})
				continue
			}
			if got := binary.LittleEndian.Uint64(recvBufs[wc.ID]); got != want || wc.Bytes != size {
				t.Fatalf("message %d: sequence %d, %d bytes", want, got, wc.Bytes)
			}
			want++
			qp.PostRecv(transport.WR{ID: wc.ID, Buf: recvBufs[wc.ID]})
		}
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	outstanding := qp.Outstanding() // receives and sends in flight, both ways
	wcs := transporttest.WaitN(t, qp, p.not, outstanding)
	seen := time.Since(killed)
	failed := 0
	for _, wc := range wcs {
		if wc.Status != flowtel.StatusOK {
			failed++
			if !errors.Is(wc.Err, transport.ErrPeerDead) {
				t.Errorf("%v completion after the kill: %v, want ErrPeerDead", wc.Op, wc.Err)
			}
		}
	}
	t.Logf("%d of %d outstanding WRs failed %v after SIGKILL", failed, outstanding, seen)
	if failed == 0 {
		t.Errorf("none of %d outstanding WRs failed", outstanding)
	}
	if seen > time.Second {
		t.Errorf("peer death took %v to surface", seen)
	}
	// Later posts fail as completions, not hangs.
	qp.PostSend(transport.WR{ID: 7, Buf: src[:10]})
	qp.PostRecv(transport.WR{ID: 8, Buf: src[:10]})
	for _, wc := range transporttest.WaitN(t, qp, p.not, 2) {
		if !errors.Is(wc.Err, transport.ErrPeerDead) {
			t.Errorf("%v posted after the death: %v, want ErrPeerDead", wc.Op, wc.Err)
		}
	}
	qp.Close()
	if mapsMention(t, "vccl-shm") {
		t.Errorf("segment still mapped after Close")
	}
	if left := shmLeftovers(t); len(left) > 0 {
		t.Errorf("left in /dev/shm: %v", left)
	}
}

// TestTwoProcessEcho checks data integrity across processes for a range of
// sizes, through the helper's echo.
func TestTwoProcessEcho(t *testing.T) {
	const max = 3<<20 + 17
	p := startPeer(t, "echo", max, 2, true)
	qp := p.qp
	dst := make([]byte, max)
	for i, n := range []int{0, 1, 8, 63, 64, 65, 4096, 65536 - 16, 65536, 65536 + 1, 1 << 20, max} {
		msg := make([]byte, n)
		for j := range msg {
			msg[j] = byte(j*7 + i)
		}
		qp.PostRecv(transport.WR{ID: 1, Buf: dst})
		qp.PostSend(transport.WR{ID: 2, Buf: msg})
		for _, wc := range transporttest.WaitN(t, qp, p.not, 2) {
			if wc.Status != flowtel.StatusOK || wc.Bytes != n {
				t.Fatalf("%d bytes: %v completion %d bytes, %v", n, wc.Op, wc.Bytes, wc.Err)
			}
		}
		if string(dst[:n]) != string(msg) {
			t.Fatalf("%d bytes came back corrupted", n)
		}
	}
	if p.ring.Len() == 0 {
		t.Fatalf("no telemetry records")
	}
}
