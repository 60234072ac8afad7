package collective

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vccl-go/vccl/transport"
)

func TestSpinFits(t *testing.T) {
	for _, c := range []struct {
		live, procs, cpus int
		bound, want       bool
	}{
		{1, 2, 2, false, true},  // 2 unbound ranks on 2 cores
		{1, 4, 2, false, false}, // 4 unbound ranks on 2 cores
		{1, 2, 1, true, true},   // 2 ranks bound to a core each
		{2, 1, 1, true, false},  // 2 engines in a process bound to one core
		{1, 2, 1, false, false}, // 2 ranks sharing one core, nobody bound them
	} {
		if got := spinFits(c.live, c.procs, c.cpus, c.bound); got != c.want {
			t.Errorf("spinFits(live %d, procs %d, cpus %d, bound %v) = %v, want %v", c.live, c.procs, c.cpus, c.bound, got, c.want)
		}
	}
}

func TestYieldsWaiting(t *testing.T) {
	sized := func(count, esize int) []*task { return []*task{{call: call{count: count, esize: esize}}} }
	for _, c := range []struct {
		name     string
		spin     bool // the QPs' Poll moves data (not ft)
		streamed bool // every link is a stream socket (TCP)
		waited   time.Duration
		active   []*task
		want     bool
	}{
		{"16 KiB float32", true, false, 0, sized(4096, 4), true},
		{"256 KiB, nearly 2*spinFor", true, false, 2*spinFor - 1, sized(yieldMax, 1), true},
		{"2*spinFor", true, false, 2 * spinFor, sized(4096, 4), false},
		{"a byte over yieldMax", true, false, 0, sized(yieldMax+1, 1), false},
		{"small beside large", true, false, 0, append(sized(256, 4), sized(1<<20, 4)...), false},
		{"over ft", false, false, 0, sized(4096, 4), false},
		{"TCP, 16 MiB", true, true, 0, sized(4<<20, 4), true},
		{"TCP, small beside large", true, true, 2*spinFor - 1, append(sized(256, 4), sized(1<<20, 4)...), true},
		{"TCP, 2*spinFor", true, true, 2 * spinFor, sized(4096, 4), false},
	} {
		e := &engine{spin: c.spin, streamed: c.streamed, active: c.active}
		if got := e.yieldsWaiting(c.waited); got != c.want {
			t.Errorf("%s: yieldsWaiting(%v) = %v, want %v", c.name, c.waited, got, c.want)
		}
	}
}

// giveWay lets a goroutine waiting for the driver's processor run: with one
// processor (a rank bound to one CPU) the driver's yields must not leave a
// transport goroutine, back from poll(2) with bytes to write, queued behind
// the poll it is waiting for.
func TestGiveWayRunsThisProcessorsGoroutines(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for i := range 100 {
		var ran atomic.Bool
		go ran.Store(true)
		// The scheduler takes from the global queue (where Gosched puts
		// the yielder) first once in 61 turns: a waiting driver gives way
		// every 16th poll, so the next one lets it run.
		e := &engine{lend: true}
		for k := 0; k < 2 && !ran.Load(); k++ {
			e.giveWay()
		}
		if !ran.Load() {
			t.Fatalf("round %d: a goroutine made runnable before two giveWays had not run after them", i)
		}
	}
}

// inlineQP is a QP whose Poll moves all of its traffic (shm's).
type inlineQP struct{ transport.QP }

func (inlineQP) ProgressesInline() {}

// A driver lends its processor where any of its QPs moves traffic in
// goroutines of its own (TCP's writer), and not where every one moves it
// in Poll (shm): there the goroutines are napping stand-ins, and at 16
// ranks letting them run at every yield cut the all-reduce to a third.
func TestLendsProcessor(t *testing.T) {
	var goroutineQP transport.QP = struct{ transport.QP }{}
	for _, c := range []struct {
		name string
		qps  []transport.QP
		want bool
	}{
		{"all inline", []transport.QP{nil, inlineQP{}, inlineQP{}}, false},
		{"one with goroutines", []transport.QP{inlineQP{}, nil, goroutineQP}, true},
		{"only goroutines", []transport.QP{goroutineQP, nil}, true},
		{"alone", []transport.QP{nil}, false},
	} {
		if got := lendsProcessor(c.qps); got != c.want {
			t.Errorf("%s: lendsProcessor = %v, want %v", c.name, got, c.want)
		}
	}
}
