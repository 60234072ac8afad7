package flowtel_test

import (
	"fmt"
	"testing"

	"github.com/vccl-go/vccl/flowtel"
)

func TestJobIDRoundTrip(t *testing.T) {
	for _, id := range []uint32{0, 1, 0xdeadbeef, 0xffffffff, 0x0000abcd} {
		s := flowtel.JobID(id)
		if s != fmt.Sprintf("%08x", id) {
			t.Errorf("JobID(%#x) = %q, want %08x", id, s, id)
		}
		got, err := flowtel.ParseJobID(s)
		if err != nil || got != id {
			t.Errorf("ParseJobID(%q) = %#x, %v; want %#x", s, got, err, id)
		}
	}
	for _, bad := range []string{"", "abc", "0x123456", "ABCDEFG0", "123456789", "+1234567", "-1234567"} {
		if _, err := flowtel.ParseJobID(bad); err == nil {
			t.Errorf("ParseJobID(%q) succeeded", bad)
		}
	}
}

func FuzzParseJobID(f *testing.F) {
	f.Add("deadbeef")
	f.Add("0000000g")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := flowtel.ParseJobID(s)
		if err != nil {
			return
		}
		// Upper-case digits parse too; printing gives the one lower-case form.
		if back, err := flowtel.ParseJobID(flowtel.JobID(id)); err != nil || back != id {
			t.Fatalf("%q: %#x does not round-trip: %#x, %v", s, id, back, err)
		}
	})
}

// A job's id, as trace file names, metrics, spans and reports print it: its
// world communicator's 32-bit id (Record.Comm, collective.Comm.ID).
func ExampleJobID() {
	fmt.Println(flowtel.JobID(0x2a))
	id, err := flowtel.ParseJobID("0000002a")
	fmt.Println(id, err)
	// Output:
	// 0000002a
	// 42 <nil>
}
