package analyzer

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/bounded"
)

// hostileTrace writes two ranks' traces whose metadata says the job has
// world ranks, with a few transfers between them.
func hostileTrace(t *testing.T, world int) string {
	dir := t.TempDir()
	for r := range 2 {
		sink, err := arrow.New(arrow.Meta{Rank: r, WorldSize: world, CommUID: "hostile0", CommID: 7}, arrow.WithDir(dir))
		if err != nil {
			t.Fatal(err)
		}
		var recs []flowtel.Record
		for i := range 100 {
			post := flowtel.Record{TsNs: int64(i) * 1000, Kind: flowtel.KindWRPost, Rank: int32(r), Peer: int32(1 - r), QP: 1, Comm: 7,
				WrID: flowtel.WRID(uint64(i), false), Bytes: 4096, Depth: 1}
			wc := post
			wc.TsNs, wc.Kind, wc.Depth = post.TsNs+500, flowtel.KindWC, 0
			recs = append(recs, post, wc)
		}
		if err := sink.Consume(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
		if err := sink.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A trace whose metadata says world_size = 2^31-1 is analysed within 5 s
// and 200 MB, with a warning, not gigabytes for the ranks it names.
func TestHostileWorldSize(t *testing.T) {
	bounded.Check(t, bounded.Issue31, func(t *testing.T) {
		dir := hostileTrace(t, math.MaxInt32)
		rep, err := AnalyzeFiles(context.Background(), []string{dir}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(rep.Warnings, "\n"), "out of range") {
			t.Errorf("no warning about the world size: %q", rep.Warnings)
		}
	})
}
