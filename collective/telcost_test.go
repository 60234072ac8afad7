package collective

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
)

// discardSink takes every batch and keeps nothing: the collector's drain,
// which is what production runs beside the ranks, without a sink's work.
type discardSink struct{}

func (discardSink) Consume(context.Context, []flowtel.Record) error { return nil }
func (discardSink) Shutdown(context.Context) error                  { return nil }

// telBlock is how many calls run between two switches of telemetry: long
// enough that the two clock readings of a block are a small part of it,
// short enough that the machine's load drifts little from one block to the
// next.
const telBlock = 256

// blockCost runs blocks of telBlock calls alternately with telemetry off
// and on (set switches it) until b.N calls ran, and reports the median
// ns per call of each and the median difference of adjacent pairs:
// interleaved, so that a busy machine's drift falls on both alike.
func blockCost(b *testing.B, set func(on bool), call func()) {
	var off, on, added []float64
	b.ResetTimer()
	for done := 0; done < b.N; {
		var pair [2]float64
		for i, tel := range []bool{false, true} {
			set(tel)
			start := time.Now()
			for range telBlock {
				call()
			}
			pair[i] = float64(time.Since(start).Nanoseconds()) / telBlock
			done += telBlock
		}
		off, on, added = append(off, pair[0]), append(on, pair[1]), append(added, pair[1]-pair[0])
	}
	b.StopTimer()
	b.ReportMetric(median(off), "off-ns/call")
	b.ReportMetric(median(on), "on-ns/call")
	b.ReportMetric(median(added), "added-ns/call")
}

// callWork stands for the rest of a small call between its records,
// about half a microsecond (a fast 2-rank hand-off and an 8-byte
// reduction), so that the records come at the rate calls make them and
// the collector drains them as it does beside a job.
func callWork(buf []byte) {
	x := buf[0]
	for i := range 1000 {
		x = x*31 + byte(i)
	}
	buf[0] = x
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkTelemetryCost is what telemetry adds to a call on the rank's
// own path (the budget of decision 0012 and ARCHITECTURE.md: at most 40
// ns below 64 KiB), measured with a Collector draining the rank's ring
// concurrently, as in production, and the calls interleaved in blocks
// with telemetry off and on (blockCost).
//
// "records/…" times what a mailbox call does for telemetry, begin's and
// end's clock readings and record writing, with fake mailboxes and no
// peer, between stand-ins for the call's other work (callWork): the cost
// without the noise of a peer's wait (mailbox-2: a 2-rank call's Exchange
// entries; mailbox-3: a call with two peers, records each). "call/…"
// runs whole 8-byte all-reduces of ranks as goroutines: on the mailbox
// path over shm (2 and 3 ranks) and on the engine (2 ranks over the
// in-process transport); there added-ns/call includes the peer's records
// slowing its side, and on two CPUs the collector's drain too.
func BenchmarkTelemetryCost(b *testing.B) {
	for _, peers := range []int{1, 2} {
		b.Run(fmt.Sprintf("records/mailbox-%d", peers+1), func(b *testing.B) {
			col := flowtel.NewCollector()
			col.AddSink(discardSink{})
			col.Start()
			defer col.Shutdown(context.Background())
			c := &Comm{rank: 0, size: peers + 1}
			s := &smallPath{boxes: make([]transport.Mailbox, peers+1), qpids: make([]uint32, peers+1), rec: col.NewRecorder(), comm: 9, peer: -1}
			for p := 1; p <= peers; p++ {
				s.boxes[p], s.qpids[p] = &recordsOnlyBox{arrived: true}, uint32(6+p)
			}
			if peers == 1 {
				s.peer = 1
			}
			s.initRecords(0)
			buf := make([]byte, 8)
			rq := &request{call: call{op: OpAllReduce}, dt: Float64, in: buf, out: buf}
			k := uint32(0)
			blockCost(b, func(on bool) { s.rec.SetPaused(!on) }, func() {
				k++
				callWork(buf)
				if s.rec.Enabled() {
					s.begin(c, k, uint64(k), rq, len(buf))
					s.end(c, uint64(k), rq, len(buf), flowtel.StatusOK)
				}
			})
			// A dropped record costs less than a kept one: where the
			// collector fell behind (a loaded machine), the figures
			// flatter telemetry.
			b.ReportMetric(float64(s.rec.Dropped())/float64(b.N), "drops/call")
		})
	}
	for _, tc := range []struct {
		name string
		n    int
		opts []Option
	}{
		{"call/mailbox-2", 2, []Option{WithTransport("shm")}},
		{"call/mailbox-3", 3, []Option{WithTransport("shm")}},
		{"call/engine-2", 2, []Option{WithTransport("loop"), WithAlgorithm(AlgoRing)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			col := flowtel.NewCollector()
			col.AddSink(discardSink{})
			col.Start()
			defer col.Shutdown(context.Background())
			comms := benchLocal(b, tc.n, append(tc.opts, WithCollector(col))...)
			if mailbox := tc.name != "call/engine-2"; (comms[0].small != nil) != mailbox {
				b.Fatalf("mailbox path: %v, want %v", comms[0].small != nil, mailbox)
			}
			ctx := context.Background()
			// Every rank runs the same blocks and switches its own
			// telemetry at the same call; rank 0 times them.
			n := (b.N + 2*telBlock - 1) / (2 * telBlock) * (2 * telBlock) // what blockCost runs
			done := make(chan error, tc.n)
			for _, c := range comms[1:] {
				go func() {
					buf := []float64{1}
					for i := range n {
						if i%telBlock == 0 {
							_ = c.setTelemetry(i/telBlock%2 == 1)
						}
						if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
			}
			buf := []float64{1}
			blockCost(b, func(on bool) { _ = comms[0].setTelemetry(on) }, func() {
				if err := AllReduce(ctx, comms[0], buf, buf, Sum); err != nil {
					b.Fatal(err)
				}
			})
			for range comms[1:] {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
