package analyzer

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vccl-go/vccl/exporter/arrow"

	"github.com/vccl-go/vccl/flowtel"
)

// liveStep is the trace time between two live updates in these tests.
const liveStep = 50e6

// liveRun feeds a job's records to a Live and updates it every liveStep of
// trace time; it returns the findings of each update.
func liveRun(t *testing.T, recs []flowtel.Record) [][]Finding {
	t.Helper()
	lv, err := NewLive(Options{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var updates [][]Finding
	next := recs[0].TsNs + liveStep
	for i := range recs {
		for recs[i].TsNs >= next {
			updates = append(updates, lv.Update(next))
			next += liveStep
		}
		lv.AddFrom(int(recs[i].Rank), recs[i:i+1])
	}
	return updates
}

// corpusRecords reads a corpus scenario's records, every rank merged in
// time order.
func corpusRecords(t *testing.T, name string) []flowtel.Record {
	t.Helper()
	dir := filepath.Join(corpusDir, name)
	files, err := arrow.ListFiles(dir)
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: %v", dir, err)
	}
	var all []flowtel.Record
	for _, f := range files {
		recs, err := arrow.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
	}
	slices.SortStableFunc(all, func(a, b flowtel.Record) int { return cmp.Compare(a.TsNs, b.TsNs) })
	return all
}

// tbfInjection is when the tbf run's rate limit went on and off.
func tbfInjection(t *testing.T) (inj struct {
	InjectNs int64 `json:"inject_ns"`
	HealNs   int64 `json:"heal_ns"`
}) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(corpusDir, "tbf-mid-4r", "inject.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &inj); err != nil {
		t.Fatal(err)
	}
	return inj
}

// Fed every rank's records of the real tbf run, the live analysis names
// the throttled link 2->3 as the root of the backpressure while the limit
// is on, and nothing before it.
func TestLiveCorpusTBF(t *testing.T) {
	t.Parallel()
	recs := corpusRecords(t, "tbf-mid-4r")
	inj := tbfInjection(t)
	updates := liveRun(t, recs)
	at := func(ts int64) []Finding { return updates[min((ts-recs[0].TsNs)/liveStep, int64(len(updates)-1))] }
	mid := at((inj.InjectNs + inj.HealNs) / 2)
	root := false
	for _, f := range mid {
		switch {
		case f.Kind == KindBackpressure && f.Rank == 2 && f.Peer == 3:
			root = true
		case f.Rank == 2 && f.Peer == 3:
		default:
			t.Errorf("mid-run live finding %s %s: %s", f.Kind, f.Culprit(), f.Summary)
		}
	}
	if !root {
		t.Errorf("no live backpressure root 2->3 mid-run: %v", mid)
	}
	for _, f := range at(inj.InjectNs - liveStep) {
		t.Errorf("live finding before the limit: %s", f.Summary)
	}
}

func TestLiveClean(t *testing.T) {
	t.Parallel()
	s := newSynth(4)
	for range 60 {
		s.allReduce(4 << 20)
	}
	for i, fs := range liveRun(t, s.merged()) {
		for _, f := range fs {
			t.Errorf("update %d: live finding on a clean job: %s", i, f.Summary)
		}
	}
	for _, name := range []string{"clean-4r", "clean-2ch"} {
		for i, fs := range liveRun(t, corpusRecords(t, name)) {
			for _, f := range fs {
				t.Errorf("%s update %d: live finding on a clean job: %s", name, i, f.Summary)
			}
		}
	}
}

// A rank still computing between calls while its peers wait in the next one
// (heartbeating) is late, not dead: the live analysis, which sees the job
// up to now, must not call it dead.
func TestLiveLateRankIsNotDead(t *testing.T) {
	t.Parallel()
	var recs []flowtel.Record
	call := func(seq uint64, ranks []int32, at int64) {
		for _, r := range ranks {
			recs = append(recs, flowtel.Record{TsNs: at, Kind: flowtel.KindCollBegin, Comm: 1, Rank: r, Peer: -1, CollSeq: seq, Op: flowtel.OpAllReduce, Step: 1, Bytes: 8})
		}
	}
	end := func(seq uint64, ranks []int32, at int64) {
		for _, r := range ranks {
			recs = append(recs, flowtel.Record{TsNs: at, Kind: flowtel.KindCollEnd, Comm: 1, Rank: r, Peer: -1, CollSeq: seq, Op: flowtel.OpAllReduce, Step: 1, Bytes: 8})
		}
	}
	all := []int32{0, 1, 2, 3}
	base := int64(1e9)
	for seq := uint64(1); seq <= 4; seq++ {
		at := base + int64(seq)*10e6
		call(seq, all, at)
		end(seq, all, at+1e6)
	}
	// Call 5: ranks 0-2 wait in it for 300 ms, writing heartbeats; rank 3
	// computes.
	t5 := base + 50e6
	call(5, all[:3], t5)
	for ts := t5 + 10e6; ts <= t5+300e6; ts += 10e6 {
		for _, r := range all[:3] {
			recs = append(recs, flowtel.Record{TsNs: ts, Kind: flowtel.KindHeartbeat, Comm: 1, Rank: r, Peer: -1, Depth: 1})
		}
	}
	lv, err := NewLive(Options{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	lv.SetWorldSize(1, 4)
	for _, r := range recs {
		lv.AddFrom(int(r.Rank), []flowtel.Record{r})
	}
	for _, f := range lv.Update(t5 + 300e6) {
		if f.Kind == KindDeadRank {
			t.Errorf("a late rank called dead: %s", f.Summary)
		}
	}
}
