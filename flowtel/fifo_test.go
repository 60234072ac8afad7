package flowtel

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFIFOAgainstSlice runs random operations on a FIFO and on a plain
// slice, from several seeds and bounds, and compares them after each one.
func TestFIFOAgainstSlice(t *testing.T) {
	for _, tc := range []struct {
		name  string
		seed  uint64
		bound int
	}{
		{"unbounded", 1, 0},
		{"unbounded-2", 2, 0},
		{"bound-1", 3, 1},
		{"bound-5", 4, 5},
		{"bound-64", 5, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(tc.seed, 0))
			var q FIFO[int]
			var model []int
			for step := range 5000 {
				v := step
				switch op := rng.IntN(7); {
				case op <= 2 && tc.bound > 0:
					q.PushBounded(v, tc.bound)
					model = append(model, v)
					if len(model) > tc.bound {
						model = model[len(model)-tc.bound:]
					}
				case op <= 1:
					q.Push(v)
					model = append(model, v)
				case op == 2:
					*q.PushSlot() = v
					model = append(model, v)
				case op == 3 && len(model) > 0:
					if got := q.PopFront(); got != model[0] {
						t.Fatalf("step %d: PopFront %d, want %d", step, got, model[0])
					}
					model = model[1:]
				case op == 4 && len(model) > 0:
					if got := *q.Front(); got != model[0] {
						t.Fatalf("step %d: Front %d, want %d", step, got, model[0])
					}
					q.Drop()
					model = model[1:]
				case op == 5 && len(model) > 0:
					if got := q.PopBack(); got != model[len(model)-1] {
						t.Fatalf("step %d: PopBack %d, want %d", step, got, model[len(model)-1])
					}
					model = model[:len(model)-1]
				}
				got := make([]int, q.Len())
				for i := range got {
					got[i] = *q.At(i)
				}
				if !slices.Equal(got, model) {
					t.Fatalf("step %d: queue %v, want %v", step, got, model)
				}
				if tc.bound > 0 && len(q.buf) > tc.bound {
					t.Fatalf("step %d: storage %d beyond the bound %d", step, len(q.buf), tc.bound)
				}
			}
		})
	}
}

// TestFIFOPopClears checks that a popped slot no longer holds what it held,
// so a queue of buffers keeps none of them alive, while Drop leaves the
// element readable through the pointer Front gave.
func TestFIFOPopClears(t *testing.T) {
	var q FIFO[*int]
	a, b, c := new(int), new(int), new(int)
	q.Push(a)
	q.Push(b)
	q.Push(c)
	q.PopFront()
	q.PopBack()
	if q.buf[0] != nil || q.buf[2] != nil {
		t.Fatalf("popped slots hold %v and %v, want nil", q.buf[0], q.buf[2])
	}
	p := q.Front()
	q.Drop()
	if *p != b {
		t.Fatalf("after Drop, the front pointer reads %v, want the dropped element %v", *p, b)
	}
}
