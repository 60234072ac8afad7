package collective

import "math/bits"

// slotWrites chooses, per size class, how a rank hands its peers the data
// of a call whose slots they alone read: written into the slots past its
// caches (Mailbox.StreamSlot), written plainly, or not written at all but
// lent (Mailbox.Lend: each peer copies it straight out of the rank's
// buffer with one single-copy read, as Open MPI's vader does). Which is
// faster depends on how far apart the cores are, which neither the rank
// nor the topology the kernel shows tells: between far cores (a cache line
// passing in 200-300 ns) a plain store first takes back the line the peer
// read two calls before, and streaming won 1.3-2x (decision 0046); between
// cores that share their last-level cache (60-110 ns) the peer then reads
// the slot from memory instead of that cache, and plain stores won 10-25%
// (decision 0054); there one copy by the reader, for a system call and one
// more hand-off, beat the slots' two copies by a quarter to a half
// (decision 0055). The same VM drew either kind from run to run, so the
// rank measures: a measurement of a class runs blocks of calls each way
// in turn (probeBlockFor), probeRounds rounds of them; each round scores
// for its fastest block, and the class keeps the way with most wins (ties
// in the order of slotWay) for reprobeEvery calls, then measures again. A block's first
// call is not counted: a broadcast root's call waits for the peer's read
// of the call before, written another way. Neighbouring blocks compare
// under the same load, and a call preempted in the middle costs one round,
// not the verdict. A measurement ends as soon as its leader cannot be
// caught in the rounds left, and a way that lost each of its first
// dropAfter rounds by more than a quarter of the winner's time is measured
// no more (the last one left is chosen): a benchmark's 200 calls of 1 MiB
// spent 60 of them measuring, 40 the losing ways, and ran at 0.77x its
// speed over 2000 calls. A class's first call adopts the choice of the
// nearest smaller class that has one, and measures itself after
// inheritCheck calls: a benchmark that sweeps sizes upward in a few dozen
// calls each (nccl-tests' habit) would otherwise spend all of its calls of
// 16 MiB measuring, two thirds of them a losing way (2 ranks, all-gather of
// 16 MiB: 5.7 ms a call lent, 10-17 ms through the slots). Lending is
// measured only where the call may lend (every
// peer reads this rank's memory, and the operation reads what is lent:
// slotWrites.lends). Under the small path's turn: its calls run one at a
// time.
type slotWrites struct {
	lends bool // the calls of this table may lend
	class [slotClasses]slotClass
}

// slotWay is a way of handing over a call's data, in the order ties go.
type slotWay uint8

const (
	wayStream slotWay = iota // into the slots past the caches: what far cores need most
	wayLend                  // lent: one copy, by the reader
	wayPlain                 // into the slots plainly
	nWays
)

// slotClass is the choice of a size class and its measurement. It
// compares ways numbered as slotWay numbers the slot writes (ties going to
// the lower number); loanChoice numbers its two ways so too.
type slotClass struct {
	calls  uint32         // calls since the class last chose
	way    slotWay        // the choice
	ways   [nWays]slotWay // the ways the measurement still compares, in slotWay's order
	nways  uint8          // how many (0: not started)
	block  uint8          // ways[block] is the way of the block being measured
	pos    uint8          // the block's calls so far
	blockN uint8          // calls a block (probeBlockFor)
	rounds uint8          // rounds measured
	sum    int64          // ns of the counted calls of the block being measured
	sums   [nWays]int64   // each way's block of the round being measured
	wins   [nWays]uint16  // rounds each way won, in this measurement
	lost   [nWays]uint8   // rounds each way lost clearly
	chosen bool           // a measurement has ended
}

const (
	// Size classes: 16 KiB (streamSlotMin) to 16 KiB<<(slotClasses-1)
	// and more, one a power of two.
	slotClasses = 8
	probeRounds = 8
	// reprobeEvery calls of a class between measurements: a measurement's
	// losing blocks cost, where they lose, up to half of their calls'
	// time, 1/128 of the class's calls at most.
	reprobeEvery = 8192
	// inheritCheck: calls of a class that adopted a smaller class's choice
	// before it measures its own.
	inheritCheck = 128
	// dropAfter rounds each lost clearly drop a way from a measurement:
	// twice, so that one preempted block does not decide.
	dropAfter = 2
	// A block lost its round clearly when it took more than
	// lossNum/lossDen of the fastest block's time: where the ways
	// differ, they differed by 1.3-2x.
	lossNum, lossDen = 5, 4
)

// probeBlockFor is how many calls of n bytes a measurement's block runs:
// 4 (3 counted), but 2 (1 counted) from 2 MiB, where a call takes
// milliseconds and a benchmark makes few: nccl-tests' and the comparison's
// 20 calls of 16 MiB went mostly to measuring. 2 ranks on the AMD VM,
// 16-64 MiB, 20 calls a size, ten launches of each alternated (medians,
// us out of place / in place): all-gather 16 MiB 1370 / 1054 -> 1365 /
// 834, 64 MiB 5664 / 3350 -> 5086 / 3460; broadcast 16 MiB 2199 / 1828
// -> 2298 / 1294, 64 MiB 7587 / 3307 -> 6209 / 3288; 1 and 4 MiB of 200
// calls level.
func probeBlockFor(n int) uint8 {
	if n >= 2<<20 {
		return 2
	}
	return 4
}

// measureCalls is the longest measurement of calls of n bytes, in calls,
// comparing ways ways.
func measureCalls(ways slotWay, n int) int {
	return int(probeBlockFor(n)) * probeRounds * int(ways)
}

func slotClassOf(n int) int {
	c := bits.Len(uint(n/streamSlotMin)) - 1
	return min(max(c, 0), slotClasses-1)
}

// way reports how a call whose rank hands n bytes to each peer hands
// them, and whether the call is timed (then done reports its duration).
// lend says whether this call may lend (its peers can read it); a class
// whose measurement began while it could not compares the other two ways.
func (w *slotWrites) way(n int, lend bool) (way slotWay, timed bool) {
	c := slotClassOf(n)
	ways := uint8(1<<wayStream | 1<<wayPlain)
	if w.lends && lend {
		ways |= 1 << wayLend
	}
	way, timed = w.class[c].next(w.class[:c], ways, probeBlockFor(n))
	if way == wayLend && !lend {
		// This one call cannot lend: it is not counted, and the next one
		// is timed in its place.
		return wayStream, false
	}
	return way, timed
}

// next reports the way of the class's next call and whether it is timed:
// the class's choice until reprobeEvery calls went by since it chose, then
// a new measurement of the ways in the mask ways (bit i: way i), in
// blocks of block calls. A class that never chose first adopts the choice
// of the nearest class of below (the table's smaller classes) that has
// one.
func (cl *slotClass) next(below []slotClass, ways, block uint8) (slotWay, bool) {
	if cl.chosen && cl.calls < reprobeEvery {
		cl.calls++
		return cl.way, false
	}
	if cl.chosen {
		*cl = slotClass{} // measure again
	} else if cl.nways == 0 {
		for c := len(below) - 1; c >= 0; c-- {
			if from := &below[c]; from.chosen {
				*cl = slotClass{way: from.way, chosen: true, calls: reprobeEvery - inheritCheck + 1}
				return cl.way, false
			}
		}
	}
	if cl.nways == 0 {
		cl.blockN = block
		for wy := range nWays {
			if ways>>wy&1 != 0 {
				cl.ways[cl.nways] = wy
				cl.nways++
			}
		}
	}
	return cl.ways[cl.block], true
}

// done takes the duration in ns of a timed call of n bytes (way said
// timed). A failed call is not reported: the next call of the class then
// goes the same way and is timed in its place.
func (w *slotWrites) done(n int, ns int64) { w.class[slotClassOf(n)].done(ns) }

// done takes the duration in ns of the class's timed call (next said
// timed).
func (cl *slotClass) done(ns int64) {
	if cl.chosen || cl.nways == 0 {
		return
	}
	if cl.pos != 0 {
		cl.sum += max(ns, 1)
	}
	if cl.pos++; cl.pos < cl.blockN {
		return
	}
	cl.sums[cl.ways[cl.block]], cl.sum, cl.pos = cl.sum, 0, 0
	if cl.block++; cl.block < cl.nways {
		return
	}
	// A round ended: its fastest block wins it (ties: the earlier way).
	cl.block = 0
	cl.rounds++
	best := cl.ways[0]
	for _, wy := range cl.ways[1:cl.nways] {
		if cl.sums[wy] < cl.sums[best] {
			best = wy
		}
	}
	cl.wins[best]++
	kept := uint8(0)
	for _, wy := range cl.ways[:cl.nways] {
		if cl.sums[wy]*lossDen > cl.sums[best]*lossNum {
			cl.lost[wy]++
		}
		if cl.rounds < dropAfter || cl.lost[wy] < cl.rounds {
			cl.ways[kept] = wy
			kept++
		}
	}
	cl.nways = kept
	pick, second := slotWay(0), -1
	for wy := range nWays {
		if cl.wins[wy] > cl.wins[pick] {
			pick = wy
		}
	}
	for wy := range nWays {
		if wy != pick {
			second = max(second, int(cl.wins[wy]))
		}
	}
	if left := probeRounds - int(cl.rounds); kept == 1 || left == 0 || int(cl.wins[pick]) > second+left {
		*cl = slotClass{way: pick, chosen: true}
	}
}
