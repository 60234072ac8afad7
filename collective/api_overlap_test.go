package collective

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// An input that overlaps the output but is not in place gets the right
// result on every path (the mailboxes whole and in slices, the engine),
// for all-gather, all-reduce and all-to-all: it is copied aside
// (inputApart), where the algorithms would overwrite it while still
// sending it.
func TestOverlappingInputCopiedAside(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	for _, tr := range []string{"shm", "tcp"} {
		comms := newLocal(t, 2, WithTransport(tr))
		for _, count := range []int{1024, 70000, 1 << 18} { // whole, sliced over shm, engine
			for _, op := range []Op{OpAllGather, OpAllReduce, OpAllToAll} {
				err := runOnAll(comms, func(c *Comm) error { return overlappingCall(ctx, c, op, count) })
				if err != nil {
					t.Fatalf("%s, %v of %d elements: %v", tr, op, count, err)
				}
			}
		}
	}
}

// overlappingCall runs op on c with an input of count elements that lies
// inside the output, shifted off this rank's place by 3 elements, and
// checks the result.
func overlappingCall(ctx context.Context, c *Comm, op Op, count int) error {
	r, n := c.Rank(), c.Size()
	val := func(rank, i int) float32 { return float32(rank*1000003 + i%4093) }
	switch op {
	case OpAllGather:
		out := make([]float32, n*count+3)
		in := out[(1-r)*count+3:][:count] // another rank's block of the output, shifted
		for i := range in {
			in[i] = val(r, i)
		}
		if err := AllGather(ctx, c, in, out[:n*count]); err != nil {
			return err
		}
		for p := range n {
			for i, v := range out[p*count : (p+1)*count] {
				if v != val(p, i) {
					return fmt.Errorf("rank %d: block %d element %d = %v, want %v", r, p, i, v, val(p, i))
				}
			}
		}
	case OpAllReduce:
		buf := make([]float32, count+3)
		in := buf[3:]
		for i := range in {
			in[i] = val(r, i)
		}
		if err := AllReduce(ctx, c, in, buf[:count], Sum); err != nil {
			return err
		}
		for i, v := range buf[:count] {
			if want := val(0, i) + val(1, i); v != want {
				return fmt.Errorf("rank %d: element %d = %v, want %v", r, i, v, want)
			}
		}
	case OpAllToAll:
		buf := make([]float32, n*count+3)
		in := buf[3:]
		for p := range n {
			for i := range count {
				in[p*count+i] = val(r, p*count+i)
			}
		}
		if err := c.AllToAll(ctx, Buf(in), Buf(buf[:n*count])); err != nil {
			return err
		}
		for p := range n {
			for i, v := range buf[p*count : (p+1)*count] {
				// Block p of the output is what rank p sent to this rank.
				if w := val(p, r*count+i); v != w {
					return fmt.Errorf("rank %d: block %d element %d = %v, want %v", r, p, i, v, w)
				}
			}
		}
	}
	return nil
}
