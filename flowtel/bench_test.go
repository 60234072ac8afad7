package flowtel

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingSink counts records and closes done once it has seen target
// (in-band KindLost counts included, so drops cannot hang a benchmark).
type countingSink struct {
	records  atomic.Uint64
	accounts atomic.Uint64
	target   uint64
	once     sync.Once
	done     chan struct{}
}

func newCountingSink(target uint64) *countingSink {
	return &countingSink{target: target, done: make(chan struct{})}
}

func (s *countingSink) Consume(_ context.Context, recs []Record) error {
	var lost uint64
	for i := range recs {
		if recs[i].Kind == KindLost {
			lost += recs[i].Bytes
		}
	}
	s.records.Add(uint64(len(recs)))
	if s.accounts.Add(uint64(len(recs))+lost) >= s.target {
		s.once.Do(func() { close(s.done) })
	}
	return nil
}

func (s *countingSink) Shutdown(context.Context) error { return nil }

func benchRecord() Record {
	return Record{Kind: KindWRPost, Rank: 1, Peer: 2, QP: 3, WrID: WRID(5, false), Bytes: 1 << 20, Depth: 4}
}

// BenchmarkRecord measures Recorder.Record, the data path's only telemetry
// call. "caller-stamped" records carry a timestamp (the progress engine reads
// the clock once per poll and stamps every record of it); "recorder-stamped"
// ones have TsNs 0 and pay a clock read each; "pass-stamped" ones have TsNs
// 0 inside passes of 4 records (BeginPass), which share one read. "inline-drain" drains the ring
// every half ring on the producer's goroutine (amortised copy, no contention);
// "collector" runs a real Collector with a counting sink concurrently, and
// reports drops/op: a full ring drops, which is cheaper than a push, so a
// benchmark with drops would flatter the recorder.
func BenchmarkRecord(b *testing.B) {
	b.Run("nil", func(b *testing.B) {
		var r *Recorder
		rec := benchRecord()
		b.ReportAllocs()
		for b.Loop() {
			r.Record(&rec)
		}
	})
	// A full ring: what a record costs the producer when it is dropped
	// (a producer that outruns its collector pays it for every record).
	b.Run("full", func(b *testing.B) {
		ring, _ := NewRing(2)
		r := NewRecorder(ring, nil)
		rec := benchRecord()
		rec.TsNs = 1
		b.ReportAllocs()
		for b.Loop() {
			r.Record(&rec)
		}
	})
	for _, stamped := range []string{"caller-stamped", "recorder-stamped", "pass-stamped"} {
		b.Run(stamped+"/inline-drain", func(b *testing.B) {
			const capacity = 1 << 12
			ring, _ := NewRing(capacity)
			r := NewRecorder(ring, nil)
			dst := make([]Record, capacity)
			rec := benchRecord()
			rec.TsNs = 1
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				stampFor(r, &rec, stamped, i)
				r.Record(&rec)
				if i&(capacity/2-1) == capacity/2-1 {
					ring.Drain(dst)
				}
			}
			b.StopTimer()
			if r.Dropped() != 0 {
				b.Fatalf("dropped %d", r.Dropped())
			}
		})
		b.Run(stamped+"/collector", func(b *testing.B) {
			c := NewCollector()
			c.AddSink(newCountingSink(1 << 62))
			c.Start()
			r := c.NewRecorder()
			rec := benchRecord()
			rec.TsNs = 1
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				stampFor(r, &rec, stamped, i)
				r.Record(&rec)
			}
			b.StopTimer()
			b.ReportMetric(float64(r.Dropped())/float64(b.N), "drops/op")
			_ = c.Shutdown(context.Background())
		})
	}
}

// stampFor prepares the i-th record of BenchmarkRecord's variant stamped.
func stampFor(r *Recorder, rec *Record, stamped string, i int) {
	switch stamped {
	case "recorder-stamped":
		rec.TsNs = 0
	case "pass-stamped":
		if i&3 == 0 {
			r.EndPass()
			r.BeginPass(0)
		}
		rec.TsNs = 0
	}
}

// BenchmarkClockNow measures the clock read a recorder-stamped record pays.
func BenchmarkClockNow(b *testing.B) {
	b.Run("monotonic", func(b *testing.B) {
		var s int64
		for b.Loop() {
			s += Monotonic()
		}
		_ = s
	})
	b.Run("vdso", func(b *testing.B) {
		var s int64
		for b.Loop() {
			s += nanotime()
		}
		_ = s
	})
	b.Run("clock-with-offset", func(b *testing.B) {
		c := NewClock(123, 4)
		var s int64
		for b.Loop() {
			s += c.Now()
		}
		_ = s
	})
	b.Run("time.Now", func(b *testing.B) {
		var s int64
		for b.Loop() {
			s += time.Now().UnixNano()
		}
		_ = s
	})
}

// BenchmarkCollectorDrain measures the collector end to end: producers write
// b.N records through Recorders (yielding, not dropping, when their ring is
// nearly full), the collector drains them and a counting sink sees them all.
// records/s is b.N over the time from the first push to the last record
// reaching the sink. With 2 CPUs the producers, the drain goroutine and the
// sink goroutine share them, so this is a lower bound on the drain rate.
func BenchmarkCollectorDrain(b *testing.B) {
	for _, producers := range []int{1, 4} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			sink := newCountingSink(uint64(b.N))
			c := NewCollector(WithRingCapacity(1 << 16))
			c.AddSink(sink)
			recs := make([]*Recorder, producers)
			for i := range recs {
				recs[i] = c.NewRecorder()
			}
			c.Start()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for p, r := range recs {
				n := b.N / producers
				if p == 0 {
					n += b.N % producers
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					rec := benchRecord()
					limit := r.ring.Cap() - 128
					for i := range n {
						if i&63 == 0 {
							for r.ring.Len() > limit {
								runtime.Gosched()
							}
						}
						rec.TsNs = int64(i + 1)
						r.Record(&rec)
					}
				}()
			}
			wg.Wait()
			select {
			case <-sink.done:
			case <-time.After(time.Minute):
				b.Fatalf("sink saw %d of %d records", sink.accounts.Load(), b.N)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			st := c.Stats()
			b.ReportMetric(float64(sink.records.Load())/elapsed.Seconds(), "records/s")
			b.ReportMetric(float64(st.RingDropped)/float64(b.N), "drops/op")
			_ = c.Shutdown(context.Background())
		})
	}
}

// BenchmarkWindowUpdate measures the window: one op is one wr_post and its
// wc, so ns/op is the cost per completion. qps spreads the pairs over that
// many QPs round-robin (1 QP hits the last-QP cache every time). "Update"
// feeds batches of 512 pairs, as a collector does; "Add" locks per record.
func BenchmarkWindowUpdate(b *testing.B) {
	for _, mode := range []string{"Update", "Add"} {
		for _, qps := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/qps=%d", mode, qps), func(b *testing.B) {
				w := NewWindow(WindowConfig{})
				const pairs = 512
				recs := make([]Record, 2*pairs)
				seq := uint64(0)
				fill := func(n int) {
					for i := range n {
						qp := uint32(seq % uint64(qps))
						wr := WRID(seq/uint64(qps), false)
						ts := int64(seq)*100 + 1
						p, c := &recs[2*i], &recs[2*i+1]
						p.TsNs, p.Kind, p.Rank, p.Peer, p.QP, p.WrID, p.Bytes, p.Depth = ts, KindWRPost, 0, 1+int32(qp%4), qp, wr, 4096, 1
						c.TsNs, c.Kind, c.Rank, c.Peer, c.QP, c.WrID, c.Bytes, c.Depth = ts+70, KindWC, 0, 1+int32(qp%4), qp, wr, 0, 0
						seq++
					}
				}
				for range 16 { // warm up: every link and QP seen, buffers grown
					fill(pairs)
					w.Update(recs)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for done := 0; done < b.N; done += pairs {
					n := min(pairs, b.N-done)
					fill(n)
					if mode == "Update" {
						w.Update(recs[:2*n])
					} else {
						for i := range recs[:2*n] {
							w.Add(&recs[i])
						}
					}
				}
				b.StopTimer()
				if s := w.Snapshot(); s[0].LatP50Ns != 70 || s[0].Unmatched != 0 {
					b.Fatalf("bad stats %+v", s[0])
				}
			})
		}
	}
}

// BenchmarkWindowSnapshot measures a snapshot of 16 links of 1024
// completions each (it sorts every link's latencies).
func BenchmarkWindowSnapshot(b *testing.B) {
	w := NewWindow(WindowConfig{})
	var recs []Record
	for i := range 16 * 1024 {
		qp := uint32(i % 16)
		wr := WRID(uint64(i/16), false)
		ts := int64(i)*100 + 1
		recs = append(recs,
			Record{TsNs: ts, Kind: KindWRPost, Peer: int32(qp), QP: qp, WrID: wr, Bytes: 4096, Depth: 1},
			Record{TsNs: ts + int64(i%97), Kind: KindWC, Peer: int32(qp), QP: qp, WrID: wr})
	}
	w.Update(recs)
	dst := make([]LinkStats, 0, 16)
	b.ReportAllocs()
	for b.Loop() {
		dst = w.AppendSnapshot(dst[:0], w.Now())
	}
}

// BenchmarkPassRecords is what an engine pass's records cost its
// goroutine, with a collector draining beside it: four records written in
// place (as transport.Core writes a post's), published one by one
// ("each", the ring's Commit after each) or at the end of the pass
// ("held", the Recorder's Commit, which a pass holds for EndPass), or not
// written ("none"). Between passes the goroutine does some other work, so
// the collector keeps up as it does beside a job; ns/op is per pass, that
// work included: subtract "none".
func BenchmarkPassRecords(b *testing.B) {
	for _, mode := range []string{"none", "each", "held"} {
		b.Run(mode, func(b *testing.B) {
			c := NewCollector()
			c.AddSink(newCountingSink(1 << 62))
			c.Start()
			r := c.NewRecorder()
			w := WRFields{Rank: 1, Peer: 2, QP: 3, Comm: 4}
			x := byte(1)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				for j := range 200 {
					x = x*31 + byte(j)
				}
				if mode == "none" {
					continue
				}
				r.BeginPass(int64(i + 1))
				for k := range 4 {
					if rec := r.Reserve(); rec != nil {
						w.Put(rec, r.Stamp(), KindWRPost, StatusOK, uint64(k), 1024, k)
					}
					if mode == "each" {
						r.ring.Commit()
					} else {
						r.Commit()
					}
				}
				r.EndPass()
			}
			b.StopTimer()
			b.ReportMetric(float64(r.Dropped())/float64(b.N), "drops/op")
			_ = c.Shutdown(context.Background())
			if x == 0 {
				b.Log(x)
			}
		})
	}
}
