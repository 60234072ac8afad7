package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/flowtel/flowteltest"
)

func TestParseSize(t *testing.T) {
	good := map[string]int64{"0": 0, "8": 8, "64K": 64 << 10, "64k": 64 << 10, "16M": 16 << 20, "1G": 1 << 30,
		"2KiB": 2 << 10, "3MB": 3 << 20, " 5 ": 5, "1T": 1 << 40}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "K", "-1", "1.5M", "12Q", "0x10", "9999999999999G"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
	for _, n := range []int64{0, 8, 1000, 1 << 10, 3 << 20, 64 << 20, 1 << 30, 1<<30 + 1} {
		if got, err := ParseSize(FormatSize(n)); err != nil || got != n {
			t.Errorf("ParseSize(FormatSize(%d)=%q) = %d, %v", n, FormatSize(n), got, err)
		}
	}
}

func TestSizes(t *testing.T) {
	cases := []struct {
		min, max int64
		f        float64
		want     []int64
	}{
		{8, 64 << 10, 4, []int64{8, 32, 128, 512, 2048, 8192, 32768}},
		{1 << 10, 64 << 20, 4, []int64{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}},
		{32 << 20, 32 << 20, 2, []int64{32 << 20}},
		{1, 4, 1.1, []int64{1, 2, 3, 4}}, // at least one byte per step
		{0, 2, 2, []int64{0, 1, 2}},
	}
	for _, c := range cases {
		if got := Sizes(c.min, c.max, c.f); !slices.Equal(got, c.want) {
			t.Errorf("Sizes(%d, %d, %g) = %v, want %v", c.min, c.max, c.f, got, c.want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	cfg, err := ParseArgs(strings.Fields("allreduce -b 8 -e 64M -f 4 -o max -d bf16 -n 7 -w 2 -c 0 -r 1 --json --telemetry on"))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Coll: AllReduce, MinBytes: 8, MaxBytes: 64 << 20, Factor: 4, Op: collective.Max, Type: collective.BFloat16,
		Iters: 7, Warmup: 2, Check: false, Root: 1, JSON: true, Telemetry: "on", Progress: "auto", Device: "host"}
	if cfg != want {
		t.Errorf("got %+v\nwant %+v", cfg, want)
	}
	// Flags first, collective last; nccl-tests' names.
	cfg, err = ParseArgs(strings.Fields("-b 1K -e 1K all_gather_perf"))
	if err != nil || cfg.Coll != AllGather || cfg.MinBytes != 1024 || !cfg.Check || cfg.Type != collective.Float32 || cfg.Op != collective.Sum {
		t.Errorf("got %+v, %v", cfg, err)
	}
	for _, name := range []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv",
		"all_reduce", "reduce_scatter", "Bcast", "all-to-all", "reduce_scatter_perf"} {
		if _, err := ParseArgs([]string{name}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string]string{
		"":                            "no collective given",
		"allsum":                      `unknown collective "allsum"`,
		"allreduce -b 8 -e 4":         "-b 8 is larger than -e 4",
		"allreduce -b 1x":             `-b "1x": not a byte size`,
		"allreduce -e lots":           `-e "lots": not a byte size`,
		"allreduce -b 8 -e 64 -f 1":   "-f 1: want a factor above 1",
		"allreduce -f two":            `-f "two": not a number`,
		"allreduce -o mean":           `-o "mean": want sum, prod, min, max or avg`,
		"allreduce -d complex64":      `-d "complex64": want int8`,
		"allreduce -c 2":              "-c 2: want 0 or 1",
		"allreduce -n 0":              "-n 0: want at least 1 iteration",
		"allreduce -w -1":             "-w -1: must not be negative",
		"allreduce -r -2":             "-r -2: must not be negative",
		"allreduce --telemetry maybe": `--telemetry "maybe": want on, off or alternate`,
		"allreduce --telemetry alternate --device gpu":                "--telemetry alternate times host buffers only",
		"allreduce --spans":                                           "--spans needs --exporters",
		"allreduce --attach":                                          "--attach needs --telemetry alternate",
		"allreduce --telemetry on --attach":                           "--attach needs --telemetry alternate",
		"allreduce --telemetry alternate --attach --exporters /tmp/x": "--attach and --exporters: choose one",
		"allreduce --progress sometimes":                              `--progress "sometimes"`,
		"allreduce -x 3":                                              "flag provided but not defined: -x",
		"allreduce -n":                                                "flag needs an argument: -n",
		"allreduce broadcast":                                         "unexpected arguments: broadcast",
		"-b 8 allreduce broadcast":                                    "unexpected arguments after the collective: broadcast",
		"allreduce -b 8 -e 64M -f 4 junk":                             "unexpected arguments: junk",
	}
	for args, want := range bad {
		_, err := ParseArgs(strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseArgs(%q) = %v, want an error containing %q", args, err, want)
		}
	}
}

func TestBusFactor(t *testing.T) {
	cases := []struct {
		c    Collective
		n    int
		want float64
	}{
		{AllReduce, 1, 0}, {AllReduce, 2, 1}, {AllReduce, 4, 1.5}, {AllReduce, 8, 1.75},
		{AllGather, 2, 0.5}, {AllGather, 4, 0.75}, {ReduceScatter, 8, 0.875}, {AllToAll, 4, 0.75},
		{Broadcast, 4, 1}, {Reduce, 8, 1}, {SendRecv, 2, 1},
	}
	for _, c := range cases {
		if got := c.c.BusFactor(c.n); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%v.BusFactor(%d) = %g, want %g", c.c, c.n, got, c.want)
		}
	}
}

func TestLayout(t *testing.T) {
	cases := []struct {
		c      Collective
		bytes  int64
		es, n  int
		want   Layout
		reason string
	}{
		{AllReduce, 1024, 4, 4, Layout{Count: 256, SendN: 256, RecvN: 256, Bytes: 1024}, ""},
		{AllReduce, 10, 4, 2, Layout{Count: 2, SendN: 2, RecvN: 2, Bytes: 8}, "whole elements"},
		{AllGather, 1024, 4, 4, Layout{Count: 64, SendN: 64, RecvN: 256, Bytes: 1024}, "count is per rank"},
		{AllGather, 1000, 4, 3, Layout{Count: 83, SendN: 83, RecvN: 249, Bytes: 996}, "whole blocks"},
		{ReduceScatter, 1024, 2, 4, Layout{Count: 128, SendN: 512, RecvN: 128, Bytes: 1024}, ""},
		{AllToAll, 1024, 8, 2, Layout{Count: 64, SendN: 128, RecvN: 128, Bytes: 1024}, ""},
		{Broadcast, 6, 4, 8, Layout{Count: 1, SendN: 1, RecvN: 1, Bytes: 4}, ""},
		{AllGather, 8, 4, 4, Layout{Bytes: 0}, "too small for one element per rank"},
	}
	for _, c := range cases {
		if got := c.c.Layout(c.bytes, c.es, c.n); got != c.want {
			t.Errorf("%v.Layout(%d, %d, %d) = %+v, want %+v %s", c.c, c.bytes, c.es, c.n, got, c.want, c.reason)
		}
	}
}

// runLocal runs cfg on n in-process ranks and returns rank 0's report and
// table.
func runLocal(t *testing.T, n int, cfg Config, corrupt func(rank int, inPlace bool, out []byte)) (*Report, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	comms, err := collective.NewLocal(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	reps := make([]*Report, n)
	errs := make([]error, n)
	var table bytes.Buffer
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := Options{Corrupt: corrupt}
			if r == 0 {
				opts.Table = &table
			}
			reps[r], errs[r] = Run(ctx, c, cfg, opts)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := 1; r < n; r++ {
		if reps[r].Wrong != reps[0].Wrong || len(reps[r].Results) != len(reps[0].Results) {
			t.Errorf("rank %d's report differs from rank 0's", r)
		}
	}
	return reps[0], table.String()
}

func smallConfig(c Collective) Config {
	cfg := DefaultConfig()
	cfg.Coll, cfg.MinBytes, cfg.MaxBytes, cfg.Factor, cfg.Iters, cfg.Warmup = c, 8, 12<<10, 6, 2, 1
	return cfg
}

// Every collective, on 1 to 4 ranks (odd counts split unevenly), checks
// clean with the default type and reduction, and the report holds the
// sweep's rows with nccl-tests' bandwidth arithmetic.
func TestRunEveryCollective(t *testing.T) {
	for _, c := range Collectives() {
		for _, n := range []int{1, 2, 3, 4} {
			t.Run(fmt.Sprintf("%v/n=%d", c, n), func(t *testing.T) {
				cfg := smallConfig(c)
				cfg.Root = n - 1
				rep, table := runLocal(t, n, cfg, nil)
				if rep.Wrong != 0 {
					t.Fatalf("%d wrong elements:\n%s", rep.Wrong, table)
				}
				sizes := Sizes(cfg.MinBytes, cfg.MaxBytes, cfg.Factor)
				if len(rep.Results) != len(sizes) {
					t.Fatalf("%d results for %d sizes", len(rep.Results), len(sizes))
				}
				for i, res := range rep.Results {
					l := c.Layout(sizes[i], 4, n)
					if res.Size != l.Bytes || res.Count != l.Count {
						t.Errorf("row %d: size %d count %d, want %d %d", i, res.Size, res.Count, l.Bytes, l.Count)
					}
					m := res.OutOfPlace
					if m.TimeUs <= 0 || m.Wrong != 0 {
						t.Errorf("row %d: %+v", i, m)
					}
					if alg := float64(res.Size) / m.TimeUs / 1e3; math.Abs(alg-m.AlgBW) > 1e-9*alg {
						t.Errorf("row %d: algbw %g, want size/time %g", i, m.AlgBW, alg)
					}
					if bus := m.AlgBW * c.BusFactor(n); math.Abs(bus-m.BusBW) > 1e-9*bus {
						t.Errorf("row %d: busbw %g, want %g", i, m.BusBW, bus)
					}
					if (res.InPlace != nil) != c.HasInPlace() {
						t.Errorf("row %d: in place %v for %v", i, res.InPlace, c)
					}
					if res.InPlace != nil && res.InPlace.Wrong != 0 {
						t.Errorf("row %d in place: %+v", i, *res.InPlace)
					}
				}
				// nccl-tests' 8 header lines and ours, a line per rank and
				// per size, nccl-tests' 4 footer lines.
				if got := strings.Count(table, "\n"); got != 9+n+len(sizes)+4 {
					t.Errorf("table of %d lines:\n%s", got, table)
				}
			})
		}
	}
}

// Every datatype and reduction checks clean: the reference agrees with
// the library's semantics (wrapping integers, truncating integer Avg,
// float Avg rounded once).
func TestRunEveryTypeAndOp(t *testing.T) {
	for _, c := range []Collective{AllReduce, ReduceScatter, Reduce} {
		for _, dt := range collective.Datatypes() {
			for _, op := range collective.ReduceOps() {
				cfg := smallConfig(c)
				cfg.Type, cfg.Op, cfg.MinBytes, cfg.MaxBytes, cfg.Iters, cfg.Warmup = dt, op, 3<<10, 3<<10, 1, 0
				rep, table := runLocal(t, 3, cfg, nil)
				if rep.Wrong != 0 {
					t.Errorf("%v %v %v: %d wrong\n%s", c, dt, op, rep.Wrong, table)
				}
			}
		}
	}
	for _, c := range []Collective{AllGather, Broadcast, AllToAll, SendRecv} {
		for _, dt := range collective.Datatypes() {
			cfg := smallConfig(c)
			cfg.Type, cfg.MinBytes, cfg.MaxBytes, cfg.Iters, cfg.Warmup = dt, 6<<10, 6<<10, 1, 0
			if rep, table := runLocal(t, 3, cfg, nil); rep.Wrong != 0 {
				t.Errorf("%v %v: %d wrong\n%s", c, dt, rep.Wrong, table)
			}
		}
	}
}

// The check catches a corrupted element, an element the library did not
// write (still the sentinel), and counts exactly those.
func TestCheckCatchesCorruption(t *testing.T) {
	for _, c := range Collectives() {
		t.Run(c.String(), func(t *testing.T) {
			cfg := smallConfig(c)
			cfg.MinBytes, cfg.MaxBytes = 1024, 1024
			var mu sync.Mutex
			corrupted := 0
			rep, table := runLocal(t, 3, cfg, func(rank int, inPlace bool, out []byte) {
				if rank != 0 || len(out) < 8 {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				corrupted++
				if inPlace {
					out[0] ^= 0x40 // a different value
				} else {
					copy(out[len(out)-8:], bytes.Repeat([]byte{sentinel}, 8)) // two elements never written
				}
			})
			if corrupted == 0 {
				t.Fatal("nothing to corrupt on rank 0")
			}
			res := rep.Results[0]
			if res.OutOfPlace.Wrong != 2 {
				t.Errorf("out of place: %d wrong, want 2\n%s", res.OutOfPlace.Wrong, table)
			}
			if res.InPlace != nil && res.InPlace.Wrong != 1 {
				t.Errorf("in place: %d wrong, want 1\n%s", res.InPlace.Wrong, table)
			}
			if !strings.Contains(table, "FAILED") {
				t.Errorf("the table does not say FAILED:\n%s", table)
			}
		})
	}
}

// The reference is computed independently: spot-check it by hand.
func TestReference(t *testing.T) {
	s := &setup{cfg: Config{Coll: AllReduce, Op: collective.Sum}, n: 40, dt: collective.Int8, es: 1}
	var sum int64
	for p := range 40 {
		sum += s.value(p, 5)
	}
	if got := s.refInt(5); got != int64(int8(sum)) {
		t.Errorf("int8 sum: %d, want %d", got, int8(sum))
	}
	s.cfg.Op, s.dt = collective.Avg, collective.Uint8
	var usum uint8
	for p := range 40 {
		usum += uint8(s.value(p, 9))
	}
	if got := s.refInt(9); got != int64(usum/40) {
		t.Errorf("uint8 avg: %d, want %d", got, usum/40)
	}
	s.cfg.Op, s.dt, s.n = collective.Avg, collective.Float32, 3
	want := float64(s.value(0, 1)+s.value(1, 1)+s.value(2, 1)) / 3
	if got := s.refFloat(1); got != want {
		t.Errorf("float avg: %g, want %g", got, want)
	}
	// A product stays exact in float16.
	s.cfg.Op, s.dt, s.n = collective.Prod, collective.Float16, 8
	for j := range 100 {
		r := s.refFloat(j)
		b := make([]byte, 2)
		put(s.dt, b, 0, r)
		if getFloat(s.dt, b, 0) != r {
			t.Fatalf("product %g is not exact in float16", r)
		}
	}
}

// Every element of both buffers holds the rank's input before the first
// timed call: none is left to the kernel's zero page.
func TestSetupFillsBuffers(t *testing.T) {
	for _, tc := range []struct {
		coll Collective
		dt   collective.Datatype
	}{{AllReduce, collective.Float32}, {AllGather, collective.Int8}, {Broadcast, collective.Float64}, {ReduceScatter, collective.Uint32}} {
		for _, device := range []string{"host", "shared"} {
			cfg := Config{Coll: tc.coll, Type: tc.dt, Op: collective.Sum, Device: device}
			s, err := newSetup(cfg, 1, 3, 3<<20)
			if err != nil {
				t.Fatal(err)
			}
			for name, b := range map[string][]byte{"send": s.sendBuf, "recv": s.recvBuf} {
				if len(b) == 0 {
					t.Fatalf("%v %v %s: no %s buffer", tc.coll, tc.dt, device, name)
				}
				for j := range len(b) / s.es {
					var got float64
					if s.dt.IsFloat() {
						got = getFloat(s.dt, b, j)
					} else {
						got = float64(getInt(s.dt, b, j))
					}
					if want := float64(s.value(1, j)); got != want {
						t.Fatalf("%v %v %s: %s element %d = %g, want the input %g", tc.coll, tc.dt, device, name, j, got, want)
					}
				}
			}
		}
	}
}

// The progress bar goes to its own writer, never into the table, and is
// erased when the sweep ends.
func TestProgressStaysOutOfTheTable(t *testing.T) {
	ctx := context.Background()
	comms, err := collective.NewLocal(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallConfig(AllReduce)
	var table, bar bytes.Buffer
	p := NewProgress(&bar, "allreduce")
	p.interval = 0
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			opts := Options{}
			if r == 0 {
				opts.Table, opts.Progress = &table, p
			}
			if _, err := Run(ctx, c, cfg, opts); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if strings.ContainsAny(table.String(), "\r\x1b") || strings.Contains(table.String(), "%") {
		t.Errorf("progress leaked into the table:\n%q", table.String())
	}
	out := bar.String()
	if !strings.Contains(out, "allreduce [") || !strings.Contains(out, "100%") {
		t.Errorf("no progress drawn: %q", out)
	}
	if !strings.HasSuffix(out, "\r\x1b[K") {
		t.Errorf("the bar is not erased at the end: %q", out[max(0, len(out)-40):])
	}
}

func TestRow(t *testing.T) {
	var b bytes.Buffer
	writeRow(&b, Result{Size: 1048576, Count: 262144, Type: "float", RedOp: "sum", Root: -1,
		OutOfPlace: Measure{TimeUs: 250.04, AlgBW: 4.19, BusBW: 1234.5, Wrong: 0},
		InPlace:    &Measure{TimeUs: 12345.6, AlgBW: 0.08, BusBW: 0.08, Wrong: -1}})
	// nccl-tests' number formats: two decimals where they fit the column,
	// then one, then none; #wrong N/A unchecked.
	want := "     1048576        262144     float     sum      -1   250.04    4.19  1234.5       0  12345.6    0.08    0.08    N/A\n"
	if b.String() != want {
		t.Errorf("row\n%q\nwant\n%q", b.String(), want)
	}
}

// --telemetry alternate times every variant with telemetry off and on in
// the same run: the off blocks write no records (only the warm-ups, the on
// blocks and the checked call of each variant do), both timings are
// reported, and the table shows the on row under the off one.
func TestRunAlternate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	col := flowtel.NewCollector()
	sink := flowteltest.NewMemorySink()
	col.AddSink(sink)
	col.Start()
	comms, err := collective.NewLocal(ctx, 2, collective.WithCollector(col))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	cfg := DefaultConfig()
	cfg.Coll, cfg.MinBytes, cfg.MaxBytes, cfg.Iters, cfg.Warmup, cfg.Telemetry = AllReduce, 1024, 1024, 13, 1, "alternate"
	reps := make([]*Report, 2)
	errs := make([]error, 2)
	var table bytes.Buffer
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := Options{Telemetry: true, Alternate: true}
			if r == 0 {
				opts.Table = &table
			}
			reps[r], errs[r] = Run(ctx, c, cfg, opts)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if err := col.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	begins := 0
	for _, rec := range sink.Records() {
		if rec.Kind == flowtel.KindCollBegin && rec.Rank == 0 && rec.Bytes == 1024 && rec.Op == collective.OpAllReduce {
			begins++
		}
	}
	// The sweep's warm-up at both ends (one size: 2 calls), then 2
	// variants × (warm-up, on blocks, check).
	if want := 2 + 2*(1+13+1); begins != want {
		t.Errorf("rank 0 recorded %d 1 KiB calls, want %d: the off blocks must record none", begins, want)
	}
	rep := reps[0]
	if !rep.Alternate || len(rep.Results) != 1 || rep.Wrong != 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, m := range []*Measure{&rep.Results[0].OutOfPlace, rep.Results[0].InPlace} {
		if m.TimeUs <= 0 || m.TelemetryOn == nil || m.TelemetryOn.TimeUs <= 0 || m.TelemetryOn.BusBW <= 0 {
			t.Errorf("measure %+v (on: %+v): want both timings", m, m.TelemetryOn)
		}
	}
	if !strings.Contains(table.String(), "#  telem. on") || !strings.Contains(table.String(), "telemetry: alternate") {
		t.Errorf("table without the telemetry-on row or mode:\n%s", table.String())
	}
	// Both ranks share the collector here, so each counts its records.
	if rep.Records < int64(len(sink.Records())) || rep.RecordsDropped != 0 {
		t.Errorf("report counts %d records kept and %d dropped; the sink got %d, none dropped", rep.Records, rep.RecordsDropped, len(sink.Records()))
	}
	if want := fmt.Sprintf("# Telemetry records    : %d kept, 0 dropped (all ranks)", rep.Records); !strings.Contains(table.String(), want) {
		t.Errorf("table without %q:\n%s", want, table.String())
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{[]float64{5}, 5}, {[]float64{9, 1, 5}, 5}, {[]float64{1, 100, 3, 2}, 2.5}} {
		if got := median(slices.Clone(c.xs)); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

func TestTelemetryRow(t *testing.T) {
	var b bytes.Buffer
	writeTelemetryRow(&b, Result{OutOfPlace: Measure{BusBW: 4, TelemetryOn: &Measure{TimeUs: 2.5, AlgBW: 3.9, BusBW: 3.9}}})
	want := "#  telem. on                                             2.50    3.90    3.90  0.975x      N/A     N/A     N/A     N/A\n"
	if b.String() != want {
		t.Errorf("row\n%q\nwant\n%q", b.String(), want)
	}
}

// Main on a single rank (no launcher in the environment) with --json
// prints one JSON document and nothing else.
func TestMainJSON(t *testing.T) {
	for _, v := range []string{"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "VCCL_RANK", "VCCL_WORLD_SIZE"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	var out bytes.Buffer
	code := Main(context.Background(), strings.Fields("broadcast -b 1K -e 4K -f 2 -n 2 -w 1 --json --telemetry on"), &out, stderr)
	if code != 0 {
		msg, _ := os.ReadFile(stderr.Name())
		t.Fatalf("exit %d: %s", code, msg)
	}
	var rep Report
	dec := json.NewDecoder(&out)
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("%v in %q", err, out.String())
	}
	if dec.More() {
		t.Error("more than one JSON document")
	}
	if rep.Collective != "broadcast" || rep.Ranks != 1 || len(rep.Results) != 3 || rep.Wrong != 0 || !rep.Telemetry || rep.Results[2].Size != 4096 {
		t.Errorf("report %+v", rep)
	}
	if msg, _ := os.ReadFile(stderr.Name()); len(msg) != 0 {
		t.Errorf("stderr: %q", msg)
	}
	// A bad flag: exit 2 and a message naming it.
	code = Main(context.Background(), strings.Fields("allreduce -o mean"), &out, stderr)
	msg, _ := os.ReadFile(stderr.Name())
	if code != 2 || !strings.Contains(string(msg), `-o "mean"`) {
		t.Errorf("exit %d, stderr %q", code, msg)
	}
	// A root outside the job.
	code = Main(context.Background(), strings.Fields("broadcast -b 8 -e 8 -r 3"), &out, stderr)
	msg, _ = os.ReadFile(stderr.Name())
	if code != 1 || !strings.Contains(string(msg), "-r 3: root out of range for 1 ranks") {
		t.Errorf("exit %d, stderr %q", code, msg)
	}
}

// --exporters runs the sweep with every exporter attached and leaves a
// readable trace, --attach with what --telemetry on attaches; without
// telemetry --exporters is refused.
func TestMainExporters(t *testing.T) {
	for _, v := range []string{"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "VCCL_RANK", "VCCL_WORLD_SIZE"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	t.Setenv("VCCL_TELEMETRY_ADDR", "off")
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	dir := t.TempDir()
	var out bytes.Buffer
	if code := Main(context.Background(), strings.Fields("allreduce -b 1K -e 4K -f 2 -n 2 -w 1 --telemetry on --exporters "+dir), &out, stderr); code != 0 {
		msg, _ := os.ReadFile(stderr.Name())
		t.Fatalf("exit %d: %s", code, msg)
	}
	recs, err := arrow.ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		t.Fatal("--exporters left an empty trace")
	}
	// Alternate with exporters: the "on" blocks have them writing, and
	// the table says so.
	dir = t.TempDir()
	out.Reset()
	if code := Main(context.Background(), strings.Fields("allreduce -b 1K -e 1K -n 4 -w 1 --telemetry alternate --exporters "+dir), &out, stderr); code != 0 {
		msg, _ := os.ReadFile(stderr.Name())
		t.Fatalf("alternate: exit %d: %s", code, msg)
	}
	if !strings.Contains(out.String(), "with exporters writing: trace (stream format)") || !strings.Contains(out.String(), "#  telem. on") {
		t.Errorf("alternate with exporters: the table does not say so:\n%s", out.String())
	}
	if recs, err := arrow.ReadAll(dir); err != nil || len(recs) == 0 {
		t.Errorf("alternate with exporters: %d records in the trace, %v", len(recs), err)
	}
	// --attach: the "on" blocks with what --telemetry on attaches, here
	// the live endpoint alone, and nothing where the environment asks for
	// nothing; the table says which.
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1:0", "with the exporters --telemetry on attaches: the live endpoint (its fold of every record, not scraped)"},
		{"off", "with the exporters --telemetry on attaches: none (the environment asks for none)"},
	} {
		t.Setenv("VCCL_TELEMETRY_ADDR", tc.addr)
		out.Reset()
		if code := Main(context.Background(), strings.Fields("allreduce -b 1K -e 1K -n 4 -w 1 --telemetry alternate --attach"), &out, stderr); code != 0 {
			msg, _ := os.ReadFile(stderr.Name())
			t.Fatalf("--attach, VCCL_TELEMETRY_ADDR=%s: exit %d: %s", tc.addr, code, msg)
		}
		if !strings.Contains(out.String(), tc.want) || !strings.Contains(out.String(), "#  telem. on") {
			t.Errorf("--attach, VCCL_TELEMETRY_ADDR=%s: the table does not say %q:\n%s", tc.addr, tc.want, out.String())
		}
	}
	code := Main(context.Background(), strings.Fields("allreduce -b 1K -e 1K --telemetry off --exporters "+dir), &out, stderr)
	msg, _ := os.ReadFile(stderr.Name())
	if code != 2 || !strings.Contains(string(msg), "--exporters needs --telemetry on") {
		t.Errorf("exit %d, stderr %q", code, msg)
	}
}

func TestCountCPUList(t *testing.T) {
	for _, tc := range []struct {
		list string
		n    int
		ok   bool
	}{
		{"0", 1, true},
		{"0-1", 2, true},
		{"0-3,8,10-11", 7, true},
		{"", 0, false},
		{"0-", 0, false},
		{"3-1", 0, false},
		{"a", 0, false},
	} {
		if n, ok := countCPUList(tc.list); n != tc.n || ok != tc.ok {
			t.Errorf("countCPUList(%q) = %d, %v; want %d, %v", tc.list, n, ok, tc.n, tc.ok)
		}
	}
}
