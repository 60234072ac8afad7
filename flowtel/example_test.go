package flowtel_test

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// A Collector drains the Recorders' rings into its sinks; here a Window
// turns the records into per-link statistics.
func ExampleCollector() {
	c := flowtel.NewCollector(flowtel.WithMaxIdle(time.Millisecond))
	w := flowtel.NewWindow(flowtel.WindowConfig{N: 1024, T: 100 * time.Millisecond})
	c.AddSink(w)
	c.Start()

	// One recorder per producer goroutine (a progress engine, say). Records
	// are normally stamped by the recorder (TsNs 0); fixed times here keep
	// the output stable.
	rec := c.NewRecorder()
	for i := range 4 {
		ts := int64(i+1) * 1000 // not 0: a zero TsNs asks the recorder to stamp it
		wr := flowtel.Record{Rank: 0, Peer: 1, QP: 7, WrID: flowtel.WRID(uint64(i), false), Bytes: 4096}
		post, done := wr, wr
		post.TsNs, post.Kind, post.Depth = ts, flowtel.KindWRPost, 1
		done.TsNs, done.Kind, done.Depth = ts+800, flowtel.KindWC, 0
		rec.Record(&post)
		rec.Record(&done)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil { // drains everything into the window
		fmt.Println(err)
		return
	}
	for _, s := range w.Snapshot() {
		fmt.Printf("%v: %d WRs, %.3f GB/s, latency p50 %dns max %dns, backlog %d\n",
			s.Key, s.Completions, s.BandwidthBps/1e9, s.LatP50Ns, s.LatMaxNs, s.Backlog)
	}
	st := c.Stats()
	fmt.Printf("drained %d records, dropped %d\n", st.Drained, st.RingDropped)
	// Output:
	// 0->1 ch=0 path=0 send: 4 WRs, 4.096 GB/s, latency p50 800ns max 800ns, backlog 0
	// drained 8 records, dropped 0
}

// A producer on a single processor (a rank bound to one CPU) that spins
// between its operations settles at points of its choosing, the same on
// every rank of a job: the collector and its sinks run then, not when the
// runtime preempts the producer. Here the sink has every record the moment
// Settle returns.
func ExampleRecorder_Settle() {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	c := flowtel.NewCollector(flowtel.WithMaxIdle(time.Hour))
	w := flowtel.NewWindow(flowtel.WindowConfig{N: 1024, T: time.Second})
	c.AddSink(w)
	c.Start()
	rec := c.NewRecorder()
	for call := range 256 {
		wr := flowtel.Record{TsNs: int64(call+1) * 1000, Rank: 0, Peer: 1, QP: 7, WrID: flowtel.WRID(uint64(call), false), Bytes: 1024}
		post, done := wr, wr
		post.Kind, post.Depth = flowtel.KindWRPost, 1
		done.TsNs, done.Kind = wr.TsNs+500, flowtel.KindWC
		rec.Record(&post)
		rec.Record(&done)
		if call%64 == 63 {
			rec.Settle()
			fmt.Printf("after call %d: %d WRs in the window\n", call, w.Snapshot()[0].Completions)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// after call 63: 64 WRs in the window
	// after call 127: 128 WRs in the window
	// after call 191: 192 WRs in the window
	// after call 255: 256 WRs in the window
}

func ExampleParseWindowEnv() {
	for _, v := range []string{"N=1024,T=50ms", "4096,1ms", "", "T=50"} {
		cfg, err := flowtel.ParseWindowEnv(v)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(cfg)
	}
	// Output:
	// N=1024,T=50ms
	// N=4096,T=1ms
	// N=1024,T=100ms
	// error: flowtel: VCCL_TELEMETRY_WINDOW="T=50": T="50" is not a duration with a unit (e.g. 50ms, 200us): time: missing unit in duration "50"
}

// slowWRs is a consumer of the fold: it counts, per link, the WRs slower
// than a bound. Embedding NopHandler, it implements only the event it uses.
type slowWRs struct {
	flowtel.NopHandler
	boundNs int64
	slow    map[flowtel.LinkKey]int
}

func (s *slowWRs) Completed(t *flowtel.Transfer) {
	if lat, ok := t.LatencyNs(); ok && lat > s.boundNs {
		s.slow[t.Link]++
	}
}

// A Fold pairs each completion with its post (and credit waits with their
// grants, call parts with each other) and hands typed events to a Handler:
// this is how every view of the records is written.
func ExampleFold() {
	v := &slowWRs{boundNs: 1000, slow: map[flowtel.LinkKey]int{}}
	f := flowtel.NewFold(v, flowtel.FoldConfig{})
	for i, lat := range []int64{500, 1500, 800, 2500} {
		ts := int64(i) * 10_000
		wr := flowtel.Record{Rank: 0, Peer: 1, QP: 7, WrID: flowtel.WRID(uint64(i), false), Bytes: 4096}
		post, done := wr, wr
		post.TsNs, post.Kind = ts, flowtel.KindWRPost
		done.TsNs, done.Kind = ts+lat, flowtel.KindWC
		f.Add([]flowtel.Record{post, done})
	}
	for k, n := range v.slow {
		fmt.Printf("%v: %d WRs slower than 1µs\n", k, n)
	}
	fmt.Printf("folded %d records\n", f.Stats().Records)
	// Output:
	// 0->1 ch=0 path=0 send: 2 WRs slower than 1µs
	// folded 8 records
}
