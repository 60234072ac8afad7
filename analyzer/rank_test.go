package analyzer

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/vccl-go/vccl/flowtel"
)

// beatJob is 4 ranks in one long call (seq 1) writing heartbeats every
// 10 ms from 10 ms to end, except where silent says a rank is off; a rank
// off at 1 ms begins the call when it is first on.
func beatJob(end int64, silent func(rank int32, ts int64) bool) []flowtel.Record {
	var recs []flowtel.Record
	var begun [4]bool
	begin := func(r int32, ts int64) {
		recs = append(recs, flowtel.Record{TsNs: ts, Kind: flowtel.KindCollBegin, Comm: 1, Rank: r, Peer: -1, CollSeq: 1, Op: flowtel.OpAllReduce, Step: 1, Bytes: 8})
		begun[r] = true
	}
	for r := range int32(4) {
		if !silent(r, 1e6) {
			begin(r, 1e6)
		}
	}
	for ts := int64(10e6); ts < end; ts += 10e6 {
		for r := range int32(4) {
			switch {
			case silent(r, ts):
			case !begun[r]:
				begin(r, ts)
			default:
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
	t.Parallel()
	tests := []struct {
		name   string
		silent func(rank int32, ts int64) bool
		want   []string // culprits of the findings
	}{
		{"healthy: every rank beats", func(int32, int64) bool { return false }, nil},
		{"rank 2 frozen 1 s", func(r int32, ts int64) bool { return r == 2 && ts > 500e6 && ts < 1500e6 }, []string{"stall rank 2"}},
		{"every rank paused together", func(_ int32, ts int64) bool { return ts > 500e6 && ts < 800e6 }, nil},
		{"rank 0 first in the call, silent while the others start", func(r int32, ts int64) bool { return r == 0 && ts > 5e6 && ts < 350e6 || r > 0 && ts < 300e6 }, nil},
		{"rank 0 off 300 ms once (a loaded host)", func(r int32, ts int64) bool { return r == 0 && ts > 500e6 && ts < 800e6 }, nil},
		{"rank 0 frozen 300 ms twice while the others wait", func(r int32, ts int64) bool {
			return r == 0 && (ts > 500e6 && ts < 800e6 || ts > 1500e6 && ts < 1800e6)
		}, []string{"stall rank 0"}},
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

// deathJob is 4 ranks running 10 ms calls. Rank r stops for good in call
// stop[r] (0: it runs on to call last): it begins that call and writes
// nothing more. The ranks still there end each call, so the ones stopped
// earlier miss it; none ends call last, in which rank r heartbeats 10 ms
// apart for beats[r] (300 ms if it runs on).
func deathJob(last uint64, stop [4]uint64, beats [4]int64) []flowtel.Record {
	var recs []flowtel.Record
	for seq := uint64(1); seq <= last; seq++ {
		t0 := int64(seq) * 10e6
		for r := range int32(4) {
			if stop[r] != 0 && seq > stop[r] {
				continue
			}
			recs = append(recs, flowtel.Record{TsNs: t0 + int64(r), Kind: flowtel.KindCollBegin, Comm: 1, Rank: r, Peer: -1, CollSeq: seq, Op: flowtel.OpAllReduce, Step: 1, Bytes: 8})
			switch {
			case seq == last:
				hb := beats[r]
				if stop[r] == 0 {
					hb = 300e6
				}
				for ts := t0 + 10e6; ts <= t0+hb; ts += 10e6 {
					recs = append(recs, flowtel.Record{TsNs: ts, Kind: flowtel.KindHeartbeat, Comm: 1, Rank: r, Peer: -1, Depth: 1})
				}
			case seq != stop[r]:
				recs = append(recs, flowtel.Record{TsNs: t0 + 5e6, Kind: flowtel.KindCollEnd, Comm: 1, Rank: r, Peer: -1, CollSeq: seq, Op: flowtel.OpAllReduce, Step: 1, Bytes: 8})
			}
		}
	}
	slices.SortStableFunc(recs, func(x, y flowtel.Record) int { return cmp.Compare(x.TsNs, y.TsNs) })
	return recs
}

func TestDeadRank(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		last  uint64
		stop  [4]uint64
		beats [4]int64
		want  []string // culprits and what is listed under them
	}{
		{"healthy", 80, [4]uint64{}, [4]int64{}, nil},
		{"rank 1 killed, the others wait", 50, [4]uint64{0, 50, 0, 0}, [4]int64{}, []string{"dead_rank rank 1 []"}},
		{"rank 1 killed, rank 2 exits on the error before the rest",
			50, [4]uint64{0, 50, 50, 0}, [4]int64{2: 100e6}, []string{"dead_rank rank 1 [rank 2]"}},
		{"rank 1 killed, the others run on without it until rank 2 is killed too",
			80, [4]uint64{0, 30, 50, 0}, [4]int64{}, []string{"dead_rank rank 1 []", "dead_rank rank 2 []"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range analyse(t, deathJob(tc.last, tc.stop, tc.beats)) {
				got = append(got, fmt.Sprintf("%s %s %v", f.Kind, f.Culprit(), f.Related))
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("findings %q, want %q", got, tc.want)
			}
		})
	}
}
