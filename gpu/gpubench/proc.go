package gpubench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/gpu/ce"
	"github.com/vccl-go/vccl/gpu/cuda"
	"github.com/vccl-go/vccl/gpu/kernels"
)

// ProcSizes are the transfer sizes of ProcCheck.
var ProcSizes = []int{1, 13, 4096, 1<<20 + 3, 8 << 20}

func pieceSeed(n, rank, salt int) uint64 { return uint64(n)*977 + uint64(rank)*31 + uint64(salt)*7919 }

func piece(n, rank, salt int) []byte {
	b := make([]byte, n)
	kernels.Fill(collective.Uint8, b, pieceSeed(n, rank, salt))
	return b
}

// procBufs are a Proc rank's check buffers: a plain send buffer and a
// registered receive buffer of size ranks × maxBytes.
type procBufs struct {
	p    *ce.Proc
	send cuda.DevicePtr
	recv cuda.DevicePtr
	mem  *ce.Mem
	max  int
}

func newProcBufs(ctx context.Context, p *ce.Proc, max int) (*procBufs, error) {
	g := p.Group()
	b := &procBufs{p: p, max: max}
	var err error
	if b.send, err = g.Alloc(0, max); err != nil {
		return nil, err
	}
	if b.recv, err = g.Alloc(0, p.Size()*max); err != nil {
		g.Free(0, b.send)
		return nil, err
	}
	if b.mem, err = p.Register(ctx, b.recv, p.Size()*max); err != nil {
		g.Free(0, b.send)
		g.Free(0, b.recv)
		return nil, err
	}
	return b, nil
}

func (b *procBufs) free(ctx context.Context) {
	b.p.Deregister(ctx, b.mem)
	b.p.Group().Free(0, b.send)
	b.p.Group().Free(0, b.recv)
}

// ProcCheck checks a Proc job's transfers against the data each rank
// uploaded (every rank can compute every piece): the ring (each rank sends
// to the next and receives from the previous in one call, both directions
// at once for 2 ranks), one way from rank 0 to rank 1, all-gather, 40
// transfers in flight at once (the mailbox's slots wrap), and a size
// mismatch, which both ends must report, after which the pair still works.
// Every rank calls it; it returns this rank's failures.
func ProcCheck(ctx context.Context, p *ce.Proc, w io.Writer) (failed int, err error) {
	me, n := p.Rank(), p.Size()
	g := p.Group()
	maxBytes := slices.Max(ProcSizes)
	b, err := newProcBufs(ctx, p, maxBytes)
	if err != nil {
		return 0, err
	}
	defer b.free(ctx)
	report := func(what string, got, want []byte) {
		if i := kernels.Equal(collective.Uint8, got, want); i >= 0 {
			failed++
			fmt.Fprintf(w, "FAIL rank %d %s: byte %d of %d got %#x want %#x\n", me, what, i, len(want), got[i], want[i])
		}
	}
	poison := func(bytes int) error { return g.Memset(0, b.recv, 0x5A, bytes) }
	download := func(off, bytes int) ([]byte, error) {
		got := make([]byte, bytes)
		if err := p.Synchronize(ctx); err != nil {
			return nil, err
		}
		return got, g.Download(0, got, b.recv.Add(off))
	}
	total := 0
	for _, sz := range ProcSizes {
		// Ring.
		total++
		if err := g.Upload(0, b.send, piece(sz, me, 1)); err != nil {
			return failed, err
		}
		if err := poison(sz); err != nil {
			return failed, err
		}
		next, prev := (me+1)%n, (me-1+n)%n
		if err := p.SendRecv(ctx, ce.SendTo(next, b.send, sz), ce.RecvInto(prev, b.mem, 0, sz)); err != nil {
			return failed, fmt.Errorf("ring %d bytes: %w", sz, err)
		}
		got, err := download(0, sz)
		if err != nil {
			return failed, err
		}
		report(fmt.Sprintf("ring %d bytes from rank %d", sz, prev), got, piece(sz, prev, 1))
		// One way, 0 -> 1, into an offset.
		total++
		if err := g.Upload(0, b.send, piece(sz, me, 2)); err != nil {
			return failed, err
		}
		if err := poison(sz + 64); err != nil {
			return failed, err
		}
		switch me {
		case 0:
			err = p.SendRecv(ctx, ce.SendTo(1, b.send, sz))
		case 1:
			err = p.SendRecv(ctx, ce.RecvInto(0, b.mem, 64, sz))
		}
		if err != nil {
			return failed, fmt.Errorf("one way %d bytes: %w", sz, err)
		}
		if me == 1 {
			got, err := download(0, sz+64)
			if err != nil {
				return failed, err
			}
			report(fmt.Sprintf("one way %d bytes", sz), got[64:], piece(sz, 0, 2))
			report(fmt.Sprintf("one way %d bytes: bytes before the offset untouched", sz), got[:64], bytesOf(0x5A, 64))
		}
		// All-gather.
		total++
		if err := g.Upload(0, b.send, piece(sz, me, 3)); err != nil {
			return failed, err
		}
		if err := poison(n * sz); err != nil {
			return failed, err
		}
		if err := p.AllGather(ctx, b.send, b.mem, sz); err != nil {
			return failed, fmt.Errorf("all-gather %d bytes: %w", sz, err)
		}
		got, err = download(0, n*sz)
		if err != nil {
			return failed, err
		}
		var want []byte
		for q := 0; q < n; q++ {
			want = append(want, piece(sz, q, 3)...)
		}
		report(fmt.Sprintf("all-gather %d bytes per rank", sz), got, want)
	}
	// Many in flight: 40 calls of one 4 KiB piece each around the ring,
	// each into its own offset, synchronized once.
	total++
	const k, sz = 40, 4096
	src := make([]byte, k*sz)
	for i := 0; i < k; i++ {
		copy(src[i*sz:], piece(sz, me, 100+i))
	}
	if err := g.Upload(0, b.send, src); err != nil {
		return failed, err
	}
	if err := poison(k * sz); err != nil {
		return failed, err
	}
	next, prev := (me+1)%n, (me-1+n)%n
	for i := 0; i < k; i++ {
		if err := p.SendRecv(ctx, ce.SendTo(next, b.send.Add(i*sz), sz), ce.RecvInto(prev, b.mem, i*sz, sz)); err != nil {
			return failed, fmt.Errorf("in flight %d: %w", i, err)
		}
	}
	got, err := download(0, k*sz)
	if err != nil {
		return failed, err
	}
	var want []byte
	for i := 0; i < k; i++ {
		want = append(want, piece(sz, prev, 100+i)...)
	}
	report("40 transfers in flight", got, want)
	// A size mismatch fails on both ends; the pair works afterwards.
	if n >= 2 && me < 2 {
		total++
		var err error
		if me == 0 {
			err = p.SendRecv(ctx, ce.SendTo(1, b.send, 100))
		} else {
			err = p.SendRecv(ctx, ce.RecvInto(0, b.mem, 0, 200))
		}
		if err == nil {
			failed++
			fmt.Fprintf(w, "FAIL rank %d: a send of 100 bytes matched a receive of 200 without an error\n", me)
		}
		if err := g.Upload(0, b.send, piece(sz, me, 7)); err != nil {
			return failed, err
		}
		if me == 0 {
			err = p.SendRecv(ctx, ce.SendTo(1, b.send, sz))
		} else {
			err = p.SendRecv(ctx, ce.RecvInto(0, b.mem, 0, sz))
		}
		if err != nil {
			return failed, fmt.Errorf("after a mismatch: %w", err)
		}
		if me == 1 {
			got, err := download(0, sz)
			if err != nil {
				return failed, err
			}
			report("a transfer after a mismatch", got, piece(sz, 0, 7))
		}
	}
	if err := p.Synchronize(ctx); err != nil {
		return failed, err
	}
	fmt.Fprintf(w, "proc check rank %d of %d: %d cases, %d failed (sizes %v: ring, one way, all-gather; 40 in flight; mismatch)\n", me, n, total, failed, ProcSizes)
	return failed, nil
}

func bytesOf(v byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = v
	}
	return b
}

// ProcBench measures a Proc job (every rank calls it; rank 0 writes):
// send/recv one way and both ways and all-gather of n bytes, and telemetry
// on against off for send/recv of n and 1 MiB. Times are the slowest rank's,
// per call, of back-to-back calls synced once, median of reps runs that
// start together (a host barrier).
func ProcBench(ctx context.Context, p *ce.Proc, w io.Writer, n int, win *flowtel.Window, col *flowtel.Collector) error {
	me, size := p.Rank(), p.Size()
	if size < 2 {
		return errors.New("ProcBench needs 2 ranks")
	}
	b, err := newProcBufs(ctx, p, n)
	if err != nil {
		return err
	}
	defer b.free(ctx)
	g := p.Group()
	if err := g.Memset(0, b.send, byte(0x3c+me), n); err != nil {
		return err
	}
	out := func(format string, a ...any) {
		if me == 0 {
			fmt.Fprintf(w, format, a...)
		}
	}
	// timed runs op k times on every rank and returns the slowest rank's
	// time per call.
	timed := func(k int, op func() error) (time.Duration, error) {
		run := func(k int) (time.Duration, error) {
			if err := p.Comm().Barrier(ctx); err != nil {
				return 0, err
			}
			t0 := time.Now()
			for i := 0; i < k; i++ {
				if err := op(); err != nil {
					return 0, err
				}
			}
			if err := p.Synchronize(ctx); err != nil {
				return 0, err
			}
			mine := make([]byte, 8)
			binary.LittleEndian.PutUint64(mine, uint64(time.Since(t0)))
			all := make([]byte, 8*size)
			if err := p.Comm().AllGather(ctx, collective.Bytes(mine, collective.Uint8), collective.Bytes(all, collective.Uint8)); err != nil {
				return 0, err
			}
			var worst time.Duration
			for q := 0; q < size; q++ {
				worst = max(worst, time.Duration(binary.LittleEndian.Uint64(all[8*q:])))
			}
			return worst / time.Duration(k), nil
		}
		if _, err := run(2); err != nil {
			return 0, err
		}
		var ts []time.Duration
		for i := 0; i < 3; i++ {
			t, err := run(k)
			if err != nil {
				return 0, err
			}
			ts = append(ts, t)
		}
		slices.Sort(ts)
		return ts[1], nil
	}
	calls := func(bytes int) int { return max(10, int(min(2000, int64(40e-3*380e9)/int64(max(bytes, 1))))) }
	oneWay := func(bytes int) func() error {
		return func() error {
			switch me {
			case 0:
				return p.SendRecv(ctx, ce.SendTo(1, b.send, bytes))
			case 1:
				return p.SendRecv(ctx, ce.RecvInto(0, b.mem, 0, bytes))
			}
			return nil
		}
	}
	both := func(bytes int) func() error {
		return func() error {
			next, prev := (me+1)%size, (me-1+size)%size
			return p.SendRecv(ctx, ce.SendTo(next, b.send, bytes), ce.RecvInto(prev, b.mem, 0, bytes))
		}
	}
	out("\n## two processes, one GPU each (%d ranks): CUDA IPC buffers and events, copy engines, 0 SMs\n", size)
	out("| operation | bytes | µs per call | GB/s (per direction; all-gather: busbw) |\n|---|---|---|---|\n")
	p.SetTelemetry(false)
	for _, c := range []struct {
		name string
		op   func() error
	}{{"send/recv 0→1", oneWay(n)}, {"send/recv ring (both directions at 2 ranks)", both(n)}, {"all-gather", func() error { return p.AllGather(ctx, b.send, b.mem, n) }}} {
		t, err := timed(calls(n), c.op)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		bw := gbps(n, t)
		if c.name == "all-gather" {
			bw = gbps(n*(size-1), t)
		}
		out("| %s | %s | %.1f | %.1f |\n", c.name, sizeName(n), us(t), bw)
	}
	for _, sz := range []int{4 << 10, 1 << 20} {
		t, err := timed(calls(sz), oneWay(sz))
		if err != nil {
			return err
		}
		out("| send/recv 0→1 | %s | %.1f | %.1f |\n", sizeName(sz), us(t), gbps(sz, t))
	}
	if col == nil {
		return nil
	}
	out("\n## two processes: telemetry on vs off (send/recv 0→1; on = a wr_post and a wc record per copy on both ranks)\n| bytes | off µs | on µs | on/off |\n|---|---|---|---|\n")
	for _, sz := range []int{1 << 20, n} {
		off, on, err := offOn(3, p.SetTelemetry, func() (time.Duration, error) { return timed(calls(sz), oneWay(sz)) })
		if err != nil {
			return err
		}
		out("| %s | %.1f | %.1f | %.3f |\n", sizeName(sz), us(off), us(on), float64(on)/float64(off))
	}
	p.SetTelemetry(false)
	if err := col.Flush(ctx); err != nil {
		return err
	}
	win.Reset()
	p.SetTelemetry(true)
	for i := 0; i < 20; i++ {
		if err := both(n)(); err != nil {
			return err
		}
	}
	if err := p.Synchronize(ctx); err != nil {
		return err
	}
	p.SetTelemetry(false)
	if err := col.Flush(ctx); err != nil {
		return err
	}
	// Each rank's window sees its own records: print them in rank order.
	for q := 0; q < size; q++ {
		if err := p.Comm().Barrier(ctx); err != nil {
			return err
		}
		if q == me {
			fmt.Fprintf(w, "rank %d's window after 20 ring send/recv of %s (flowtel.Window over its GPU records):\n", me, sizeName(n))
			for _, s := range win.Snapshot() {
				fmt.Fprintf(w, "  %-28s completions=%d bytes=%d bw=%.1f GB/s lat p50=%.1f µs unmatched=%d\n",
					s.Key, s.Completions, s.Bytes, s.BandwidthBps/1e9, float64(s.LatP50Ns)/1e3, s.Unmatched)
			}
		}
	}
	return p.Comm().Barrier(ctx)
}
