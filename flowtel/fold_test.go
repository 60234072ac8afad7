package flowtel_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vccl-go/vccl/flowtel"
)

// eventLog is a Handler that writes each event as one line.
type eventLog struct{ lines []string }

func (l *eventLog) add(format string, args ...any) {
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *eventLog) Posted(t *flowtel.Transfer) {
	l.add("posted %s wr=%d bytes=%d pending=%d/%dB orphans=%d ahead=%v:%d", t.Link, t.WrID, t.Bytes, t.Pending, t.PendingBytes, t.Orphans, t.HasAhead, t.Ahead.WrID)
}

func (l *eventLog) Completed(t *flowtel.Transfer) {
	lat, ok := t.LatencyNs()
	l.add("done %s wr=%d bytes=%d status=%s lat=%d/%v pending=%d orphans=%d prev=%d", t.Link, t.WrID, t.Bytes, t.Status, lat, ok, t.Pending, t.Orphans, t.PrevDoneNs)
}

func (l *eventLog) WaitBegan(w *flowtel.CreditWait) {
	l.add("wait %s wr=%d from=%d", w.Link, w.WrID, w.FromNs)
}

func (l *eventLog) WaitEnded(w *flowtel.CreditWait) {
	l.add("waited %s wr=%d %d..%d granted=%v", w.Link, w.WrID, w.FromNs, w.ToNs, w.Granted)
}

func (l *eventLog) CallBegan(c *flowtel.Call) {
	l.add("call rank=%d seq=%d %s begin=%d", c.Rank, c.Seq, c.Op, c.BeginNs)
}

func (l *eventLog) CallEnded(c *flowtel.Call) {
	l.add("called rank=%d seq=%d %s %d..%d bytes=%d parts=%d/%d/%d %s complete=%v", c.Rank, c.Seq, c.Op, c.BeginNs, c.EndNs, c.Bytes, c.Begun, c.Ended, c.Parts, c.Status, c.Complete)
}

func (l *eventLog) PathChanged(p *flowtel.PathChange) { l.add("%s %s at %d", p.Kind, p.Link, p.TsNs) }

func (l *eventLog) Gap(g *flowtel.Gap) {
	l.add("gap comm=%d rank=%d %d..%d open=%v pending=%d calls=%d beats=%v", g.Comm, g.Rank, g.FromNs, g.ToNs, g.Open, g.PendingWRs, g.OpenCalls, g.Beats)
}

func (l *eventLog) Lost(x *flowtel.Lost) { l.add("lost rank=%d %d at %d", x.Rank, x.Records, x.TsNs) }

// wr returns a record of rank 0's QP 1 to peer 1.
func wr(ts int64, k flowtel.Kind, seq uint64, recv bool, bytes uint64) flowtel.Record {
	return flowtel.Record{TsNs: ts, Kind: k, Rank: 0, Peer: 1, QP: 1, WrID: flowtel.WRID(seq, recv), Bytes: bytes}
}

func coll(ts int64, k flowtel.Kind, rank int32, seq uint64, parts uint32, bytes uint64) flowtel.Record {
	return flowtel.Record{TsNs: ts, Kind: k, Rank: rank, Peer: -1, CollSeq: seq, Op: flowtel.OpAllReduce, Step: parts, Bytes: bytes}
}

func status(r flowtel.Record, s flowtel.Status) flowtel.Record { r.Status = s; return r }

func TestFold(t *testing.T) {
	const (
		post  = flowtel.KindWRPost
		wc    = flowtel.KindWC
		wait  = flowtel.KindCreditWait
		grant = flowtel.KindCreditGrant
		begin = flowtel.KindCollBegin
		end   = flowtel.KindCollEnd
	)
	tests := []struct {
		name   string
		cfg    flowtel.FoldConfig
		recs   []flowtel.Record
		finish bool
		want   []string
	}{
		{
			name: "a post pairs with its completion in each direction",
			recs: []flowtel.Record{wr(100, post, 0, false, 10), wr(110, post, 0, true, 20), wr(150, wc, 0, true, 20), wr(200, wc, 0, false, 0)},
			want: []string{
				"posted 0->1 ch=0 path=0 send wr=0 bytes=10 pending=1/10B orphans=0 ahead=false:0",
				"posted 0->1 ch=0 path=0 recv wr=1 bytes=20 pending=1/20B orphans=0 ahead=false:0",
				"done 0->1 ch=0 path=0 recv wr=1 bytes=20 status=ok lat=40/true pending=0 orphans=0 prev=0",
				// The completion carries no bytes: the post's count.
				"done 0->1 ch=0 path=0 send wr=0 bytes=10 status=ok lat=100/true pending=0 orphans=0 prev=0",
			},
		},
		{
			name: "a lost completion orphans its post; a completion without its post is unmatched",
			cfg:  flowtel.FoldConfig{Ahead: true},
			recs: []flowtel.Record{wr(100, post, 0, false, 1), wr(110, post, 1, false, 1), wr(200, wc, 1, false, 1), wr(300, wc, 2, false, 1)},
			want: []string{
				"posted 0->1 ch=0 path=0 send wr=0 bytes=1 pending=1/1B orphans=0 ahead=false:0",
				"posted 0->1 ch=0 path=0 send wr=2 bytes=1 pending=2/2B orphans=0 ahead=true:0",
				"done 0->1 ch=0 path=0 send wr=2 bytes=1 status=ok lat=90/true pending=0 orphans=1 prev=0",
				"done 0->1 ch=0 path=0 send wr=4 bytes=1 status=ok lat=0/false pending=0 orphans=0 prev=200",
			},
		},
		{
			name: "the largest send ahead is what a send may wait behind",
			cfg:  flowtel.FoldConfig{Ahead: true},
			recs: []flowtel.Record{wr(1, post, 0, false, 1000), wr(2, post, 1, false, 10), wr(3, wc, 0, false, 1000), wr(4, post, 2, false, 10), wr(5, wc, 1, false, 10)},
			want: []string{
				"posted 0->1 ch=0 path=0 send wr=0 bytes=1000 pending=1/1000B orphans=0 ahead=false:0",
				"posted 0->1 ch=0 path=0 send wr=2 bytes=10 pending=2/1010B orphans=0 ahead=true:0",
				"done 0->1 ch=0 path=0 send wr=0 bytes=1000 status=ok lat=2/true pending=1 orphans=0 prev=0",
				"posted 0->1 ch=0 path=0 send wr=4 bytes=10 pending=2/20B orphans=0 ahead=true:2",
				"done 0->1 ch=0 path=0 send wr=2 bytes=10 status=ok lat=3/true pending=1 orphans=0 prev=3",
			},
		},
		{
			name: "a full queue orphans its oldest post",
			cfg:  flowtel.FoldConfig{MaxPending: 1},
			recs: []flowtel.Record{wr(1, post, 0, true, 5), wr(2, post, 1, true, 6)},
			want: []string{
				"posted 0->1 ch=0 path=0 recv wr=1 bytes=5 pending=1/5B orphans=0 ahead=false:0",
				"posted 0->1 ch=0 path=0 recv wr=3 bytes=6 pending=1/6B orphans=1 ahead=false:0",
			},
		},
		{
			name: "a grant closes its wait; older waits lost theirs",
			recs: []flowtel.Record{wr(10, wait, 0, false, 1), wr(20, wait, 1, false, 1), wr(20, wait, 1, false, 1), wr(50, grant, 1, false, 1)},
			want: []string{
				"wait 0->1 ch=0 path=0 send wr=0 from=10",
				"wait 0->1 ch=0 path=0 send wr=2 from=20",
				"waited 0->1 ch=0 path=0 send wr=0 10..10 granted=false",
				"waited 0->1 ch=0 path=0 send wr=2 20..50 granted=true",
			},
		},
		{
			name: "a completed send had its credit",
			recs: []flowtel.Record{wr(1, post, 0, false, 1), wr(2, wait, 0, false, 1), wr(9, wc, 0, false, 1)},
			want: []string{
				"posted 0->1 ch=0 path=0 send wr=0 bytes=1 pending=1/1B orphans=0 ahead=false:0",
				"wait 0->1 ch=0 path=0 send wr=0 from=2",
				"waited 0->1 ch=0 path=0 send wr=0 2..2 granted=false",
				"done 0->1 ch=0 path=0 send wr=0 bytes=1 status=ok lat=8/true pending=0 orphans=0 prev=0",
			},
		},
		{
			name: "a call split in two parts ends with its second end",
			recs: []flowtel.Record{coll(100, begin, 0, 7, 2, 64), coll(105, begin, 0, 7, 2, 64), coll(200, end, 0, 7, 2, 0), coll(220, end, 0, 7, 2, 0),
				coll(230, end, 0, 7, 2, 0)},
			want: []string{
				"call rank=0 seq=7 allreduce begin=100",
				"called rank=0 seq=7 allreduce 100..220 bytes=128 parts=2/2/2 ok complete=true",
			},
		},
		{
			name: "a failed part fails the call",
			recs: []flowtel.Record{coll(1, begin, 3, 1, 1, 8), status(coll(9, end, 3, 1, 1, 8), flowtel.StatusError)},
			want: []string{
				"call rank=3 seq=1 allreduce begin=1",
				"called rank=3 seq=1 allreduce 1..9 bytes=8 parts=1/1/1 error complete=true",
			},
		},
		{
			name:   "finish ends open calls incomplete and reports silent ranks",
			recs:   []flowtel.Record{coll(1, begin, 0, 1, 2, 8), coll(2, begin, 0, 1, 2, 8), coll(5, end, 0, 1, 2, 0), wr(30_000_000, post, 0, false, 1)},
			finish: true,
			want: []string{
				"call rank=0 seq=1 allreduce begin=1",
				"gap comm=0 rank=0 5..30000000 open=false pending=0 calls=1 beats=false",
				"posted 0->1 ch=0 path=0 send wr=0 bytes=1 pending=1/1B orphans=0 ahead=false:0",
				"called rank=0 seq=1 allreduce 1..5 bytes=16 parts=2/1/2 ok complete=false",
			},
		},
		{
			name: "too many open calls end the oldest",
			cfg:  flowtel.FoldConfig{MaxOpenCalls: 1, GapNs: -1},
			recs: []flowtel.Record{coll(1, begin, 0, 1, 1, 8), coll(2, begin, 0, 2, 1, 8), coll(3, end, 0, 1, 1, 8), coll(4, end, 0, 2, 1, 8)},
			want: []string{
				"call rank=0 seq=1 allreduce begin=1",
				"called rank=0 seq=1 allreduce 1..0 bytes=8 parts=1/0/1 ok complete=false",
				"call rank=0 seq=2 allreduce begin=2",
				// seq 1's end is late: counted, not reopened.
				"called rank=0 seq=2 allreduce 2..4 bytes=8 parts=1/1/1 ok complete=true",
			},
		},
		{
			name: "silence with nothing outstanding is no gap",
			recs: []flowtel.Record{wr(1, post, 0, false, 1), wr(2, wc, 0, false, 1), wr(900_000_000, post, 1, false, 1)},
			want: []string{
				"posted 0->1 ch=0 path=0 send wr=0 bytes=1 pending=1/1B orphans=0 ahead=false:0",
				"done 0->1 ch=0 path=0 send wr=0 bytes=1 status=ok lat=1/true pending=0 orphans=0 prev=0",
				"posted 0->1 ch=0 path=0 send wr=2 bytes=1 pending=1/1B orphans=0 ahead=false:0",
			},
		},
		{
			name: "heartbeats keep a waiting rank from a gap; a silence after them is one",
			recs: []flowtel.Record{wr(1, post, 0, false, 1),
				{TsNs: 10_000_000, Kind: flowtel.KindHeartbeat, Peer: -1}, {TsNs: 20_000_000, Kind: flowtel.KindHeartbeat, Peer: -1},
				wr(80_000_000, wc, 0, false, 1)},
			want: []string{
				"posted 0->1 ch=0 path=0 send wr=0 bytes=1 pending=1/1B orphans=0 ahead=false:0",
				"gap comm=0 rank=0 20000000..80000000 open=false pending=1 calls=0 beats=true",
				"done 0->1 ch=0 path=0 send wr=0 bytes=1 status=ok lat=79999999/true pending=0 orphans=0 prev=0",
			},
		},
		{
			name: "path changes and loss pass through",
			recs: []flowtel.Record{{TsNs: 5, Kind: flowtel.KindFailover, Rank: 2, Peer: 3, Path: flowtel.PathBackup},
				{TsNs: 6, Kind: flowtel.KindLost, Rank: 2, Peer: -1, Bytes: 17}},
			want: []string{"failover 2->3 ch=0 path=1 send at 5", "lost rank=2 17 at 6"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var log eventLog
			f := flowtel.NewFold(&log, tc.cfg)
			f.Add(tc.recs)
			if tc.finish {
				f.Finish()
			}
			if !slices.Equal(log.lines, tc.want) {
				t.Errorf("events:\n%s\nwant:\n%s", strings.Join(log.lines, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestFoldStats(t *testing.T) {
	f := flowtel.NewFold(flowtel.NopHandler{}, flowtel.FoldConfig{MaxOpenCalls: 1})
	f.Add([]flowtel.Record{
		wr(1, flowtel.KindWRPost, 0, false, 1),
		wr(2, flowtel.KindWC, 1, false, 1), // orphans wr 0, unmatched itself
		coll(3, flowtel.KindCollBegin, 0, 1, 1, 1),
		coll(4, flowtel.KindCollBegin, 0, 2, 1, 1), // evicts seq 1
		coll(5, flowtel.KindCollEnd, 0, 1, 1, 1),   // late
		{TsNs: 6, Kind: flowtel.KindLost, Bytes: 3},
		{TsNs: 7, Kind: flowtel.Kind(200)},
	})
	want := flowtel.FoldStats{Records: 7, Lost: 3, Unmatched: 1, Orphaned: 1, LateCalls: 1, Evicted: 1, Invalid: 1}
	if got := f.Stats(); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
}

func TestFoldBoundsQPs(t *testing.T) {
	f := flowtel.NewFold(flowtel.NopHandler{}, flowtel.FoldConfig{MaxQPs: 4})
	for qp := range uint32(100) {
		f.AddRecord(&flowtel.Record{TsNs: 1, Kind: flowtel.KindWRPost, Rank: 0, Peer: 1, QP: qp})
	}
	if got := f.Stats().Untracked; got != 96 {
		t.Errorf("untracked %d, want 96", got)
	}
}

func TestFoldAdvanceReportsAnOpenGapOnce(t *testing.T) {
	var log eventLog
	f := flowtel.NewFold(&log, flowtel.FoldConfig{GapNs: 100})
	f.Add([]flowtel.Record{wr(10, flowtel.KindWRPost, 0, false, 1)})
	f.Advance(50) // not yet
	f.Advance(200)
	f.Advance(300) // still the same silence
	f.Add([]flowtel.Record{wr(400, flowtel.KindWC, 0, false, 1)})
	want := []string{
		"posted 0->1 ch=0 path=0 send wr=0 bytes=1 pending=1/1B orphans=0 ahead=false:0",
		"gap comm=0 rank=0 10..200 open=true pending=1 calls=0 beats=false",
		"gap comm=0 rank=0 10..400 open=false pending=1 calls=0 beats=false",
		"done 0->1 ch=0 path=0 send wr=0 bytes=1 status=ok lat=390/true pending=0 orphans=0 prev=0",
	}
	if !slices.Equal(log.lines, want) {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(log.lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestWaitSpans(t *testing.T) {
	w := flowtel.NewWaitSpans(0)
	wait := func(qp uint32, wr uint64, from, to int64, granted bool) *flowtel.CreditWait {
		return &flowtel.CreditWait{QP: qp, WrID: wr, FromNs: from, ToNs: to, Granted: granted}
	}
	steps := []struct {
		name      string
		began     *flowtel.CreditWait
		ended     *flowtel.CreditWait
		wantAdded int64
		wantOpen  bool
	}{
		{name: "a wait begins", began: wait(1, 0, 10, 0, false), wantOpen: true},
		{name: "an overlapping one on another QP", began: wait(2, 0, 20, 0, false), wantOpen: true},
		{name: "the later one ends first", ended: wait(2, 0, 20, 30, true), wantAdded: 10, wantOpen: true},
		{name: "the earlier one covers it", ended: wait(1, 0, 10, 40, true), wantAdded: 20},
		{name: "a lost grant adds nothing", began: wait(1, 2, 50, 0, false), ended: wait(1, 2, 50, 50, false)},
		{name: "a disjoint wait adds its length", began: wait(1, 4, 60, 0, false), ended: wait(1, 4, 60, 65, true), wantAdded: 5},
	}
	for _, st := range steps {
		if st.began != nil {
			w.Began(st.began)
		}
		var added int64
		if st.ended != nil {
			added = w.Ended(st.ended)
		}
		if _, open := w.Open(); added != st.wantAdded || open != st.wantOpen {
			t.Errorf("%s: added %d open %v, want %d %v", st.name, added, open, st.wantAdded, st.wantOpen)
		}
	}
	if got := w.Within(0, 100); got != 35 {
		t.Errorf("Within(0, 100) = %d, want 35 (10..40 and 60..65)", got)
	}
	if got := w.Within(35, 62); got != 7 {
		t.Errorf("Within(35, 62) = %d, want 7", got)
	}
}

func TestCallBandwidth(t *testing.T) {
	c := flowtel.Call{Op: flowtel.OpAllReduce, BeginNs: 1000, EndNs: 2000, Bytes: 4000, Begun: 1, Ended: 1, Parts: 1, Complete: true}
	if got := c.AlgBW(); got != 4e9 {
		t.Errorf("AlgBW %g, want 4e9", got)
	}
	if got := c.BusBW(4); got != 6e9 {
		t.Errorf("BusBW(4) %g, want 6e9", got)
	}
	c.Status = flowtel.StatusError
	if got := c.AlgBW(); got != 0 {
		t.Errorf("a failed call's AlgBW %g, want 0", got)
	}
}

// BenchmarkFold is the cost of folding a record: one QP's posts and
// completions.
func BenchmarkFold(b *testing.B) {
	f := flowtel.NewFold(flowtel.NopHandler{}, flowtel.FoldConfig{})
	recs := make([]flowtel.Record, 0, 1024)
	for i := range uint64(256) {
		recs = append(recs, wr(int64(4*i+1), flowtel.KindWRPost, i, false, 4096), wr(int64(4*i+2), flowtel.KindWRPost, i, true, 4096),
			wr(int64(4*i+3), flowtel.KindWC, i, false, 4096), wr(int64(4*i+4), flowtel.KindWC, i, true, 4096))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		f.Add(recs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

// BenchmarkFoldCalls is the cost of folding the records of small calls: a
// coll_begin, two posts and their completions, and a coll_end a call, as a
// rank of two writes for an all-reduce by mailbox.
func BenchmarkFoldCalls(b *testing.B) {
	f := flowtel.NewFold(flowtel.NopHandler{}, flowtel.FoldConfig{GapNs: -1})
	const calls = 1024
	recs := make([]flowtel.Record, 0, 6*calls)
	for i := range uint64(calls) {
		ts := int64(10 * i)
		recs = append(recs, coll(ts, flowtel.KindCollBegin, 0, i+1, 1, 1024),
			wr(ts+1, flowtel.KindWRPost, i, false, 1024), wr(ts+1, flowtel.KindWRPost, i, true, 1024),
			wr(ts+2, flowtel.KindWC, i, false, 1024), wr(ts+2, flowtel.KindWC, i, true, 1024),
			coll(ts+3, flowtel.KindCollEnd, 0, i+1, 1, 1024))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := range b.N {
		// Later calls and WRs each round, as a rank's stream goes on.
		for k := range recs {
			if recs[k].CollSeq != 0 {
				recs[k].CollSeq += calls
			}
			if recs[k].WrID != 0 || recs[k].Kind == flowtel.KindWRPost || recs[k].Kind == flowtel.KindWC {
				recs[k].WrID += 2 * calls
			}
			recs[k].TsNs += 10 * calls
		}
		_ = n
		f.Add(recs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}
