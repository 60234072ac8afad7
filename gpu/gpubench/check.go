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
		if send[r], err = g.Alloc(r, 2*maxBytes); err != nil {
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
			nf, nt, err := checkReductions(ctx, g, w, dt, op, send, recv)
			failed += nf
			total += nt
			if err != nil {
				return failed, err
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
		// Broadcast from each root, out of place and in place.
		for root := 0; root < 2; root++ {
			for _, inPlace := range []bool{false, true} {
				total++
				for r := 0; r < 2; r++ {
					if err := g.Upload(r, send[r], in[r]); err != nil {
						return failed, err
					}
					if err := g.Memset(r, recv[r], 0x5A, n); err != nil {
						return failed, err
					}
				}
				src := send[root]
				if inPlace {
					if err := g.Upload(root, recv[root], in[root]); err != nil {
						return failed, err
					}
					src = recv[root]
				}
				if err := g.Broadcast(ctx, src, recv[:], n, root); err != nil {
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
					if i := kernels.Equal(collective.Uint8, got, in[root]); i >= 0 {
						failed++
						okAll = false
						fmt.Fprintf(w, "FAIL broadcast %d bytes root %d inplace=%v rank %d: byte %d\n", n, root, inPlace, r, i)
					}
				}
			}
		}
		if okAll {
			fmt.Fprintf(w, "ok   allgather, sendrecv (both directions), broadcast (both roots, in and out of place) %d bytes\n", n)
		}
	}
	fmt.Fprintf(w, "check: %d cases, %d failed\n", total, failed)
	return failed, nil
}

// checkReductions checks reduce-scatter (2 × count elements in, count out
// per rank, out of place and in place) and reduce (to each root, out of
// place and in place) of one datatype and reduction at every count.
func checkReductions(ctx context.Context, g *ce.Group, w io.Writer, dt collective.Datatype, op collective.ReduceOp, send, recv [2]cuda.DevicePtr) (failed, total int, err error) {
	sz := dt.Size()
	fail := func(what string, count int, inPlace bool, r, i int, got, want []byte) {
		failed++
		fmt.Fprintf(w, "FAIL %s %v %v count=%d inplace=%v rank %d: element %d got %x want %x\n",
			what, dt, op, count, inPlace, r, i, got[i*sz:(i+1)*sz], want[i*sz:(i+1)*sz])
	}
	bad0 := 0
	for ci, count := range CheckCounts {
		// Reduce-scatter: each rank's input is 2*count elements.
		n := 2 * count * sz
		in := [][]byte{make([]byte, n), make([]byte, n)}
		kernels.Fill(dt, in[0], uint64(count)*17+uint64(dt)*3+uint64(op)+5000)
		kernels.Fill(dt, in[1], uint64(count)*17+uint64(dt)*3+uint64(op)+6000)
		want := kernels.Reference(dt, op, in)
		for _, inPlace := range []bool{false, true} {
			total++
			var dst [2]cuda.DevicePtr
			src := send
			for r := 0; r < 2; r++ {
				dst[r] = recv[r]
				if inPlace {
					src[r] = recv[r]
					dst[r] = recv[r].Add(r * count * sz)
				}
				if err := g.Upload(r, src[r], in[r]); err != nil {
					return failed, total, err
				}
				if !inPlace {
					if err := g.Memset(r, recv[r], 0xA5, count*sz); err != nil {
						return failed, total, err
					}
				}
			}
			if err := g.ReduceScatter(ctx, src[:], dst[:], count, dt, op); err != nil {
				return failed, total, fmt.Errorf("reduce-scatter %v %v count %d: %w", dt, op, count, err)
			}
			if err := g.Synchronize(ctx); err != nil {
				return failed, total, fmt.Errorf("reduce-scatter %v %v count %d: %w", dt, op, count, err)
			}
			for r := 0; r < 2; r++ {
				got := make([]byte, count*sz)
				if err := g.Download(r, got, dst[r]); err != nil {
					return failed, total, err
				}
				wr := want[r*count*sz : (r+1)*count*sz]
				if i := kernels.Equal(dt, got, wr); i >= 0 {
					fail("reducescatter", count, inPlace, r, i, got, wr)
				}
			}
		}
		// Reduce: count elements, root alternating with the count; out
		// of place to one root, in place to the other.
		n = count * sz
		in = [][]byte{in[0][:n], in[1][:n]}
		want = kernels.Reference(dt, op, in)
		for k, inPlace := range []bool{false, true} {
			total++
			root := (ci + k) % 2
			src := send
			dst := recv[root]
			for r := 0; r < 2; r++ {
				if inPlace && r == root {
					src[r] = recv[r]
				}
				if err := g.Upload(r, src[r], in[r]); err != nil {
					return failed, total, err
				}
			}
			if !inPlace {
				if err := g.Memset(root, dst, 0xA5, n); err != nil {
					return failed, total, err
				}
			}
			if err := g.Reduce(ctx, src[:], dst, count, dt, op, root); err != nil {
				return failed, total, fmt.Errorf("reduce %v %v count %d: %w", dt, op, count, err)
			}
			if err := g.Synchronize(ctx); err != nil {
				return failed, total, fmt.Errorf("reduce %v %v count %d: %w", dt, op, count, err)
			}
			got := make([]byte, n)
			if err := g.Download(root, got, dst); err != nil {
				return failed, total, err
			}
			if i := kernels.Equal(dt, got, want); i >= 0 {
				fail(fmt.Sprintf("reduce(root %d)", root), count, inPlace, root, i, got, want)
			}
		}
	}
	if failed == bad0 {
		fmt.Fprintf(w, "ok   reducescatter and reduce %-8v %-4v counts %v, out of place and in place, both ranks / both roots\n", dt, op, CheckCounts)
	}
	return failed, total, nil
}
