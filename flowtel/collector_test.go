package flowtel_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/flowtel/flowteltest"
)

const testDeadline = 20 * time.Second

func deadlineCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	t.Cleanup(cancel)
	return ctx
}

// post returns the seq'th test record of producer rank.
func post(rank int32, seq uint64) *flowtel.Record {
	return &flowtel.Record{TsNs: int64(seq) + 1, Kind: flowtel.KindWRPost, Rank: rank, CollSeq: seq, WrID: flowtel.WRID(seq, false), Bytes: 8}
}

// checkStreams checks that recs hold, for each rank r < len(pushed), the
// records 0..pushed[r]-1 in order, where every gap is exactly covered by
// KindLost records of that rank, and that nothing is missing at the end.
func checkStreams(t *testing.T, recs []flowtel.Record, pushed []uint64) (received, lost []uint64) {
	t.Helper()
	next := make([]uint64, len(pushed))
	received = make([]uint64, len(pushed))
	lost = make([]uint64, len(pushed))
	for i, r := range recs {
		if r.Rank < 0 || int(r.Rank) >= len(pushed) {
			t.Fatalf("record %d: unexpected rank: %v", i, r)
		}
		k := r.Rank
		switch r.Kind {
		case flowtel.KindLost:
			if r.Bytes == 0 {
				t.Fatalf("record %d: KindLost with zero count", i)
			}
			next[k] += r.Bytes
			lost[k] += r.Bytes
		case flowtel.KindWRPost:
			if r.CollSeq != next[k] {
				t.Fatalf("record %d: rank %d: got seq %d, want %d (lost so far %d)", i, k, r.CollSeq, next[k], lost[k])
			}
			next[k]++
			received[k]++
		default:
			t.Fatalf("record %d: unexpected %v", i, r)
		}
	}
	for k := range pushed {
		if next[k] != pushed[k] {
			t.Errorf("rank %d: received %d + lost %d = %d, pushed %d", k, received[k], lost[k], next[k], pushed[k])
		}
	}
	return received, lost
}

// TestCollectorDeliversAll runs several producers against a collector and
// checks every sink sees every record of every producer in order, or a
// KindLost record covering exactly what is missing: nothing is lost silently.
func TestCollectorDeliversAll(t *testing.T) {
	for _, tc := range []struct {
		name      string
		producers int
		n         uint64
		ringCap   int
		batch     int
		sinks     int
		queue     int
	}{
		// Each sink queue can hold every batch, so sinks never drop and
		// every loss is a ring's, attributable to its producer.
		{"one producer", 1, 20000, 1024, 64, 1, 1024},
		{"many producers", 4, 10000, 256, 100, 2, 1024},
		{"tiny rings", 3, 5000, 4, 3, 1, 8192},
		{"batch of one", 2, 2000, 64, 1, 1, 1 << 13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := flowtel.NewCollector(flowtel.WithRingCapacity(tc.ringCap), flowtel.WithBatchSize(tc.batch),
				flowtel.WithMaxIdle(time.Millisecond), flowtel.WithSinkQueue(tc.queue))
			sinks := make([]*flowteltest.MemorySink, tc.sinks)
			for i := range sinks {
				sinks[i] = flowteltest.NewMemorySink()
				c.AddSink(sinks[i])
			}
			c.Start()
			var wg sync.WaitGroup
			for p := range tc.producers {
				r := c.NewRecorder()
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range tc.n {
						r.Record(post(int32(p), i))
					}
				}()
			}
			wg.Wait()
			if err := c.Shutdown(deadlineCtx(t)); err != nil {
				t.Fatal(err)
			}
			pushed := make([]uint64, tc.producers)
			for i := range pushed {
				pushed[i] = tc.n
			}
			st := c.Stats()
			for i, s := range sinks {
				if s.ShutdownCalls() != 1 {
					t.Errorf("sink %d: Shutdown called %d times", i, s.ShutdownCalls())
				}
				if st.Sinks[i].DroppedRecords != 0 {
					t.Fatalf("sink %d dropped %d records with a queue of %d", i, st.Sinks[i].DroppedRecords, tc.queue)
				}
				_, lost := checkStreams(t, s.Records(), pushed)
				var lostSum uint64
				for _, l := range lost {
					lostSum += l
				}
				if lostSum != st.RingDropped {
					t.Errorf("sink %d: in-band loss %d, rings dropped %d", i, lostSum, st.RingDropped)
				}
			}
			if st.Rings != tc.producers || st.SinkErrors != 0 {
				t.Errorf("stats: %+v", st)
			}
		})
	}
}

// gateSink blocks in Consume until released (or until its ctx ends), keeping
// what it is given.
type gateSink struct {
	flowteltest.MemorySink
	entered chan struct{} // closed on the first Consume
	once    sync.Once
	release chan struct{}
}

func newGateSink() *gateSink {
	return &gateSink{entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gateSink) Consume(ctx context.Context, recs []flowtel.Record) error {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.MemorySink.Consume(ctx, recs)
}

// TestCollectorSlowSink blocks one sink and checks that the producer and the
// other sink carry on (every record reaches the fast sink while the slow one
// is stuck in its first Consume), that the slow sink's losses are counted, and
// that they reach it in band.
func TestCollectorSlowSink(t *testing.T) {
	for _, tc := range []struct {
		name   string
		batch  int
		queue  int
		chunk  int
		chunks int
	}{
		// A chunk never exceeds the queue, so the fast sink, which is
		// waited for after each chunk, cannot drop: a chunk drains into at
		// most chunk batches.
		{"queue of one", 4, 1, 1, 200},
		{"queue of sixteen", 16, 16, 16, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := deadlineCtx(t)
			c := flowtel.NewCollector(flowtel.WithRingCapacity(1024), flowtel.WithBatchSize(tc.batch),
				flowtel.WithSinkQueue(tc.queue), flowtel.WithMaxIdle(time.Millisecond))
			slow, fast := newGateSink(), flowteltest.NewMemorySink()
			c.AddSink(slow)
			c.AddSink(fast)
			c.Start()
			r := c.NewRecorder()
			total := uint64(tc.chunk * tc.chunks)
			var seq uint64
			for range tc.chunks {
				for range tc.chunk {
					r.Record(post(0, seq))
					seq++
				}
				// Waiting for the fast sink keeps the ring from overflowing.
				if _, err := fast.Wait(ctx, int(seq)); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-slow.entered:
			case <-ctx.Done():
				t.Fatal("the slow sink never got a batch")
			}
			// The fast sink's count follows its last Consume, which
			// Wait saw: wait for the count too.
			for c.Stats().Sinks[1].Records != total && ctx.Err() == nil {
				runtime.Gosched()
			}
			st := c.Stats()
			if slow.Consumes() != 0 || slow.Len() != 0 {
				t.Fatalf("slow sink got records while blocked")
			}
			if st.RingDropped != 0 {
				t.Fatalf("ring dropped %d records: the slow sink stalled the drain", st.RingDropped)
			}
			held := uint64(tc.batch * (tc.queue + 1)) // the batch in Consume plus a full queue
			if st.Sinks[0].DroppedRecords < total-held {
				t.Fatalf("slow sink dropped %d records, want >= %d", st.Sinks[0].DroppedRecords, total-held)
			}
			if st.Sinks[1].DroppedRecords != 0 || st.Sinks[1].Records != total {
				t.Fatalf("fast sink: %+v", st.Sinks[1])
			}
			checkStreams(t, fast.Records(), []uint64{total})

			close(slow.release)
			if err := c.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			st = c.Stats()
			recs := slow.Records()
			received, lost := checkStreams(t, recs, []uint64{total})
			if lost[0] != st.Sinks[0].DroppedRecords || received[0] != st.Sinks[0].Records {
				t.Fatalf("slow sink: received %d lost %d in band; stats %+v", received[0], lost[0], st.Sinks[0])
			}
			if st.Sinks[0].DroppedBatches == 0 {
				t.Fatalf("no dropped batches counted: %+v", st.Sinks[0])
			}
		})
	}
}

// TestCollectorShutdown checks Shutdown drains everything, with or without
// Start, even when the collector sleeps long, and reports drops that never
// made it in band.
func TestCollectorShutdown(t *testing.T) {
	type lost uint64
	for _, tc := range []struct {
		name    string
		ringCap int
		start   bool
		// produce writes records (seqs from 0) and may drive the collector.
		produce func(t *testing.T, c *flowtel.Collector, r *flowtel.Recorder, s *flowteltest.MemorySink)
		want    []any // uint64: a record's seq; lost(n): a KindLost record
	}{
		{
			name: "never started", ringCap: 16,
			produce: pushSeq(0, 10),
			want:    seqs(0, 10),
		},
		{
			name: "started, sleeping long", ringCap: 16, start: true,
			produce: pushSeq(0, 5), // below half: no wake-up
			want:    seqs(0, 5),
		},
		{
			name: "overflow never reported in band", ringCap: 4,
			produce: pushSeq(0, 10),
			want:    append(seqs(0, 4), lost(6)),
		},
		{
			name: "overflow reported in band", ringCap: 4,
			produce: func(t *testing.T, c *flowtel.Collector, r *flowtel.Recorder, s *flowteltest.MemorySink) {
				pushSeq(0, 10)(t, c, r, s)
				c.Start()
				if _, err := s.WaitTimeout(4, testDeadline); err != nil {
					t.Fatal(err)
				}
				r.Record(post(0, 10))
			},
			want: append(seqs(0, 4), lost(6), uint64(10)),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := flowtel.NewCollector(flowtel.WithRingCapacity(tc.ringCap), flowtel.WithMaxIdle(time.Hour))
			s := flowteltest.NewMemorySink()
			c.AddSink(s)
			if tc.start {
				c.Start()
			}
			r := c.NewRecorder()
			tc.produce(t, c, r, s)
			if err := c.Shutdown(deadlineCtx(t)); err != nil {
				t.Fatal(err)
			}
			got := s.Records()
			if len(got) != len(tc.want) {
				t.Fatalf("got %d records, want %d: %v", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				switch w := w.(type) {
				case uint64:
					if got[i].Kind != flowtel.KindWRPost || got[i].CollSeq != w {
						t.Errorf("record %d: got %v, want seq %d", i, got[i], w)
					}
				case lost:
					if got[i].Kind != flowtel.KindLost || got[i].Bytes != uint64(w) || got[i].Rank != 0 {
						t.Errorf("record %d: got %v, want lost(%d) of rank 0", i, got[i], w)
					}
				}
			}
			if s.ShutdownCalls() != 1 {
				t.Errorf("sink Shutdown called %d times", s.ShutdownCalls())
			}
			// Later calls return at once, and recorders are now disabled.
			if err := c.Shutdown(deadlineCtx(t)); err != nil {
				t.Errorf("second Shutdown: %v", err)
			}
			if r2 := c.NewRecorder(); r2 != nil {
				t.Errorf("NewRecorder after Shutdown = %v, want nil", r2)
			}
		})
	}
}

func pushSeq(from, to uint64) func(*testing.T, *flowtel.Collector, *flowtel.Recorder, *flowteltest.MemorySink) {
	return func(_ *testing.T, _ *flowtel.Collector, r *flowtel.Recorder, _ *flowteltest.MemorySink) {
		for i := from; i < to; i++ {
			r.Record(post(0, i))
		}
	}
}

func seqs(from, to uint64) []any {
	var s []any
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// TestCollectorShutdownDeadline checks Shutdown returns when its context
// expires even though a sink is stuck, and that the stuck Consume sees a
// cancelled context.
func TestCollectorShutdownDeadline(t *testing.T) {
	c := flowtel.NewCollector(flowtel.WithBatchSize(4), flowtel.WithSinkQueue(2))
	g := newGateSink()
	c.AddSink(g)
	c.Start()
	r := c.NewRecorder()
	for i := range uint64(40) {
		r.Record(post(0, i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want a deadline error", err)
	}
	// The stuck sink is released by the cancelled context; a later call
	// waits for the end of the shutdown.
	if err := c.Shutdown(deadlineCtx(t)); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	st := c.Stats()
	if g.Len() != 0 {
		t.Fatalf("the gate was never opened, yet the sink has %d records", g.Len())
	}
	if st.Sinks[0].Errors == 0 || !errors.Is(st.LastError, context.Canceled) {
		t.Fatalf("want the cancelled Consume counted as an error: %+v", st)
	}
	if st.Sinks[0].DroppedRecords == 0 {
		t.Fatalf("want the batches left after the deadline dropped and counted: %+v", st.Sinks[0])
	}
	if g.ShutdownCalls() != 1 {
		t.Fatalf("sink Shutdown called %d times", g.ShutdownCalls())
	}
}

type errSink struct {
	flowteltest.MemorySink
	consumeErr, shutdownErr error
}

func (e *errSink) Consume(ctx context.Context, recs []flowtel.Record) error {
	_ = e.MemorySink.Consume(ctx, recs)
	return e.consumeErr
}

func (e *errSink) Shutdown(context.Context) error { return e.shutdownErr }

func TestCollectorSinkErrors(t *testing.T) {
	errConsume, errShutdown := errors.New("disk full"), errors.New("flush failed")
	c := flowtel.NewCollector()
	bad := &errSink{consumeErr: errConsume, shutdownErr: errShutdown}
	good := flowteltest.NewMemorySink()
	c.AddSink(bad)
	c.AddSink(good)
	r := c.NewRecorder()
	for i := range uint64(10) {
		r.Record(post(0, i))
	}
	err := c.Shutdown(deadlineCtx(t))
	if !errors.Is(err, errShutdown) {
		t.Fatalf("Shutdown = %v, want it to carry %v", err, errShutdown)
	}
	st := c.Stats()
	if st.SinkErrors == 0 || st.Sinks[0].Errors == 0 || !errors.Is(st.LastError, errConsume) {
		t.Fatalf("consume errors not counted: %+v", st)
	}
	if good.Len() != 10 || bad.Len() != 10 || st.Drained != 10 {
		t.Fatalf("good %d bad %d drained %d, want 10 each", good.Len(), bad.Len(), st.Drained)
	}
}

// TestCollectorAddSinkWhileRunning checks a sink added to a running collector
// gets what is drained afterwards.
func TestCollectorAddSinkWhileRunning(t *testing.T) {
	ctx := deadlineCtx(t)
	c := flowtel.NewCollector(flowtel.WithMaxIdle(time.Millisecond))
	first := flowteltest.NewMemorySink()
	c.AddSink(first)
	c.Start()
	r := c.NewRecorder()
	r.Record(post(0, 0))
	if _, err := first.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	second := flowteltest.NewMemorySink()
	c.AddSink(second)
	r.Record(post(0, 1))
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if first.Len() != 2 || second.Len() != 1 || second.Records()[0].CollSeq != 1 {
		t.Fatalf("first %v, second %v", first.Records(), second.Records())
	}
	late := flowteltest.NewMemorySink()
	c.AddSink(late) // after Shutdown: ignored
	if late.ShutdownCalls() != 0 || len(c.Stats().Sinks) != 2 {
		t.Fatalf("a sink added after Shutdown was registered")
	}
}

// TestCollectorClock checks the collector's recorders stamp with its clock.
func TestCollectorClock(t *testing.T) {
	fc := flowteltest.NewFakeClock(1000)
	c := flowtel.NewCollector(flowtel.WithClock(fc.Clock()))
	if c.Clock().Now() != 1000 {
		t.Fatalf("Clock().Now() = %d", c.Clock().Now())
	}
	s := flowteltest.NewMemorySink()
	c.AddSink(s)
	r := c.NewRecorder()
	r.Record(&flowtel.Record{Kind: flowtel.KindCollBegin})
	fc.Advance(5 * time.Microsecond)
	r.Record(&flowtel.Record{Kind: flowtel.KindCollEnd})
	r.Record(&flowtel.Record{Kind: flowtel.KindCollEnd, TsNs: 7}) // stamped by the caller
	if err := c.Shutdown(deadlineCtx(t)); err != nil {
		t.Fatal(err)
	}
	got := s.Records()
	want := []int64{1000, 6000, 7}
	for i, w := range want {
		if got[i].TsNs != w {
			t.Errorf("record %d: ts %d, want %d", i, got[i].TsNs, w)
		}
	}
}

// TestCollectorShutdownCancelled checks a Shutdown whose context is already
// done returns at once with its error and accounts for every record: each is
// delivered or counted as dropped.
func TestCollectorShutdownCancelled(t *testing.T) {
	c := flowtel.NewCollector(flowtel.WithBatchSize(3))
	s := flowteltest.NewMemorySink()
	c.AddSink(s)
	r := c.NewRecorder()
	for i := range uint64(10) {
		r.Record(post(0, i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want context.Canceled", err)
	}
	if err := c.Shutdown(deadlineCtx(t)); err != nil { // waits for the end
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Drained != 10 || st.Sinks[0].Records+st.Sinks[0].DroppedRecords != 10 || uint64(s.Len()) != st.Sinks[0].Records {
		t.Fatalf("records unaccounted for: sink has %d, stats %+v", s.Len(), st)
	}
	if s.ShutdownCalls() != 1 {
		t.Fatalf("sink Shutdown called %d times", s.ShutdownCalls())
	}
}

func TestCollectorFlushDeliversEverythingRecorded(t *testing.T) {
	c := flowtel.NewCollector(flowtel.WithMaxIdle(time.Hour)) // only a flush or a wake drains
	var mu sync.Mutex
	got := 0
	c.AddSink(sinkFunc(func(recs []flowtel.Record) {
		mu.Lock()
		got += len(recs)
		mu.Unlock()
	}))
	if err := c.Flush(context.Background()); err == nil {
		t.Fatal("Flush before Start succeeded")
	}
	c.Start()
	rec := c.NewRecorder()
	for i := range 100 {
		rec.Record(&flowtel.Record{TsNs: int64(i + 1), Kind: flowtel.KindWC})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := got
	mu.Unlock()
	if n != 100 {
		t.Fatalf("after Flush the sink has %d of 100 records", n)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err == nil {
		t.Fatal("Flush after Shutdown succeeded")
	}
}

type sinkFunc func([]flowtel.Record)

func (f sinkFunc) Consume(_ context.Context, recs []flowtel.Record) error { f(recs); return nil }
func (f sinkFunc) Shutdown(context.Context) error                         { return nil }

// TestCollectorOneP: with a single P, a producer that never blocks still
// has its ring drained (it yields the P when the ring crosses half full),
// so nothing is dropped; without the yield the collector would not run
// until the runtime preempted the producer, 10 ms later, long after the
// ring filled.
func TestCollectorOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const ringCap, n = 1024, 16 * 1024
	c := flowtel.NewCollector(flowtel.WithRingCapacity(ringCap), flowtel.WithBatchSize(256),
		flowtel.WithMaxIdle(time.Millisecond), flowtel.WithSinkQueue(1024))
	sink := flowteltest.NewMemorySink()
	c.AddSink(sink)
	c.Start()
	r := c.NewRecorder()
	for i := range uint64(n) {
		r.Record(post(0, i))
	}
	if err := c.Shutdown(deadlineCtx(t)); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.RingDropped != 0 {
		t.Fatalf("one P: the ring dropped %d of %d records", st.RingDropped, n)
	}
	checkStreams(t, sink.Records(), []uint64{n})
}

// On one P, Settle lends the processor until the collector drained the
// rings and every sink consumed what it was handed: right after it, the
// sink holds every record made before it, though the producer never
// blocked; the sink got them in slices of at most 512. A recorder without
// a collector settles nothing.
func TestRecorderSettleOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	c := flowtel.NewCollector(flowtel.WithMaxIdle(time.Hour))
	sink := flowteltest.NewMemorySink()
	c.AddSink(sink)
	c.Start()
	r := c.NewRecorder()
	var seq uint64
	for round := range 5 {
		for range 1000 + 700*round { // under half the ring: no wake-up of its own
			r.Record(post(0, seq))
			seq++
		}
		r.Settle()
		if got := sink.Len(); got != int(seq) {
			t.Fatalf("round %d: after Settle the sink holds %d of %d records", round, got, seq)
		}
	}
	if want := (int(seq) + 511) / 512; sink.Consumes() < want {
		t.Fatalf("%d records in %d Consume calls: want slices of at most 512 (%d calls or more)", seq, sink.Consumes(), want)
	}
	if err := c.Shutdown(deadlineCtx(t)); err != nil {
		t.Fatal(err)
	}
	checkStreams(t, sink.Records(), []uint64{seq})

	ring, err := flowtel.NewRing(8)
	if err != nil {
		t.Fatal(err)
	}
	alone := flowtel.NewRecorder(ring, nil)
	alone.Record(post(0, 0))
	alone.Settle()
	var nilRec *flowtel.Recorder
	nilRec.Settle()
}
