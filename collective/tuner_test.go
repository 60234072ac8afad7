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
		if got := c.chunkFor(cl, AlgoRing); got != tc.want {
			t.Errorf("%s: chunk %d, want %d", tc.name, got, tc.want)
		}
	}
}

// The direct algorithms run only where every rank has directCPUs to itself
// (cpusEach) and then from directFrom up, for the operations that have
// them, or for small all-gathers and reduce-scatters where ranks outnumber
// cores over TCP; a forced algorithm still wins.
func TestPickDirect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		peers []peerInfo
		each  int
	}{
		{"bound ranks, one CPU each", []peerInfo{{HostID: "a", CPUs: 1, Bound: true}, {HostID: "a", CPUs: 1, Bound: true}, {HostID: "a", CPUs: 1, Bound: true}}, 1},
		{"bound ranks, two CPUs each", []peerInfo{{HostID: "a", CPUs: 2, Bound: true}, {HostID: "a", CPUs: 3, Bound: true}, {HostID: "a", CPUs: 2, Bound: true}}, 2},
		{"unbound, 3 ranks on 16 CPUs", []peerInfo{{HostID: "a", CPUs: 16}, {HostID: "a", CPUs: 16}, {HostID: "a", CPUs: 16}}, 5},
		{"unbound, oversubscribed", []peerInfo{{HostID: "a", CPUs: 2}, {HostID: "a", CPUs: 2}, {HostID: "a", CPUs: 2}}, 0},
		{"one unbound rank among bound ones", []peerInfo{{HostID: "a", CPUs: 4, Bound: true}, {HostID: "a", CPUs: 6}, {HostID: "a", CPUs: 4, Bound: true}}, 1},
		{"two hosts, the least decides", []peerInfo{{HostID: "a", CPUs: 8}, {HostID: "b", CPUs: 4}, {HostID: "b", CPUs: 4}}, 2},
	} {
		if got := cpusEach(tc.peers); got != tc.each {
			t.Errorf("%s: cpusEach %d, want %d", tc.name, got, tc.each)
		}
	}
	for _, tc := range []struct {
		op         Op
		bytes      int
		direct     bool // Comm.hostDirect
		crowd, tcp bool // Comm.crowded, Comm.overStream
		forced     Algorithm
		want       Algorithm
	}{
		{OpAllReduce, directFrom, true, false, false, AlgoAuto, AlgoDirect},
		{OpAllReduce, directFrom - 4, true, false, false, AlgoAuto, AlgoRing},
		{OpAllReduce, 64 << 20, false, false, false, AlgoAuto, AlgoRing},
		{OpAllReduce, 64 << 20, true, false, false, AlgoRing, AlgoRing},
		{OpReduceScatter, directFrom, true, false, false, AlgoAuto, AlgoDirect},
		{OpAllGather, directFrom, true, false, false, AlgoAuto, AlgoDirect},
		{OpBroadcast, directFrom, true, false, false, AlgoAuto, AlgoDirect},
		{OpReduce, directFrom, true, false, false, AlgoAuto, AlgoDirect},
		{OpBarrier, directFrom, true, false, false, AlgoAuto, AlgoAuto},
		// Ranks outnumbering cores over TCP: small all-gathers and
		// reduce-scatters go direct (decision 0058).
		{OpAllGather, 1 << 10, false, true, true, AlgoAuto, AlgoDirect},
		{OpAllGather, smallMessage, false, true, true, AlgoAuto, AlgoDirect},
		{OpReduceScatter, smallMessage, false, true, true, AlgoAuto, AlgoDirect},
		{OpAllGather, smallMessage + 4, false, true, true, AlgoAuto, AlgoRing},
		{OpAllGather, 1 << 10, false, false, true, AlgoAuto, AlgoRing},
		{OpReduceScatter, 1 << 10, false, true, false, AlgoAuto, AlgoRing},
		// And all-reduces small enough for one shot (decision 0059):
		// 64 KiB in all to the 3 peers of 4 ranks.
		{OpAllReduce, 1 << 10, false, true, true, AlgoAuto, AlgoDirect},
		{OpAllReduce, smallMessage / 3, false, true, true, AlgoAuto, AlgoDirect},
		{OpAllReduce, smallMessage/3 + 4, false, true, true, AlgoAuto, AlgoRecursiveDoubling},
		{OpAllReduce, 1 << 10, false, false, true, AlgoAuto, AlgoRecursiveDoubling},
		{OpAllReduce, 1 << 10, false, true, false, AlgoAuto, AlgoRecursiveDoubling},
		{OpAllReduce, 1 << 10, false, true, true, AlgoRing, AlgoRing},
		{OpBroadcast, 1 << 10, false, true, true, AlgoAuto, AlgoTree},
		{OpAllGather, 1 << 10, false, true, true, AlgoRing, AlgoRing},
	} {
		c := &Comm{size: 4, hostDirect: tc.direct, crowded: tc.crowd, overStream: tc.tcp, opts: options{algo: tc.forced}}
		if got := c.pickAlgo(tc.op, tc.bytes); got != tc.want {
			t.Errorf("%v of %d bytes, direct %v, crowded %v, over TCP %v, forced %v: %v, want %v",
				tc.op, tc.bytes, tc.direct, tc.crowd, tc.tcp, tc.forced, got, tc.want)
		}
	}
}

// Direct schedules are cut into directChunk pieces up to directWide ranks
// and directChunkWide beyond, once a block holds two of them; smaller
// blocks keep the ring's rule, and a configured chunk size wins.
func TestDirectChunk(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		n     int
		total int // bytes of the all-reduce
		chunk int // configured
		want  int
	}{
		{"8 ranks 64 MiB", 8, 64 << 20, DefaultChunk, directChunk},
		{"8 ranks 4 MiB", 8, 4 << 20, DefaultChunk, directChunk},
		{"8 ranks 2 MiB: block below two chunks", 8, 2 << 20, DefaultChunk, 64 << 10},
		{"9 ranks 64 MiB", 9, 64 << 20, DefaultChunk, directChunkWide},
		{"16 ranks 64 MiB", 16, 64 << 20, DefaultChunk, directChunkWide},
		{"16 ranks 2 MiB", 16, 2 << 20, DefaultChunk, directChunkWide},
		{"16 ranks 64 MiB, chunk set", 16, 64 << 20, 1 << 20, 1 << 20},
	} {
		c := &Comm{opts: options{chunk: tc.chunk}}
		cl := &call{op: OpAllReduce, n: tc.n, count: tc.total / 4, esize: 4}
		if got := c.chunkFor(cl, AlgoDirect); got != tc.want {
			t.Errorf("%s: chunk %d, want %d", tc.name, got, tc.want)
		}
	}
}
