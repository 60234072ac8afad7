//go:build linux

package shm

import (
	"bytes"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/syncbuf"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// cmaCounts reads a QP's single-copy counters under its progress lock.
func cmaCounts(q *QP) (sent, in, inFail uint64, readable bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cmaSent, q.cmaIn, q.cmaInFail, q.cma != nil
}

// cmaPair connects a pair of shm QPs that take single copy for every
// message it applies to, whatever the sender's copy rate (until the test
// ends).
func cmaPair(t *testing.T) (*transporttest.Pair, *QP, *QP) {
	t.Helper()
	cmaAlways.Store(true)
	t.Cleanup(func() { cmaAlways.Store(false) })
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}, Kill: crash})
	return p, p.A.(*QP), p.B.(*QP)
}

// exchangeOne sends msg from p.A to a receive of len(msg)+100 bytes on p.B
// (reducing with sum when given) and checks both completions and the data.
func exchangeOne(t *testing.T, p *transporttest.Pair, msg []byte, reduce transport.ReduceFunc, what string) {
	t.Helper()
	exchange(t, p, msg, reduce, false, what)
}

// exchange is exchangeOne with the receive's transport.WR.Pull set to pull.
func exchange(t *testing.T, p *transporttest.Pair, msg []byte, reduce transport.ReduceFunc, pull bool, what string) {
	t.Helper()
	dst := make([]byte, len(msg)+100)
	want := msg
	wr := transport.WR{ID: 1, Buf: dst, Pull: pull}
	if reduce != nil {
		wr.Buf = dst[:len(msg)]
		wr.Src = bytes.Repeat([]byte{1}, len(msg))
		wr.Reduce = reduce
		want = make([]byte, len(msg))
		for i := range msg {
			want[i] = msg[i] + 1
		}
	}
	if err := p.B.PostRecv(wr); err != nil {
		t.Fatal(err)
	}
	if err := p.A.PostSend(transport.WR{ID: 2, Buf: msg}); err != nil {
		t.Fatal(err)
	}
	sc := transporttest.WaitN(t, p.A, p.NotA, 1)[0]
	rc := transporttest.WaitN(t, p.B, p.NotB, 1)[0]
	if sc.Status != flowtel.StatusOK || rc.Status != flowtel.StatusOK || rc.Bytes != len(msg) || !bytes.Equal(dst[:rc.Bytes], want) {
		t.Fatalf("%s: send %v (%v), recv %v %d bytes (%v), data equal %v", what, sc.Status, sc.Err, rc.Status, rc.Bytes, rc.Err, bytes.Equal(dst[:min(rc.Bytes, len(dst))], want))
	}
}

func addBytes(dst, msg, src []byte) {
	for i := range dst {
		dst[i] = msg[i] + src[i]
	}
}

// TestCMA: a large plain receive is filled by single copy, a small one and
// a reducing one through the ring.
func TestCMA(t *testing.T) {
	p, a, b := cmaPair(t)
	big := patternOf(cmaMin+4096, 7)
	exchangeOne(t, p, big, nil, "single copy")
	if sent, _, _, _ := cmaCounts(a); sent != 1 {
		t.Fatalf("sender published %d single-copy records for a message of %d bytes, want 1", sent, len(big))
	}
	if _, in, fail, _ := cmaCounts(b); in != 1 || fail != 0 {
		t.Fatalf("receiver read %d single-copy messages (%d failed), want 1 (0)", in, fail)
	}
	exchangeOne(t, p, big[:cmaMin-1], nil, "below the threshold")
	exchangeOne(t, p, big, addBytes, "reducing receive")
	if sent, _, _, _ := cmaCounts(a); sent != 1 {
		t.Fatalf("%d single-copy records after a small and a reducing receive, want still 1", sent)
	}
}

// TestCMATee: a send by single copy writes its tee too (while the receiver
// reads it), and so does its resend through the ring after a failed read.
func TestCMATee(t *testing.T) {
	p, a, _ := cmaPair(t)
	msg := patternOf(cmaMin+4096, 5)
	for _, fault := range []bool{false, true} {
		cmaFault.Store(fault)
		tee, dst := make([]byte, len(msg)), make([]byte, len(msg))
		if err := p.B.PostRecv(transport.WR{ID: 1, Buf: dst}); err != nil {
			t.Fatal(err)
		}
		if err := p.A.PostSend(transport.WR{ID: 2, Buf: msg, Tee: tee}); err != nil {
			t.Fatal(err)
		}
		sc := transporttest.WaitN(t, p.A, p.NotA, 1)[0]
		rc := transporttest.WaitN(t, p.B, p.NotB, 1)[0]
		if sc.Status != flowtel.StatusOK || rc.Status != flowtel.StatusOK || !bytes.Equal(dst, msg) || !bytes.Equal(tee, msg) {
			t.Fatalf("failed read %v: send %v (%v), recv %v (%v), data equal %v, tee equal %v", fault, sc.Status, sc.Err, rc.Status, rc.Err, bytes.Equal(dst, msg), bytes.Equal(tee, msg))
		}
	}
	cmaFault.Store(false)
	if sent, _, _, _ := cmaCounts(a); sent != 2 {
		t.Fatalf("sender published %d single-copy records, want 2", sent)
	}
}

// captureWarnings sends slog's default output to a buffer for the test and
// lets the once-a-process warning about single copy speak again.
func captureWarnings(t *testing.T) *syncbuf.Buffer {
	buf := &syncbuf.Buffer{}
	old, warned := slog.Default(), cmaWarned.Load()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, nil)))
	cmaWarned.Store(false)
	t.Cleanup(func() {
		slog.SetDefault(old)
		cmaWarned.Store(warned)
	})
	return buf
}

// wantNoCMAWarning checks that the log says, once, that single copy is
// off and why.
func wantNoCMAWarning(t *testing.T, log, why string) {
	t.Helper()
	if n := strings.Count(log, "single copy (process_vm_readv) is off"); n != 1 || !strings.Contains(log, why) || !strings.Contains(log, "peer_pid=") {
		t.Fatalf("log %q: want one warning that single copy is off, naming the peer's pid and why (%q)", log, why)
	}
}

// TestCMAFallback makes single-copy reads fail: the message must arrive
// intact through the ring and the QP keep to the ring afterwards.
func TestCMAFallback(t *testing.T) {
	log := captureWarnings(t)
	p, a, b := cmaPair(t)
	msg := patternOf(cmaMin+4096, 3)
	exchangeOne(t, p, msg, nil, "single copy") // the probe passes
	if got := log.String(); got != "" {
		t.Fatalf("a probe that passed logged %q", got)
	}
	cmaFault.Store(true)
	defer cmaFault.Store(false)
	exchangeOne(t, p, msg, nil, "a failed read")
	wantNoCMAWarning(t, log.String(), "injected")
	if _, in, fail, readable := cmaCounts(b); in != 2 || fail != 1 || readable {
		t.Fatalf("receiver: %d single-copy records, %d failed, still reading the peer: %v; want 2, 1, false", in, fail, readable)
	}
	cmaFault.Store(false)
	exchangeOne(t, p, msg, nil, "after a failed read")
	if sent, _, _, _ := cmaCounts(a); sent != 2 {
		t.Fatalf("sender published %d single-copy records, want 2 (then the ring)", sent)
	}
}

// TestCMARefused: a receiver whose probe of the peer's memory fails (no
// permission, say) never offers single copy; messages go through the ring.
func TestCMARefused(t *testing.T) {
	log := captureWarnings(t)
	cmaFault.Store(true)
	defer cmaFault.Store(false)
	p, a, b := cmaPair(t)
	msg := patternOf(cmaMin+4096, 5)
	exchangeOne(t, p, msg, nil, "probe refused")
	if _, _, _, readable := cmaCounts(b); readable {
		t.Fatal("receiver reads the peer after a failed probe")
	}
	if sent, _, _, _ := cmaCounts(a); sent != 0 {
		t.Fatalf("sender published %d single-copy records to a receiver that cannot read it", sent)
	}
	wantNoCMAWarning(t, log.String(), "injected")
}

// rateQP is a QP with the words the sender's choice of mode reads.
func rateQP() *QP {
	q := &QP{seg: &segment{}}
	q.seg.out.cmaRate, q.seg.in.cmaRate = new(atomic.Uint64), new(atomic.Uint64)
	for i := range q.seg.out.readRate {
		q.seg.out.readRate[i], q.seg.in.readRate[i] = new(atomic.Uint64), new(atomic.Uint64)
	}
	q.seg.out.ring = make([]byte, 1<<20)
	return q
}

// TestWhileSlow: single copy (chooseCMA) and streamed records
// (ringCopyFor) only while the measured copy rate into the ring is low;
// fast copies after a slow spell turn both off again.
func TestWhileSlow(t *testing.T) {
	q := rateQP()
	q.streamRate = 3                               // streamed copies slower than
	q.seg.out.cmaRate.Store(math.Float64bits(8.0)) // the receiver's single-copy reads
	if q.chooseCMA(0) || q.ringCopyFor(chunkMax, false) != copyTimed {
		t.Fatal("single copy or no timing before any copy into the ring was timed")
	}
	for range 8 {
		q.noteCopy(64<<10, 3277) // 20 bytes/ns: close cores
	}
	if q.chooseCMA(0) || q.ringCopyFor(chunkMax, false) != copyTimed {
		t.Fatalf("single copy or no timing at %.1f bytes/ns", q.copyRate)
	}
	for range 8 {
		q.noteCopy(64<<10, 21845) // 3 bytes/ns: far cores
	}
	if !q.chooseCMA(0) {
		t.Fatalf("no single copy at %.1f bytes/ns", q.copyRate)
	}
	for _, tc := range []struct {
		n     int
		cmaOK bool
		want  ringCopy
	}{
		{chunkMax, false, copyStreamed},
		{rateSample, false, copyStreamed},
		{rateSample - 1, false, copyPlain},
		// The send single copy was offered for measures the rate.
		{chunkMax, true, copyTimed},
	} {
		if got := q.ringCopyFor(tc.n, tc.cmaOK); got != tc.want {
			t.Errorf("at %.1f bytes/ns, %d bytes (single copy offered: %v): %v, want %v", q.copyRate, tc.n, tc.cmaOK, got, tc.want)
		}
	}
	q.noteCopy(64<<10, 1<<30) // one descheduled copy
	for range 9 {
		q.noteCopy(64<<10, 3277)
	}
	if q.chooseCMA(0) || q.ringCopyFor(chunkMax, false) != copyTimed {
		t.Fatalf("single copy or no timing still, after fast copies (%.1f bytes/ns)", q.copyRate)
	}
}

// TestStreamSpells: a slow QP streams a trial spell of two laps, then a
// lap of the ring goes plainly and untimed and the rate is measured
// afresh, and single copy's too. From then on what the spell delivered
// (the sender's streamed copies, the receiver's reads of them) decides
// against the plain ring: streamed spells of restreamAfter bytes where it
// delivered more, plain copies where it delivered less, until
// replainAfter bytes ask for another trial.
func TestStreamSpells(t *testing.T) {
	q := rateQP()
	lap := len(q.seg.out.ring)
	slowStart := func() {
		t.Helper()
		for range rateStart {
			q.noteCopy(64<<10, 9362) // 7 bytes/ns
		}
		if !q.copiesSlow() {
			t.Fatalf("copies at %.1f bytes/ns not slow", q.copyRate)
		}
	}
	// spell streams n bytes, the receiver reading them at read, and then
	// checks the plain lap after it.
	spell := func(n int, read float64) {
		t.Helper()
		for streamed := 0; streamed < n-chunkMax; streamed += chunkMax {
			if got := q.ringCopyFor(chunkMax, false); got != copyStreamed {
				t.Fatalf("%d bytes streamed of a spell of %d: %v, want %v", streamed, n, got, copyStreamed)
			}
			q.noteStream(chunkMax, 4681) // 14 bytes/ns
			q.seg.out.readRate[1].Store(math.Float64bits(read))
		}
		for sent := 0; sent < lap; sent += chunkMax {
			if got := q.ringCopyFor(chunkMax, false); got != copyPlain {
				t.Fatalf("%d bytes into the lap after a spell of %d: %v, want %v", sent, n, got, copyPlain)
			}
		}
		if q.copyRate != 0 || !q.cmaStale || math.Abs(q.spellSend-14) > 0.01 || q.spellRead != read {
			t.Fatalf("after the lap: rate %.1f, single copy's rate stale %v, spell %.1f/%.1f: want 0, true, 14/%.1f", q.copyRate, q.cmaStale, q.spellSend, q.spellRead, read)
		}
		if got := q.ringCopyFor(chunkMax, false); got != copyTimed {
			t.Fatalf("after the lap: %v, want %v", got, copyTimed)
		}
	}
	q.seg.out.readRate[0].Store(math.Float64bits(30)) // plain records read at 30 bytes/ns

	slowStart()
	spell(2*lap, 5) // streamed records read at 5: max(1/14, 1/5) against max(1/7, 1/30)
	slowStart()
	for sent := 0; sent < replainAfter; sent += chunkMax {
		if got := q.ringCopyFor(chunkMax, false); got != copyTimed {
			t.Fatalf("%d bytes after a spell that delivered less: %v, want %v", sent, got, copyTimed)
		}
	}
	spell(2*lap, 12) // a trial again, and now the spell delivers more
	slowStart()
	spell(restreamAfter, 12)
}

// TestRingCost: an exchange's cores make both copies in turn; one way,
// the slower copy decides; an unknown rate costs nothing.
func TestRingCost(t *testing.T) {
	for _, tc := range []struct {
		send, read float64
		duplex     bool
		want       float64
	}{
		{10, 40, true, 0.125},
		{10, 40, false, 0.1},
		{40, 10, false, 0.1},
		{10, 0, true, 0.1},
		{0, 0, false, 0},
	} {
		if got := ringCost(tc.send, tc.read, tc.duplex); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("ringCost(%v, %v, duplex %v) = %v, want %v", tc.send, tc.read, tc.duplex, got, tc.want)
		}
	}
}

// TestStreamBeatsCMA: the measured rates choose between a streamed ring
// and single copy; an unmeasured mode is tried first, streaming before
// single copy; an exchange keeps to single copy.
func TestStreamBeatsCMA(t *testing.T) {
	for _, tc := range []struct {
		stream, cma float64
		duplex      bool
		want        bool
	}{
		{0, 0, false, true},
		{0, 30, false, true},
		{14, 0, false, false},
		{14, 5.4, false, true},
		{4, 5.4, false, false},
		{0, 0, true, false},
		{14, 5.4, true, false},
	} {
		if got := streamBeatsCMA(tc.stream, tc.cma, tc.duplex); got != tc.want {
			t.Errorf("streamed %.1f, single copy %.1f bytes/ns, duplex %v: stream %v, want %v", tc.stream, tc.cma, tc.duplex, got, tc.want)
		}
	}
}

// TestStreamThenSingleCopy: a slow QP streams first (measuring the
// streamed rate), then tries single copy (the receiver's rate), then keeps
// to the faster; after restreamAfter bytes by single copy it streams again
// to measure the streamed rate afresh.
func TestStreamThenSingleCopy(t *testing.T) {
	q := rateQP()
	for range rateStart {
		q.noteCopy(64<<10, 21845) // 3 bytes/ns: far
	}
	if q.chooseCMA(0) || !q.streamWins(false) {
		t.Fatal("single copy before a streamed copy was timed")
	}
	q.noteStream(64<<10, 4681) // 14 bytes/ns
	if !q.chooseCMA(0) {
		t.Fatalf("streamed at %.1f bytes/ns, single copy not measured: not tried", q.streamRate)
	}
	q.noteSingleCopy(1 << 20)
	r := rateQP()
	r.seg.in.cmaRate = q.seg.out.cmaRate // the receiver's side of the word
	r.noteRead(1<<20, 194180)            // 5.4 bytes/ns
	if q.chooseCMA(0) {
		t.Fatalf("single copy at %.1f bytes/ns against a ring streamed at %.1f", math.Float64frombits(q.seg.out.cmaRate.Load()), q.streamRate)
	}
	r.noteRead(1<<20, 1<<20) // much slower: the average follows
	for range 8 {
		r.noteRead(1<<20, 34953) // 30 bytes/ns
	}
	if !q.chooseCMA(0) {
		t.Fatalf("no single copy at %.1f bytes/ns against a ring streamed at %.1f", math.Float64frombits(q.seg.out.cmaRate.Load()), q.streamRate)
	}
	for sent := 1 << 20; sent < restreamAfter; sent += 1 << 20 { // 1 MiB went by single copy above
		if q.streamRate == 0 {
			t.Fatalf("streamed rate dropped after %d bytes by single copy, want after %d", sent, restreamAfter)
		}
		q.noteSingleCopy(1 << 20)
	}
	if q.streamRate != 0 || q.chooseCMA(0) {
		t.Fatalf("after %d bytes by single copy: streamed rate %.1f, single copy chosen %v; want 0 and false", restreamAfter, q.streamRate, q.chooseCMA(0))
	}
}

// TestExchangeCMA: a send with a large receive queued beside it (an
// exchange) tries single copy even while the copies into the ring run
// fast, for cmaTrial sends; then keeps it unless the ring, both copies of
// every byte counted, costs less by cmaBias; on the ring it tries single
// copy again after cmaRetryMin sends, then after twice as many. Small
// receives (signature headers) make no exchange; a send shortly after an
// exchange's receives counts as one.
func TestExchangeCMA(t *testing.T) {
	q := rateQP()
	for range 8 {
		q.noteCopy(64<<10, 3277) // 20 bytes/ns: close cores
	}
	q.seg.out.readRate[0].Store(math.Float64bits(30))
	idx := uint64(0)
	send := func() bool { idx++; return q.chooseCMA(idx) }
	if send() {
		t.Fatal("single copy for a one-way send at 20 bytes/ns")
	}
	q.recvs.Push(recvOp{wr: transport.WR{Buf: make([]byte, 1024)}})
	if send() {
		t.Fatal("single copy beside a small receive only")
	}
	q.recvs.Push(recvOp{wr: transport.WR{Buf: make([]byte, cmaMin)}})
	for i := range cmaTrial {
		if !send() {
			t.Fatalf("exchange send %d of the trial through the ring", i)
		}
	}
	// The ring delivers 12 bytes per ns both ways (1/20 + 1/30 ns a byte).
	q.seg.out.cmaRate.Store(math.Float64bits(9)) // within cmaBias of it
	if !send() {
		t.Fatal("ring chosen against single copy at 9 bytes/ns")
	}
	q.seg.out.cmaRate.Store(math.Float64bits(5))
	ringRun := func(n int) {
		t.Helper()
		for i := range n {
			if send() {
				t.Fatalf("single copy at 5 bytes/ns, ring send %d of %d", i, n)
			}
		}
	}
	trial := func() {
		t.Helper()
		for i := range cmaTrial {
			if !send() {
				t.Fatalf("retry send %d through the ring", i)
			}
		}
	}
	ringRun(cmaRetryMin)
	trial()
	ringRun(2 * cmaRetryMin)
	trial()
	q.recvs.PopFront()
	q.recvs.PopFront()
	q.seg.out.cmaRate.Store(math.Float64bits(20))
	for i := range exchangeSends - 1 {
		if !send() {
			t.Fatalf("send %d after the exchange's receives through the ring", i)
		}
	}
	if send() {
		t.Fatalf("single copy %d sends after the last receive", exchangeSends)
	}
}

// TestSlowExchangeNeverStreams: while the copies into the ring run slow, a
// send of an exchange takes single copy, not a streamed ring, also when it
// is decided with no receive queued (before its step's receive is posted,
// or after it completed), within exchangeSends of one that had a receive
// beside it; a one-way send with nothing measured streams first.
func TestSlowExchangeNeverStreams(t *testing.T) {
	q := rateQP()
	for range rateStart {
		q.noteCopy(64<<10, 21845) // 3 bytes/ns: far
	}
	if q.chooseCMA(1) {
		t.Fatal("a one-way send took single copy before a streamed copy was timed")
	}
	q.recvs.Push(recvOp{wr: transport.WR{Buf: make([]byte, cmaMin)}})
	if !q.chooseCMA(2) {
		t.Fatal("an exchange's send beside its receive streams")
	}
	q.recvs.PopFront()
	for idx := uint64(3); idx < 2+exchangeSends; idx++ {
		if !q.chooseCMA(idx) {
			t.Fatalf("send %d, decided with no receive queued %d sends after one that had, streams", idx, idx-2)
		}
	}
	if q.chooseCMA(2 + exchangeSends) {
		t.Fatalf("a send %d after the last receive still counts as an exchange", exchangeSends)
	}
}

// TestRateStart: the rate starts at the median of the first rateStart
// timed copies, so one slow copy among them decides nothing.
func TestRateStart(t *testing.T) {
	q := &QP{}
	q.noteCopy(64<<10, 65536) // 1 byte/ns: a cold source
	for i := 1; i < rateStart; i++ {
		if q.copyRate != 0 {
			t.Fatalf("rate %.1f after %d copies, want none before %d", q.copyRate, i, rateStart)
		}
		q.noteCopy(64<<10, 3277) // 20 bytes/ns
	}
	if q.copyRate < 19 || q.copyRate > 21 {
		t.Fatalf("rate %.1f bytes/ns after one slow and %d fast copies, want 20", q.copyRate, rateStart-1)
	}
}

// A receiver that reads a send by address, acknowledges it and closes at
// once (a rank leaving after its last collective) has taken the message:
// the send completes, though the sender learns of the close before it
// looks at the acknowledgement.
func TestCMASendAcknowledgedThenPeerClosed(t *testing.T) {
	p, a, b := cmaPair(t)
	big := patternOf(cmaMin+4096, 3)
	dst := make([]byte, len(big))
	if err := b.PostRecv(transport.WR{ID: 1, Buf: dst}); err != nil {
		t.Fatal(err)
	}
	if err := a.PostSend(transport.WR{ID: 2, Buf: big}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(transporttest.Deadline)
	for sent, _, _, _ := cmaCounts(a); sent == 0; sent, _, _, _ = cmaCounts(a) {
		if time.Now().After(deadline) {
			t.Fatal("the sender never published the message by address")
		}
		runtime.Gosched()
	}
	// Hold the sender's progress until the receiver is gone.
	a.mu.Lock()
	rc := transporttest.WaitN(t, b, p.NotB, 1)[0]
	if rc.Status != flowtel.StatusOK || !bytes.Equal(dst, big) {
		a.mu.Unlock()
		t.Fatalf("receive: %v (%v), data equal %v", rc.Status, rc.Err, bytes.Equal(dst, big))
	}
	b.Close()
	for a.gone.Load() == nil {
		if time.Now().After(deadline) {
			a.mu.Unlock()
			t.Fatal("the sender never saw the receiver close")
		}
		runtime.Gosched()
	}
	a.mu.Unlock()
	if sc := transporttest.WaitN(t, a, p.NotA, 1)[0]; sc.Status != flowtel.StatusOK {
		t.Fatalf("send read and acknowledged before the receiver closed: %v (%v), want ok", sc.Status, sc.Err)
	}
}

// TestHandoff: closeWindows windows in a row of single-copy records whose
// quickest trip says the cores are close stop the offers of single copy
// for cmaCloseRest receives; far windows, and single close ones among
// them, do not.
func TestHandoff(t *testing.T) {
	q := &QP{}
	for range 10 * handoffWindow {
		q.noteHandoff(closeHandoff * 3)
	}
	if q.closeRest != 0 {
		t.Fatalf("far trips (%d ns): %d receives without single copy, want 0", closeHandoff*3, q.closeRest)
	}
	closeWindow := func() {
		for i := range handoffWindow {
			ns := int64(5000) // descheduled on the way
			if i == handoffWindow/2 {
				ns = closeHandoff / 2
			}
			if q.noteHandoff(ns); i < handoffWindow-1 && q.closeRest != 0 {
				t.Fatalf("decided after %d of a window of %d records", i+1, handoffWindow)
			}
		}
	}
	for range 3 {
		closeWindow() // a lucky trip now and then, far
		for range handoffWindow {
			q.noteHandoff(closeHandoff * 3)
		}
	}
	if q.closeRest != 0 {
		t.Fatalf("single close windows among far ones: %d receives without single copy, want 0", q.closeRest)
	}
	for range closeWindows {
		closeWindow()
	}
	if q.closeRest != cmaCloseRest {
		t.Fatalf("%d close windows in a row: %d receives without single copy, want %d", closeWindows, q.closeRest, cmaCloseRest)
	}
}

// TestPull: a receive that asks for single copy (transport.WR.Pull) gets it
// from pullMin bytes whatever the sender's copy rate says, a reducing one
// too, reduced piece by piece as it is read (over several pieces here); a
// read that fails at its start sends the message through the ring instead.
func TestPull(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}, Kill: crash})
	a, b := p.A.(*QP), p.B.(*QP)
	t.Cleanup(func() { cmaFault.Store(false) })
	for _, tc := range []struct {
		name   string
		n      int
		reduce bool
		fault  bool
		cma    uint64 // single-copy records the sender publishes
		failed uint64 // reads the receiver acknowledges as failed
	}{
		{"plain", pullMin + 4096, false, false, 1, 0},
		{"below pullMin", pullMin - 64, false, false, 0, 0},
		{"reducing, several pieces", 3*pullPiece + 4096, true, false, 1, 0},
		{"reducing, read refused", pullMin + 4096, true, true, 1, 1},
	} {
		sent0, _, fail0, _ := cmaCounts(a)
		cmaFault.Store(tc.fault)
		var reduce transport.ReduceFunc
		if tc.reduce {
			reduce = addBytes
		}
		exchange(t, p, patternOf(tc.n, 3), reduce, true, tc.name)
		cmaFault.Store(false)
		sent, _, _, _ := cmaCounts(a)
		_, _, fail, _ := cmaCounts(b)
		if sent-sent0 != tc.cma || fail-fail0 != tc.failed {
			t.Fatalf("%s: %d single-copy records, %d failed reads; want %d, %d", tc.name, sent-sent0, fail-fail0, tc.cma, tc.failed)
		}
		if tc.fault {
			break // the receiver reads this peer through the ring from now on
		}
	}
}
