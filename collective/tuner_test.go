package collective

import "testing"

// A 2-rank all-gather over shared memory sends each block whole up to
// wholeBlockMax, and a 2-rank broadcast its buffer up to wholeBcastMax;
// TCP, more ranks, larger blocks and the other collectives keep the
// pipeline's chunks, and a configured chunk size wins. With more ranks
// than cores a block goes whole up to the configured chunk (over shared
// memory).
func TestChunkFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		op    Op
		n     int
		block int // bytes: a rank's (all-gather), the buffer (broadcast, all-reduce)
		tcp   bool
		crowd bool // more ranks than cores
		chunk int  // configured
		want  int
	}{
		{"all-gather 2 ranks 512 KiB", OpAllGather, 2, 512 << 10, false, false, DefaultChunk, 512 << 10},
		{"all-gather 2 ranks 8 MiB", OpAllGather, 2, wholeBlockMax, false, false, DefaultChunk, wholeBlockMax},
		{"all-gather 2 ranks 32 MiB", OpAllGather, 2, 32 << 20, false, false, DefaultChunk, DefaultChunk},
		{"all-gather 2 ranks over TCP", OpAllGather, 2, 512 << 10, true, false, DefaultChunk, 256 << 10},
		{"all-gather 4 ranks", OpAllGather, 4, 512 << 10, false, false, DefaultChunk, 128 << 10},
		{"broadcast 2 ranks 256 KiB", OpBroadcast, 2, 256 << 10, false, false, DefaultChunk, 256 << 10},
		{"broadcast 2 ranks 512 KiB", OpBroadcast, 2, wholeBcastMax, false, false, DefaultChunk, wholeBcastMax},
		{"broadcast 2 ranks 1 MiB", OpBroadcast, 2, 1 << 20, false, false, DefaultChunk, 256 << 10},
		{"broadcast 2 ranks over TCP", OpBroadcast, 2, 256 << 10, true, false, DefaultChunk, 256 << 10},
		{"broadcast 4 ranks", OpBroadcast, 4, 256 << 10, false, false, DefaultChunk, 64 << 10},
		{"all-reduce 4 ranks crowded 1 MiB", OpAllReduce, 4, 1 << 20, false, true, DefaultChunk, 256 << 10},
		{"all-reduce 4 ranks crowded 16 MiB", OpAllReduce, 4, 16 << 20, false, true, DefaultChunk, DefaultChunk},
		{"all-reduce 4 ranks crowded over TCP", OpAllReduce, 4, 1 << 20, true, true, DefaultChunk, 256 << 10},
		{"all-reduce 4 ranks 1 MiB", OpAllReduce, 4, 1 << 20, false, false, DefaultChunk, 64 << 10},
		{"all-gather 2 ranks, chunk set", OpAllGather, 2, 512 << 10, false, false, 64 << 10, 64 << 10},
	} {
		c := &Comm{overStream: tc.tcp, crowded: tc.crowd, opts: options{chunk: tc.chunk}}
		cl := &call{op: tc.op, n: tc.n, count: tc.block / 4, esize: 4}
		if got := c.chunkFor(cl); got != tc.want {
			t.Errorf("%s: chunk %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A host crowds the communicator when it has more ranks than the fewest
// CPUs any of its ranks may use; a rank that said nothing (0) counts for
// its host's ranks but not its CPUs.
func TestCrowded(t *testing.T) {
	t.Parallel()
	p := func(host string, cpus int) peerInfo { return peerInfo{HostID: host, CPUs: cpus} }
	for _, tc := range []struct {
		name  string
		peers []peerInfo
		want  bool
	}{
		{"2 ranks on 2 CPUs", []peerInfo{p("a", 2), p("a", 2)}, false},
		{"4 ranks on 2 CPUs", []peerInfo{p("a", 2), p("a", 2), p("a", 2), p("a", 2)}, true},
		{"2 hosts of 2 ranks on 2 CPUs", []peerInfo{p("a", 2), p("a", 2), p("b", 2), p("b", 2)}, false},
		{"one rank bound to 1 CPU", []peerInfo{p("a", 16), p("a", 1)}, true},
		{"one host crowded", []peerInfo{p("a", 16), p("b", 1), p("b", 1)}, true},
		{"CPUs not said", []peerInfo{p("a", 0), p("a", 0), p("a", 0)}, false},
		{"some not said", []peerInfo{p("a", 0), p("a", 2), p("a", 0)}, true},
	} {
		if got := crowded(tc.peers); got != tc.want {
			t.Errorf("%s: crowded %v, want %v", tc.name, got, tc.want)
		}
	}
}
