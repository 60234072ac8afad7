package collective

import (
	"math/bits"
	"sync"
)

// loanChoice chooses, per size class, whether 2 ranks' all-reduces that
// may go by loans (loanedFor) do, or go as they would without loans (on
// the engine's ring, or in slices where the engines do not spin). Which is
// faster depends on how fast the host's process_vm_readv is, which nothing
// the rank can read tells: on a 16-core host loans ran 1.4-2x the ring
// from 4 MiB one day and level with it another, on an AMD VM the ring
// 1.7-2.2x the loans (decision 0063). It measures as slotWrites does
// (slotClass), both ranks in step: they make the same calls, so each
// times the same calls the same way, and ties keep the calls off loans.
// Ranks whose verdicts still differ meet at the tag check and run the
// call on the engine; the rank whose call by loans so fell back keeps its
// calls of the class off loans until it measures again, so that the ranks
// agree from the next call. A class does not adopt a smaller one's choice:
// where the buffers outgrow the caches the ways may rank otherwise, and a
// wrong choice costs up to half of each call's time where a measurement
// costs about 4 calls of the losing way.
type loanChoice struct {
	mu    sync.Mutex // blocking calls report from their callers' goroutines
	class [loanClasses]slotClass
}

// The ways loanChoice compares, numbered as slotClass numbers ways.
const (
	wayAsBefore slotWay = iota // the call goes as it would without loans
	wayLoans                   // by loans
)

// loanClasses is how many size classes loanChoice keeps, one a power of
// two from loanedMin: 2 MiB to 256 MiB and more.
const loanClasses = 8

func loanClassOf(n int) int {
	c := bits.Len(uint(n/loanedMin(OpAllReduce, 2))) - 1
	return min(max(c, 0), loanClasses-1)
}

// measuresLoans reports whether calls of op between ranks ranks that may
// go by loans ask loanChoice.
func measuresLoans(op Op, ranks int) bool { return op == OpAllReduce && ranks == 2 }

// choose reports whether a call of n bytes a rank goes by loans, and
// whether it is timed (then done reports its duration). Only a blocking
// call (canTime) is timed: an async one's end is its caller's to see, and
// its time would hold the calls queued before it. An async call takes the
// class's choice, and by loans (decision 0060's choice) while the class
// has none; it does not move a measurement on.
func (lc *loanChoice) choose(n int, canTime bool) (loans, timed bool) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	cl := &lc.class[loanClassOf(n)]
	if !canTime {
		if !cl.chosen {
			return true, false
		}
		if cl.calls < reprobeEvery {
			cl.calls++
		}
		return cl.way == wayLoans, false
	}
	way, timed := cl.next(nil, 1<<wayAsBefore|1<<wayLoans, probeBlockFor(n))
	return way == wayLoans, timed
}

// done takes the duration in ns of a timed call of n bytes that went by
// loans or not. A failed call, or one that outlived its measurement's
// block, is not counted.
func (lc *loanChoice) done(n int, loans bool, ns int64) {
	way := wayAsBefore
	if loans {
		way = wayLoans
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	cl := &lc.class[loanClassOf(n)]
	if !cl.chosen && cl.nways > 0 && cl.ways[cl.block] == way {
		cl.done(ns)
	}
}

// fellBack keeps the calls of n bytes off loans until their class
// measures again: a call of theirs by loans met a peer's call that was not.
func (lc *loanChoice) fellBack(n int) {
	lc.mu.Lock()
	lc.class[loanClassOf(n)] = slotClass{way: wayAsBefore, chosen: true}
	lc.mu.Unlock()
}
