package collective

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// A one-shot all-reduce reduces the inputs in rank order on every rank:
// every rank gets the same bits, those of ((x0+x1)+x2)+x3, in place or not
// (recursive doubling's (x0+x1)+(x2+x3) differs in the last bits of most
// elements of these inputs, so the reference tells the schedules apart).
func TestOneShotSameBits(t *testing.T) {
	t.Parallel()
	const n, count = 4, 1000
	if !oneShot(count*4, n) {
		t.Fatalf("%d float32 on %d ranks do not go in one shot", count, n)
	}
	in := orderSensitive(n, count, 7)
	want := make([]float32, count)
	for i := range want {
		acc := in[0][i]
		for r := 1; r < n; r++ {
			acc += in[r][i]
		}
		want[i] = acc
	}
	comms := newLocal(t, n, WithAlgorithm(AlgoDirect))
	for _, inPlace := range []bool{false, true} {
		outs := allReduceOuts(t, comms, in, inPlace)
		for r, out := range outs {
			for i := range out {
				if math.Float32bits(out[i]) != math.Float32bits(want[i]) {
					t.Fatalf("in place %v, rank %d, element %d: %v (%#x), want %v (%#x), the inputs summed in rank order",
						inPlace, r, i, out[i], math.Float32bits(out[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}

// orderSensitive returns n ranks' inputs of count elements whose float32
// sums depend on the order they are added in: magnitudes from 1e-3 to 1e3.
func orderSensitive(n, count int, seed uint64) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 59))
	in := make([][]float32, n)
	for r := range in {
		in[r] = make([]float32, count)
		for i := range in[r] {
			in[r][i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
		}
	}
	return in
}

// allReduceOuts sums in[r] on every rank r of comms, in place or not, and
// returns each rank's output.
func allReduceOuts(t *testing.T, comms []*Comm, in [][]float32, inPlace bool) [][]float32 {
	t.Helper()
	outs := make([][]float32, len(comms))
	errs := onRanks(comms, func(c *Comm) error {
		src := append([]float32(nil), in[c.Rank()]...)
		dst := src
		if !inPlace {
			dst = make([]float32, len(src))
		}
		outs[c.Rank()] = dst
		return AllReduce(testCtx(t, time.Minute), c, src, dst, Sum)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("in place %v, rank %d: %v", inPlace, r, err)
		}
	}
	return outs
}
