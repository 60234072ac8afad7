// Package gpubench holds what cmd/vccl-gpubench runs on a GPU machine: the
// correctness matrix of the copy-engine collectives against the host
// reference, and the measurements side by side with NCCL.
package gpubench

import (
	"context"
	"fmt"
	"io"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/ce"
	"github.com/vccl-go/vccl/gpu/cuda"
	"github.com/vccl-go/vccl/gpu/kernels"
)

// CheckCounts are the element counts of the all-reduce check: the
// one-kernel path, the copy-engine path with one and several chunks, and
// counts that leave ragged tails.
var CheckCounts = []int{1, 7, 1000, 65537, 1<<20 + 5}

// Check runs every datatype × reduction × count, out of place and in place,
// then all-gather and send/recv, on a 2-GPU group (give it a small SmallMax
// and Chunk so that both all-reduce paths and several chunks are covered), comparing each rank's
// output with kernels.Reference. It returns the number of failures.
func Check(ctx context.Context, g *ce.Group, w io.Writer) (failed int, err error) {
	maxCount := 0
	for _, c := range CheckCounts {
		maxCount = max(maxCount, c)
	}
	maxBytes := maxCount * 8
	var send, recv [2]cuda.DevicePtr
	for r := 0; r < 2; r++ {
		if send[r], err = g.Alloc(r, maxBytes); err != nil {
			return 0, err
		}
		defer g.Free(r, send[r])
		if recv[r], err = g.Alloc(r, 2*maxBytes); err != nil {
			return 0, err
		}
		defer g.Free(r, recv[r])
	}
	total := 0
	for _, dt := range collective.Datatypes() {
		for _, op := range collective.ReduceOps() {
			bad := 0
			for _, count := range CheckCounts {
				n := count * dt.Size()
				in := [][]byte{make([]byte, n), make([]byte, n)}
				kernels.Fill(dt, in[0], uint64(count)*131+uint64(dt)*7+uint64(op))
				kernels.Fill(dt, in[1], uint64(count)*131+uint64(dt)*7+uint64(op)+1000)
				want := kernels.Reference(dt, op, in)
				for _, inPlace := range []bool{false, true} {
					total++
					src := send
					if inPlace {
						src = recv
					}
					for r := 0; r < 2; r++ {
						if err := g.Upload(r, src[r], in[r]); err != nil {
							return failed, err
						}
						if !inPlace {
							if err := g.Memset(r, recv[r], 0xA5, n); err != nil {
								return failed, err
							}
						}
					}
					if err := g.AllReduce(ctx, src[:], recv[:], count, dt, op); err != nil {
						return failed, fmt.Errorf("all-reduce %v %v count %d: %w", dt, op, count, err)
					}
					if err := g.Synchronize(ctx); err != nil {
						return failed, fmt.Errorf("all-reduce %v %v count %d: %w", dt, op, count, err)
					}
					for r := 0; r < 2; r++ {
						got := make([]byte, n)
						if err := g.Download(r, got, recv[r]); err != nil {
							return failed, err
						}
						if i := kernels.Equal(dt, got, want); i >= 0 {
							bad++
							failed++
							sz := dt.Size()
							fmt.Fprintf(w, "FAIL allreduce %v %v count=%d inplace=%v rank %d: element %d got %x want %x (a %x b %x)\n",
								dt, op, count, inPlace, r, i, got[i*sz:(i+1)*sz], want[i*sz:(i+1)*sz], in[0][i*sz:(i+1)*sz], in[1][i*sz:(i+1)*sz])
						}
					}
				}
			}
			if bad == 0 {
				fmt.Fprintf(w, "ok   allreduce %-8v %-4v counts %v, out of place and in place, both ranks\n", dt, op, CheckCounts)
			}
		}
	}
	// All-gather and send/recv move bytes: check odd sizes.
	for _, n := range []int{1, 13, 4096, 1<<20 + 3, maxBytes} {
		total++
		in := [][]byte{make([]byte, n), make([]byte, n)}
		kernels.Fill(collective.Uint8, in[0], uint64(n))
		kernels.Fill(collective.Uint8, in[1], uint64(n)+1)
		for r := 0; r < 2; r++ {
			if err := g.Upload(r, send[r], in[r]); err != nil {
				return failed, err
			}
			if err := g.Memset(r, recv[r], 0x5A, 2*n); err != nil {
				return failed, err
			}
		}
		if err := g.AllGather(ctx, send[:], recv[:], n); err != nil {
			return failed, err
		}
		if err := g.Synchronize(ctx); err != nil {
			return failed, err
		}
		want := append(append([]byte(nil), in[0]...), in[1]...)
		okAll := true
		for r := 0; r < 2; r++ {
			got := make([]byte, 2*n)
			if err := g.Download(r, got, recv[r]); err != nil {
				return failed, err
			}
			if i := kernels.Equal(collective.Uint8, got, want); i >= 0 {
				failed++
				okAll = false
				fmt.Fprintf(w, "FAIL allgather %d bytes rank %d: byte %d\n", n, r, i)
			}
		}
		// Both directions at once.
		total++
		for r := 0; r < 2; r++ {
			if err := g.Memset(r, recv[r], 0x5A, n); err != nil {
				return failed, err
			}
		}
		if err := g.SendRecv(ctx, ce.Transfer{From: 0, To: 1, Src: send[0], Dst: recv[1], Bytes: n},
			ce.Transfer{From: 1, To: 0, Src: send[1], Dst: recv[0], Bytes: n}); err != nil {
			return failed, err
		}
		if err := g.Synchronize(ctx); err != nil {
			return failed, err
		}
		for r := 0; r < 2; r++ {
			got := make([]byte, n)
			if err := g.Download(r, got, recv[r]); err != nil {
				return failed, err
			}
			if i := kernels.Equal(collective.Uint8, got, in[1-r]); i >= 0 {
				failed++
				okAll = false
				fmt.Fprintf(w, "FAIL sendrecv %d bytes into rank %d: byte %d\n", n, r, i)
			}
		}
		if okAll {
			fmt.Fprintf(w, "ok   allgather and sendrecv (both directions) %d bytes\n", n)
		}
	}
	fmt.Fprintf(w, "check: %d cases, %d failed\n", total, failed)
	return failed, nil
}
