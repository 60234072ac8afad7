package source

import (
	"io"
	"math"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vccl-go/vccl/ui"
)

// scrape is one reading of a rank's collective metrics (exporter/prom's
// names), summed over communicators, algorithms and sizes, by operation.
type scrape struct {
	at  time.Time
	ops map[string]*opCounters
}

type opCounters struct {
	calls                float64 // vccl_collectives_total, every status
	busSum, busCount     float64 // vccl_bus_bandwidth_bytes_per_second, in GB/s
	algSum, algCount     float64 // vccl_algorithm_bandwidth_bytes_per_second, in GB/s
	timeSumUs, timeCount float64 // vccl_collective_exec_time_seconds, in µs
}

// parseScrape reads the Prometheus text format. Metrics other than the
// collective ones are ignored, so the live endpoint's stand-in summary
// (no exporter/prom attached) gives no collectives, and no error.
func parseScrape(r io.Reader, at time.Time) (*scrape, error) {
	r, err := filterMetrics(r)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	sc := &scrape{at: at, ops: map[string]*opCounters{}}
	get := func(m *dto.Metric) *opCounters {
		op := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "collective" {
				op = lp.GetValue()
			}
		}
		c := sc.ops[op]
		if c == nil {
			c = &opCounters{}
			sc.ops[op] = c
		}
		return c
	}
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			switch name {
			case "vccl_collectives_total":
				get(m).calls += m.GetCounter().GetValue()
			case "vccl_bus_bandwidth_bytes_per_second":
				c := get(m)
				c.busSum += m.GetHistogram().GetSampleSum() / 1e9
				c.busCount += float64(m.GetHistogram().GetSampleCount())
			case "vccl_algorithm_bandwidth_bytes_per_second":
				c := get(m)
				c.algSum += m.GetHistogram().GetSampleSum() / 1e9
				c.algCount += float64(m.GetHistogram().GetSampleCount())
			case "vccl_collective_exec_time_seconds":
				c := get(m)
				c.timeSumUs += m.GetHistogram().GetSampleSum() * 1e6
				c.timeCount += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	delete(sc.ops, "")
	return sc, nil
}

// rankRates is one rank's collectives between its last two scrapes (or,
// with only one, since it started).
type rankRates struct {
	ops map[string]opRate
}

type opRate struct {
	calls    float64 // cumulative
	perSec   float64
	bus, alg float64 // mean GB/s over the interval
	timeUs   float64 // mean execution time over the interval
	n        float64 // calls the means are over
}

// ratesOf: the rates between two scrapes; with only one, since started
// (when the rank's endpoint started), if known.
func ratesOf(cur, prev *scrape, started time.Time) rankRates {
	rr := rankRates{ops: map[string]opRate{}}
	for op, c := range cur.ops {
		o := opCounters{}
		var dt float64
		if prev != nil {
			if p := prev.ops[op]; p != nil && p.calls <= c.calls {
				o = *p
			}
			dt = cur.at.Sub(prev.at).Seconds()
		} else if !started.IsZero() {
			dt = cur.at.Sub(started).Seconds()
		}
		r := opRate{calls: c.calls}
		if dt > 0 {
			r.perSec = (c.calls - o.calls) / dt
		}
		mean := func(sum, psum, cnt, pcnt float64) float64 {
			if d := cnt - pcnt; d > 0 {
				return (sum - psum) / d
			}
			if cnt > 0 { // nothing new: the mean so far
				return sum / cnt
			}
			return 0
		}
		r.bus = mean(c.busSum, o.busSum, c.busCount, o.busCount)
		r.alg = mean(c.algSum, o.algSum, c.algCount, o.algCount)
		r.timeUs = mean(c.timeSumUs, o.timeSumUs, c.timeCount, o.timeCount)
		r.n = max(c.timeCount-o.timeCount, 0)
		rr.ops[op] = r
	}
	return rr
}

// mergeRates makes the job's collectives from its ranks': calls per
// second and bandwidths averaged over the ranks, and the arrival skew
// estimated as the spread of the ranks' mean execution times (a rank that
// arrives late waits less, so its call is shorter by about its lateness).
func mergeRates(rs []rankRates, size int) []ui.Coll {
	byOp := map[string][]opRate{}
	for _, r := range rs {
		for op, x := range r.ops {
			byOp[op] = append(byOp[op], x)
		}
	}
	var out []ui.Coll
	for _, op := range slices.Sorted(func(yield func(string) bool) {
		for k := range byOp {
			if !yield(k) {
				return
			}
		}
	}) {
		xs := byOp[op]
		c := ui.Coll{Op: op, SkewEstimated: true}
		var bus, alg, tm float64
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, x := range xs {
			c.Calls = max(c.Calls, uint64(x.calls))
			c.PerSec += x.perSec
			bus += x.bus
			alg += x.alg
			tm += x.timeUs
			if x.timeUs > 0 {
				lo, hi = min(lo, x.timeUs), max(hi, x.timeUs)
			}
		}
		n := float64(len(xs))
		c.PerSec /= n
		c.BusBWBps = bus / n * 1e9
		c.AlgBWBps = alg / n * 1e9
		c.AvgTimeNs = int64(tm / n * 1e3)
		if len(xs) > 1 && hi > lo {
			c.SkewNs = int64((hi - lo) * 1e3)
		}
		out = append(out, c)
	}
	return out
}
