package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/internal/benchhook"
)

// Measure is one timed variant (out of place or in place) of one size.
type Measure struct {
	TimeUs float64 `json:"time_us"`
	AlgBW  float64 `json:"algbw_gbps"`
	BusBW  float64 `json:"busbw_gbps"`
	Wrong  int64   `json:"wrong"` // -1: not checked (-c 0)
	// NCCL is NCCL's measurement on the same buffers (--vs-nccl).
	NCCL *Measure `json:"nccl,omitempty"`
	// TelemetryOn is, with --telemetry alternate, the same calls timed with
	// telemetry on, in blocks alternating with this measurement's (which
	// then has it off).
	TelemetryOn *Measure `json:"telemetry_on,omitempty"`
}

// Result is one row of the table.
type Result struct {
	Size       int64    `json:"size"`
	Count      int      `json:"count"`
	Type       string   `json:"type"` // as nccl-tests names it: float, half, double, bfloat16, int32, ...
	RedOp      string   `json:"redop"`
	Root       int      `json:"root"`
	OutOfPlace Measure  `json:"out_of_place"`
	InPlace    *Measure `json:"in_place"` // nil where the collective has no in-place form`
}

// RankInfo describes one rank of the job.
type RankInfo struct {
	Rank      int    `json:"rank"`
	Pid       int    `json:"pid"`
	Host      string `json:"host"`
	Transport string `json:"transport"` // to the next rank
	CPUs      int    `json:"cpus"`      // the CPUs the rank may run on (its affinity: 1 when a launcher bound it to one)
	// Device is the GPU's ordinal with --device gpu, -1 with host
	// buffers; DeviceBus its PCI address (domain:bus:device, as
	// nccl-tests prints it) and DeviceName its name.
	Device     int    `json:"device"`
	DeviceBus  string `json:"device_bus,omitempty"`
	DeviceName string `json:"device_name,omitempty"`
}

// Report is the whole run: what the JSON output holds.
type Report struct {
	Collective string  `json:"collective"`
	Ranks      int     `json:"ranks"`
	Type       string  `json:"type"` // as nccl-tests names it
	RedOp      string  `json:"redop"`
	Root       int     `json:"root"`
	MinBytes   int64   `json:"min_bytes"`
	MaxBytes   int64   `json:"max_bytes"`
	Factor     float64 `json:"factor"`
	Iters      int     `json:"iters"`
	Warmup     int     `json:"warmup"`
	Check      bool    `json:"check"`
	Telemetry  bool    `json:"telemetry"`
	Alternate  bool    `json:"telemetry_alternate,omitempty"` // off and on alternately: see Measure.TelemetryOn
	// Exporters says which exporters wrote while telemetry was on
	// (--exporters, --attach), "" for the records alone.
	Exporters string     `json:"telemetry_exporters,omitempty"`
	Date      string     `json:"date"`
	Host      string     `json:"host"`
	CPUs      int        `json:"cpus"` // rank 0's host's online CPUs; each rank's own in RankInfo
	GoVersion string     `json:"go_version"`
	RankInfo  []RankInfo `json:"rank_info"`
	Results   []Result   `json:"results"`
	AvgBusBW  float64    `json:"avg_busbw_gbps"`
	Wrong     int64      `json:"wrong"` // over every checked result; -1 without -c 1
	// Records kept (drained by the collectors) and dropped (a ring was
	// full) over all ranks, with telemetry on; a telemetry cost measured
	// while records are dropped is not the cost of keeping them.
	Records        int64 `json:"telemetry_records,omitempty"`
	RecordsDropped int64 `json:"telemetry_records_dropped,omitempty"`
}

// countRecords fills rep's record counts with telemetry on: every rank
// delivers what it recorded so far and the counts are summed (ranks that
// share a collector, in one process, each count all of its records).
func countRecords(ctx context.Context, comm *collective.Comm, rep *Report) error {
	col := comm.Collector()
	if col == nil {
		return nil
	}
	if err := col.Flush(ctx); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	st := col.Stats()
	n := []int64{int64(st.Drained), int64(st.RingDropped)}
	if err := collective.AllReduce(ctx, comm, n, n, collective.Sum); err != nil {
		return err
	}
	rep.Records, rep.RecordsDropped = n[0], n[1]
	return nil
}

// Options are the parts of a run that are not the command line.
type Options struct {
	// Table receives the nccl-tests table as the sweep goes (rank 0, not
	// --json); nil prints nothing.
	Table io.Writer
	// Progress, when not nil, shows the sweep's progress (rank 0).
	Progress *Progress
	// Corrupt, when set, may alter a rank's output after a checked call and
	// before the check: tests use it to see the check catch a bad result.
	Corrupt func(rank int, inPlace bool, out []byte)
	// Telemetry is what the report says about telemetry.
	Telemetry bool
	// Alternate times every variant with telemetry off and on in
	// alternating blocks (comm made with telemetry on; host buffers).
	Alternate bool
	// Exporters says which exporters are attached (--exporters, --attach),
	// for the report.
	Exporters string
	// Settle, when not nil, ends every block of Alternate inside the
	// block's timing: it delivers what telemetry the block's calls made
	// (drained, consumed by every sink, the trace handed to the OS), so
	// that each block pays for its own records and not the next block,
	// which may be an "off" one.
	Settle func(context.Context) error
	// device runs the sweep on device buffers (--device gpu).
	device *deviceRun
}

// Run measures cfg.Coll on comm over the sweep. Every rank calls it with the
// same cfg; every rank gets the same report (times averaged over ranks,
// wrong elements summed).
func Run(ctx context.Context, comm *collective.Comm, cfg Config, opts Options) (*Report, error) {
	n, rank := comm.Size(), comm.Rank()
	if cfg.Coll.Rooted() && cfg.Root >= n {
		return nil, fmt.Errorf("-r %d: root out of range for %d ranks", cfg.Root, n)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	rep := &Report{Collective: cfg.Coll.String(), Ranks: n, Type: NCCLTypeName(cfg.Type), RedOp: redopName(cfg), Root: rootOf(cfg),
		MinBytes: cfg.MinBytes, MaxBytes: cfg.MaxBytes, Factor: cfg.Factor, Iters: cfg.Iters, Warmup: cfg.Warmup,
		Check: cfg.Check, Telemetry: opts.Telemetry, Alternate: opts.Alternate, Exporters: opts.Exporters, Date: time.Now().Format(time.RFC3339), Host: host,
		CPUs: hostCPUs(), GoVersion: runtime.Version(), Wrong: -1, Results: []Result{}}
	if cfg.Check {
		rep.Wrong = 0
	}
	var err error
	if rep.RankInfo, err = gatherInfo(ctx, comm, opts.device); err != nil {
		return nil, fmt.Errorf("exchanging rank information: %w", err)
	}
	sizes := Sizes(cfg.MinBytes, cfg.MaxBytes, cfg.Factor)
	s, err := newSetup(cfg, rank, n, sizes[len(sizes)-1])
	if err != nil {
		return nil, fmt.Errorf("buffers: %w", err)
	}
	if s.dev = opts.device; s.dev != nil {
		if err := s.dev.alloc(ctx, s); err != nil {
			return nil, fmt.Errorf("device buffers: %w", err)
		}
	}
	if opts.Table != nil {
		writeHeader(opts.Table, rep)
	}
	if opts.Progress != nil {
		var total float64
		for _, size := range sizes {
			total += work(cfg, size)
		}
		opts.Progress.Start(total)
		defer opts.Progress.Finish()
	}
	// As nccl-tests does, warm up at the largest and then the smallest
	// size before the sweep: a job's first milliseconds run slow (its
	// threads start, its pages fault in), and would otherwise be timed in
	// the first row (BENCHMARKS.md, Method).
	for _, size := range []int64{sizes[len(sizes)-1], sizes[0]} {
		run, _, _ := s.prepare(ctx, comm, cfg.Coll.Layout(size, s.es, n), false)
		if err := run(cfg.Warmup); err != nil {
			return nil, fmt.Errorf("warm-up at %d bytes: %w", size, err)
		}
	}
	var bwSum float64
	var bwCount int
	variants := []bool{false, true}
	if !cfg.Coll.HasInPlace() {
		variants = variants[:1]
	}
	for _, size := range sizes {
		l := cfg.Coll.Layout(size, s.es, n)
		res := Result{Size: l.Bytes, Count: l.Count, Type: rep.Type, RedOp: rep.RedOp, Root: rep.Root}
		for _, inPlace := range variants {
			m, err := s.measure(ctx, comm, l, inPlace, opts)
			if err != nil {
				where := "out of place"
				if inPlace {
					where = "in place"
				}
				return nil, fmt.Errorf("%v of %d bytes %s: %w", cfg.Coll, l.Bytes, where, err)
			}
			if inPlace {
				res.InPlace = &m
			} else {
				res.OutOfPlace = m
			}
			bwSum += m.BusBW
			bwCount++
			if cfg.Check {
				rep.Wrong += m.Wrong
			}
			if opts.Progress != nil {
				opts.Progress.Add(work(cfg, size) / float64(len(variants)))
			}
		}
		rep.Results = append(rep.Results, res)
		if opts.Table != nil {
			if opts.Progress != nil {
				opts.Progress.Clear()
			}
			writeRow(opts.Table, res)
			if opts.Progress != nil {
				opts.Progress.Draw()
			}
		}
	}
	rep.AvgBusBW = bwSum / float64(bwCount)
	if err := countRecords(ctx, comm, rep); err != nil {
		return rep, err
	}
	if opts.Progress != nil {
		opts.Progress.Finish()
	}
	if opts.Table != nil {
		writeFooter(opts.Table, rep)
	}
	return rep, nil
}

// work is a size's weight for the progress bar: the bytes it moves.
func work(cfg Config, size int64) float64 {
	it := cfg.Iters + cfg.Warmup
	if cfg.Check {
		it++
	}
	if !cfg.Coll.HasInPlace() {
		return float64(max(size, 1024)) * float64(it)
	}
	return float64(max(size, 1024)) * float64(2*it)
}

func redopName(cfg Config) string {
	if cfg.Coll.Reduces() {
		return cfg.Op.String()
	}
	return "none"
}

func rootOf(cfg Config) int {
	if cfg.Coll.Rooted() {
		return cfg.Root
	}
	return -1
}

// measure times one variant and, with -c 1, checks it.
// timed sets m's time and bandwidths from this rank's elapsed time for
// the timed iterations: the mean over iterations on this rank, then over
// ranks (nccl-tests' -a 1).
func (s *setup) timed(ctx context.Context, comm *collective.Comm, elapsed time.Duration, l Layout, m *Measure) error {
	t := []float64{float64(elapsed.Nanoseconds()) / 1e3 / float64(s.cfg.Iters)}
	if err := collective.AllReduce(ctx, comm, t, t, collective.Sum); err != nil {
		return err
	}
	m.TimeUs = t[0] / float64(s.n)
	if m.TimeUs > 0 {
		m.AlgBW = float64(l.Bytes) / (m.TimeUs * 1e3)
		m.BusBW = m.AlgBW * s.cfg.Coll.BusFactor(s.n)
	}
	return nil
}

// prepare returns what runs k back-to-back calls of l's variant, with its
// host buffers and, on a device, its device call.
func (s *setup) prepare(ctx context.Context, comm *collective.Comm, l Layout, inPlace bool) (func(k int) error, call, devCall) {
	cl := s.buffers(l, inPlace)
	var dc devCall
	if s.dev != nil {
		dc = s.dev.call(s, cl)
		return func(k int) error { return s.dev.run(ctx, comm, s, dc, k) }, cl, dc
	}
	return func(k int) error {
		for range k {
			if err := s.start(ctx, comm, cl); err != nil {
				return err
			}
		}
		return nil
	}, cl, dc
}

func (s *setup) measure(ctx context.Context, comm *collective.Comm, l Layout, inPlace bool, opts Options) (Measure, error) {
	m := Measure{Wrong: -1}
	run, cl, dc := s.prepare(ctx, comm, l, inPlace)
	if err := run(s.cfg.Warmup); err != nil {
		return m, err
	}
	if err := comm.Barrier(ctx); err != nil {
		return m, err
	}
	if opts.Alternate {
		off, on, err := alternate(ctx, comm, s.cfg.Iters, run, opts.Settle)
		if err != nil {
			return m, err
		}
		m.TelemetryOn = &Measure{Wrong: -1}
		if err := s.timed(ctx, comm, on, l, m.TelemetryOn); err != nil {
			return m, err
		}
		if err := s.timed(ctx, comm, off, l, &m); err != nil {
			return m, err
		}
	} else {
		t0 := time.Now()
		if err := run(s.cfg.Iters); err != nil {
			return m, err
		}
		if err := s.timed(ctx, comm, time.Since(t0), l, &m); err != nil {
			return m, err
		}
	}
	if s.dev != nil && s.dev.nccl != 0 {
		nm, err := s.dev.ncclMeasure(ctx, comm, s, l, dc)
		if err != nil {
			return m, fmt.Errorf("NCCL: %w", err)
		}
		m.NCCL = &nm
	}
	if !s.cfg.Check {
		return m, nil
	}
	s.fill(l, cl)
	if s.dev != nil {
		if err := s.dev.upload(s, l); err != nil {
			return m, err
		}
	}
	if err := run(1); err != nil {
		return m, err
	}
	if s.dev != nil && cl.out != nil {
		if err := s.dev.download(cl.out, dc.out); err != nil {
			return m, err
		}
	}
	if opts.Corrupt != nil && cl.out != nil {
		opts.Corrupt(s.rank, inPlace, cl.out)
	}
	bad := []int64{0}
	if cl.out != nil {
		bad[0] = s.wrong(l, cl.out)
	}
	if err := collective.AllReduce(ctx, comm, bad, bad, collective.Sum); err != nil {
		return m, err
	}
	m.Wrong = bad[0]
	return m, nil
}

// altBlocks is how many blocks of each setting --telemetry alternate splits
// the timed iterations into. A shared machine's slow spells (a run several
// times slower for seconds) then fall on both settings alike, where
// separate launches each got their own luck.
const altBlocks = 10

// alternate runs iters calls with telemetry off and iters with it on, in
// blocks that alternate off-on, on-off, ... (so a drift favours neither),
// and returns for each setting iters times the median over its blocks of
// the block's mean call time: a slow spell that takes a block or two
// moves neither median, where it would move a total. It leaves telemetry
// on. Every rank switches at the same call, between calls, so no call
// loses records. settle, if not nil, ends every block, timed with it.
func alternate(ctx context.Context, comm *collective.Comm, iters int, run func(int) error, settle func(context.Context) error) (off, on time.Duration, err error) {
	blocks := min(altBlocks, iters)
	var perCall [2][]float64 // ns per call of each block, [off, on]
	for b := range blocks {
		k := iters/blocks + btoi(b < iters%blocks)
		for j, tel := range [2]bool{b%2 == 1, b%2 == 0} {
			if err := benchhook.SetTelemetry(comm, tel); err != nil {
				return 0, 0, err
			}
			t0 := time.Now()
			if err := run(k); err != nil {
				return 0, 0, fmt.Errorf("telemetry %s, block %d.%d: %w", onOff(tel), b, j, err)
			}
			if settle != nil {
				if err := settle(ctx); err != nil {
					return 0, 0, fmt.Errorf("telemetry %s, block %d.%d: delivering its records: %w", onOff(tel), b, j, err)
				}
			}
			perCall[btoi(tel)] = append(perCall[btoi(tel)], float64(time.Since(t0).Nanoseconds())/float64(k))
		}
	}
	off = time.Duration(median(perCall[0]) * float64(iters))
	on = time.Duration(median(perCall[1]) * float64(iters))
	return off, on, benchhook.SetTelemetry(comm, true)
}

// median returns the median of xs (not empty), sorting it.
func median(xs []float64) float64 {
	slices.Sort(xs)
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + m) / 2
	}
	return m
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// gatherInfo collects every rank's pid, host, transport and device (dev:
// nil with host buffers).
func gatherInfo(ctx context.Context, comm *collective.Comm, dev *deviceRun) ([]RankInfo, error) {
	const slot = 512
	n, rank := comm.Size(), comm.Rank()
	host, _ := os.Hostname()
	tr := "self"
	if n > 1 {
		tr = comm.Transport((rank + 1) % n)
	}
	me := RankInfo{Rank: rank, Pid: os.Getpid(), Host: host, Transport: tr, CPUs: runtime.NumCPU(), Device: -1}
	if dev != nil {
		me.Device, me.DeviceBus, me.DeviceName = dev.info()
	}
	b, _ := json.Marshal(me)
	if len(b) > slot {
		b, _ = json.Marshal(RankInfo{Rank: rank, Pid: os.Getpid(), Transport: tr, CPUs: runtime.NumCPU(), Device: me.Device})
	}
	mine := make([]byte, slot)
	copy(mine, b)
	all := make([]byte, slot*n)
	if err := collective.AllGather(ctx, comm, mine, all); err != nil {
		return nil, err
	}
	out := make([]RankInfo, n)
	for r := range n {
		rec := all[r*slot : (r+1)*slot]
		end := 0
		for end < slot && rec[end] != 0 {
			end++
		}
		if err := json.Unmarshal(rec[:end], &out[r]); err != nil {
			return nil, fmt.Errorf("rank %d's record: %w", r, err)
		}
	}
	return out, nil
}

// hostCPUs is the number of CPUs online on this host: runtime.NumCPU
// counts only those the process may use, one for a rank a launcher bound
// to a core. It reads Linux's /sys list and falls back to NumCPU elsewhere.
func hostCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	n, ok := countCPUList(strings.TrimSpace(string(b)))
	if !ok {
		return runtime.NumCPU()
	}
	return n
}

// countCPUList counts the CPUs of a list such as "0-3,8,10-11"; ok is
// false when the list does not parse.
func countCPUList(list string) (n int, ok bool) {
	if list == "" {
		return 0, false
	}
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, false
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, false
			}
		}
		n += b - a + 1
	}
	return n, true
}
