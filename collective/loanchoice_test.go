package collective

import (
	"fmt"
	"testing"
	"time"
)

// loanChoice keeps the way that won most rounds, ties left to the calls
// off loans, per size class; async calls go by loans until it chose, its
// choice after, and do not move a measurement on; a call reported for a way
// the class is not measuring is not counted; a call by loans that fell
// back keeps the class off loans until it measures again.
func TestLoanChoiceChooses(t *testing.T) {
	const n = 4 << 20
	flat := func(ns int64) func(int) int64 { return func(int) int64 { return ns } }
	for _, tc := range []struct {
		name     string
		ns       [2]func(round int) int64 // by way: as before, by loans
		want     slotWay
		rounds   int  // rounds each way was measured
		stray    bool // each timed call is first reported for the other way too
		async    bool // an async call (untimed) comes before each timed call
		fallBack bool // a call by loans falls back once the class chose
	}{
		{name: "loans clearly faster", ns: [2]func(int) int64{flat(100), flat(50)}, want: wayLoans, rounds: dropAfter},
		{name: "ring clearly faster", ns: [2]func(int) int64{flat(50), flat(100)}, want: wayAsBefore, rounds: dropAfter},
		{name: "loans a little faster", ns: [2]func(int) int64{flat(100), flat(90)}, want: wayLoans, rounds: probeRounds/2 + 1},
		{name: "tie", ns: [2]func(int) int64{flat(100), func(r int) int64 { return 80 + int64(r%2)*40 }}, want: wayAsBefore, rounds: probeRounds},
		{name: "reports of the other way", ns: [2]func(int) int64{flat(100), flat(50)}, want: wayLoans, rounds: dropAfter, stray: true},
		{name: "loans faster, the peer not", ns: [2]func(int) int64{flat(100), flat(50)}, want: wayAsBefore, rounds: dropAfter, fallBack: true},
		{name: "ring clearly faster, async calls between", ns: [2]func(int) int64{flat(50), flat(100)}, want: wayAsBefore, rounds: dropAfter, async: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lc loanChoice
			calls := 0
			var counted [2]int
			for !lc.class[loanClassOf(n)].chosen {
				if calls > 10*measureCalls(2, n) {
					t.Fatalf("no choice after %d calls", calls)
				}
				calls++
				if tc.async {
					if loans, timed := lc.choose(n, false); !loans || timed {
						t.Fatalf("async call before call %d: by loans %v timed %v, want by loans untimed", calls, loans, timed)
					}
				}
				loans, timed := lc.choose(n, true)
				if !timed {
					t.Fatalf("call %d of the measurement not timed", calls)
				}
				way := wayAsBefore
				if loans {
					way = wayLoans
				}
				if tc.stray {
					lc.done(n, !loans, 1)
				}
				lc.done(n, loans, tc.ns[way](counted[way]/int(probeBlockFor(n))))
				counted[way]++
			}
			for way, got := range counted {
				if want := int(probeBlockFor(n)) * tc.rounds; got != want {
					t.Errorf("measured %d calls of way %d, want %d", got, way, want)
				}
			}
			if tc.fallBack {
				if loans, _ := lc.choose(n, true); loans {
					lc.fellBack(n)
				}
			}
			for i := range reprobeEvery - 1 {
				loans, timed := lc.choose(n, i%2 == 0 || !tc.async)
				if timed || loans != (tc.want == wayLoans) {
					t.Fatalf("call %d after the choice: by loans %v timed %v, want by loans %v untimed", i, loans, timed, tc.want == wayLoans)
				}
			}
			// The other classes measure on their own.
			if _, timed := lc.choose(n<<4, true); !timed {
				t.Fatal("a larger class adopted the choice")
			}
		})
	}
}

// A class measures itself whatever a smaller class chose; the classes go
// by powers of two from loanedMin.
func TestLoanChoiceClasses(t *testing.T) {
	var lc loanChoice
	lc.class[1] = slotClass{way: wayLoans, chosen: true}
	if _, timed := lc.choose(loanedMin(OpAllReduce, 2)<<4, true); !timed {
		t.Fatal("a larger class adopted class 1's choice")
	}
	for _, tc := range []struct{ n, want int }{
		{2 << 20, 0}, {4<<20 - 1, 0}, {4 << 20, 1}, {64 << 20, 5}, {1 << 30, loanClasses - 1}, {0, 0},
	} {
		if got := loanClassOf(tc.n); got != tc.want {
			t.Errorf("loanClassOf(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// 2 ranks over shm measure their all-reduces by loans against the way
// they go otherwise (the engine's ring where the engines spin, slices
// where they do not), every result whole, and reach the same choice,
// which every later call of the class takes on both ranks.
func TestLoanChoiceOverShm(t *testing.T) {
	byLoans(t)
	for _, crowd := range []bool{false, true} {
		t.Run(fmt.Sprintf("crowded=%v", crowd), func(t *testing.T) {
			if crowd {
				crowded(t)
			}
			ctx := testCtx(t, time.Minute)
			comms := newLocal(t, 2, WithTransport("shm"))
			if !crowd && !comms[0].engines[0].spins() {
				t.Skip("the engines do not spin on this machine's cores: the crowded case measures")
			}
			mc := matrixCase{op: OpAllReduce, dt: Float32, redop: Sum, count: loanedLeast(OpAllReduce, 2) / 4, inPlace: true}
			cl := func(r int) *slotClass { return &comms[r].small.loans.class[loanClassOf(mc.count*4)] }
			asBefore := "engine"
			if crowd {
				asBefore = "slices"
			}
			// run runs a call and reports how each rank made it.
			run := func(call int) (ways [2]string) {
				before := mailboxCalls(comms[0])
				if err := runOnAll(comms, func(c *Comm) error { return runCase(ctx, c, mc) }); err != nil {
					t.Fatalf("call %d: %v", call, err)
				}
				k := mailboxCalls(comms[0])
				for r := range 2 {
					switch {
					case k == before:
						ways[r] = "engine"
					case wentByLoans(comms[1-r], k, loanedRequest(mc)):
						ways[r] = "loans"
					default:
						ways[r] = "slices"
					}
				}
				return ways
			}
			// A measurement takes measureCalls calls at most; calls
			// that fall back where the ranks disagree are not counted.
			var took [2]map[string]int
			call := 0
			for ; !cl(0).chosen || !cl(1).chosen; call++ {
				if call == 4*measureCalls(2, mc.count*4) {
					t.Fatalf("no choice after %d calls: rank 0 %+v, rank 1 %+v", call, *cl(0), *cl(1))
				}
				for r, way := range run(call) {
					if took[r] == nil {
						took[r] = map[string]int{}
					}
					took[r][way]++
				}
			}
			for r := range 2 {
				if took[r]["loans"] == 0 || took[r][asBefore] == 0 {
					t.Errorf("rank %d measured %v, want calls by loans and %s", r, took[r], asBefore)
				}
			}
			// A rank whose calls by loans fell back after its choice
			// keeps off loans: a call later, the ranks agree.
			run(call)
			want := asBefore
			if cl(0).way == wayLoans {
				want = "loans"
			}
			for i := range 3 {
				if ways := run(call + 1 + i); ways != [2]string{want, want} {
					t.Fatalf("call %d after the choice (rank 0 %d, rank 1 %d): %v, want both %s", i, cl(0).way, cl(1).way, ways, want)
				}
			}
		})
	}
}

// Ranks whose choices differ run the call on the engine, and the rank
// whose call by loans fell back keeps its calls off loans from then on.
func TestLoanChoiceDisagreement(t *testing.T) {
	byLoans(t)
	ctx := testCtx(t, time.Minute)
	comms := newLocal(t, 2, WithTransport("shm"))
	chooseWay(&comms[0].small.loans, wayLoans)
	chooseWay(&comms[1].small.loans, wayAsBefore)
	mc := matrixCase{op: OpAllReduce, dt: Float32, redop: Sum, count: loanedLeast(OpAllReduce, 2)/4 + 7}
	for call := range 3 {
		before := mailboxCalls(comms[0])
		if err := runOnAll(comms, func(c *Comm) error { return runCase(ctx, c, mc) }); err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
		k := mailboxCalls(comms[0])
		if byLoans := k != before && wentByLoans(comms[1], k, loanedRequest(mc)); byLoans != (call == 0) {
			t.Fatalf("call %d: rank 0 published it by loans: %v, want %v", call, byLoans, call == 0)
		}
	}
	if cl := comms[0].small.loans.class[loanClassOf(mc.count*4)]; !cl.chosen || cl.way != wayAsBefore {
		t.Fatalf("rank 0's class after the fallback: %+v, want the calls off loans", cl)
	}
}
