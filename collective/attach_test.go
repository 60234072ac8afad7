package collective

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/flowtel/flowteltest"
)

// registerForTest registers a for the rest of the test. The package's tests
// do not run in parallel, so no other test's communicators meet it.
func registerForTest(t *testing.T, name string, a TelemetryAttacher) {
	t.Helper()
	RegisterTelemetry(name, a)
	t.Cleanup(func() {
		attachersMu.Lock()
		delete(attachers, name)
		attachersMu.Unlock()
	})
}

// attachLog is what a test attacher saw: the communicators it attached to
// and, per rank, its memory sink and whether that sink had been shut down
// when detach ran.
type attachLog struct {
	mu             sync.Mutex
	comms          []*Comm
	sinks          map[int]*flowteltest.MemorySink
	shutAtDetach   map[int]int
	detached       int
	collectorStats map[int]flowtel.CollectorStats
}

func newAttachLog() *attachLog {
	return &attachLog{sinks: map[int]*flowteltest.MemorySink{}, shutAtDetach: map[int]int{}, collectorStats: map[int]flowtel.CollectorStats{}}
}

// attacher adds a memory sink to the communicator's collector, as an
// exporter would, and checks that the communicator is set up.
func (l *attachLog) attacher(t *testing.T) TelemetryAttacher {
	return func(ctx context.Context, c *Comm) (func(context.Context) error, error) {
		if c.UID() == "" || c.ID() == 0 || c.Clock() == nil || c.Size() < 1 || c.Collector() == nil {
			t.Errorf("attacher ran on a communicator not set up: uid %q id %d clock %v size %d collector %v",
				c.UID(), c.ID(), c.Clock(), c.Size(), c.Collector())
		}
		if c.Size() > 1 && c.opts.master != "" && c.Store() == nil {
			t.Errorf("rank %d: attacher ran without the rendezvous store", c.Rank())
		}
		sink := flowteltest.NewMemorySink()
		c.Collector().AddSink(sink)
		l.mu.Lock()
		l.comms = append(l.comms, c)
		l.sinks[c.Rank()] = sink
		l.collectorStats[c.Rank()] = c.Collector().Stats()
		l.mu.Unlock()
		return func(context.Context) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.detached++
			l.shutAtDetach[c.Rank()] = sink.ShutdownCalls()
			return nil
		}, nil
	}
}

// Every rank of NewLocal runs the attacher once, before its collector has
// drained anything; the sink it adds sees the first collective's records;
// Close detaches after the collector has shut the sink down.
func TestAttachersRunOnNewLocal(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	l := newAttachLog()
	registerForTest(t, "test", l.attacher(t))
	comms, err := NewLocal(ctx, 2, WithTelemetry(true))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.comms) != 2 {
		t.Fatalf("attacher ran %d times for 2 ranks", len(l.comms))
	}
	for r, st := range l.collectorStats {
		if st.Drained != 0 {
			t.Errorf("rank %d: the collector had drained %d records before the attacher ran", r, st.Drained)
		}
	}
	if err := allReduceOnAll(ctx, comms, 1024); err != nil {
		t.Fatal(err)
	}
	for _, c := range comms {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if l.detached != 2 {
		t.Errorf("detached %d times, want 2", l.detached)
	}
	for r, sink := range l.sinks {
		if l.shutAtDetach[r] != 1 {
			t.Errorf("rank %d: detach ran with the sink shut down %d times, want after the collector's shutdown", r, l.shutAtDetach[r])
		}
		begins := 0
		for _, rec := range sink.Records() {
			if rec.Kind == flowtel.KindCollBegin && rec.CollSeq == 1 {
				begins++
			}
		}
		if begins == 0 {
			t.Errorf("rank %d: the sink missed the first collective's begin", r)
		}
	}
	// Closing again detaches nothing twice.
	comms[0].Close()
	comms[0].Abort()
	if l.detached != 2 {
		t.Errorf("detached %d times after a second Close and an Abort, want 2", l.detached)
	}
}

// Ranks that meet through the rendezvous store run it after the store is
// up; a child of Split runs none (its records reach the parent's sinks).
func TestAttachersRunOnNewNotSplit(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	l := newAttachLog()
	registerForTest(t, "test", l.attacher(t))
	comms := newStoreJob(t, ctx, 2, WithTelemetry(true), WithTransport("tcp"))
	if len(l.comms) != 2 {
		t.Fatalf("attacher ran %d times for 2 ranks", len(l.comms))
	}
	children := make([]*Comm, 2)
	if err := runOnAll(comms, func(c *Comm) (err error) {
		children[c.Rank()], err = c.Split(ctx, 0, c.Rank())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(l.comms) != 2 {
		t.Errorf("attacher ran %d times after Split, want 2 (none for the children)", len(l.comms))
	}
	if err := allReduceOnAll(ctx, children, 16); err != nil {
		t.Fatal(err)
	}
	for _, c := range children {
		c.Close()
	}
	for _, c := range comms {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for r, sink := range l.sinks {
		child := 0
		for _, rec := range sink.Records() {
			if rec.Kind == flowtel.KindCollEnd && rec.Comm == children[r].ID() {
				child++
			}
		}
		if child == 0 {
			t.Errorf("rank %d: the parent's sink got none of the child's collectives", r)
		}
	}
}

// Telemetry off, or WithTelemetryAttachers(false): nothing runs.
func TestAttachersSkipped(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	l := newAttachLog()
	registerForTest(t, "test", l.attacher(t))
	for _, opts := range [][]Option{
		{WithTelemetry(false)},
		{WithTelemetry(true), WithTelemetryAttachers(false)},
	} {
		comms, err := NewLocal(ctx, 2, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range comms {
			c.Close()
		}
	}
	c, err := New(ctx, append([]Option{WithRank(0, 1)}, WithTelemetry(false))...)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if len(l.comms) != 0 {
		t.Errorf("attacher ran %d times", len(l.comms))
	}
}

// A failing attacher fails New with an error naming it; the attachers that
// ran before it (in name order) are detached.
func TestAttacherErrorFailsNew(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	l := newAttachLog()
	registerForTest(t, "a-good", l.attacher(t))
	registerForTest(t, "b-bad", func(context.Context, *Comm) (func(context.Context) error, error) {
		return nil, errors.New("no such directory")
	})
	_, err := New(ctx, WithRank(0, 1), WithTelemetry(true))
	if err == nil || !strings.Contains(err.Error(), `telemetry attacher "b-bad"`) || !strings.Contains(err.Error(), "no such directory") {
		t.Fatalf("New: %v, want the b-bad attacher's error", err)
	}
	if len(l.comms) != 1 || l.detached != 1 {
		t.Errorf("a-good attached %d times and detached %d, want 1 and 1", len(l.comms), l.detached)
	}
	if _, err := NewLocal(ctx, 2, WithTelemetry(true)); err == nil || !strings.Contains(err.Error(), `"b-bad"`) {
		t.Fatalf("NewLocal: %v, want the b-bad attacher's error", err)
	}
	if len(l.comms) != 3 || l.detached != 3 {
		t.Errorf("a-good attached %d times and detached %d, want 3 and 3", len(l.comms), l.detached)
	}
}

func TestRegisterTelemetryTwicePanics(t *testing.T) {
	registerForTest(t, "once", func(context.Context, *Comm) (func(context.Context) error, error) { return nil, nil })
	defer func() {
		if recover() == nil {
			t.Error("a second RegisterTelemetry of the same name did not panic")
		}
	}()
	RegisterTelemetry("once", func(context.Context, *Comm) (func(context.Context) error, error) { return nil, nil })
}

func TestTelemetryAttachersSorted(t *testing.T) {
	noop := func(context.Context, *Comm) (func(context.Context) error, error) { return nil, nil }
	registerForTest(t, "zz", noop)
	registerForTest(t, "aa", noop)
	got := TelemetryAttachers()
	if !slices.IsSorted(got) || !slices.Contains(got, "aa") || !slices.Contains(got, "zz") {
		t.Errorf("TelemetryAttachers() = %q, want both names, sorted", got)
	}
}

// An attacher that fails on rank 0 alone, after every rank has joined,
// fails rank 0's New with its error, and the other ranks' first call with
// the same cause, named as rank 0's, not as a peer that vanished.
func TestAttacherErrorReachesPeers(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	registerForTest(t, "bad-on-0", func(_ context.Context, c *Comm) (func(context.Context) error, error) {
		if c.Rank() == 0 {
			return nil, errors.New("address 127.0.0.1:9100 already in use")
		}
		return nil, nil
	})
	const n = 3
	addr := freeAddr(t)
	_, errs := eachRank(n, func(r int) (*Comm, error) {
		c, err := New(ctx, WithRank(r, n), WithMaster(addr), WithTelemetry(true))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return nil, c.AllReduce(ctx, Buf([]float32{1}), Buf(make([]float32, 1)), Sum)
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), `telemetry attacher "bad-on-0": address 127.0.0.1:9100 already in use`) {
		t.Fatalf("rank 0: %v, want its attacher's error", errs[0])
	}
	for r := 1; r < n; r++ {
		var pf *PeerFailedError
		if !errors.As(errs[r], &pf) || pf.Rank != 0 || !strings.Contains(errs[r].Error(), "already in use") {
			t.Errorf("rank %d: %v, want rank 0's failure with its cause", r, errs[r])
		}
	}
}
