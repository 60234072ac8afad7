//go:build unix

package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
)

// benchWindow is how many receives (and sends) stay posted ahead, so credit
// round trips overlap the transfers.
const benchWindow = 8

type benchPair struct {
	a, b   transport.QP
	na, nb *transport.Notifier
}

func newBenchPair(tb testing.TB, be Backend, recA, recB *flowtel.Recorder) *benchPair {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := be.Listen(ctx, transport.ListenConfig{Token: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	p := &benchPair{na: transport.NewNotifier(), nb: transport.NewNotifier()}
	type res struct {
		qp  transport.QP
		err error
	}
	acc := make(chan res, 1)
	go func() {
		q, err := ln.Accept(ctx, "k", transport.Config{Rank: 1, Peer: 0, QPID: 2, Recorder: recB, Notifier: p.nb})
		acc <- res{q, err}
	}()
	if p.a, err = be.Dial(ctx, ln.Addr(), "k", transport.Config{Rank: 0, Peer: 1, QPID: 1, Token: "bench", Recorder: recA, Notifier: p.na}); err != nil {
		tb.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		tb.Fatal(r.err)
	}
	p.b = r.qp
	tb.Cleanup(func() { p.a.Close(); p.b.Close() })
	return p
}

// stream moves b.N messages of size bytes from a to b, the benchmark
// goroutine owning both QPs, with benchWindow WRs posted ahead on each side.
//
// Unless distinct is set, every receive lands in the same buffer, as the
// plain stream's reads do: both then move bytes between the same two
// buffers. With a buffer per posted receive the working set (here 36 MiB)
// outgrows the cache and the benchmark measures memory, not the transport.
func (p *benchPair) stream(b *testing.B, size int, distinct bool) {
	send := make([]byte, size)
	recvs := make([][]byte, benchWindow)
	recvs[0] = make([]byte, size)
	for i := range recvs {
		if distinct {
			recvs[i] = make([]byte, size)
		} else {
			recvs[i] = recvs[0]
		}
	}
	wcs := make([]transport.WC, 2*benchWindow)
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	defer cpu.report(b)
	total := b.N
	sendPosted, recvPosted, sendDone, recvDone := 0, 0, 0, 0
	for ; recvPosted < min(benchWindow, total); recvPosted++ {
		p.b.PostRecv(transport.WR{ID: uint64(recvPosted), Buf: recvs[recvPosted]})
	}
	for ; sendPosted < min(benchWindow, total); sendPosted++ {
		p.a.PostSend(transport.WR{ID: uint64(sendPosted), Buf: send})
	}
	for sendDone < total || recvDone < total {
		ka := p.a.Poll(wcs)
		for _, wc := range wcs[:ka] {
			if wc.Err != nil {
				b.Fatalf("send: %v", wc.Err)
			}
			sendDone++
			if sendPosted < total {
				p.a.PostSend(transport.WR{ID: uint64(sendPosted), Buf: send})
				sendPosted++
			}
		}
		kb := p.b.Poll(wcs)
		for _, wc := range wcs[:kb] {
			if wc.Err != nil || wc.Bytes != size {
				b.Fatalf("recv: %d bytes, %v", wc.Bytes, wc.Err)
			}
			recvDone++
			if recvPosted < total {
				p.b.PostRecv(transport.WR{ID: wc.ID, Buf: recvs[wc.ID]})
				recvPosted++
			}
		}
		if ka+kb == 0 {
			select {
			case <-p.na.C():
			case <-p.nb.C():
			case <-deadline.C:
				b.Fatalf("stalled: %d/%d sends, %d/%d receives", sendDone, total, recvDone, total)
			}
		}
	}
}

// cpuMeter reports the process's CPU time (user + system) per op, which the
// other tenants of a shared machine disturb far less than wall time.
type cpuMeter struct{ start int64 }

func cpuNow() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func startCPU() cpuMeter { return cpuMeter{cpuNow()} }

func (m cpuMeter) report(b *testing.B) {
	b.ReportMetric(float64(cpuNow()-m.start)/float64(b.N), "cpu-ns/op")
}

// plainPair is two ends of a plain TCP connection over loopback.
func plainPair(tb testing.TB) (net.Conn, net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	c2 := <-acc
	if c2 == nil {
		tb.Fatal("accept failed")
	}
	tb.Cleanup(func() { c1.Close(); c2.Close() })
	return c1, c2
}

// plainStream is the baseline: a writer goroutine writes b.N messages of
// size bytes to a net.Conn and the benchmark goroutine reads them, into one
// buffer or, with distinct, into benchWindow buffers in turn.
func plainStream(b *testing.B, size int, distinct bool) {
	c1, c2 := plainPair(b)
	send := make([]byte, size)
	recvs := [][]byte{make([]byte, size)}
	for distinct && len(recvs) < benchWindow {
		recvs = append(recvs, make([]byte, size))
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	defer cpu.report(b)
	errc := make(chan error, 1)
	go func() {
		for range b.N {
			if _, err := c1.Write(send); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := range b.N {
		if _, err := io.ReadFull(c2, recvs[i%len(recvs)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

func BenchmarkTransfer4MiB(b *testing.B) {
	const size = 4 << 20
	b.Run("vccl-tcp", func(b *testing.B) { newBenchPair(b, Backend{}, nil, nil).stream(b, size, false) })
	b.Run("plain-tcp", func(b *testing.B) { plainStream(b, size, false) })
	// A buffer per posted receive, as an application would have, against
	// a plain stream reading into as many buffers in turn.
	b.Run("vccl-tcp-distinct-bufs", func(b *testing.B) { newBenchPair(b, Backend{}, nil, nil).stream(b, size, true) })
	b.Run("plain-tcp-distinct-bufs", func(b *testing.B) { plainStream(b, size, true) })
}

// drainer empties rings concurrently, as a Collector would.
func drainer(b *testing.B, rings ...*flowtel.Ring) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		buf := make([]flowtel.Record, 4096)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			for _, r := range rings {
				for r.Drain(buf) == len(buf) {
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		var dropped uint64
		for _, r := range rings {
			dropped += r.Dropped()
		}
		b.ReportMetric(float64(dropped), "dropped")
	}
}

func BenchmarkTelemetry(b *testing.B) {
	for _, size := range []int{1 << 20, 4 << 20} {
		name := fmt.Sprintf("%dMiB", size>>20)
		b.Run("off/"+name, func(b *testing.B) { newBenchPair(b, Backend{}, nil, nil).stream(b, size, false) })
		b.Run("on/"+name, func(b *testing.B) {
			ra, _ := flowtel.NewRing(1 << 16)
			rb, _ := flowtel.NewRing(1 << 16)
			p := newBenchPair(b, Backend{}, flowtel.NewRecorder(ra, nil), flowtel.NewRecorder(rb, nil))
			stop := drainer(b, ra, rb)
			p.stream(b, size, false)
			b.StopTimer()
			stop()
		})
	}
}

// BenchmarkPingPong8B measures a round trip of an 8-byte message: one op is
// a ping and its echo.
func BenchmarkPingPong8B(b *testing.B) {
	b.Run("vccl-tcp", func(b *testing.B) {
		p := newBenchPair(b, Backend{}, nil, nil)
		echoDone := make(chan error, 1)
		n := b.N
		go func() { echoDone <- echo(p.b, p.nb, n) }()
		ping, pong := make([]byte, 8), make([]byte, 8)
		wcs := make([]transport.WC, 4)
		deadline := time.NewTimer(time.Minute)
		defer deadline.Stop()
		b.ReportAllocs()
		b.ResetTimer()
		p.a.PostRecv(transport.WR{Buf: pong})
		for range n {
			p.a.PostSend(transport.WR{Buf: ping})
			for got := false; !got; {
				k := p.a.Poll(wcs)
				for _, wc := range wcs[:k] {
					if wc.Err != nil {
						b.Fatal(wc.Err)
					}
					if wc.Op == transport.OpRecv {
						got = true
					}
				}
				if k == 0 {
					select {
					case <-p.na.C():
					case <-deadline.C:
						b.Fatal("ping-pong stalled")
					}
				}
			}
			p.a.PostRecv(transport.WR{Buf: pong})
		}
		b.StopTimer()
		if err := <-echoDone; err != nil {
			b.Fatal(err)
		}
	})
	b.Run("plain-tcp", func(b *testing.B) {
		c1, c2 := plainPair(b)
		go func() {
			buf := make([]byte, 8)
			for {
				if _, err := io.ReadFull(c2, buf); err != nil {
					return
				}
				if _, err := c2.Write(buf); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, 8)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			c1.Write(buf)
			if _, err := io.ReadFull(c1, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// echo owns q: it sends back each of n 8-byte messages.
func echo(q transport.QP, no *transport.Notifier, n int) error {
	buf, reply := make([]byte, 8), make([]byte, 8)
	wcs := make([]transport.WC, 4)
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	q.PostRecv(transport.WR{Buf: buf})
	for got := 0; got < n; {
		k := q.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Err != nil {
				return wc.Err
			}
			if wc.Op == transport.OpRecv {
				got++
				if got < n {
					q.PostRecv(transport.WR{Buf: buf})
				}
				q.PostSend(transport.WR{Buf: reply})
			}
		}
		if k == 0 {
			select {
			case <-no.C():
			case <-deadline.C:
				return fmt.Errorf("echo stalled after %d of %d", got, n)
			}
		}
	}
	return nil
}

// BenchmarkTelemetryExchange is what telemetry adds to a small exchange,
// as a 2-rank all-reduce of size bytes makes one: each end posts a
// receive and then a send of size bytes to the other in one pass, as the
// engine does (flowtel.Recorder.BeginPass), and polls until the four work
// requests completed. The benchmark goroutine owns both
// ends, spinning (SetSpinning), so no wake-up's cost hides the records';
// telemetry is paused and resumed in alternating blocks of 256 exchanges
// with the rings drained concurrently, and added-ns/op is the median
// difference of adjacent blocks, both ends' records together.
func BenchmarkTelemetryExchange(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			ra, _ := flowtel.NewRing(1 << 16)
			rb, _ := flowtel.NewRing(1 << 16)
			recA, recB := flowtel.NewRecorder(ra, nil), flowtel.NewRecorder(rb, nil)
			p := newBenchPair(b, Backend{}, recA, recB)
			qa, qb := p.a.(*QP), p.b.(*QP)
			qa.SetSpinning(true)
			qb.SetSpinning(true)
			stop := drainer(b, ra, rb)
			defer stop()
			sa, sb, da, db := make([]byte, size), make([]byte, size), make([]byte, size), make([]byte, size)
			wcs := make([]transport.WC, 8)
			deadline := time.Now().Add(time.Minute)
			exchange := func() {
				for _, e := range []struct {
					q        *QP
					rec      *flowtel.Recorder
					dst, src []byte
				}{{qa, recA, da, sa}, {qb, recB, db, sb}} {
					e.rec.BeginPass(0) // as the engine posts a step's
					if err := e.q.PostRecv(transport.WR{Buf: e.dst}); err != nil {
						b.Fatal(err)
					}
					if err := e.q.PostSend(transport.WR{Buf: e.src}); err != nil {
						b.Fatal(err)
					}
					e.rec.EndPass()
				}
				for left := 4; left > 0; {
					for _, q := range []*QP{qa, qb} {
						k := q.Poll(wcs)
						for _, wc := range wcs[:k] {
							if wc.Err != nil {
								b.Fatal(wc.Err)
							}
						}
						left -= k
					}
					if time.Now().After(deadline) {
						b.Fatal("exchange stalled")
					}
				}
			}
			const block = 256
			var off, on, added []float64
			b.ResetTimer()
			for done := 0; done < b.N; {
				var pair [2]float64
				for i, tel := range []bool{false, true} {
					recA.SetPaused(!tel)
					recB.SetPaused(!tel)
					start := time.Now()
					for range block {
						exchange()
					}
					pair[i] = float64(time.Since(start).Nanoseconds()) / block
					done += block
				}
				off, on, added = append(off, pair[0]), append(on, pair[1]), append(added, pair[1]-pair[0])
			}
			b.StopTimer()
			b.ReportMetric(medianOf(off), "off-ns/op")
			b.ReportMetric(medianOf(on), "on-ns/op")
			b.ReportMetric(medianOf(added), "added-ns/op")
		})
	}
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
