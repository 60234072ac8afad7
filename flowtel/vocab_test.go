package flowtel

import (
	"strings"
	"testing"
)

// Every named code parses back from its String, and a code with no name
// Every named code parses back from its String, and a code with no name
// prints as what(code) and does not parse.
func TestCodesRoundTrip(t *testing.T) {
	roundTrip(t, ParseOp, []Op{OpAllReduce, OpBarrier}, "op(200)")
	roundTrip(t, ParseAlgorithm, []Algorithm{AlgoAuto, AlgoDirect}, "algo(200)")
	roundTrip(t, ParseDatatype, []Datatype{Int8, Float64}, "datatype(200)")
	roundTrip(t, ParseKind, []Kind{KindCollBegin, KindHeartbeat}, "kind(200)")
	for _, tc := range []struct{ got, want string }{
		{Op(0).String(), "op(0)"}, {Datatype(0).String(), "datatype(0)"}, {Kind(0).String(), "invalid"},
		{PathBackup.String(), "backup"}, {Path(7).String(), "path(7)"},
		{DirRecv.String(), "recv"}, {Dir(3).String(), "dir(3)"},
		{StatusRetransmitted.String(), "retransmitted"}, {Status(9).String(), "status(9)"},
	} {
		if tc.got != tc.want {
			t.Errorf("String %q, want %q", tc.got, tc.want)
		}
	}
	for _, tc := range []struct {
		s    string
		want uint8
	}{{"", uint8(AlgoAuto)}, {"recursive-doubling", uint8(AlgoRecursiveDoubling)}, {"bf16", uint8(BFloat16)}} {
		a, aerr := ParseAlgorithm(tc.s)
		d, derr := ParseDatatype(tc.s)
		if (aerr != nil || uint8(a) != tc.want) && (derr != nil || uint8(d) != tc.want) {
			t.Errorf("alias %q parses to algorithm %v (%v), datatype %v (%v); want code %d", tc.s, a, aerr, d, derr, tc.want)
		}
	}
	if _, err := ParseKind("invalid"); err == nil {
		t.Error(`ParseKind("invalid") succeeded; the zero kind is not a name to parse`)
	}
	if _, err := ParseDatatype("float128"); err == nil || !strings.Contains(err.Error(), "bfloat16") {
		t.Errorf(`ParseDatatype("float128"): %v, want an error listing the datatypes`, err)
	}
}

func roundTrip[T interface {
	~uint8
	String() string
}](t *testing.T, parse func(string) (T, error), known []T, unknown string) {
	t.Helper()
	for _, c := range known {
		if got, err := parse(c.String()); err != nil || got != c {
			t.Errorf("code %d prints %q, which parses to %d (%v)", c, c.String(), got, err)
		}
	}
	if got := T(200).String(); got != unknown {
		t.Errorf("code 200 prints %q, want %q", got, unknown)
	}
	if _, err := parse(unknown); err == nil {
		t.Errorf("%q parsed as a code", unknown)
	}
}
