// Command vccl-gpubench checks and measures VCCL's copy-engine collectives
// on the GPUs of one host, NCCL alongside on the same buffers and streams.
//
//	vccl-gpubench -check            # every datatype × reduction vs the host reference
//	vccl-gpubench -bench            # all-reduce, send/recv, all-gather, SM sweep, telemetry on/off
//	vccl-gpubench -ptx DIR          # write the generated PTX (one file per kernel)
//	vcclrun -n 2 vccl-gpubench -proc  # one process per GPU: IPC transfers, check and measure
//
// Keep NCCL_NVLS_ENABLE=0 in the environment on machines where NVLink
// multicast must stay off; VCCL never uses it. With VCCL_TELEMETRY=1, the
// communicator of -proc gets the exporters the environment asks for (the
// telemetry package: VCCL_TELEMETRY_DIR, VCCL_TELEMETRY_ADDR, OTEL_*); the
// copy engines' records go to the benchmark's own collector, which its
// telemetry measurements read.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/gpu/ce"
	"github.com/vccl-go/vccl/gpu/cuda"
	"github.com/vccl-go/vccl/gpu/gpubench"
	"github.com/vccl-go/vccl/gpu/kernels"
	"github.com/vccl-go/vccl/gpu/nccl"
	"github.com/vccl-go/vccl/gpu/nvml"
	_ "github.com/vccl-go/vccl/telemetry" // the exporters VCCL_TELEMETRY_DIR, VCCL_TELEMETRY_ADDR and OTEL_* ask for
)

func main() {
	err := run(os.Args[1:], os.Stdout)
	fmt.Fprintln(os.Stderr, "vccl-gpubench: released everything; exiting")
	if err != nil {
		fmt.Fprintln(os.Stderr, "vccl-gpubench:", err)
		if errors.Is(err, cuda.ErrNoDriver) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mul := 1
		switch {
		case strings.HasSuffix(f, "G"):
			mul, f = 1<<30, strings.TrimSuffix(f, "G")
		case strings.HasSuffix(f, "M"):
			mul, f = 1<<20, strings.TrimSuffix(f, "M")
		case strings.HasSuffix(f, "K"):
			mul, f = 1<<10, strings.TrimSuffix(f, "K")
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, v*mul)
	}
	return out, nil
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("vccl-gpubench", flag.ContinueOnError)
	check := fs.Bool("check", false, "run the correctness matrix")
	bench := fs.Bool("bench", false, "run the measurements")
	withNCCL := fs.Bool("nccl", true, "measure NCCL alongside (libnccl.so.2 via $VCCL_NCCL_LIB or the torch pip package)")
	sizesF := fs.String("sizes", "4K,64K,1M,16M,32M,64M,256M,1G", "all-reduce sizes in bytes")
	smsF := fs.Int("sms", 16, "reduction kernel grid (thread blocks, so at most this many SMs)")
	sweepF := fs.String("sweep-sms", "2,4,8,16,32", "SM counts for the sweep")
	sweepSizes := fs.String("sweep-sizes", "16M,256M,1G", "sizes for the SM sweep")
	chunk := fs.Int("chunk", 0, "all-reduce pipeline chunk in bytes (0: automatic)")
	p2p := fs.Int("p2p", 256<<20, "send/recv and all-gather bytes")
	pathF := fs.String("path-sizes", "1M,16M,32M,64M", "sizes for the path sweep (empty: none)")
	redF := fs.String("red-sizes", "4K,1M,16M,64M,256M", "sizes (input per rank) for reduce-scatter, reduce and broadcast (empty: none)")
	smallMax := fs.Int("small-max", 0, "largest out-of-place all-reduce on the one-kernel path (0: default, -1: never)")
	dtod := fs.Bool("dtod", false, "copy between GPUs with cuMemcpyDtoDAsync instead of cuMemcpyPeerAsync")
	ptxDir := fs.String("ptx", "", "write the generated PTX into this directory and exit")
	proc := fs.Bool("proc", false, "run as one rank of a job of one process per GPU (start it with vcclrun): check and measure the IPC path")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ptxDir != "" {
		if err := os.MkdirAll(*ptxDir, 0o755); err != nil {
			return err
		}
		for _, s := range kernels.All() {
			src, err := kernels.Source(s)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(*ptxDir, s.Name()+".ptx"), []byte(src), 0o644); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "wrote %d kernels to %s\n", len(kernels.All()), *ptxDir)
		return nil
	}
	if !*check && !*bench {
		*check, *bench = true, true
	}
	if *proc {
		return runProc(*check, *bench, *p2p, stdout)
	}
	sizes, err := ints(*sizesF)
	if err != nil {
		return err
	}
	sweep, err := ints(*sweepF)
	if err != nil {
		return err
	}
	swSizes, err := ints(*sweepSizes)
	if err != nil {
		return err
	}
	pathSizes, err := ints(*pathF)
	if err != nil {
		return err
	}
	redSizes, err := ints(*redF)
	if err != nil {
		return err
	}
	cuda.SetLibrary(os.Getenv(cuda.EnvLib))
	nccl.SetLibrary(os.Getenv(nccl.EnvLib))
	if err := cuda.Load(); err != nil {
		return err
	}
	drv, _ := cuda.DriverVersion()
	n, err := cuda.DeviceCount()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# vccl-gpubench %s\ndriver CUDA %d.%d, %d devices\n", time.Now().UTC().Format(time.RFC3339), drv/1000, drv%1000/10, n)
	for i := 0; i < n; i++ {
		d, _ := cuda.GetDevice(i)
		name, _ := d.Name()
		sms, _ := d.Attribute(cuda.AttrMultiprocessorCount)
		ces, _ := d.Attribute(cuda.AttrAsyncEngineCount)
		bus, _ := d.PCIBusID()
		mem, _ := d.TotalMem()
		fmt.Fprintf(stdout, "GPU %d: %s, %d SMs, %d copy engines, %d GiB, %s\n", i, name, sms, ces, mem>>30, bus)
	}
	if n < 2 {
		return fmt.Errorf("need 2 GPUs, found %d", n)
	}
	ctx := context.Background()
	if *check {
		g, err := ce.New(ce.Config{Devices: []int{0, 1}, SMs: *smsF, Chunk: 256 << 10, SmallMax: 256 << 10})
		if err != nil {
			return err
		}
		t0 := time.Now()
		failed, err := gpubench.Check(ctx, g, stdout)
		g.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "check took %s\n", time.Since(t0).Round(time.Millisecond))
		if failed > 0 {
			defer fmt.Fprintf(stdout, "CHECK FAILED: %d cases\n", failed)
		}
	}
	if !*bench {
		return nil
	}
	col := flowtel.NewCollector()
	win := flowtel.NewWindow(flowtel.WindowConfig{N: 1 << 16, T: 10 * time.Second})
	col.AddSink(win)
	col.Start()
	defer col.Shutdown(ctx)
	g, err := ce.New(ce.Config{Devices: []int{0, 1}, SMs: *smsF, Chunk: *chunk, Collector: col, SmallMax: *smallMax, DtoD: *dtod})
	if err != nil {
		return err
	}
	defer g.Close()
	g.SetTelemetry(false)
	b := &gpubench.Bench{G: g, W: stdout}
	if *withNCCL {
		path, err := nccl.Open()
		if err != nil {
			fmt.Fprintf(stdout, "NCCL not measured: %v\n", err)
		} else {
			v, _ := nccl.Version()
			fmt.Fprintf(stdout, "NCCL %d.%d.%d from %s\n", v/10000, v/100%100, v%100, path)
			err := g.Do(0, func() (err error) { b.Comms, err = nccl.InitAll([]int{0, 1}); return })
			if err != nil {
				return err
			}
			defer g.Do(0, func() error {
				for _, c := range b.Comms {
					c.Destroy()
				}
				return nil
			})
		}
	}
	maxSize := *p2p
	for _, s := range append(append(append(sizes, swSizes...), pathSizes...), redSizes...) {
		maxSize = max(maxSize, s)
	}
	if err := b.Alloc(maxSize); err != nil {
		return err
	}
	defer b.Free()
	if err := g.Prepare(collective.Float32, collective.Sum); err != nil { // compile before timing
		return err
	}
	steps := []func() error{
		func() error {
			if len(pathSizes) == 0 {
				return nil
			}
			return b.PathSweep(pathSizes)
		},
		func() error { return b.AllReduce(sizes) },
		func() error { return b.Latency(4 << 10) },
		func() error { return b.SendRecv(*p2p) },
		func() error { return b.AllGather(*p2p) },
		func() error {
			c, err := nvml.Open()
			if err != nil {
				fmt.Fprintf(stdout, "\nNVLink counters not read: %v\n", err)
				return nil
			}
			defer c.Close()
			return b.NVLink(c, *p2p)
		},
		func() error { return b.Reductions(redSizes) },
		func() error {
			if len(swSizes) == 0 {
				return nil
			}
			return b.SMSweep(swSizes, sweep)
		},
		func() error { return b.TelemetryDiag(1 << 20) },
		func() error { return b.Telemetry([]int{1 << 20, 16 << 20, 64 << 20, 256 << 20}, win, col) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// runProc is one rank of a job of one process per GPU.
func runProc(check, bench bool, p2p int, stdout io.Writer) error {
	ctx := context.Background()
	col := flowtel.NewCollector()
	win := flowtel.NewWindow(flowtel.WindowConfig{N: 1 << 16, T: 10 * time.Second})
	col.AddSink(win)
	col.Start()
	defer col.Shutdown(ctx)
	t0 := time.Now()
	comm, err := collective.NewFromEnv(ctx)
	if err != nil {
		return err
	}
	defer comm.Close()
	p, err := ce.Attach(ctx, comm, ce.ProcConfig{Collector: col})
	if err != nil {
		return err
	}
	defer p.Close()
	p.SetTelemetry(false)
	d := p.Device()
	bus, _ := d.PCIBusID()
	fmt.Fprintf(stdout, "rank %d of %d: GPU %d (%s), set up in %s\n", p.Rank(), p.Size(), d, bus, time.Since(t0).Round(time.Millisecond))
	if check {
		if !p.Staged() {
			failed, err := gpubench.ProcCheck(ctx, p, stdout)
			if err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("proc check: %d cases failed", failed)
			}
		}
		t1 := time.Now()
		failed, total, err := gpubench.CommCheck(ctx, comm, p, stdout)
		if err != nil {
			return err
		}
		mode := "IPC"
		if p.Staged() {
			mode = "staged through host memory"
		}
		fmt.Fprintf(stdout, "rank %d: collective API on device buffers (%s): %d cases, %d failed, %s\n", p.Rank(), mode, total, failed, time.Since(t1).Round(time.Millisecond))
		if failed > 0 {
			return fmt.Errorf("collective API check: %d cases failed", failed)
		}
	}
	if bench && !p.Staged() {
		return gpubench.ProcBench(ctx, p, stdout, p2p, win, col)
	}
	return nil
}
