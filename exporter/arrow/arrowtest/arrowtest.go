// Package arrowtest writes small trace files for the tests of the packages
// that read them (the analyzer, vccl-top's replay).
package arrowtest

import (
	"context"
	"testing"

	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/flowtel"
)

// TwoRanks writes, in a fresh directory it returns, the traces of two ranks
// that exchanged 100 transfers, with metadata that says the job has world
// ranks (a hostile trace when world is huge).
func TwoRanks(t testing.TB, world int) string {
	t.Helper()
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
