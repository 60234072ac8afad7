package collective

import (
	"testing"
	"time"

	"github.com/vccl-go/vccl/internal/benchhook"
)

// TestStore: a job that rendezvoused through a store hands it out as a
// Store that every rank reads and writes; communicators without one
// return a nil interface, not a typed nil a caller would dial through.
func TestStore(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	if st := newLocal(t, 2)[0].Store(); st != nil {
		t.Errorf("NewLocal's Store() = %v, want nil", st)
	}
	comms := newStoreJob(t, ctx, 2)
	if err := comms[0].Store().Set(ctx, "user/greeting", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	got, err := comms[1].Store().Get(ctx, "user/greeting")
	if err != nil || string(got) != "hello" {
		t.Fatalf("rank 1 read %q, %v; want rank 0's hello", got, err)
	}
}

// TestBenchHookSetTelemetry: the benchmark's switch reaches a
// communicator's recorders through the hook package collective sets, and
// refuses what it cannot switch.
func TestBenchHookSetTelemetry(t *testing.T) {
	on := newLocal(t, 1, WithTelemetry(true))[0]
	off := newLocal(t, 1, WithTelemetry(false))[0]
	if !on.engines[0].rec.Enabled() {
		t.Fatal("a communicator with telemetry on does not record")
	}
	for _, tc := range []struct {
		name    string
		comm    any
		wantErr bool
	}{
		{"telemetry on", on, false},
		{"telemetry off", off, true},
		{"not a communicator", "comm", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := benchhook.SetTelemetry(tc.comm, false)
			if (err != nil) != tc.wantErr {
				t.Fatalf("SetTelemetry(false): %v, want error %v", err, tc.wantErr)
			}
			if err == nil && on.engines[0].rec.Enabled() {
				t.Error("the recorder is not paused")
			}
		})
	}
}

type (
	namedI8  int8
	namedU8  uint8
	namedF32 float32
	namedI32 int32
	namedU32 uint32
	namedF64 float64
	namedI64 int64
	namedU64 uint64
)

// TestDatatypeOfNamedTypes: a slice of a named type over a basic one maps
// to its underlying datatype, told apart by size, sign and fraction.
func TestDatatypeOfNamedTypes(t *testing.T) {
	for _, tc := range []struct {
		got, want Datatype
	}{
		{DatatypeOf[namedI8](), Int8},
		{DatatypeOf[namedU8](), Uint8},
		{DatatypeOf[namedF32](), Float32},
		{DatatypeOf[namedI32](), Int32},
		{DatatypeOf[namedU32](), Uint32},
		{DatatypeOf[namedF64](), Float64},
		{DatatypeOf[namedI64](), Int64},
		{DatatypeOf[namedU64](), Uint64},
	} {
		if tc.got != tc.want {
			t.Errorf("DatatypeOf = %v, want %v", tc.got, tc.want)
		}
	}
}
