package analyzer

import (
	"testing"

	"github.com/vccl-go/vccl/flowtel"
)

// beatJob is 4 ranks in one long call (seq 1) writing heartbeats every
// 10 ms from 10 ms to end, except where silent says a rank is off.
func beatJob(end int64, silent func(rank int32, ts int64) bool) []flowtel.Record {
	var recs []flowtel.Record
	for r := range int32(4) {
		recs = append(recs, flowtel.Record{TsNs: 1e6, Kind: flowtel.KindCollBegin, Comm: 1, Rank: r, Peer: -1, CollSeq: 1, Op: flowtel.OpAllReduce, Step: 1, Bytes: 8})
	}
	for ts := int64(10e6); ts < end; ts += 10e6 {
		for r := range int32(4) {
			if !silent(r, ts) {
				recs = append(recs, flowtel.Record{TsNs: ts, Kind: flowtel.KindHeartbeat, Comm: 1, Rank: r, Peer: -1, Depth: 1})
			}
		}
	}
	for r := range int32(4) {
		recs = append(recs, flowtel.Record{TsNs: end, Kind: flowtel.KindCollEnd, Comm: 1, Rank: r, Peer: -1, CollSeq: 1, Op: flowtel.OpAllReduce, Step: 1, Bytes: 8})
	}
	return recs
}

func analyse(t *testing.T, recs []flowtel.Record) []Finding {
	t.Helper()
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	a.SetWorldSize(1, 4)
	a.Add(recs)
	return a.Finish().Findings
}

func TestRankThatDoesNotRun(t *testing.T) {
	tests := []struct {
		name   string
		silent func(rank int32, ts int64) bool
		want   []string // culprits of the findings
	}{
		{"healthy: every rank beats", func(int32, int64) bool { return false }, nil},
		{"rank 2 frozen 1 s", func(r int32, ts int64) bool { return r == 2 && ts > 500e6 && ts < 1500e6 }, []string{"stall rank 2"}},
		{"every rank paused together", func(_ int32, ts int64) bool { return ts > 500e6 && ts < 800e6 }, nil},
		{"every rank off 40 ms in turn (a busy host)", func(r int32, ts int64) bool { return (ts/10e6)%20 >= int64(4*r) && (ts/10e6)%20 < int64(4*r)+4 }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range analyse(t, beatJob(3e9, tc.silent)) {
				got = append(got, f.Kind.String()+" "+f.Culprit())
			}
			if len(got) != len(tc.want) || len(got) > 0 && got[0] != tc.want[0] {
				t.Errorf("findings %q, want %q", got, tc.want)
			}
		})
	}
}
