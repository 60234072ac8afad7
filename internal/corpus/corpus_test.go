package corpus

import "testing"

func TestJudge(t *testing.T) {
	l := Label{Expect: []Expect{
		{Kinds: []string{"backpressure", "slow_link"}, Rank: 2, Peer: 3},
		{Kind: "dead_rank", Rank: 1, Peer: -1},
	}}
	tests := []struct {
		name               string
		found              []Found
		ok                 bool
		missed, wrong, bad int
	}{
		{"both named", []Found{{"slow_link", 2, 3}, {"dead_rank", 1, -1}}, true, 0, 0, 0},
		{"one missed", []Found{{"backpressure", 2, 3}}, false, 1, 0, 0},
		{"a victim named", []Found{{"slow_link", 2, 3}, {"dead_rank", 1, -1}, {"backpressure", 1, 2}}, false, 0, 0, 1},
		{"the culprit, another kind", []Found{{"stall", 2, 3}, {"dead_rank", 1, -1}}, false, 1, 1, 0},
	}
	for _, tc := range tests {
		s := Judge(l, tc.found)
		if s.OK() != tc.ok || len(s.Missed(l)) != tc.missed || len(s.WrongKind) != tc.wrong || len(s.Extra) != tc.bad {
			t.Errorf("%s: ok %v missed %d wrong %d extra %d, want %v %d %d %d", tc.name, s.OK(), len(s.Missed(l)), len(s.WrongKind), len(s.Extra), tc.ok, tc.missed, tc.wrong, tc.bad)
		}
	}
	if s := Judge(Label{}, []Found{{"stall", 0, -1}}); s.OK() || len(s.Extra) != 1 {
		t.Errorf("a clean run with a finding: %+v", s)
	}
}
