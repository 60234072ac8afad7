package collective

import "testing"

// A 2-rank all-gather over shared memory sends each block whole up to
// wholeBlockMax, and a 2-rank broadcast its buffer up to wholeBcastMax;
// TCP, more ranks, larger blocks and the other collectives keep the
// pipeline's chunks, and a configured chunk size wins.
func TestChunkFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		op    Op
		n     int
		block int // bytes a rank
		tcp   bool
		chunk int // configured
		want  int
	}{
		{"all-gather 2 ranks 512 KiB", OpAllGather, 2, 512 << 10, false, DefaultChunk, 512 << 10},
		{"all-gather 2 ranks 8 MiB", OpAllGather, 2, wholeBlockMax, false, DefaultChunk, wholeBlockMax},
		{"all-gather 2 ranks 32 MiB", OpAllGather, 2, 32 << 20, false, DefaultChunk, DefaultChunk},
		{"all-gather 2 ranks over TCP", OpAllGather, 2, 512 << 10, true, DefaultChunk, 256 << 10},
		{"all-gather 4 ranks", OpAllGather, 4, 512 << 10, false, DefaultChunk, 128 << 10},
		{"broadcast 2 ranks 256 KiB", OpBroadcast, 2, 256 << 10, false, DefaultChunk, 256 << 10},
		{"broadcast 2 ranks 512 KiB", OpBroadcast, 2, wholeBcastMax, false, DefaultChunk, wholeBcastMax},
		{"broadcast 2 ranks 1 MiB", OpBroadcast, 2, 1 << 20, false, DefaultChunk, 256 << 10},
		{"broadcast 2 ranks over TCP", OpBroadcast, 2, 256 << 10, true, DefaultChunk, 256 << 10},
		{"broadcast 4 ranks", OpBroadcast, 4, 256 << 10, false, DefaultChunk, 64 << 10},
		{"all-gather 2 ranks, chunk set", OpAllGather, 2, 512 << 10, false, 64 << 10, 64 << 10},
	} {
		c := &Comm{overStream: tc.tcp, opts: options{chunk: tc.chunk}}
		cl := &call{op: tc.op, n: tc.n, count: tc.block / 4, esize: 4}
		if got := c.chunkFor(cl); got != tc.want {
			t.Errorf("%s: chunk %d, want %d", tc.name, got, tc.want)
		}
	}
}
