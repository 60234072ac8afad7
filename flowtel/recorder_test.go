package flowtel_test

import (
	"strings"
	"testing"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/flowtel/flowteltest"
)

// drainAll returns every record waiting in ring.
func drainAll(ring *flowtel.Ring) []flowtel.Record {
	dst := make([]flowtel.Record, ring.Cap())
	return dst[:ring.Drain(dst)]
}

// Inside a pass, unstamped records share the time read at the first of
// them (or the one the caller gave); outside, each is stamped when
// written; a record the caller stamped keeps its time either way.
func TestRecorderPass(t *testing.T) {
	fc := flowteltest.NewFakeClock(1000)
	ring, _ := flowtel.NewRing(64)
	r := flowtel.NewRecorder(ring, flowtel.NewClockFrom(fc, 5, 0))
	rec := func() { r.Record(&flowtel.Record{Kind: flowtel.KindWRPost}) }

	rec() // outside a pass: now
	fc.Advance(10)
	r.BeginPass(0)
	fc.Advance(10) // the pass's first record reads the clock, not BeginPass
	rec()
	fc.Advance(10)
	rec()
	r.Record(&flowtel.Record{Kind: flowtel.KindWC, TsNs: 7})
	r.EndPass()
	fc.Advance(10)
	rec() // after the pass: now again
	r.BeginPass(2000)
	fc.Advance(10)
	rec() // the caller's time
	r.EndPass()

	var got []int64
	for _, x := range drainAll(ring) {
		got = append(got, x.TsNs)
	}
	want := []int64{1005, 1025, 1025, 7, 1045, 2000}
	if len(got) != len(want) {
		t.Fatalf("stamps %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("stamps %v, want %v", got, want)
		}
	}
}

// Inside a pass, records written in place and committed are published at
// EndPass, all at once and in the order reserved; a record pushed inside
// the pass publishes those before it and lands after them, never over a
// reserved slot.
func TestRecorderPassPublishesAtEnd(t *testing.T) {
	ring, _ := flowtel.NewRing(16)
	r := flowtel.NewRecorder(ring, nil)
	put := func(id uint64) {
		x := r.Reserve()
		*x = flowtel.Record{TsNs: 1, Kind: flowtel.KindWRPost, WrID: id}
		r.Commit()
	}
	r.BeginPass(1)
	put(1)
	put(2)
	if n := ring.Len(); n != 0 {
		t.Fatalf("%d records published inside the pass, want none before EndPass", n)
	}
	r.Record(&flowtel.Record{TsNs: 1, Kind: flowtel.KindWC, WrID: 3})
	if n := ring.Len(); n != 3 {
		t.Fatalf("after a push inside the pass %d records published, want 3", n)
	}
	put(4)
	if n := ring.Len(); n != 3 {
		t.Fatalf("%d records published, want 3 until EndPass", n)
	}
	r.EndPass()
	got := drainAll(ring)
	if len(got) != 4 {
		t.Fatalf("drained %d records, want 4", len(got))
	}
	for i, x := range got {
		if x.WrID != uint64(i+1) {
			t.Fatalf("record %d is WR %d, want %d: %v", i, x.WrID, i+1, got)
		}
	}
	put(5) // outside a pass: at once
	if n := ring.Len(); n != 1 {
		t.Fatalf("outside a pass %d records published, want 1", n)
	}
}

// A nil recorder is the disabled one: passes are no-ops and At passes the
// reading through.
func TestRecorderNilPass(t *testing.T) {
	var r *flowtel.Recorder
	r.BeginPass(5)
	r.Record(&flowtel.Record{})
	r.EndPass()
	if got := r.At(42); got != 42 {
		t.Errorf("nil recorder At(42) = %d", got)
	}
}

// At puts a monotonic reading on the clock's time base; a clock with its
// own time source reads that instead.
func TestClockAt(t *testing.T) {
	ring, _ := flowtel.NewRing(2)
	if got := flowtel.NewRecorder(ring, flowtel.NewClock(100, 0)).At(1000); got != 1100 {
		t.Errorf("offset clock At(1000) = %d, want 1100", got)
	}
	if got := flowtel.NewRecorder(ring, nil).At(1000); got != 1000 {
		t.Errorf("host clock At(1000) = %d, want 1000", got)
	}
	fc := flowteltest.NewFakeClock(50)
	if got := flowtel.NewClockFrom(fc, 1, 0).At(1000); got != 51 {
		t.Errorf("fake clock At(1000) = %d, want its own time 51", got)
	}
}

// A paused recorder keeps nothing and says so; resumed, it records again.
func TestRecorderPaused(t *testing.T) {
	ring, _ := flowtel.NewRing(8)
	r := flowtel.NewRecorder(ring, nil)
	r.SetPaused(true)
	r.Record(&flowtel.Record{Kind: flowtel.KindWRPost, TsNs: 1})
	if r.Enabled() || ring.Len() != 0 {
		t.Fatalf("paused: Enabled %v, %d records kept", r.Enabled(), ring.Len())
	}
	r.SetPaused(false)
	r.Record(&flowtel.Record{Kind: flowtel.KindWRPost, TsNs: 2})
	if got := drainAll(ring); !r.Enabled() || len(got) != 1 || got[0].TsNs != 2 {
		t.Fatalf("resumed: Enabled %v, records %v", r.Enabled(), got)
	}
	var nilRec *flowtel.Recorder
	nilRec.SetPaused(false)
	if nilRec.Enabled() {
		t.Error("a nil recorder is enabled")
	}
}

// ParseEnabled takes the values VCCL_TELEMETRY documents and names the
// variable for any other.
func TestParseEnabled(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    bool
		wantErr bool
	}{
		{"", false, false}, {"1", true, false}, {"true", true, false}, {" On ", true, false}, {"yes", true, false},
		{"0", false, false}, {"off", false, false}, {"no", false, false}, {"maybe", false, true},
	} {
		got, err := flowtel.ParseEnabled(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseEnabled(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), flowtel.EnvTelemetry) {
			t.Errorf("ParseEnabled(%q) error %q does not name %s", tc.in, err, flowtel.EnvTelemetry)
		}
	}
}

func TestParseClockSource(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    flowtel.ClockSource
		wantErr bool
	}{
		{"", flowtel.ClockAuto, false}, {"tsc", flowtel.ClockAuto, false},
		{"monotonic", flowtel.ClockMonotonic, false}, {"hpet", flowtel.ClockAuto, true},
	} {
		got, err := flowtel.ParseClockSource(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want || (err != nil && !strings.Contains(err.Error(), flowtel.EnvClock)) {
			t.Errorf("ParseClockSource(%q) = %v, %v; want %v, error %v naming %s", tc.in, got, err, tc.want, tc.wantErr, flowtel.EnvClock)
		}
	}
}
