package gpubench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/gpu/ce"
	"github.com/vccl-go/vccl/gpu/cuda"
	"github.com/vccl-go/vccl/gpu/nccl"
	"github.com/vccl-go/vccl/gpu/nvml"
)

// Bench measures the group, NCCL alongside when comms is non-nil, on the
// same buffers and streams, and writes a table.
type Bench struct {
	G      *ce.Group
	Comms  []nccl.Comm // nil: VCCL only
	W      io.Writer
	Target time.Duration // time per measurement (default 40 ms)
	Reps   int           // measurements per row, median reported (default 3)

	send, recv [2]cuda.DevicePtr
	cap        int
}

// Alloc gives each rank send and receive buffers of n bytes (receive 2n,
// for all-gather) filled with data.
func (b *Bench) Alloc(n int) error {
	b.cap = n
	for r := 0; r < 2; r++ {
		var err error
		if b.send[r], err = b.G.Alloc(r, n); err != nil {
			return err
		}
		if b.recv[r], err = b.G.Alloc(r, 2*n); err != nil {
			return err
		}
		if err := b.G.Memset(r, b.send[r], byte(0x3c+r), n); err != nil { // finite float32s, not zeros
			return err
		}
		if err := b.G.Memset(r, b.recv[r], 0x3c, 2*n); err != nil {
			return err
		}
	}
	return b.G.Synchronize(context.Background())
}

// Free releases the buffers.
func (b *Bench) Free() {
	for r := 0; r < 2; r++ {
		b.G.Free(r, b.send[r])
		b.G.Free(r, b.recv[r])
	}
}

// time runs enqueue back to back and returns the time per call: first one
// call to warm up and estimate, then enough calls to fill Target, synced
// once at the end (as nccl-tests do), Reps times, median.
func (b *Bench) time(enqueue func() error) (time.Duration, error) {
	ctx := context.Background()
	target := b.Target
	if target == 0 {
		target = 40 * time.Millisecond
	}
	reps := b.Reps
	if reps == 0 {
		reps = 3
	}
	run := func(n int) (time.Duration, error) {
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if err := enqueue(); err != nil {
				return 0, err
			}
		}
		if err := b.G.Synchronize(ctx); err != nil {
			return 0, err
		}
		return time.Since(t0) / time.Duration(n), nil
	}
	if _, err := run(2); err != nil {
		return 0, err
	}
	est, err := run(3)
	if err != nil {
		return 0, err
	}
	n := int(target / max(est, time.Microsecond))
	n = max(5, min(n, 5000))
	var ts []time.Duration
	for i := 0; i < reps; i++ {
		t, err := run(n)
		if err != nil {
			return 0, err
		}
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts[len(ts)/2], nil
}

// latency is time with a sync after every call: what a caller that waits
// for each operation sees.
func (b *Bench) latency(enqueue func() error, n int) (time.Duration, error) {
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if err := enqueue(); err != nil {
			return 0, err
		}
		if err := b.G.Synchronize(ctx); err != nil {
			return 0, err
		}
	}
	ts := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := enqueue(); err != nil {
			return 0, err
		}
		if err := b.G.Synchronize(ctx); err != nil {
			return 0, err
		}
		ts = append(ts, time.Since(t0))
	}
	slices.Sort(ts)
	return ts[len(ts)/2], nil
}

func (b *Bench) vcclAllReduce(count int, dt collective.Datatype) func() error {
	return func() error {
		return b.G.AllReduce(context.Background(), b.send[:], b.recv[:], count, dt, collective.Sum)
	}
}

func (b *Bench) ncclAllReduce(count int, dt collective.Datatype) func() error {
	return func() error {
		return b.G.Do(0, func() error {
			if err := nccl.GroupStart(); err != nil {
				return err
			}
			for r := 0; r < 2; r++ {
				if err := b.Comms[r].AllReduce(b.send[r], b.recv[r], count, dt, collective.Sum, b.G.Stream(r)); err != nil {
					return err
				}
			}
			return nccl.GroupEnd()
		})
	}
}

func gbps(bytes int, t time.Duration) float64 { return float64(bytes) / t.Seconds() / 1e9 }

func sizeName(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// AllReduce prints one row per size: float32 sum, busbw (= algbw at 2
// ranks), both libraries and the ratio.
func (b *Bench) AllReduce(sizes []int) error {
	fmt.Fprintf(b.W, "\n## all-reduce float32 sum, 2 GPUs (back-to-back calls, one sync; busbw = bytes/time at 2 ranks)\n")
	fmt.Fprintf(b.W, "| bytes | VCCL µs | VCCL busbw GB/s | VCCL path, SMs | NCCL µs | NCCL busbw GB/s | VCCL/NCCL busbw |\n|---|---|---|---|---|---|---|\n")
	for _, n := range sizes {
		count := n / 4
		tv, err := b.time(b.vcclAllReduce(count, collective.Float32))
		if err != nil {
			return err
		}
		path := fmt.Sprintf("copy engines + kernel, %d SMs", b.G.SMs())
		if n <= b.G.Config().SmallMax {
			path = fmt.Sprintf("one kernel/GPU (peer reads), ≤%d SMs", b.G.SMs())
		}
		row := fmt.Sprintf("| %s | %.1f | %.1f | %s |", sizeName(n), us(tv), gbps(n, tv), path)
		if b.Comms != nil {
			tn, err := b.time(b.ncclAllReduce(count, collective.Float32))
			if err != nil {
				return err
			}
			row += fmt.Sprintf(" %.1f | %.1f | %.2f× |", us(tn), gbps(n, tn), float64(tn)/float64(tv))
		} else {
			row += " – | – | – |"
		}
		fmt.Fprintln(b.W, row)
	}
	return nil
}

func us(t time.Duration) float64 { return float64(t) / 1e3 }

// Latency prints the median time of one all-reduce of n bytes waited for
// on its own.
func (b *Bench) Latency(n int) error {
	count := n / 4
	tv, err := b.latency(b.vcclAllReduce(count, collective.Float32), 2000)
	if err != nil {
		return err
	}
	row := fmt.Sprintf("\nall-reduce %s, each call waited for (median of 2000): VCCL %.1f µs", sizeName(n), us(tv))
	if b.Comms != nil {
		tn, err := b.latency(b.ncclAllReduce(count, collective.Float32), 2000)
		if err != nil {
			return err
		}
		row += fmt.Sprintf(", NCCL %.1f µs, VCCL/NCCL time %.2f×", us(tn), float64(tv)/float64(tn))
	}
	fmt.Fprintln(b.W, row)
	return nil
}

// SendRecv prints point-to-point bandwidth, one way and both ways at once.
func (b *Bench) SendRecv(n int) error {
	ctx := context.Background()
	fmt.Fprintf(b.W, "\n## send/recv %s between the 2 GPUs (copy engine, 0 SMs for VCCL)\n", sizeName(n))
	fmt.Fprintf(b.W, "| direction | VCCL µs | VCCL GB/s (per direction) | NCCL µs | NCCL GB/s | VCCL/NCCL |\n|---|---|---|---|---|---|\n")
	for _, both := range []bool{false, true} {
		ts := []ce.Transfer{{From: 0, To: 1, Src: b.send[0], Dst: b.recv[1], Bytes: n}}
		name := "0→1"
		if both {
			ts = append(ts, ce.Transfer{From: 1, To: 0, Src: b.send[1], Dst: b.recv[0], Bytes: n})
			name = "both at once"
		}
		tv, err := b.time(func() error { return b.G.SendRecv(ctx, ts...) })
		if err != nil {
			return err
		}
		row := fmt.Sprintf("| %s | %.1f | %.1f |", name, us(tv), gbps(n, tv))
		if b.Comms != nil {
			tn, err := b.time(func() error {
				return b.G.Do(0, func() error {
					if err := nccl.GroupStart(); err != nil {
						return err
					}
					for _, t := range ts {
						if err := b.Comms[t.From].Send(b.send[t.From], n, collective.Uint8, t.To, b.G.Stream(t.From)); err != nil {
							return err
						}
						if err := b.Comms[t.To].Recv(b.recv[t.To], n, collective.Uint8, t.From, b.G.Stream(t.To)); err != nil {
							return err
						}
					}
					return nccl.GroupEnd()
				})
			})
			if err != nil {
				return err
			}
			row += fmt.Sprintf(" %.1f | %.1f | %.2f× |", us(tn), gbps(n, tn), float64(tn)/float64(tv))
		} else {
			row += " – | – | – |"
		}
		fmt.Fprintln(b.W, row)
	}
	return nil
}

// AllGather prints all-gather of n bytes per rank.
func (b *Bench) AllGather(n int) error {
	ctx := context.Background()
	tv, err := b.time(func() error { return b.G.AllGather(ctx, b.send[:], b.recv[:], n) })
	if err != nil {
		return err
	}
	// busbw of all-gather = total bytes × (n-1)/n / time = n bytes / time at 2 ranks
	row := fmt.Sprintf("\nall-gather %s per rank: VCCL %.1f µs, busbw %.1f GB/s, 0 SMs", sizeName(n), us(tv), gbps(n, tv))
	if b.Comms != nil {
		tn, err := b.time(func() error {
			return b.G.Do(0, func() error {
				if err := nccl.GroupStart(); err != nil {
					return err
				}
				for r := 0; r < 2; r++ {
					if err := b.Comms[r].AllGather(b.send[r], b.recv[r], n, collective.Uint8, b.G.Stream(r)); err != nil {
						return err
					}
				}
				return nccl.GroupEnd()
			})
		})
		if err != nil {
			return err
		}
		row += fmt.Sprintf("; NCCL %.1f µs, busbw %.1f GB/s; VCCL/NCCL %.2f×", us(tn), gbps(n, tn), float64(tn)/float64(tv))
	}
	fmt.Fprintln(b.W, row)
	return nil
}

// SMSweep prints all-reduce busbw for each reduction grid.
func (b *Bench) SMSweep(sizes, sms []int) error {
	fmt.Fprintf(b.W, "\n## all-reduce busbw GB/s by reduction SMs (copy-engine path)\n| bytes |")
	for _, s := range sms {
		fmt.Fprintf(b.W, " %d SMs |", s)
	}
	fmt.Fprintf(b.W, "\n|---|%s\n", repeat("---|", len(sms)))
	old := b.G.SMs()
	defer b.G.SetSMs(old)
	for _, n := range sizes {
		row := fmt.Sprintf("| %s |", sizeName(n))
		for _, s := range sms {
			b.G.SetSMs(s)
			t, err := b.time(b.vcclAllReduce(n/4, collective.Float32))
			if err != nil {
				return err
			}
			row += fmt.Sprintf(" %.1f |", gbps(n, t))
		}
		fmt.Fprintln(b.W, row)
	}
	return nil
}

func repeat(s string, n int) string {
	out := ""
	for i := 0; i < n; i++ {
		out += s
	}
	return out
}

// offOn times measure with telemetry off and on alternately, rounds times
// each, and returns the median of each.
func offOn(rounds int, set func(bool), measure func() (time.Duration, error)) (off, on time.Duration, err error) {
	var offs, ons []time.Duration
	for range rounds {
		for _, tel := range []bool{false, true} {
			set(tel)
			t, err := measure()
			if err != nil {
				return 0, 0, err
			}
			if tel {
				ons = append(ons, t)
			} else {
				offs = append(offs, t)
			}
		}
	}
	slices.Sort(offs)
	slices.Sort(ons)
	return offs[rounds/2], ons[rounds/2], nil
}

// Telemetry compares all-reduce and send/recv with records on and off
// (alternating, Reps times each), then prints what the per-link window
// computed from the records.
func (b *Bench) Telemetry(sizes []int, win *flowtel.Window, col *flowtel.Collector) error {
	ctx := context.Background()
	fmt.Fprintf(b.W, "\n## telemetry on vs off (all-reduce float32 sum; on = a wr_post and a wc record per copy and kernel; alternating, median of 5)\n| bytes | off µs | on µs | on/off |\n|---|---|---|---|\n")
	for _, n := range sizes {
		off, on, err := offOn(5, b.G.SetTelemetry, func() (time.Duration, error) { return b.time(b.vcclAllReduce(n/4, collective.Float32)) })
		if err != nil {
			return err
		}
		fmt.Fprintf(b.W, "| %s | %.1f | %.1f | %.3f |\n", sizeName(n), us(off), us(on), float64(on)/float64(off))
	}
	b.G.SetTelemetry(false)
	if err := col.Flush(ctx); err != nil {
		return err
	}
	st := col.Stats()
	fmt.Fprintf(b.W, "\ncollector: %+v\n", st)
	// A fresh burst of send/recv so the window's span covers GPU traffic only.
	win.Reset()
	b.G.SetTelemetry(true)
	ts := []ce.Transfer{{From: 0, To: 1, Src: b.send[0], Dst: b.recv[1], Bytes: b.cap}, {From: 1, To: 0, Src: b.send[1], Dst: b.recv[0], Bytes: b.cap}}
	for i := 0; i < 20; i++ {
		if err := b.G.SendRecv(ctx, ts...); err != nil {
			return err
		}
	}
	if err := b.G.Synchronize(ctx); err != nil {
		return err
	}
	b.G.SetTelemetry(false)
	if err := col.Flush(ctx); err != nil {
		return err
	}
	fmt.Fprintf(b.W, "\nper-link window after 20 send/recv of %s each way (flowtel.Window over the GPU records):\n", sizeName(b.cap))
	for _, s := range win.Snapshot() {
		fmt.Fprintf(b.W, "  %-28s completions=%d bytes=%d bw=%.1f GB/s lat p50=%.1f µs p99=%.1f µs unmatched=%d\n",
			s.Key, s.Completions, s.Bytes, s.BandwidthBps/1e9, float64(s.LatP50Ns)/1e3, float64(s.LatP99Ns)/1e3, s.Unmatched)
	}
	return nil
}

// PathSweep times all-reduce on each path at each size: the copy-engine
// path with either copy API, and the one-kernel path (peer reads over
// NVLink) at two grids, to place the threshold between them.
func (b *Bench) PathSweep(sizes []int) error {
	type variant struct {
		name string
		set  func(*ce.Config)
	}
	old := b.G.Config()
	defer b.G.Reconfigure(func(c *ce.Config) { *c = old })
	vs := []variant{
		{"CE peer-copy 16 SMs", func(c *ce.Config) { c.SmallMax, c.DtoD, c.SMs = -1, false, 16 }},
		{"CE DtoD 16 SMs", func(c *ce.Config) { c.SmallMax, c.DtoD, c.SMs = -1, true, 16 }},
		{"kernel 16 SMs", func(c *ce.Config) { c.SmallMax, c.SMs = math.MaxInt, 16 }},
		{"kernel 32 SMs", func(c *ce.Config) { c.SmallMax, c.SMs = math.MaxInt, 32 }},
		{"kernel 64 SMs", func(c *ce.Config) { c.SmallMax, c.SMs = math.MaxInt, 64 }},
	}
	fmt.Fprintf(b.W, "\n## all-reduce µs by path (float32 sum)\n| bytes |")
	for _, v := range vs {
		fmt.Fprintf(b.W, " %s |", v.name)
	}
	fmt.Fprintf(b.W, "\n|---|%s\n", repeat("---|", len(vs)))
	for _, n := range sizes {
		row := fmt.Sprintf("| %s |", sizeName(n))
		for _, v := range vs {
			b.G.Reconfigure(func(c *ce.Config) { *c = old; v.set(c) })
			t, err := b.time(b.vcclAllReduce(n/4, collective.Float32))
			if err != nil {
				return err
			}
			row += fmt.Sprintf(" %.1f |", us(t))
		}
		fmt.Fprintln(b.W, row)
	}
	return nil
}

// Reductions prints reduce-scatter, reduce and broadcast (float32; sizes
// are each rank's input) for both libraries. busbw as nccl-tests: input
// bytes × (ranks-1)/ranks / time for reduce-scatter, bytes / time for
// reduce and broadcast.
func (b *Bench) Reductions(sizes []int) error {
	ctx := context.Background()
	fmt.Fprintf(b.W, "\n## reduce-scatter, reduce (root 0), broadcast (root 0): float32 sum, 2 GPUs\n")
	fmt.Fprintf(b.W, "| op | bytes in per rank | VCCL µs | VCCL busbw GB/s | VCCL path, SMs | NCCL µs | NCCL busbw GB/s | VCCL/NCCL busbw |\n|---|---|---|---|---|---|---|---|\n")
	small := b.G.Config().SmallMax
	for _, n := range sizes {
		count := n / 4
		type row struct {
			name       string
			vccl, nccl func() error
			busbw      int
			path       string
			cfg        func(*ce.Config) // for this row only
		}
		path := fmt.Sprintf("copy engines + kernel, %d SMs", b.G.SMs())
		if n <= small {
			path = fmt.Sprintf("one kernel/GPU (peer reads), ≤%d SMs", b.G.SMs())
		}
		rootPath := path
		if n <= small {
			rootPath = fmt.Sprintf("one kernel on root (peer reads), ≤%d SMs", b.G.SMs())
		}
		rows := []row{
			{"reduce-scatter", func() error {
				return b.G.ReduceScatter(ctx, b.send[:], b.recv[:], count/2, collective.Float32, collective.Sum)
			}, func() error {
				return b.ncclEach(func(r int) error {
					return b.Comms[r].ReduceScatter(b.send[r], b.recv[r], count/2, collective.Float32, collective.Sum, b.G.Stream(r))
				})
			}, n / 2, path, nil},
			{"reduce", func() error {
				return b.G.Reduce(ctx, b.send[:], b.recv[0], count, collective.Float32, collective.Sum, 0)
			}, func() error {
				return b.ncclEach(func(r int) error {
					return b.Comms[r].Reduce(b.send[r], b.recv[r], count, collective.Float32, collective.Sum, 0, b.G.Stream(r))
				})
			}, n, rootPath, nil},
			{"broadcast", func() error {
				return b.G.Broadcast(ctx, b.send[0], b.recv[:], n, 0)
			}, func() error {
				return b.ncclEach(func(r int) error {
					return b.Comms[r].Broadcast(b.send[r], b.recv[r], count, collective.Float32, 0, b.G.Stream(r))
				})
			}, n, "copy engine, 0 SMs", nil},
		}
		for _, rw := range rows {
			old := b.G.Config()
			if rw.cfg != nil {
				b.G.Reconfigure(rw.cfg)
			}
			tv, err := b.time(rw.vccl)
			if rw.cfg != nil {
				b.G.Reconfigure(func(c *ce.Config) { *c = old })
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", rw.name, sizeName(n), err)
			}
			line := fmt.Sprintf("| %s | %s | %.1f | %.1f | %s |", rw.name, sizeName(n), us(tv), gbps(rw.busbw, tv), rw.path)
			if b.Comms != nil && rw.nccl != nil {
				tn, err := b.time(rw.nccl)
				if err != nil {
					return fmt.Errorf("NCCL %s %s: %w", rw.name, sizeName(n), err)
				}
				line += fmt.Sprintf(" %.1f | %.1f | %.2f× |", us(tn), gbps(rw.busbw, tn), float64(tn)/float64(tv))
			} else {
				line += " – | – | – |"
			}
			fmt.Fprintln(b.W, line)
		}
	}
	return nil
}

// ncclEach runs f for both ranks inside one NCCL group.
func (b *Bench) ncclEach(f func(r int) error) error {
	return b.G.Do(0, func() error {
		if err := nccl.GroupStart(); err != nil {
			return err
		}
		for r := 0; r < 2; r++ {
			if err := f(r); err != nil {
				nccl.GroupEnd()
				return err
			}
		}
		return nccl.GroupEnd()
	})
}

// TelemetryDiag times the all-reduce of n bytes with telemetry's parts
// switched on one at a time, alternating Reps times: the time per call and
// the time the caller spent queuing it (when queuing takes as long as the
// call, the CPU proxy is the bottleneck and every driver call or record
// it adds shows).
func (b *Bench) TelemetryDiag(n int) error {
	ctx := context.Background()
	type variant struct {
		name string
		tel  bool
		busy time.Duration // PollBusy
		diag ce.Diagnostics
	}
	old := b.G.Config()
	defer func() {
		b.G.Reconfigure(func(c *ce.Config) { c.PollBusy = old.PollBusy })
		b.G.SetDiagnostics(ce.Diagnostics{})
		b.G.SetTelemetry(false)
	}()
	vs := []variant{
		{name: "off", busy: old.PollBusy},
		{name: "on (default: busy proxy polls every 500 µs)", tel: true, busy: 500 * time.Microsecond},
		{name: "on, busy proxy polls every 200 µs", tel: true, busy: 200 * time.Microsecond},
		{name: "on, busy proxy polls every 5 µs (as before)", tel: true, busy: 5 * time.Microsecond},
		{name: "on, every 500 µs, no records", tel: true, busy: 500 * time.Microsecond, diag: ce.Diagnostics{NoRecords: true}},
		{name: "off, ordering on pooled events", busy: old.PollBusy, diag: ce.Diagnostics{PooledEvents: true}},
	}
	tot := make([][]time.Duration, len(vs))
	enq := make([][]time.Duration, len(vs))
	const reps = 5
	for rep := 0; rep < reps; rep++ {
		for i, v := range vs {
			b.G.Reconfigure(func(c *ce.Config) { c.PollBusy = v.busy })
			b.G.SetDiagnostics(v.diag)
			b.G.SetTelemetry(v.tel)
			call := b.vcclAllReduce(n/4, collective.Float32)
			for k := 0; k < 20; k++ { // warm up
				if err := call(); err != nil {
					return err
				}
			}
			if err := b.G.Synchronize(ctx); err != nil {
				return err
			}
			const calls = 2000
			t0 := time.Now()
			for k := 0; k < calls; k++ {
				if err := call(); err != nil {
					return err
				}
			}
			te := time.Since(t0)
			if err := b.G.Synchronize(ctx); err != nil {
				return err
			}
			tt := time.Since(t0)
			tot[i] = append(tot[i], tt/calls)
			enq[i] = append(enq[i], te/calls)
		}
	}
	const clk = 1 << 20
	t0 := time.Now()
	for i := 0; i < clk; i++ {
		flowtel.Monotonic()
	}
	clockNs := float64(time.Since(t0).Nanoseconds()) / clk
	fmt.Fprintf(b.W, "\n## telemetry's parts, all-reduce %s float32 (2000 calls back to back, variants alternating, median of 5; a clock read here costs %.0f ns)\n| variant | µs per call | µs queuing per call | vs off |\n|---|---|---|---|\n", sizeName(n), clockNs)
	slices.Sort(tot[0])
	base := tot[0][reps/2]
	for i, v := range vs {
		slices.Sort(tot[i])
		slices.Sort(enq[i])
		fmt.Fprintf(b.W, "| %s | %.2f | %.2f | %.3f |\n", v.name, us(tot[i][reps/2]), us(enq[i][reps/2]), float64(tot[i][reps/2])/float64(base))
	}
	return nil
}

// Sampler reads per-GPU NVLink counters (gpu/nvml's Collector).
type Sampler interface {
	Sample() (nvml.Sample, error)
}

// NVLink sends n bytes each way 20 times and prints what the NVLink
// counters (NVML) saw on each GPU against the bytes VCCL moved.
func (b *Bench) NVLink(s Sampler, n int) error {
	ctx := context.Background()
	ts := []ce.Transfer{{From: 0, To: 1, Src: b.send[0], Dst: b.recv[1], Bytes: n}, {From: 1, To: 0, Src: b.send[1], Dst: b.recv[0], Bytes: n}}
	if err := b.G.Synchronize(ctx); err != nil {
		return err
	}
	before, err := s.Sample()
	if err != nil {
		return err
	}
	t0 := time.Now()
	const reps = 20
	for i := 0; i < reps; i++ {
		if err := b.G.SendRecv(ctx, ts...); err != nil {
			return err
		}
	}
	if err := b.G.Synchronize(ctx); err != nil {
		return err
	}
	el := time.Since(t0)
	after, err := s.Sample()
	if err != nil {
		return err
	}
	fmt.Fprintf(b.W, "\n## NVLink counters (NVML) over %d send/recv of %s each way: VCCL moved %.1f GB/s each way over %v\n", reps, sizeName(n), gbps(reps*n, el), el.Round(time.Microsecond))
	fmt.Fprintf(b.W, "| GPU | NVLink TX bytes | RX bytes | TX GB/s | RX GB/s | TX/sent | PCIe TX GB/s | PCIe RX GB/s | util GPU %% | util mem %% |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for i := range after.GPUs {
		a, o := after.GPUs[i], before.GPUs[i]
		if !a.NVLinkOK {
			fmt.Fprintf(b.W, "| %d | not counted (%v) |||||||||\n", a.Index, a.Err)
			continue
		}
		tx, rx := a.NVLinkTXBytes-o.NVLinkTXBytes, a.NVLinkRXBytes-o.NVLinkRXBytes
		fmt.Fprintf(b.W, "| %d | %d | %d | %.1f | %.1f | %.3f | %.2f | %.2f | %d | %d |\n", a.Index, tx, rx,
			a.NVLinkTXBps/1e9, a.NVLinkRXBps/1e9, float64(tx)/float64(reps*n), a.PCIeTXBps/1e9, a.PCIeRXBps/1e9, a.UtilGPU, a.UtilMemory)
	}
	return nil
}
