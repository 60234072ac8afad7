package flowtel_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// Hand-built records for rank 0 talking to peer 1 on channel 0, path 0,
// unless changed with on().
func wpost(ts int64, qp uint32, seq uint64, recv bool, bytes uint64, depth uint32) flowtel.Record {
	return flowtel.Record{TsNs: ts, Kind: flowtel.KindWRPost, Rank: 0, Peer: 1, QP: qp, WrID: flowtel.WRID(seq, recv), Bytes: bytes, Depth: depth}
}

// wc completes; its Bytes are 0, so the window takes the post's.
func wc(ts int64, qp uint32, seq uint64, recv bool, depth uint32) flowtel.Record {
	return flowtel.Record{TsNs: ts, Kind: flowtel.KindWC, Rank: 0, Peer: 1, QP: qp, WrID: flowtel.WRID(seq, recv), Depth: depth}
}

func credit(ts int64, k flowtel.Kind, qp uint32, seq uint64) flowtel.Record {
	return flowtel.Record{TsNs: ts, Kind: k, Rank: 0, Peer: 1, QP: qp, WrID: flowtel.WRID(seq, false)}
}

func on(r flowtel.Record, peer int32, ch uint16, path flowtel.Path) flowtel.Record {
	r.Peer, r.Channel, r.Path = peer, ch, path
	return r
}

func withStatus(r flowtel.Record, s flowtel.Status) flowtel.Record { r.Status = s; return r }
func withBytes(r flowtel.Record, b uint64) flowtel.Record          { r.Bytes = b; return r }
func withDepth(r flowtel.Record, d uint32) flowtel.Record          { r.Depth = d; return r }

var (
	send01 = flowtel.LinkKey{Rank: 0, Peer: 1, Dir: flowtel.DirSend}
	recv01 = flowtel.LinkKey{Rank: 0, Peer: 1, Dir: flowtel.DirRecv}
)

// pingPong returns n sends of b bytes on qp 1, posted every 1000ns, the i-th
// completing after lat(i) ns.
func pingPong(n int, b uint64, lat func(i int) int64) []flowtel.Record {
	var recs []flowtel.Record
	for i := range n {
		ts := int64(i) * 1000
		recs = append(recs, wpost(ts, 1, uint64(i), false, b, 1), wc(ts+lat(i), 1, uint64(i), false, 0))
	}
	return recs
}

func TestWindowStats(t *testing.T) {
	type tc struct {
		name string
		cfg  flowtel.WindowConfig
		recs []flowtel.Record
		now  int64
		want []flowtel.LinkStats // every link, in key order
		lost uint64
	}
	cases := []tc{
		{
			name: "latency percentiles",
			recs: pingPong(100, 64, func(i int) int64 { return int64(i+1) * 10 }), // 10..1000ns
			now:  100_000,
			want: []flowtel.LinkStats{{
				Key: send01, Completions: 100, Bytes: 6400,
				SpanNs: 99*1000 + 990, BandwidthBps: 99 * 64 * 1e9 / (99*1000 + 990),
				LatencySamples: 100, LatP50Ns: 500, LatP99Ns: 990, LatMaxNs: 1000,
				LastNs: 100_000,
			}},
		},
		{
			name: "bandwidth and backlog",
			recs: []flowtel.Record{
				wpost(0, 1, 0, false, 1000, 1), wpost(0, 1, 1, false, 1000, 2),
				wpost(0, 1, 2, false, 1000, 3), wpost(0, 1, 3, false, 1000, 4),
				wc(100, 1, 0, false, 3), wc(200, 1, 1, false, 2), wc(300, 1, 2, false, 1),
			},
			now: 300,
			want: []flowtel.LinkStats{{
				Key: send01, Completions: 3, Bytes: 3000, SpanNs: 200, BandwidthBps: 2000 * 1e9 / 200,
				LatencySamples: 3, LatP50Ns: 200, LatP99Ns: 300, LatMaxNs: 300,
				Backlog: 1, OutstandingBytes: 1000, PendingWRs: 1, LastNs: 300,
			}},
		},
		{
			name: "single completion: bytes over latency",
			recs: []flowtel.Record{wpost(0, 1, 0, false, 1000, 1), wc(500, 1, 0, false, 0)},
			now:  500,
			want: []flowtel.LinkStats{{
				Key: send01, Completions: 1, Bytes: 1000, BandwidthBps: 2e9,
				LatencySamples: 1, LatP50Ns: 500, LatP99Ns: 500, LatMaxNs: 500, LastNs: 500,
			}},
		},
		{
			name: "send and receive kept apart; wc bytes win over the post's",
			recs: []flowtel.Record{
				wpost(0, 1, 0, false, 100, 1), wpost(0, 1, 0, true, 4096, 1),
				wc(50, 1, 0, false, 0),
				withBytes(wc(80, 1, 0, true, 0), 1024), // a short receive
			},
			now: 100,
			want: []flowtel.LinkStats{
				{Key: send01, Completions: 1, Bytes: 100, BandwidthBps: 100 * 1e9 / 50, LatencySamples: 1, LatP50Ns: 50, LatP99Ns: 50, LatMaxNs: 50, LastNs: 50},
				{Key: recv01, Completions: 1, Bytes: 1024, BandwidthBps: 1024 * 1e9 / 80, LatencySamples: 1, LatP50Ns: 80, LatP99Ns: 80, LatMaxNs: 80, LastNs: 80},
			},
		},
		{
			name: "links by peer, channel and path; backlog summed over QPs",
			recs: []flowtel.Record{
				wpost(0, 1, 0, false, 10, 3), wpost(0, 2, 0, false, 20, 2), // two QPs, one link
				on(wpost(5, 3, 0, false, 30, 1), 1, 0, 1), // backup path
				on(wpost(6, 4, 0, false, 40, 1), 2, 3, 0), // peer 2, channel 3
			},
			now: 10,
			want: []flowtel.LinkStats{
				{Key: send01, Backlog: 5, OutstandingBytes: 30, PendingWRs: 2, LastNs: 0},
				{Key: flowtel.LinkKey{Peer: 1, Path: 1}, Backlog: 1, OutstandingBytes: 30, PendingWRs: 1, LastNs: 5},
				{Key: flowtel.LinkKey{Peer: 2, Channel: 3}, Backlog: 1, OutstandingBytes: 40, PendingWRs: 1, LastNs: 6},
			},
		},
		{
			name: "last N completions",
			cfg:  flowtel.WindowConfig{N: 4},
			recs: pingPong(10, 8, func(i int) int64 { return int64(10 - i) }), // 10..1ns
			now:  10_000,
			want: []flowtel.LinkStats{{
				Key: send01, Completions: 4, Bytes: 32, SpanNs: 9001 - 6004, BandwidthBps: 24 * 1e9 / (9001 - 6004),
				LatencySamples: 4, LatP50Ns: 2, LatP99Ns: 4, LatMaxNs: 4, LastNs: 9001,
			}},
		},
		{
			name: "last T",
			cfg:  flowtel.WindowConfig{T: 1500 * time.Nanosecond},
			recs: pingPong(10, 8, func(i int) int64 { return 100 }), // completions at 100, 1100, ..., 9100
			now:  9500,
			want: []flowtel.LinkStats{{
				Key: send01, Completions: 2, Bytes: 16, SpanNs: 1000, BandwidthBps: 8 * 1e9 / 1000,
				LatencySamples: 2, LatP50Ns: 100, LatP99Ns: 100, LatMaxNs: 100, LastNs: 9100,
			}},
		},
		{
			name: "idle past T",
			cfg:  flowtel.WindowConfig{T: time.Microsecond},
			recs: pingPong(3, 8, func(i int) int64 { return 100 }),
			now:  1_000_000,
			want: []flowtel.LinkStats{{Key: send01, LastNs: 2100}},
		},
		{
			name: "credit waits: closed and still open",
			recs: []flowtel.Record{
				credit(100, flowtel.KindCreditWait, 1, 0), credit(400, flowtel.KindCreditGrant, 1, 0),
				wpost(400, 1, 0, false, 10, 1), wc(500, 1, 0, false, 0),
				credit(600, flowtel.KindCreditWait, 1, 1),
			},
			now: 1000,
			want: []flowtel.LinkStats{{
				Key: send01, Completions: 1, Bytes: 10, BandwidthBps: 10 * 1e9 / 100,
				LatencySamples: 1, LatP50Ns: 100, LatP99Ns: 100, LatMaxNs: 100,
				CreditWaitNs: 300 + 400, CreditWaiting: true, LastNs: 600,
			}},
		},
		{
			name: "credit waits clipped to the window",
			cfg:  flowtel.WindowConfig{T: 500 * time.Nanosecond},
			recs: []flowtel.Record{
				credit(100, flowtel.KindCreditWait, 1, 0), credit(700, flowtel.KindCreditGrant, 1, 0),
				credit(800, flowtel.KindCreditWait, 1, 1), credit(850, flowtel.KindCreditGrant, 1, 1),
				credit(900, flowtel.KindCreditWait, 1, 2),
			},
			now:  1000,
			want: []flowtel.LinkStats{{Key: send01, CreditWaitNs: 200 + 50 + 100, CreditWaiting: true, LastNs: 900}},
		},
		{
			// As transports record it: the sends are posted, find no
			// credit, and get it in posting order.
			name: "overlapping waits count once",
			recs: []flowtel.Record{
				wpost(0, 1, 0, false, 10, 1), wpost(0, 1, 1, false, 10, 2), wpost(0, 1, 2, false, 10, 3),
				credit(10, flowtel.KindCreditWait, 1, 0), credit(20, flowtel.KindCreditWait, 1, 1),
				credit(30, flowtel.KindCreditWait, 1, 2),
				credit(100, flowtel.KindCreditGrant, 1, 0), withDepth(credit(150, flowtel.KindCreditGrant, 1, 1), 3),
			},
			now: 200,
			want: []flowtel.LinkStats{{
				Key: send01, Backlog: 3, OutstandingBytes: 30, PendingWRs: 3,
				CreditWaitNs: 200 - 10, CreditWaiting: true, LastNs: 150,
			}},
		},
		{
			name: "disjoint waits add up; a lost grant drops its wait",
			recs: []flowtel.Record{
				credit(10, flowtel.KindCreditWait, 1, 0), credit(40, flowtel.KindCreditGrant, 1, 0),
				credit(50, flowtel.KindCreditWait, 1, 1), // its grant is lost
				{Kind: flowtel.KindLost, Bytes: 1, TsNs: 60},
				credit(70, flowtel.KindCreditWait, 1, 2), credit(100, flowtel.KindCreditGrant, 1, 2),
				credit(200, flowtel.KindCreditWait, 1, 3), credit(200, flowtel.KindCreditWait, 1, 3), // a duplicate
				credit(250, flowtel.KindCreditGrant, 1, 3),
			},
			now:  300,
			lost: 1,
			want: []flowtel.LinkStats{{Key: send01, CreditWaitNs: 30 + 30 + 50, LastNs: 250}},
		},
		{
			name: "two QPs on one link",
			recs: []flowtel.Record{
				credit(10, flowtel.KindCreditWait, 1, 0), credit(20, flowtel.KindCreditWait, 2, 0),
				credit(30, flowtel.KindCreditGrant, 1, 0),
			},
			now:  100,
			want: []flowtel.LinkStats{{Key: send01, CreditWaitNs: 90, CreditWaiting: true, LastNs: 30}},
		},
		{
			name: "lost grant: the wait is dropped, not guessed",
			recs: []flowtel.Record{
				{Kind: flowtel.KindLost, Bytes: 1, TsNs: 150},
				credit(100, flowtel.KindCreditWait, 1, 0), // its grant was lost
				wpost(300, 1, 0, false, 10, 1), wc(400, 1, 0, false, 0),
			},
			now:  1000,
			lost: 1,
			want: []flowtel.LinkStats{{
				Key: send01, Completions: 1, Bytes: 10, BandwidthBps: 10 * 1e9 / 100,
				LatencySamples: 1, LatP50Ns: 100, LatP99Ns: 100, LatMaxNs: 100, LastNs: 400,
			}},
		},
		{
			name: "lost post: completion counted without latency",
			recs: []flowtel.Record{
				wpost(0, 1, 0, false, 10, 1), wc(100, 1, 0, false, 0),
				{Kind: flowtel.KindLost, Bytes: 1, TsNs: 200}, // the post of send 1
				withBytes(wc(300, 1, 1, false, 0), 10),
				wpost(400, 1, 2, false, 10, 1), wc(600, 1, 2, false, 0),
			},
			now:  600,
			lost: 1,
			want: []flowtel.LinkStats{{
				Key: send01, Completions: 3, Bytes: 30, SpanNs: 500, BandwidthBps: 20 * 1e9 / 500,
				LatencySamples: 2, LatP50Ns: 100, LatP99Ns: 200, LatMaxNs: 200, LastNs: 600, Unmatched: 1,
			}},
		},
		{
			name: "lost completion: pairing resynchronises on the next one",
			recs: []flowtel.Record{
				wpost(0, 1, 0, false, 10, 1), wpost(10, 1, 1, false, 10, 2), wpost(20, 1, 2, false, 10, 3),
				wc(100, 1, 0, false, 2),
				{Kind: flowtel.KindLost, Bytes: 1, TsNs: 150}, // the wc of send 1
				wc(300, 1, 2, false, 0),
			},
			now:  300,
			lost: 1,
			want: []flowtel.LinkStats{{
				Key: send01, Completions: 2, Bytes: 20, SpanNs: 200, BandwidthBps: 10 * 1e9 / 200,
				LatencySamples: 2, LatP50Ns: 100, LatP99Ns: 280, LatMaxNs: 280, LastNs: 300, Orphaned: 1,
			}},
		},
		{
			name: "receives pair by their own FIFO",
			recs: []flowtel.Record{
				wpost(0, 1, 0, true, 8, 1), wpost(0, 1, 1, true, 8, 2),
				wpost(5, 1, 0, false, 8, 3),
				wc(10, 1, 0, false, 2), wc(40, 1, 0, true, 1), wc(70, 1, 1, true, 0),
			},
			now: 70,
			want: []flowtel.LinkStats{
				// Depth is per QP, both directions: the last record says 0.
				{Key: send01, Completions: 1, Bytes: 8, BandwidthBps: 8 * 1e9 / 5, LatencySamples: 1, LatP50Ns: 5, LatP99Ns: 5, LatMaxNs: 5, LastNs: 10},
				{Key: recv01, Completions: 2, Bytes: 16, SpanNs: 30, BandwidthBps: 8 * 1e9 / 30, LatencySamples: 2, LatP50Ns: 40, LatP99Ns: 70, LatMaxNs: 70, LastNs: 70},
			},
		},
		{
			name: "failed completions",
			recs: []flowtel.Record{
				wpost(0, 1, 0, false, 8, 1), withStatus(wc(10, 1, 0, false, 0), flowtel.StatusError),
				wpost(20, 1, 1, false, 8, 1), withStatus(wc(30, 1, 1, false, 0), flowtel.StatusFlushed),
				wpost(40, 1, 2, false, 8, 1), wc(50, 1, 2, false, 0),
			},
			now: 50,
			want: []flowtel.LinkStats{{
				Key: send01, Completions: 3, Failed: 2, Bytes: 24, SpanNs: 40, BandwidthBps: 16 * 1e9 / 40,
				LatencySamples: 3, LatP50Ns: 10, LatP99Ns: 10, LatMaxNs: 10, LastNs: 50,
			}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, mode := range []string{"Update", "Add"} {
				w := flowtel.NewWindow(c.cfg)
				if mode == "Update" {
					w.Update(c.recs)
				} else {
					for i := range c.recs {
						w.Add(&c.recs[i])
					}
				}
				got := w.SnapshotAt(c.now)
				if len(got) != len(c.want) {
					t.Fatalf("%s: %d links, want %d: %+v", mode, len(got), len(c.want), got)
				}
				for i := range got {
					g, wt := got[i], c.want[i]
					if !approx(g.BandwidthBps, wt.BandwidthBps) {
						t.Errorf("%s: link %v: bandwidth %g, want %g", mode, g.Key, g.BandwidthBps, wt.BandwidthBps)
					}
					g.BandwidthBps, wt.BandwidthBps = 0, 0
					if g != wt {
						t.Errorf("%s: link %d:\n got %+v\nwant %+v", mode, i, g, wt)
					}
					one, ok := w.Link(c.want[i].Key, c.now)
					if !ok || one.Key != c.want[i].Key || one.Completions != c.want[i].Completions {
						t.Errorf("%s: Link(%v) = %+v, %v", mode, c.want[i].Key, one, ok)
					}
				}
				if w.Lost() != c.lost {
					t.Errorf("%s: Lost() = %d, want %d", mode, w.Lost(), c.lost)
				}
			}
		})
	}
}

func approx(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

func TestWindowSnapshotNow(t *testing.T) {
	recs := pingPong(3, 8, func(int) int64 { return 100 })
	// Without a clock, Snapshot uses the latest record time (2100).
	w := flowtel.NewWindow(flowtel.WindowConfig{T: time.Microsecond})
	w.Update(recs)
	if w.Now() != 2100 {
		t.Fatalf("Now() = %d, want 2100", w.Now())
	}
	if s := w.Snapshot(); len(s) != 1 || s[0].Completions != 2 {
		t.Fatalf("Snapshot() = %+v, want the completions in [1100, 2100]", s)
	}
	// With one, Snapshot follows it.
	fc := fakeClock(5_000_000)
	w = flowtel.NewWindow(flowtel.WindowConfig{T: time.Microsecond}, flowtel.WithWindowClock(flowtel.NewClockFrom(fc, 0, 0)))
	w.Update(recs)
	if s := w.Snapshot(); len(s) != 1 || s[0].Completions != 0 || s[0].LastNs != 2100 {
		t.Fatalf("Snapshot() = %+v, want an idle link", s)
	}
	// AppendSnapshot reuses its argument; Reset forgets.
	buf := make([]flowtel.LinkStats, 0, 4)
	if s := w.AppendSnapshot(buf, 2100); &s[0] != &buf[:1][0] {
		t.Fatalf("AppendSnapshot did not reuse dst")
	}
	w.Reset()
	if s := w.Snapshot(); len(s) != 0 {
		t.Fatalf("Snapshot after Reset = %+v", s)
	}
	if _, ok := w.Link(send01, 0); ok {
		t.Fatalf("Link after Reset found")
	}
}

type fakeClock int64

func (f fakeClock) Nanotime() int64 { return int64(f) }

// TestWindowConcurrent updates and snapshots at once under the race detector.
func TestWindowConcurrent(t *testing.T) {
	w := flowtel.NewWindow(flowtel.WindowConfig{N: 64})
	recs := make([]flowtel.Record, 0, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		seq := uint64(0)
		for range 200 {
			recs = recs[:0]
			for range 128 {
				ts := int64(seq) * 10
				recs = append(recs, wpost(ts, uint32(seq%4), seq/4, false, 64, 1), wc(ts+5, uint32(seq%4), seq/4, false, 0))
				seq++
			}
			w.Update(recs)
		}
	}()
	timeout := time.After(testDeadline)
	snapshots := 0
loop:
	for {
		select {
		case <-done:
			break loop
		case <-timeout:
			t.Fatal("the writer did not finish")
		default:
		}
		for _, s := range w.Snapshot() {
			if s.Completions > 64 || (s.Completions > 0 && s.LatMaxNs != 5) {
				t.Fatalf("inconsistent snapshot %+v", s)
			}
		}
		snapshots++
	}
	s := w.Snapshot()
	if len(s) != 1 || s[0].Completions != 64 || s[0].LastNs != int64(200*128-1)*10+5 ||
		s[0].LatP99Ns != 5 || s[0].Unmatched != 0 || s[0].Orphaned != 0 || s[0].PendingWRs != 0 {
		t.Fatalf("final stats %+v after %d snapshots", s, snapshots)
	}
}

// TestWindowUpdateNoAlloc checks a warmed-up window updates without
// allocating.
func TestWindowUpdateNoAlloc(t *testing.T) {
	w := flowtel.NewWindow(flowtel.WindowConfig{N: 128})
	recs := make([]flowtel.Record, 512)
	seq := uint64(0)
	fill := func() {
		for i := 0; i < len(recs); i += 2 {
			ts := int64(seq) * 10
			qp := uint32(seq % 8)
			recs[i] = wpost(ts, qp, seq, false, 64, 1)
			recs[i+1] = wc(ts+7, qp, seq, false, 0)
			seq++
		}
	}
	for range 4 {
		fill()
		w.Update(recs)
	}
	allocs := testing.AllocsPerRun(50, func() {
		fill()
		w.Update(recs)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per Update, want 0", allocs)
	}
}

func TestParseWindowEnv(t *testing.T) {
	def := flowtel.WindowConfig{N: flowtel.DefaultWindowN, T: flowtel.DefaultWindowT}
	for _, tc := range []struct {
		in      string
		want    flowtel.WindowConfig
		wantErr string // substring of the error; "" for success
	}{
		{in: "", want: def},
		{in: "   ", want: def},
		{in: "N=1024,T=50ms", want: flowtel.WindowConfig{N: 1024, T: 50 * time.Millisecond}},
		{in: "1024,50ms", want: flowtel.WindowConfig{N: 1024, T: 50 * time.Millisecond}},
		{in: "50ms,1024", want: flowtel.WindowConfig{N: 1024, T: 50 * time.Millisecond}},
		{in: " t = 2s , n = 8 ", want: flowtel.WindowConfig{N: 8, T: 2 * time.Second}},
		{in: "N=4096", want: flowtel.WindowConfig{N: 4096, T: flowtel.DefaultWindowT}},
		{in: "T=200us", want: flowtel.WindowConfig{N: flowtel.DefaultWindowN, T: 200 * time.Microsecond}},
		{in: "T=5µs", want: flowtel.WindowConfig{N: flowtel.DefaultWindowN, T: 5 * time.Microsecond}},
		{in: "1", want: flowtel.WindowConfig{N: 1, T: flowtel.DefaultWindowT}},
		{in: "1h", want: flowtel.WindowConfig{N: flowtel.DefaultWindowN, T: time.Hour}},
		{in: "N=1048576", want: flowtel.WindowConfig{N: 1 << 20, T: flowtel.DefaultWindowT}},

		{in: "N=0", wantErr: "N=0 out of range"},
		{in: "N=-3", wantErr: "N=-3 out of range"},
		{in: "N=2000000", wantErr: "out of range [1, 1048576]"},
		{in: "N=abc", wantErr: `N="abc" is not an integer`},
		{in: "N=1.5", wantErr: "is not an integer"},
		{in: "T=50", wantErr: `T="50" is not a duration with a unit`},
		{in: "T=fast", wantErr: "is not a duration"},
		{in: "T=0s", wantErr: "must be positive"},
		{in: "T=-5ms", wantErr: "must be positive"},
		{in: "X=1", wantErr: `unknown key "X" (want N or T)`},
		{in: "1024,2048", wantErr: "N given twice"},
		{in: "N=1,T=1s,N=2", wantErr: "N given twice"},
		{in: "50ms,1s", wantErr: "T given twice"},
		{in: "N=1,", wantErr: "empty item"},
		{in: ",", wantErr: "empty item"},
		{in: "abc", wantErr: `"abc" is neither a count N`},
		{in: "N=1;T=1s", wantErr: "is not an integer"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := flowtel.ParseWindowEnv(tc.in)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseWindowEnv(%q) = %v, want an error containing %q", tc.in, got, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), flowtel.EnvWindow) {
					t.Fatalf("ParseWindowEnv(%q) error %q, want it to name %s and contain %q", tc.in, err, flowtel.EnvWindow, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseWindowEnv(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestWindowConfigZero(t *testing.T) {
	if got := flowtel.NewWindow(flowtel.WindowConfig{}).Config(); got != (flowtel.WindowConfig{N: flowtel.DefaultWindowN, T: flowtel.DefaultWindowT}) {
		t.Fatalf("zero config gives %v, want the defaults", got)
	}
}

func TestWindowRetransmittedIsNotFailed(t *testing.T) {
	w := flowtel.NewWindow(flowtel.WindowConfig{N: 8, T: time.Hour})
	post := flowtel.Record{TsNs: 10, Kind: flowtel.KindWRPost, Rank: 0, Peer: 1, QP: 1, WrID: flowtel.WRID(0, false), Bytes: 100}
	wc := post
	wc.TsNs, wc.Kind, wc.Status, wc.Path = 20, flowtel.KindWC, flowtel.StatusRetransmitted, 1
	w.Update([]flowtel.Record{post, wc})
	completions := 0
	for _, l := range w.SnapshotAt(20) {
		completions += l.Completions
		if l.Failed != 0 {
			t.Fatalf("link %v: %d failed; a retransmitted WR is a delivered one", l.Key, l.Failed)
		}
	}
	if completions != 1 {
		t.Fatalf("%d completions, want the retransmitted one", completions)
	}
}
