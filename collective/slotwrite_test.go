package collective

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// slotWrites keeps the way that won most pairs of its measurement, a tie
// going to streaming, per size class, and measures again after
// reprobeEvery calls.
func TestSlotWritesChoose(t *testing.T) {
	const n = 64 << 10
	for _, tc := range []struct {
		name           string
		streamNs       int64
		plainNs        func(pair int) int64
		wantPlain      bool
		failEveryThird bool // every third streamed call fails: not reported
	}{
		{name: "plain faster", streamNs: 100, plainNs: func(int) int64 { return 80 }, wantPlain: true},
		{name: "stream faster", streamNs: 100, plainNs: func(int) int64 { return 120 }},
		{name: "tie", streamNs: 100, plainNs: func(p int) int64 { return 100 + int64(p%2)*40 - 20 }}, // plain blocks win half
		{name: "plain faster, calls failing", streamNs: 100, plainNs: func(int) int64 { return 80 }, wantPlain: true, failEveryThird: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w slotWrites
			calls, plainCalls := 0, 0
			for !w.class[slotClassOf(n)].chosen {
				if calls > 10*measureCalls {
					t.Fatalf("no choice after %d calls", calls)
				}
				calls++
				stream, timed := w.stream(n)
				if !timed {
					t.Fatalf("call %d of the measurement not timed", calls)
				}
				if stream {
					if tc.failEveryThird && calls%3 == 0 {
						continue
					}
					w.done(n, tc.streamNs)
					continue
				}
				w.done(n, tc.plainNs(plainCalls/probeBlock))
				plainCalls++
			}
			pairs := plainCalls / probeBlock
			if pairs != probePairs {
				t.Errorf("chose after %d pairs, want %d", pairs, probePairs)
			}
			for i := range reprobeEvery {
				stream, timed := w.stream(n)
				if timed || stream == tc.wantPlain {
					t.Fatalf("call %d after the choice: stream %v timed %v, want stream %v untimed", i, stream, timed, !tc.wantPlain)
				}
			}
			if _, timed := w.stream(n); !timed {
				t.Fatalf("no new measurement after %d calls", reprobeEvery)
			}
			// The other classes are still measuring.
			if _, timed := w.stream(streamSlotMin); !timed {
				t.Fatal("another size class shares the choice")
			}
		})
	}
}

func TestSlotClassOf(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{streamSlotMin, 0}, {2*streamSlotMin - 1, 0}, {2 * streamSlotMin, 1},
		{64 << 10, 2}, {256 << 10, 4}, {1 << 30, slotClasses - 1}, {0, 0},
	} {
		if got := slotClassOf(tc.n); got != tc.want {
			t.Errorf("slotClassOf(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// 2 ranks over shm measure both ways of writing their slots (all-gather,
// broadcast, and both sliced beyond a slot) with every result whole, and
// reach a choice.
func TestSlotWritesBothWaysOverShm(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	comms := newLocal(t, 2, WithTransport("shm"))
	if comms[0].small == nil {
		t.Fatal("a communicator joined over shm has no mailbox path")
	}
	for _, tc := range []struct {
		op    Op
		bytes int
	}{
		{OpAllGather, 64 << 10},
		{OpBroadcast, 64 << 10},
		{OpAllGather, 4 * slotMax}, // sliced
		{OpBroadcast, 4 * slotMax},
	} {
		n := tc.bytes / 4
		for call := range measureCalls {
			err := runOnAll(comms, func(c *Comm) error {
				fill := func(b []float32, rank int) {
					for i := range b {
						b[i] = float32(rank*1000003 + call*7919 + i)
					}
				}
				switch tc.op {
				case OpAllGather:
					in, out := make([]float32, n), make([]float32, 2*n)
					fill(in, c.Rank())
					if err := c.AllGather(ctx, Buf(in), Buf(out)); err != nil {
						return err
					}
					for r := range 2 {
						want := make([]float32, n)
						fill(want, r)
						if !slices.Equal(out[r*n:(r+1)*n], want) {
							return fmt.Errorf("call %d: rank %d's block wrong", call, r)
						}
					}
				case OpBroadcast:
					buf, want := make([]float32, n), make([]float32, n)
					fill(want, 1)
					if c.Rank() == 1 {
						copy(buf, want)
					}
					if err := c.Broadcast(ctx, Buf(buf), Buf(buf), 1); err != nil {
						return err
					}
					if !slices.Equal(buf, want) {
						return fmt.Errorf("call %d: broadcast wrong", call)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%v of %d bytes a rank: %v", tc.op, tc.bytes, err)
			}
		}
		// The root alone writes a broadcast's slots.
		writer := comms[0]
		if tc.op == OpBroadcast {
			writer = comms[1]
		}
		if !writer.small.writes.class[slotClassOf(tc.bytes)].chosen {
			t.Errorf("%v of %d bytes a rank: rank %d measured no choice in %d calls", tc.op, tc.bytes, writer.Rank(), measureCalls)
		}
	}
}
