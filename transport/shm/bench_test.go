//go:build linux

package shm

import (
	"runtime"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
)

// Two-process benchmarks: the peer is the helper process (startPeer), which
// echoes or sinks; both ends busy-poll, as a progress engine does.

// BenchmarkCopy4MiB is the yardstick: one thread's copy() of 4 MiB.
func BenchmarkCopy4MiB(b *testing.B) {
	src, dst := make([]byte, 4<<20), make([]byte, 4<<20)
	for i := range src {
		src[i] = byte(i)
	}
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		copy(dst, src)
	}
}

// copyRate measures copy() of size bytes, in bytes per ns, in the same run
// as the benchmark that compares against it.
func copyRate(size int) float64 {
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	best := 0.0
	for range 5 {
		const n = 8
		t0 := time.Now()
		for range n {
			copy(dst, src)
		}
		best = max(best, float64(n*size)/float64(time.Since(t0).Nanoseconds()))
	}
	return best
}

// timePings sends warm pings, waiting for each pong, so that both ends
// settle, then times b.N more.
func timePings(b *testing.B, qp transport.QP, ping []byte, warm int, wait func()) {
	for range warm {
		qp.PostSend(transport.WR{ID: 9, Buf: ping})
		wait()
	}
	b.ResetTimer()
	for range b.N {
		qp.PostSend(transport.WR{ID: 9, Buf: ping})
		wait()
	}
	b.StopTimer()
}

// seen fails the benchmark on a failed completion among wcs and reports
// whether fn saw, in one of them, what it waits for.
func seen(b *testing.B, wcs []transport.WC, fn func(transport.WC) bool) bool {
	done := false
	for _, wc := range wcs {
		if wc.Status != flowtel.StatusOK {
			b.Fatalf("%v completion: %v", wc.Op, wc.Err)
		}
		if fn(wc) {
			done = true
		}
	}
	return done
}

// spin polls qp until fn has seen what it waits for; it fails the
// benchmark after a deadline instead of hanging.
func spin(b *testing.B, qp transport.QP, wcs []transport.WC, fn func(transport.WC) bool) {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		n := qp.Poll(wcs)
		if seen(b, wcs[:n], fn) {
			return
		}
		if i&0xfff == 0 && time.Now().After(deadline) {
			b.Fatalf("no completion for 30s")
		}
	}
}

// BenchmarkLatency8B is a ping-pong of 8 bytes with a helper that
// busy-polls; ns/op is the round trip, ns/oneway half of it. In spin the
// benchmark busy-polls too; in block it sleeps on the QP's Notifier
// whenever a poll finds nothing, so the message is moved by the QP's
// background goroutine, woken through the futex; backoff waits as
// collective's progress engine does (spin, yield, then sleep).
func BenchmarkLatency8B(b *testing.B) {
	for _, mode := range []string{"spin", "block", "backoff"} {
		b.Run(mode, func(b *testing.B) {
			p := startPeer(b, "echo", 8, 2, false)
			qp := p.qp
			ping, wcs, gotPong := pingPong(qp)
			wait := func() { spin(b, qp, wcs, gotPong) }
			if mode != "spin" {
				spins := map[string]time.Duration{"block": 0, "backoff": engineSpin}[mode]
				deadline, nap := time.NewTimer(time.Hour), time.NewTimer(time.Hour)
				defer deadline.Stop()
				wait = func() {
					deadline.Reset(30 * time.Second)
					backoff(b, qp, p.not, spins, nap, deadline.C, wcs, gotPong)
				}
			}
			timePings(b, qp, ping, 1000, wait)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/oneway")
		})
	}
}

// BenchmarkExchange1KiB is the transfer of a 2-rank 1 KiB all-reduce: each
// end posts a receive of 64 KiB (collective's receive for a header and an
// eager payload) and then sends 1 KiB plus a 64-byte header, and a round
// waits for both. The helper answers each message this way as it arrives,
// so with sends that wait for the peer's receive a round costs a credit's
// trip and then the data's; sent eagerly, the data's trip alone.
func BenchmarkExchange1KiB(b *testing.B) {
	const msgLen = 1<<10 + 64
	p := startPeer(b, "exchange", 64<<10+64, 1, false)
	qp := p.qp
	dst, msg := make([]byte, 64<<10+64), make([]byte, msgLen)
	wcs := make([]transport.WC, 8)
	round := func() {
		qp.PostRecv(transport.WR{ID: 1, Buf: dst})
		qp.PostSend(transport.WR{ID: 2, Buf: msg})
		left := 2
		spin(b, qp, wcs, func(transport.WC) bool { left--; return left == 0 })
	}
	for range 1000 { // both ends settle
		round()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		round()
	}
}

// pingPong posts two 8-byte receives for the peer's answers and returns a
// ping to send, a completion buffer, and the test that reposts a receive
// when its answer came.
func pingPong(qp transport.QP) (ping []byte, wcs []transport.WC, gotPong func(transport.WC) bool) {
	bufs := [2][]byte{make([]byte, 8), make([]byte, 8)}
	for i := range bufs {
		qp.PostRecv(transport.WR{ID: uint64(i), Buf: bufs[i]})
	}
	return make([]byte, 8), make([]transport.WC, 8), func(wc transport.WC) bool {
		if wc.Op == transport.OpRecv {
			qp.PostRecv(transport.WR{ID: wc.ID, Buf: bufs[wc.ID]})
			return true
		}
		return false
	}
}

// BenchmarkSlowPeer is a ping-pong of 8 bytes with a helper that answers
// only after slowEcho of busy work, so an owner that backs off has gone to
// sleep on its Notifier by the time the answer comes; us/late is how much
// later than slowEcho it learns of it, the cost of handing the wait to the
// background goroutine and back.
func BenchmarkSlowPeer(b *testing.B) {
	for _, mode := range []string{"spin", "backoff"} {
		b.Run(mode, func(b *testing.B) {
			p := startPeer(b, "slowecho", 8, 2, false)
			qp := p.qp
			ping, wcs, gotPong := pingPong(qp)
			deadline, nap := time.NewTimer(time.Hour), time.NewTimer(time.Hour)
			defer deadline.Stop()
			spins := map[string]time.Duration{"spin": time.Hour, "backoff": engineSpin}[mode]
			wait := func() {
				deadline.Reset(30 * time.Second)
				backoff(b, qp, p.not, spins, nap, deadline.C, wcs, gotPong)
			}
			timePings(b, qp, ping, 20, wait)
			rt := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric((rt-float64(slowEcho.Nanoseconds()))/1e3, "us/late")
		})
	}
}

// engineSpin is how long collective's progress engine polls after the
// last progress before it yields (as long again), then sleeps.
const engineSpin = 200 * time.Microsecond

// backoff is spin for an owner that backs off as collective's progress
// engine does when polls find nothing: it polls for spinFor, yields between
// polls as long again, then sleeps on the Notifier (at most 1 ms). With
// spinFor 0 it sleeps at once.
func backoff(b *testing.B, qp transport.QP, not *transport.Notifier, spinFor time.Duration, nap *time.Timer, deadline <-chan time.Time, wcs []transport.WC, fn func(transport.WC) bool) {
	idle := 0
	var idleSince time.Time
	for {
		n := qp.Poll(wcs)
		if seen(b, wcs[:n], fn) {
			return
		}
		if n > 0 {
			idle = 0
			continue
		}
		idle++
		if idle == 1 {
			idleSince = time.Now()
		}
		if spinFor > 0 {
			if idle&63 != 0 {
				continue
			}
			switch waited := time.Since(idleSince); {
			case waited < spinFor:
				continue
			case waited < 2*spinFor:
				runtime.Gosched()
				continue
			}
		}
		nap.Reset(time.Millisecond)
		select {
		case <-not.C():
		case <-nap.C:
		case <-deadline:
			b.Fatalf("no completion for 30s")
		}
		nap.Stop()
		idle = 0
	}
}

// streamer drives one QP to a sink helper: it sends messages of one size
// with depth sends in flight (the sink keeps depth receives posted), then a
// 1-byte fence, and waits for the sink's answer to it, so a batch is timed
// until its last byte has landed.
type streamer struct {
	b       *testing.B
	e       peerEnd
	src     []byte
	ack     []byte
	out     int
	wcs     []transport.WC
	scratch []flowtel.Record
}

const streamDepth = 4

func newStreamer(b *testing.B, e peerEnd, size int) *streamer {
	s := &streamer{b: b, e: e, src: make([]byte, size), ack: make([]byte, 8), wcs: make([]transport.WC, 64)}
	if e.ring != nil {
		s.scratch = make([]flowtel.Record, e.ring.Cap())
	}
	for i := range s.src {
		s.src[i] = byte(i)
	}
	return s
}

func (s *streamer) run(n int) {
	qp := s.e.qp
	sendDone := func(wc transport.WC) bool {
		if wc.Op == transport.OpSend {
			s.out--
		}
		return true
	}
	for sent := 0; sent < n || s.out > 0; {
		for s.out < streamDepth && sent < n {
			qp.PostSend(transport.WR{ID: uint64(sent), Buf: s.src})
			s.out++
			sent++
		}
		spin(s.b, qp, s.wcs, sendDone)
		if r := s.e.ring; r != nil && r.Len() > r.Cap()/2 {
			s.scratch = drainRing(r, s.scratch)
		}
	}
	qp.PostRecv(transport.WR{ID: 1 << 40, Buf: s.ack})
	qp.PostSend(transport.WR{ID: 1 << 41, Buf: s.src[:1]})
	s.out++
	spin(s.b, qp, s.wcs, func(wc transport.WC) bool {
		sendDone(wc)
		return wc.Op == transport.OpRecv
	})
}

func stream(b *testing.B, size int, tel bool) {
	p := startPeer(b, "sink", size, streamDepth, tel)
	s := newStreamer(b, p.peerEnd, size)
	s.run(8) // warm up
	rate := copyRate(size)
	b.SetBytes(int64(size))
	b.ResetTimer()
	s.run(b.N)
	b.StopTimer()
	got := float64(size) * float64(b.N) / float64(b.Elapsed().Nanoseconds())
	b.ReportMetric(got/rate, "x-copy")
}

// BenchmarkStream streams 1 MiB and 4 MiB messages, telemetry off and on
// (both ends); x-copy is the throughput over a copy() of the same size
// measured in the same run. BenchmarkTelemetry is the finer comparison.
func BenchmarkStream(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"1MiB", 1 << 20}, {"4MiB", 4 << 20}} {
		for _, tel := range []bool{false, true} {
			name := size.name + "/tel=off"
			if tel {
				name = size.name + "/tel=on"
			}
			b.Run(name, func(b *testing.B) { stream(b, size.n, tel) })
		}
	}
}

// BenchmarkTelemetry measures what telemetry costs a stream: one helper,
// two QPs, telemetry off on one and on (both ends) on the other, driven in
// alternating batches so the load of a shared machine weighs on both alike.
// tel-overhead-% is the time per message with telemetry over the time
// without, minus one.
func BenchmarkTelemetry(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"1MiB", 1 << 20}, {"4MiB", 4 << 20}} {
		b.Run(size.name, func(b *testing.B) {
			p := startPeers(b, "sink", size.n, streamDepth, []bool{false, true})
			off, on := newStreamer(b, p.ends[0], size.n), newStreamer(b, p.ends[1], size.n)
			off.run(8)
			on.run(8)
			const batch = 8
			var tOff, tOn time.Duration
			timed := func(s *streamer, k int) time.Duration {
				t0 := time.Now()
				s.run(k)
				return time.Since(t0)
			}
			b.SetBytes(int64(2 * size.n))
			b.ResetTimer()
			for done, round := 0, 0; done < b.N; round++ {
				k := min(batch, b.N-done)
				if round%2 == 0 {
					tOff += timed(off, k)
					tOn += timed(on, k)
				} else {
					tOn += timed(on, k)
					tOff += timed(off, k)
				}
				done += k
			}
			b.StopTimer()
			b.ReportMetric(float64(tOff.Nanoseconds())/float64(b.N), "ns/msg-off")
			b.ReportMetric(float64(tOn.Nanoseconds())/float64(b.N), "ns/msg-on")
			b.ReportMetric(100*(float64(tOn)/float64(tOff)-1), "tel-overhead-%")
		})
	}
}
