package collective

import "math/bits"

// slotWrites chooses, per size class, how a rank writes the mailbox slots
// that its peers read and it does not read back: past its caches
// (Mailbox.StreamSlot) or plainly. Which is faster depends on how far
// apart the cores are, which neither the rank nor the topology the kernel
// shows tells: between far cores (a cache line passing in 200-300 ns) a
// plain store first takes back the line the peer read two calls before,
// and streaming won 1.3-2x (decision 0046); between cores that share their
// last-level cache (60-110 ns) the peer then reads the slot from memory
// instead of that cache, and plain stores won 10-25% (decision 0054). The
// same VM drew either kind from run to run, so the rank measures: a
// measurement of a class alternates blocks of probeBlock calls written
// each way, probePairs pairs of them; each pair scores for its faster
// block, and the class keeps the winner for reprobeEvery calls, then
// measures again. A block's first call is not counted: a broadcast root's
// call waits for the peer's read of the call before, written the other
// way. Neighbouring blocks compare under the same load, and a call
// preempted in the middle costs one pair, not the verdict. Under the small
// path's turn: its calls run one at a time.
type slotWrites struct {
	class [slotClasses]slotClass
}

type slotClass struct {
	calls  uint32 // calls since the class last chose (or since the start)
	plain  bool   // the choice: plain stores
	sum    int64  // ns of the counted calls of the block being measured
	first  int64  // the streamed block's sum in the pair being measured
	wins   int    // pairs the plain block won, in this measurement
	chosen bool   // a measurement has ended
}

const (
	// Size classes: 16 KiB (streamSlotMin) to 16 KiB<<(slotClasses-1)
	// and more, one a power of two.
	slotClasses = 8
	probeBlock  = 4
	probePairs  = 8
	// measureCalls is a measurement's length in calls.
	measureCalls = 2 * probeBlock * probePairs
	// reprobeEvery calls of a class between measurements: a measurement's
	// plain or streamed half costs, where it loses, up to half of its
	// calls' time, 1/256 of the class's calls at most.
	reprobeEvery = 8192
)

func slotClassOf(n int) int {
	c := bits.Len(uint(n/streamSlotMin)) - 1
	return min(max(c, 0), slotClasses-1)
}

// stream reports how a call whose rank writes n bytes into each peer's
// slot writes them, and whether the call is timed (then done reports its
// duration).
func (w *slotWrites) stream(n int) (stream, timed bool) {
	cl := &w.class[slotClassOf(n)]
	if cl.chosen && cl.calls < reprobeEvery {
		cl.calls++
		return !cl.plain, false
	}
	if cl.chosen {
		*cl = slotClass{plain: cl.plain} // measure again
	}
	// Even blocks of the measurement stream, odd ones write plainly.
	return (cl.calls/probeBlock)&1 == 0, true
}

// done takes the duration in ns of a timed call of n bytes (stream said
// timed). A failed call is not reported: the next call of the class then
// writes its slots the same way and is timed in its place.
func (w *slotWrites) done(n int, ns int64) {
	cl := &w.class[slotClassOf(n)]
	if cl.chosen {
		return
	}
	if cl.calls%probeBlock != 0 {
		cl.sum += max(ns, 1)
	}
	cl.calls++
	if cl.calls%probeBlock != 0 {
		return
	}
	if (cl.calls/probeBlock)&1 == 1 {
		cl.first = cl.sum // a streamed block ended
	} else if cl.sum < cl.first {
		cl.wins++
	}
	cl.sum = 0
	if cl.calls == measureCalls {
		// Streaming stays on a tie: it is what far cores need most.
		*cl = slotClass{plain: cl.wins > probePairs/2, chosen: true}
	}
}
