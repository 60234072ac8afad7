package transport

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vccl-go/vccl/flowtel"
)

// stale fills ring's slots with records of every field set, as a previous
// lap leaves them, and drains them. Any kind but 0xff, which marks a slot
// holding an Exchange entry.
func stale(t *testing.T, ring *flowtel.Ring) {
	t.Helper()
	junk := flowtel.Record{TsNs: -1, CollSeq: ^uint64(0), WrID: ^uint64(0), Bytes: ^uint64(0), Rank: -1, Peer: -1,
		QP: ^uint32(0), Comm: ^uint32(0), Depth: ^uint32(0), Step: ^uint32(0), Channel: ^uint16(0),
		Kind: 0xfe, Status: 0xff, Op: 0xff, Algo: 0xff, Dtype: 0xff, Path: 0xff}
	for range ring.Cap() {
		if !ring.Push(&junk) {
			t.Fatal("stale: ring full")
		}
	}
	if n := ring.Drain(make([]flowtel.Record, ring.Cap())); n != ring.Cap() {
		t.Fatalf("stale: drained %d of %d", n, ring.Cap())
	}
}

// The core writes its records in place over the ring's previous lap: every
// field must be its own, none left from the record the slot held.
func TestCoreRecordsOverwriteSlots(t *testing.T) {
	ring, err := flowtel.NewRing(4)
	if err != nil {
		t.Fatal(err)
	}
	stale(t, ring)
	cfg := Config{Rank: 1, Peer: 2, QPID: 3, Comm: 4, Channel: 5, Path: 1, Recorder: flowtel.NewRecorder(ring, nil)}
	c := NewCore("test", cfg)
	wr := WR{Buf: make([]byte, 100), Tag: Tag{CollSeq: 6, Step: 7, Op: 8, Algo: 9, Dtype: 10}}
	id := c.Posted(OpSend, &wr)
	c.Complete(WC{Status: flowtel.StatusOK, Bytes: 100, TsNs: 12345}, id, wr.Tag)
	if n := c.Poll(make([]WC, 1)); n != 1 {
		t.Fatalf("polled %d completions, want 1", n)
	}
	got := make([]flowtel.Record, 4)
	if n := ring.Drain(got); n != 2 {
		t.Fatalf("drained %d records, want 2", n)
	}
	want := flowtel.Record{CollSeq: 6, WrID: id, Bytes: 100, Rank: 1, Peer: 2, QP: 3, Comm: 4, Depth: 1, Step: 7,
		Channel: 5, Kind: flowtel.KindWRPost, Status: flowtel.StatusOK, Op: 8, Algo: 9, Dtype: 10, Path: 1}
	if got[0].TsNs <= 0 {
		t.Errorf("post stamped %d, want the time of the post", got[0].TsNs)
	}
	want.TsNs = got[0].TsNs
	if got[0] != want {
		t.Errorf("post record\n got %+v\nwant %+v", got[0], want)
	}
	want.TsNs, want.Kind, want.Depth = 12345, flowtel.KindWC, 0
	if got[1] != want {
		t.Errorf("completion record\n got %+v\nwant %+v", got[1], want)
	}
}

// A completion is stamped only when telemetry would record it: with the
// recorder paused (telemetry off) the WC's time stays 0, no clock read.
func TestCompletionStampedOnlyWithTelemetry(t *testing.T) {
	for _, paused := range []bool{false, true} {
		ring, err := flowtel.NewRing(8)
		if err != nil {
			t.Fatal(err)
		}
		rec := flowtel.NewRecorder(ring, nil)
		rec.SetPaused(paused)
		c := NewCore("test", Config{Recorder: rec})
		wr := WR{Buf: make([]byte, 10)}
		id := c.Posted(OpSend, &wr)
		c.Complete(WC{Status: flowtel.StatusOK, Bytes: 10}, id, wr.Tag)
		wcs := make([]WC, 1)
		if n := c.Poll(wcs); n != 1 {
			t.Fatalf("paused %v: polled %d completions, want 1", paused, n)
		}
		if stamped := wcs[0].TsNs != 0; stamped == paused {
			t.Errorf("paused %v: completion time %d", paused, wcs[0].TsNs)
		}
		if n, want := ring.Drain(make([]flowtel.Record, 8)), map[bool]int{false: 2, true: 0}[paused]; n != want {
			t.Errorf("paused %v: %d records, want %d", paused, n, want)
		}
	}
}

// Admit refuses what no backend may take, before accounting it: a refused
// WR leaves the QP's depth and its sequence of ids alone.
func TestAdmitRefusesBeforeAccounting(t *testing.T) {
	region := make([]byte, 64)
	mr, err := Register(region[:32])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		wr     WR
		closed bool
		want   error  // errors.Is target, or nil
		substr string // in the message, when want is nil and an error is due
	}{
		{"accepted", WR{Buf: region[:8]}, false, nil, ""},
		{"accepted in region", WR{Buf: region[4:8], MR: mr}, false, nil, ""},
		{"closed", WR{Buf: region[:8]}, true, ErrClosed, ""},
		{"outside region", WR{Buf: region[30:40], MR: mr}, false, ErrMRMismatch, ""},
		{"tee length", WR{Buf: region[:8], Tee: region[8:12]}, false, nil, "tee of 4 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := NewCore("test", Config{})
			id, err := c.Admit(OpSend, &tc.wr, tc.closed)
			refused := tc.want != nil || tc.substr != ""
			switch {
			case !refused && err != nil:
				t.Fatalf("Admit: %v, want the WR accepted", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("Admit: %v, want %v", err, tc.want)
			case tc.substr != "" && (err == nil || !strings.Contains(err.Error(), tc.substr)):
				t.Fatalf("Admit: %v, want an error saying %q", err, tc.substr)
			}
			wantDepth := 1
			if refused {
				wantDepth = 0
			}
			if got := c.Outstanding(); got != wantDepth {
				t.Fatalf("outstanding %d after Admit, want %d", got, wantDepth)
			}
			if next := c.Posted(OpSend, &WR{}); refused && next != flowtel.WRID(0, false) {
				t.Fatalf("the next send got id %d, want the first send's: the refused WR took one", next)
			} else if !refused && next == id {
				t.Fatalf("the next send got id %d, the accepted WR's", next)
			}
		})
	}
}

// Fail queues a completion with the WR's id and the status and error given.
func TestFailCompletes(t *testing.T) {
	c := NewCore("test", Config{Notifier: NewNotifier()})
	wr := WR{ID: 42, Buf: make([]byte, 8)}
	id := c.Posted(OpRecv, &wr)
	c.Fail(OpRecv, &wr, id, flowtel.StatusFlushed, ErrClosed)
	wcs := make([]WC, 2)
	if n := c.Poll(wcs); n != 1 {
		t.Fatalf("polled %d completions, want 1", n)
	}
	if wc := wcs[0]; wc.ID != 42 || wc.Op != OpRecv || wc.Status != flowtel.StatusFlushed || !errors.Is(wc.Err, ErrClosed) || wc.Bytes != 0 {
		t.Fatalf("completion %+v, want WR 42, a receive, flushed with ErrClosed", wc)
	}
}

// tickSource is a clock that moves on by a microsecond at every reading,
// so that a test can count readings from the stamps.
type tickSource struct{ ns atomic.Int64 }

func (s *tickSource) Nanotime() int64 { return s.ns.Add(1000) }

// Core.Stamp reads the clock once for the events that share it, and not
// at all with telemetry paused; GrantedAt stamps the grant with it.
func TestCoreStampSharesOneReading(t *testing.T) {
	ring, err := flowtel.NewRing(8)
	if err != nil {
		t.Fatal(err)
	}
	src := &tickSource{}
	rec := flowtel.NewRecorder(ring, flowtel.NewClockFrom(src, 0, 0))
	c := NewCore("test", Config{Recorder: rec})
	wr := WR{Buf: make([]byte, 10)}
	id := c.Posted(OpSend, &wr) // reads the clock: 1000
	var ts int64
	if a, b := c.Stamp(&ts), c.Stamp(&ts); a != 2000 || b != a || ts != a {
		t.Fatalf("stamps %d, %d (kept %d), want one reading, 2000", a, b, ts)
	}
	c.GrantedAt(id, wr.Tag, len(wr.Buf), ts)
	c.Complete(WC{Bytes: 10, TsNs: ts}, id, wr.Tag)
	if n := c.Poll(make([]WC, 1)); n != 1 {
		t.Fatalf("polled %d completions, want 1", n)
	}
	got := make([]flowtel.Record, 8)
	if n := ring.Drain(got); n != 3 || got[1].Kind != flowtel.KindCreditGrant || got[1].TsNs != 2000 || got[2].Kind != flowtel.KindWC || got[2].TsNs != 2000 {
		t.Fatalf("drained %d records %+v, want a post, then a grant and a completion stamped 2000", n, got[:n])
	}
	if now := src.ns.Load(); now != 2000 {
		t.Errorf("the clock was read %d times, want 2", now/1000)
	}
	rec.SetPaused(true)
	ts = 0
	if c.Stamp(&ts) != 0 || src.ns.Load() != 2000 {
		t.Errorf("paused: stamp %d, clock at %d; want 0 and no reading", ts, src.ns.Load())
	}
}
