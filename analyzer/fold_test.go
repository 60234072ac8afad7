package analyzer

import (
	"fmt"
	"slices"
	"testing"
)

// TestOneCauseOneFinding checks the folds of the final report: symptoms
// that the same cause explains are listed under it, not beside it.
func TestOneCauseOneFinding(t *testing.T) {
	t.Parallel()
	link := func(k Kind, src, dst int32, from, to, impact int64) Finding {
		return Finding{Kind: k, Comm: 1, Rank: src, Peer: dst, StartNs: from * 1e6, EndNs: to * 1e6, ImpactNs: impact * 1e6,
			Evidence: map[string]float64{"ratio": 0.2, "rate_ratio": 0.1}}
	}
	rank := func(k Kind, r int32, from, to int64) Finding {
		return Finding{Kind: k, Comm: 1, Rank: r, Peer: -1, Channel: -1, StartNs: from * 1e6, EndNs: to * 1e6, ImpactNs: (to - from) * 1e6}
	}
	tests := []struct {
		name string
		in   []Finding
		want []string // culprits, with what is listed under them
	}{
		{"a slow link and a smaller backpressure into its sender (its interface delays the acks)",
			[]Finding{link(KindSlowLink, 3, 0, 0, 10000, 8000), link(KindBackpressure, 2, 3, 3000, 3200, 120)},
			[]string{"slow_link link 3->0 ch0 [2->3 ch0]"}},
		{"a slow link and backpressure on the same link: both stay",
			[]Finding{link(KindSlowLink, 2, 3, 0, 3000, 2000), link(KindBackpressure, 2, 3, 500, 2500, 700)},
			[]string{"backpressure link 2->3 ch0 []", "slow_link link 2->3 ch0 []"}},
		{"a slow link and backpressure elsewhere: both stay",
			[]Finding{link(KindSlowLink, 3, 0, 0, 10000, 8000), link(KindBackpressure, 1, 2, 3000, 3200, 120)},
			[]string{"backpressure link 1->2 ch0 []", "slow_link link 3->0 ch0 []"}},
		{"two slow links through one rank: the worse is the culprit",
			[]Finding{link(KindSlowLink, 3, 0, 0, 10000, 8000), link(KindSlowLink, 2, 3, 0, 10000, 500)},
			[]string{"slow_link link 3->0 ch0 [2->3 ch0]"}},
		{"a link stall while a rank is frozen is listed under the rank",
			[]Finding{rank(KindStall, 1, 1000, 2000), link(KindStall, 1, 2, 1100, 1900, 800)},
			[]string{"stall rank 1 [1->2 ch0]"}},
		{"a link finding that began before the rank stopped stays",
			[]Finding{rank(KindStall, 1, 1000, 2000), link(KindSlowLink, 3, 0, 0, 10000, 8000)},
			[]string{"slow_link link 3->0 ch0 []", "stall rank 1 []"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range foldSlowLinks(foldAftermath(tc.in)) {
				got = append(got, fmt.Sprintf("%s %s %v", f.Kind, f.Culprit(), f.Related))
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("findings %q, want %q", got, tc.want)
			}
		})
	}
}
