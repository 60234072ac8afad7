package ft

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// Failover tests on loopback. A fault is injected in-process: a
// blackholed path sends nothing, reads nothing and looks unacknowledged to
// the detector, as a dead link does; its reconnection attempts fail until
// the fault is lifted. The harness in test/fault does the same with real
// interfaces going down in network namespaces.

// deadline bounds every wait here.
const deadline = 30 * time.Second

func newPair(t *testing.T, prm Params) (*transporttest.Pair, *faults) {
	t.Helper()
	f := &faults{}
	prm = scaledParams(t, prm)
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{Params: prm, faults: f}})
	return p, f
}

// scaledParams fills prm's unset detector timers from the defaults scaled
// by how late this process's timers fire now. Both ends of a pair share
// this process: when it is starved (CPU hogs, the race detector's 5-20x),
// one end's reader not being scheduled looks, to the other end's monitor,
// like a silent path, and a test that counts failovers sees one it did not
// cause. So the silence a path may keep grows with the lateness measured
// here: the 99th percentile of 100 one-millisecond sleeps, against the 5 ms
// of slack the 60 ms default leaves over six 10 ms heartbeats; at least
// 3x under the race detector. On an idle host the defaults stand. The
// probe interval (fail-back) is left alone.
func scaledParams(t *testing.T, prm Params) Params {
	t.Helper()
	lates := make([]time.Duration, 100)
	for i := range lates {
		t0 := time.Now()
		time.Sleep(time.Millisecond)
		lates[i] = time.Since(t0) - time.Millisecond
	}
	slices.Sort(lates)
	p99 := lates[98]
	k := min(max(int64(p99/(5*time.Millisecond)), 1), 8)
	if raceEnabled {
		k = max(k, 3)
	}
	d := DefaultParams()
	scale := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def * time.Duration(k)
		}
	}
	scale(&prm.Heartbeat, d.Heartbeat)
	scale(&prm.DeadAfter, d.DeadAfter)
	scale(&prm.LinkTimeout, d.LinkTimeout)
	scale(&prm.Progress, d.Progress)
	prm.LinkTimeout = max(prm.LinkTimeout, prm.DeadAfter)
	if k > 1 {
		t.Logf("timers fire up to %v late (p99): the detector's silences are %dx the defaults (dead after %v)", p99.Round(100*time.Microsecond), k, prm.DeadAfter)
	}
	return prm
}

// breakPath blackholes path i at both ends and makes its reconnections
// fail, as when a link goes down.
func breakPath(f *faults, i int, qs ...transport.QP) {
	f.down[i].Store(true)
	for _, qp := range qs {
		q := qp.(*QP)
		q.mu.Lock()
		if pa := q.paths[i]; pa != nil {
			pa.blackhole.Store(true)
		}
		q.mu.Unlock()
	}
}

func healPath(f *faults, i int) { f.down[i].Store(false) }

// stream is one end's traffic: it sends n messages of pseudo-random sizes
// and contents and receives the peer's n, checking that each arrives once,
// in order, intact. Only its goroutine posts and polls the QP.
type stream struct {
	q       transport.QP
	no      *transport.Notifier
	seed    uint64
	peer    uint64
	n       int
	maxSize int
	window  int

	mu       sync.Mutex
	sent     int // sends completed
	received int // receives completed and checked
	err      error
	done     chan struct{}
}

func msgSize(seed uint64, i, maxSize int) int {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	switch r.IntN(4) {
	case 0:
		return r.IntN(64)
	case 1:
		return r.IntN(4096)
	default:
		return r.IntN(maxSize + 1)
	}
}

func msgFill(b []byte, seed uint64, i int) {
	x := uint32(seed)*2654435761 + uint32(i)*40503 + 1
	for k := range b {
		x = x*1664525 + 1013904223
		b[k] = byte(x >> 24)
	}
}

func (s *stream) progress() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent, s.received
}

func (s *stream) run() {
	defer close(s.done)
	err := s.loop()
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

func (s *stream) loop() error {
	sendBufs := map[uint64][]byte{}
	recvBufs := map[uint64][]byte{}
	nextSend, nextRecv := 0, 0
	wantSend, wantRecv := 0, 0
	wcs := make([]transport.WC, 64)
	var idle progressClock // running time without a completion
	for wantSend < s.n || wantRecv < s.n {
		for nextRecv < s.n && nextRecv-wantRecv < s.window {
			b := make([]byte, s.maxSize)
			recvBufs[uint64(nextRecv)] = b
			if err := s.q.PostRecv(transport.WR{ID: uint64(nextRecv), Buf: b}); err != nil {
				return err
			}
			nextRecv++
		}
		for nextSend < s.n && nextSend-wantSend < s.window {
			b := make([]byte, msgSize(s.seed, nextSend, s.maxSize))
			msgFill(b, s.seed, nextSend)
			sendBufs[uint64(nextSend)] = b
			if err := s.q.PostSend(transport.WR{ID: 1<<40 | uint64(nextSend), Buf: b}); err != nil {
				return err
			}
			nextSend++
		}
		k := s.q.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != flowtel.StatusOK {
				return fmt.Errorf("%s %d failed: %v", wc.Op, wc.ID&(1<<40-1), wc.Err)
			}
			if wc.Op == transport.OpSend {
				if wc.ID != 1<<40|uint64(wantSend) {
					return fmt.Errorf("send %d completed where %d was due", wc.ID&(1<<40-1), wantSend)
				}
				delete(sendBufs, uint64(wantSend))
				wantSend++
				continue
			}
			if wc.ID != uint64(wantRecv) {
				return fmt.Errorf("receive %d completed where %d was due", wc.ID, wantRecv)
			}
			size := msgSize(s.peer, wantRecv, s.maxSize)
			want := make([]byte, size)
			msgFill(want, s.peer, wantRecv)
			if got := recvBufs[wc.ID][:wc.Bytes]; wc.Bytes != size || !bytes.Equal(got, want) {
				return fmt.Errorf("message %d: %d bytes, want %d, or corrupted", wantRecv, wc.Bytes, size)
			}
			delete(recvBufs, wc.ID)
			wantRecv++
		}
		s.mu.Lock()
		s.sent, s.received = wantSend, wantRecv
		s.mu.Unlock()
		if k > 0 {
			idle = progressClock{}
		}
		if k == 0 {
			if idle.tick() > deadline {
				return fmt.Errorf("stuck after %d sends and %d receives of %d", wantSend, wantRecv, s.n)
			}
			select {
			case <-s.no.C():
			case <-time.After(time.Millisecond):
			}
		}
	}
	return nil
}

// traffic runs both ends' streams of n messages each.
type traffic struct{ a, b *stream }

func startTraffic(p *transporttest.Pair, n, maxSize int) *traffic {
	tr := &traffic{
		a: &stream{q: p.A, no: p.NotA, seed: 1, peer: 2, n: n, maxSize: maxSize, window: 16, done: make(chan struct{})},
		b: &stream{q: p.B, no: p.NotB, seed: 2, peer: 1, n: n, maxSize: maxSize, window: 16, done: make(chan struct{})},
	}
	go tr.a.run()
	go tr.b.run()
	return tr
}

// waitProgress waits until both ends received at least k more messages.
func (tr *traffic) waitProgress(t *testing.T, k int) {
	t.Helper()
	_, a0 := tr.a.progress()
	_, b0 := tr.b.progress()
	var pc progressClock
	for {
		_, a := tr.a.progress()
		_, b := tr.b.progress()
		if a >= min(a0+k, tr.a.n) && b >= min(b0+k, tr.b.n) {
			return
		}
		if pc.tick() > deadline {
			t.Fatalf("no progress: %d/%d and %d/%d messages received", a, tr.a.n, b, tr.b.n)
		}
		time.Sleep(time.Millisecond)
	}
}

// wait waits for both streams to end. A stream ends by itself, with an
// error, after deadline of running time without a completion; wait gives
// up too only when neither stream has made progress for twice that, so a
// slow host (the race detector, CPU hogs: this test took 22 to 74 s) gets
// all the time its progress shows it needs.
func (tr *traffic) wait(t *testing.T) {
	t.Helper()
	idle := progressClock{credit: 20 * time.Millisecond}
	last := [4]int{-1}
	for _, s := range []*stream{tr.a, tr.b} {
	poll:
		for {
			select {
			case <-s.done:
				break poll
			case <-time.After(10 * time.Millisecond):
			}
			as, ar := tr.a.progress()
			bs, br := tr.b.progress()
			if now := [4]int{as, ar, bs, br}; now != last {
				last, idle = now, progressClock{credit: 20 * time.Millisecond}
				continue
			}
			if idle.tick() > 2*deadline {
				t.Fatalf("no progress for %v of running time: %v messages sent and received", 2*deadline, last)
			}
		}
		if s.err != nil {
			t.Fatal(s.err)
		}
	}
}

// waitFor polls cond every millisecond until it holds, and returns the wall
// time it took. It gives up once limit has passed on a clock that runs only
// while this process runs: each poll counts the millisecond it slept, or at
// most pollCredit, however late the scheduler woke it. So on a host where
// CPU hogs or the race detector starve the process, the deadline stretches
// with the starvation that delays the failover itself, measured, not
// guessed; on an idle host it is limit.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	var pc progressClock
	for !cond() {
		if pc.tick() > limit {
			t.Fatalf("%s: not within %v of running time (%v of wall time)", what, limit, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// pollCredit is the most one poll of waitFor counts toward its limit.
const pollCredit = 2 * time.Millisecond

// progressClock counts the time a polling loop ran: the time between two
// ticks, at most credit each (pollCredit when zero: twice a 1 ms poll).
type progressClock struct {
	credit   time.Duration
	last     time.Time
	credited time.Duration
}

func (c *progressClock) tick() time.Duration {
	now := time.Now()
	if !c.last.IsZero() {
		c.credited += min(now.Sub(c.last), cmp.Or(c.credit, pollCredit))
	}
	c.last = now
	return c.credited
}

func stats(qp transport.QP) Stats { return qp.(*QP).Stats() }

func drain(r *flowtel.Ring) []flowtel.Record {
	out := make([]flowtel.Record, r.Len())
	return out[:r.Drain(out)]
}

func TestFailoverExactlyOnce(t *testing.T) {
	p, f := newPair(t, Params{})
	tr := startTraffic(p, 3000, 256<<10)
	tr.waitProgress(t, 200)
	breakPath(f, 0, p.A, p.B)
	down := time.Now()
	took := waitFor(t, "failover on both ends", 2*time.Second, func() bool {
		return stats(p.A).OnBackup && stats(p.B).OnBackup
	})
	t.Logf("both ends on the backup %v after the primary went down", took)
	tr.waitProgress(t, 200)
	t.Logf("traffic flows on the backup %v after the primary went down", time.Since(down))
	tr.wait(t)
	for _, q := range []transport.QP{p.A, p.B} {
		s := stats(q)
		if s.Failovers != 1 || s.Failbacks != 0 {
			t.Errorf("rank %d: %+v, want one failover and no fail-back", q.Info().Rank, s)
		}
		if err := q.(*QP).Err(); err != nil {
			t.Errorf("rank %d: Err() = %v after a failover, want nil", q.Info().Rank, err)
		}
	}
	// The records tell the story: link_down (path 0), failover (path 1),
	// retransmitted completions, later traffic on path 1.
	recs := drain(p.RingA)
	var kinds []string
	var retrans, onBackup int
	for _, r := range recs {
		switch r.Kind {
		case flowtel.KindLinkDown, flowtel.KindFailover, flowtel.KindFailback, flowtel.KindLinkUp:
			kinds = append(kinds, fmt.Sprintf("%s/%d", r.Kind, r.Path))
		case flowtel.KindWC:
			if r.Status == flowtel.StatusRetransmitted {
				retrans++
			}
			if r.Path == 1 {
				onBackup++
			}
		}
	}
	if len(kinds) < 2 || kinds[0] != "link_down/0" || kinds[1] != "failover/1" {
		t.Errorf("link records %v, want link_down/0 then failover/1", kinds)
	}
	if onBackup == 0 {
		t.Errorf("no completion recorded on path 1")
	}
	t.Logf("rank 0: link records %v, %d retransmitted completions, %d on the backup", kinds, retrans, onBackup)
}

func TestFailback(t *testing.T) {
	p, f := newPair(t, Params{})
	tr := startTraffic(p, 4000, 64<<10)
	tr.waitProgress(t, 100)
	breakPath(f, 0, p.A, p.B)
	waitFor(t, "failover", 2*time.Second, func() bool { return stats(p.A).OnBackup && stats(p.B).OnBackup })
	tr.waitProgress(t, 100)
	healPath(f, 0)
	took := waitFor(t, "fail-back", time.Second, func() bool {
		return stats(p.A).Failbacks == 1 && stats(p.B).Failbacks == 1
	})
	t.Logf("fail-back %v after the primary healed", took)
	tr.wait(t)
	if a := p.A.Info(); a.Path != 0 {
		t.Errorf("data on path %d after the fail-back", a.Path)
	}
	var kinds []string
	for _, r := range drain(p.RingB) {
		if r.Kind == flowtel.KindLinkUp || r.Kind == flowtel.KindFailback {
			kinds = append(kinds, fmt.Sprintf("%s/%d", r.Kind, r.Path))
		}
	}
	if strings.Join(kinds, " ") != "link_up/0 failback/0" {
		t.Errorf("rank 1 records %v, want link_up/0 failback/0", kinds)
	}
}

func TestRepeatedFlaps(t *testing.T) {
	p, f := newPair(t, Params{})
	flaps := 8
	if testing.Short() {
		flaps = 3
	}
	tr := startTraffic(p, 400*flaps, 32<<10)
	for i := range flaps {
		tr.waitProgress(t, 50)
		breakPath(f, 0, p.A, p.B)
		waitFor(t, "failover", 2*time.Second, func() bool { return stats(p.A).OnBackup && stats(p.B).OnBackup })
		tr.waitProgress(t, 50)
		healPath(f, 0)
		waitFor(t, "fail-back", 2*time.Second, func() bool {
			return stats(p.A).Failbacks == uint64(i+1) && stats(p.B).Failbacks == uint64(i+1)
		})
	}
	tr.wait(t)
	sa, sb := stats(p.A), stats(p.B)
	t.Logf("after %d flaps: rank 0 %+v", flaps, sa)
	if sa.Failovers != uint64(flaps) || sb.Failovers != uint64(flaps) {
		t.Errorf("failovers %d and %d, want %d", sa.Failovers, sb.Failovers, flaps)
	}
}

func TestBackupDownWhileOnPrimary(t *testing.T) {
	p, f := newPair(t, Params{})
	tr := startTraffic(p, 2000, 64<<10)
	tr.waitProgress(t, 100)
	breakPath(f, 1, p.A, p.B)
	waitFor(t, "backup declared down", 2*time.Second, func() bool { return stats(p.A).LinkDowns == 1 && stats(p.B).LinkDowns == 1 })
	healPath(f, 1)
	waitFor(t, "backup back up", 2*time.Second, func() bool { return stats(p.A).LinkUps == 1 && stats(p.B).LinkUps == 1 })
	tr.wait(t)
	for _, q := range []transport.QP{p.A, p.B} {
		if s := stats(q); s.Failovers != 0 || s.RetransmittedWRs != 0 {
			t.Errorf("rank %d: %+v: a backup failure moved data", q.Info().Rank, s)
		}
	}
}

func TestBothPathsDown(t *testing.T) {
	prm := Params{LinkTimeout: 300 * time.Millisecond}
	p, f := newPair(t, prm)
	tr := startTraffic(p, 1<<30, 16<<10)
	tr.waitProgress(t, 100)
	breakPath(f, 0, p.A, p.B)
	breakPath(f, 1, p.A, p.B)
	start := time.Now()
	for _, s := range []*stream{tr.a, tr.b} {
		select {
		case <-s.done:
		case <-time.After(deadline):
			t.Fatal("traffic did not fail")
		}
		if s.err == nil || !strings.Contains(s.err.Error(), "every path is down") {
			t.Fatalf("stream error %v, want the link named as lost", s.err)
		}
	}
	t.Logf("both ends failed %v after both paths went down: %v", time.Since(start), tr.a.err)
	for _, q := range []transport.QP{p.A, p.B} {
		err := q.(*QP).Err()
		if !errors.Is(err, transport.ErrPeerDead) || !strings.Contains(err.Error(), "primary path") || !strings.Contains(err.Error(), "backup path") {
			t.Errorf("Err() = %v, want ErrPeerDead naming both paths", err)
		}
	}
}

func TestResetPrimary(t *testing.T) {
	p, f := newPair(t, Params{})
	_ = f
	tr := startTraffic(p, 3000, 64<<10)
	tr.waitProgress(t, 100)
	// A reset on one end's primary: the failure is seen at once, not after
	// silence.
	a := p.A.(*QP)
	a.mu.Lock()
	a.paths[0].conn.SetLinger(0)
	a.paths[0].conn.Close()
	a.mu.Unlock()
	// The reset end fails over and back. The other end does the same when
	// it reads the reset first; when the primary's new connection comes
	// first, it replaces the old one in place (install: a link down and
	// up, its unacknowledged sends replayed, no failover). Under load in
	// CI the second happened once.
	movedOrReplaced := func(s Stats) bool { return s.Failovers == 1 || s.LinkDowns >= 1 }
	took := waitFor(t, "failover", time.Second, func() bool { return stats(p.A).Failovers == 1 && movedOrReplaced(stats(p.B)) })
	t.Logf("failover %v after the reset", took)
	waitFor(t, "fail-back", 2*time.Second, func() bool {
		b := stats(p.B)
		return stats(p.A).Failbacks == 1 && b.Failbacks == b.Failovers && !b.OnBackup
	})
	tr.wait(t)
}

// TestNoFalseAlarmUnderLoad pushes messages of up to 1 MiB both ways as
// fast as the link takes them, with no fault: every message arrives.
func TestNoFalseAlarmUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test skipped in -short mode")
	}
	p, _ := newPair(t, Params{})
	n := 3000
	if raceEnabled {
		n = 300
	}
	tr := startTraffic(p, n, 1<<20)
	tr.wait(t)
	for _, q := range []transport.QP{p.A, p.B} {
		s := stats(q)
		if s.LinkDowns == 0 {
			continue
		}
		// Both ends share one process here, and on a loaded machine (or
		// under the race detector) it can be starved of CPU for longer
		// than a path may be silent: a false alarm costs a failover and a
		// fail-back, never data, and it is logged rather than failed.
		// test/fault's TestNoFalseAlarms counts them across processes.
		t.Logf("rank %d: %+v: a path was declared down under load", q.Info().Rank, s)
	}
}
