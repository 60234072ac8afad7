package analyzer

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options are the analyzer's thresholds. A zero field takes its default
// (DefaultOptions); the package documentation defines what each governs.
type Options struct {
	// Resolution is the width of the time slices the link detectors work
	// on. Default 1ms.
	Resolution time.Duration `opt:"resolution"`
	// Slack is how far out of time order one rank's records may come (the
	// recorder writes a completion at the owner's next poll, stamped with
	// when it happened); slices are judged once every rank's records are
	// past them by Slack. Default 250ms.
	Slack time.Duration `opt:"slack"`

	Backpressure BackpressureOptions `opt:"backpressure"`
	Stall        StallOptions        `opt:"stall"`
	Straggler    StragglerOptions    `opt:"straggler"`
	SlowLink     SlowLinkOptions     `opt:"slow_link"`
	HOL          HOLOptions          `opt:"hol"`
	Failover     FailoverOptions     `opt:"failover"`
	Rank         RankOptions         `opt:"rank"`

	// Significance bounds the chance that a link or rank of a healthy job
	// is, by luck, slow or late as often as a finding says (a slow link, a
	// straggler): the job's own rate of such events is the yardstick.
	// Default 1e-4, shared among the links or ranks compared.
	Significance float64 `opt:"significance"`

	// ListBelowFloor lists the findings under the noise floor too: those
	// of severity info (less than SeverityWarningShare of the trace lost),
	// which a healthy job has by chance. Without it they are only counted
	// (Report.BelowFloor). Default false.
	ListBelowFloor bool `opt:"list_below_floor"`

	// MaxListed bounds the collectives and WRs a finding lists. Default 16.
	MaxListed int `opt:"max_listed"`
	// SeriesPoints bounds the points of each link's chart series (the
	// series halves its resolution when full). Default 480.
	SeriesPoints int `opt:"series_points"`
	// TimelineCollectives bounds the collectives kept for the timeline
	// chart (every k-th, k doubling when full). Default 400.
	TimelineCollectives int `opt:"timeline_collectives"`
}

// BackpressureOptions: see "Backpressure" in the package documentation.
type BackpressureOptions struct {
	Window        time.Duration `opt:"window"`         // time a link is judged over (ending at each slice); default 5ms
	Baseline      time.Duration `opt:"baseline"`       // healthy slices a link's baseline covers; default 50ms
	MinBaseline   time.Duration `opt:"min_baseline"`   // baseline needed before judging; default 5ms
	RateFactor    float64       `opt:"rate_factor"`    // rate below this share of the baseline rate; default 0.5
	BacklogFactor float64       `opt:"backlog_factor"` // backlog above this multiple of the baseline's maximum; default 2
	CreditShare   float64       `opt:"credit_share"`   // or credit-starved over this share of the busy time; default 0.5
	MinBacklog    uint64        `opt:"min_backlog"`    // bytes outstanding a slice needs to be judged; default 64KiB
	MinBusy       float64       `opt:"min_busy"`       // share of a slice with sends pending, to judge it; default 0.5
	MinDuration   time.Duration `opt:"min_duration"`   // flagged time an episode needs; default 100ms
	Outlier       float64       `opt:"outlier"`        // and this many times another link's longest at other times; default 3
	MinShare      float64       `opt:"min_share"`      // flagged share of the episode's busy slices; default 0.5
	MaxGap        time.Duration `opt:"max_gap"`        // unflagged time that ends an episode; default 20ms
}

// StallOptions: see "Stall" in the package documentation.
type StallOptions struct {
	MinDuration  time.Duration `opt:"min_duration"`  // idle gap inside a collective; default 10ms
	MaxBusy      float64       `opt:"max_busy"`      // share of a slice with sends pending that still counts as idle; default 0.1
	MaxExplained float64       `opt:"max_explained"` // share of the gap that a late rank or backpressure may explain; default 0.5
}

// StragglerOptions: see "Straggler" in the package documentation.
type StragglerOptions struct {
	MinLate     time.Duration `opt:"min_late"`     // arrival after every other rank by at least this; default 2ms
	MinCount    int           `opt:"min_count"`    // late collectives needed; default 3
	MinShare    float64       `opt:"min_share"`    // share of all late arrivals that are this rank's; default 0.5
	MinFraction float64       `opt:"min_fraction"` // share of the comm's collectives it is late to; default 0.05
	// A single arrival this late (a hang between calls) is a straggler on
	// its own, when it is also Outlier times any other rank's latest
	// arrival; default 1s (a loaded host deschedules a rank between calls
	// for 600 ms now and then).
	MinSingleLate time.Duration `opt:"min_single_late"`
	Outlier       float64       `opt:"outlier"` // default 5
}

// RankOptions: see "A rank that does not run" in the package documentation.
type RankOptions struct {
	// NotRunning is the silence, with calls in flight, of a rank that
	// writes heartbeats after which it is taken not to run: five missed
	// heartbeats (a rank that yields its core among more ranks than cores
	// may wait two or three for it); default 50ms.
	NotRunning time.Duration `opt:"not_running"`
	// MinDown is the time a rank must not run, at a stretch, to be a
	// finding: a busy host deschedules a rank for 100 ms now and then;
	// default 200ms.
	MinDown time.Duration `opt:"min_down"`
	// MinSingle is the time a rank that was off once must not run: one
	// silence is weaker evidence than several (a loaded host deschedules
	// a rank for 300 ms now and then); default 500ms.
	MinSingle time.Duration `opt:"min_single"`
	// Outlier: its own silences must add up to this many times the
	// longest silence of any other rank with a call in flight (a host
	// that deschedules every rank in turn names none); default 3.
	Outlier float64 `opt:"outlier"`
	// DeadGrace: a rank whose records stop, with a sign of trouble, while
	// its peers' go on for at least this long died; default 10ms (a killed
	// rank's last unwritten records and its peers' detection of its death
	// can come that close).
	DeadGrace time.Duration `opt:"dead_grace"`
}

// SlowLinkOptions: see "Slow link" in the package documentation.
type SlowLinkOptions struct {
	Ratio          float64       `opt:"ratio"`           // bandwidth under this share of the other links' median; default 0.5
	MinBytes       uint64        `opt:"min_bytes"`       // a link's bytes in a collective to judge it; default 64KiB
	MinXfer        time.Duration `opt:"min_xfer"`        // and its timed transfer time; default 20µs
	Significance   float64       `opt:"significance"`    // chance a link of this job is as often slow by luck; default 1e-4
	MinWRBytes     uint64        `opt:"min_wr_bytes"`    // WRs smaller than this are not timed; default 4KiB
	MinCollectives int           `opt:"min_collectives"` // slow collectives an episode needs; default 5
	MinDuration    time.Duration `opt:"min_duration"`    // and the time it spans (a connection\'s first moments are slow); default 250ms
	MinFraction    float64       `opt:"min_fraction"`    // share of the episode's collectives that are slow; default 0.6
	MaxGap         int           `opt:"max_gap"`         // consecutive normal collectives that end an episode; default 5
}

// HOLOptions: see "Head-of-line blocking" in the package documentation.
type HOLOptions struct {
	MinWait    time.Duration `opt:"min_wait"`    // time a WR waits behind the blocking one; default 1ms
	Dominance  float64       `opt:"dominance"`   // that wait's share of the blocked WR's latency; default 0.8
	SizeRatio  float64       `opt:"size_ratio"`  // blocking WR at least this many times larger (or of another call); default 8
	MinBlocked int           `opt:"min_blocked"` // blocked WRs a finding needs; default 2
	MaxGap     time.Duration `opt:"max_gap"`     // time between blocking events that starts a new finding; default 1s
}

// FailoverOptions: see "Failover" in the package documentation.
type FailoverOptions struct {
	Window time.Duration `opt:"window"` // before and after windows; default 1s
}

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options {
	return Options{
		Resolution: time.Millisecond,
		Slack:      250 * time.Millisecond,
		Backpressure: BackpressureOptions{
			Window: 5 * time.Millisecond, Baseline: 50 * time.Millisecond, MinBaseline: 5 * time.Millisecond,
			RateFactor: 0.5, BacklogFactor: 2, CreditShare: 0.5, MinBacklog: 64 << 10, MinBusy: 0.5, MinShare: 0.5,
			MinDuration: 100 * time.Millisecond, MaxGap: 20 * time.Millisecond, Outlier: 3,
		},
		Stall: StallOptions{MinDuration: 50 * time.Millisecond, MaxBusy: 0.1, MaxExplained: 0.5},
		Straggler: StragglerOptions{
			MinLate: 2 * time.Millisecond, MinCount: 3, MinShare: 0.5, MinFraction: 0.05,
			MinSingleLate: time.Second, Outlier: 5,
		},
		SlowLink: SlowLinkOptions{
			Ratio: 0.5, MinBytes: 64 << 10, MinXfer: 20 * time.Microsecond, MinDuration: 250 * time.Millisecond,
			MinWRBytes: 4 << 10, MinCollectives: 5, MinFraction: 0.6, MaxGap: 5,
		},
		Rank: RankOptions{NotRunning: 50 * time.Millisecond, MinDown: 200 * time.Millisecond, MinSingle: 500 * time.Millisecond, Outlier: 3, DeadGrace: 10 * time.Millisecond},
		HOL: HOLOptions{
			MinWait: time.Millisecond, Dominance: 0.8, SizeRatio: 8, MinBlocked: 2, MaxGap: time.Second,
		},
		Failover:            FailoverOptions{Window: time.Second},
		Significance:        1e-4,
		MaxListed:           16,
		SeriesPoints:        480,
		TimelineCollectives: 400,
	}
}

// withDefaults fills zero fields from DefaultOptions.
func (o Options) withDefaults() Options {
	fillZero(reflect.ValueOf(&o).Elem(), reflect.ValueOf(DefaultOptions()))
	return o
}

func fillZero(dst, def reflect.Value) {
	for i := range dst.NumField() {
		f := dst.Field(i)
		if f.Kind() == reflect.Struct {
			fillZero(f, def.Field(i))
			continue
		}
		if f.IsZero() {
			f.Set(def.Field(i))
		}
	}
}

// Validate reports options out of range.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	check(o.Resolution >= 10*time.Microsecond, "resolution %v: want at least 10µs", o.Resolution)
	check(o.Slack >= 0, "slack %v: want at least 0", o.Slack)
	for _, s := range []struct {
		name string
		v    float64
	}{
		{"backpressure.rate_factor", o.Backpressure.RateFactor}, {"backpressure.credit_share", o.Backpressure.CreditShare},
		{"backpressure.min_busy", o.Backpressure.MinBusy}, {"backpressure.min_share", o.Backpressure.MinShare}, {"stall.max_explained", o.Stall.MaxExplained},
		{"stall.max_busy", o.Stall.MaxBusy}, {"straggler.min_share", o.Straggler.MinShare},
		{"straggler.min_fraction", o.Straggler.MinFraction}, {"slow_link.ratio", o.SlowLink.Ratio},
		{"slow_link.min_fraction", o.SlowLink.MinFraction}, {"hol.dominance", o.HOL.Dominance},
	} {
		check(s.v > 0 && s.v <= 1, "%s %v: want a share in (0, 1]", s.name, s.v)
	}
	check(o.Significance > 0 && o.Significance < 1, "significance %v: want a probability in (0, 1)", o.Significance)
	check(o.Straggler.Outlier >= 1, "straggler.outlier %v: want at least 1", o.Straggler.Outlier)
	check(o.Backpressure.Outlier >= 1, "backpressure.outlier %v: want at least 1", o.Backpressure.Outlier)
	check(o.Rank.Outlier >= 1, "rank.outlier %v: want at least 1", o.Rank.Outlier)
	check(o.Rank.NotRunning >= time.Millisecond, "rank.not_running %v: want at least 1ms", o.Rank.NotRunning)
	check(o.Rank.MinSingle >= o.Rank.MinDown, "rank.min_single %v: want at least rank.min_down (%v)", o.Rank.MinSingle, o.Rank.MinDown)
	check(o.Backpressure.BacklogFactor >= 1, "backpressure.backlog_factor %v: want at least 1", o.Backpressure.BacklogFactor)
	check(o.HOL.SizeRatio >= 1, "hol.size_ratio %v: want at least 1", o.HOL.SizeRatio)
	check(o.MaxListed >= 1 && o.MaxListed <= 1<<16, "max_listed %d: want 1 to 65536", o.MaxListed)
	check(o.SeriesPoints >= 16 && o.SeriesPoints <= 1<<16, "series_points %d: want 16 to 65536", o.SeriesPoints)
	check(o.TimelineCollectives >= 2 && o.TimelineCollectives <= 1<<16, "timeline_collectives %d: want 2 to 65536", o.TimelineCollectives)
	check(o.Backpressure.Window/o.Resolution <= 1<<12, "backpressure.window %v: at most 4096 slices of %v", o.Backpressure.Window, o.Resolution)
	check(o.Backpressure.Baseline/o.Resolution <= 1<<16, "backpressure.baseline %v: at most 65536 slices of %v", o.Backpressure.Baseline, o.Resolution)
	check(o.Failover.Window/o.Resolution <= 1<<20, "failover.window %v: at most 2^20 slices of %v", o.Failover.Window, o.Resolution)
	if len(errs) > 0 {
		return fmt.Errorf("analyzer: options: %s", strings.Join(errs, "; "))
	}
	return nil
}

// OptionNames returns the names Set takes (e.g. "straggler.min_late"), with
// their defaults.
func OptionNames() []string {
	var out []string
	walkOptions(reflect.ValueOf(DefaultOptions()), "", func(name string, v reflect.Value) {
		out = append(out, fmt.Sprintf("%s=%v", name, v.Interface()))
	})
	return out
}

func walkOptions(v reflect.Value, prefix string, fn func(string, reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		name := prefix + t.Field(i).Tag.Get("opt")
		if v.Field(i).Kind() == reflect.Struct {
			walkOptions(v.Field(i), name+".", fn)
			continue
		}
		fn(name, v.Field(i))
	}
}

// Set sets the option named name (as OptionNames lists them) from its text:
// a Go duration, a number, or a size such as 64KiB.
func (o *Options) Set(name, value string) error {
	var target reflect.Value
	walkOptions(reflect.ValueOf(o).Elem(), "", func(n string, v reflect.Value) {
		if n == name {
			target = v
		}
	})
	if !target.IsValid() {
		names := OptionNames()
		for i, n := range names {
			names[i], _, _ = strings.Cut(n, "=")
		}
		slices.Sort(names)
		return fmt.Errorf("analyzer: unknown option %q (options: %s)", name, strings.Join(names, ", "))
	}
	bad := func(err error) error { return fmt.Errorf("analyzer: option %s=%q: %v", name, value, err) }
	switch target.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(value)
		if err != nil {
			return bad(err)
		}
		target.SetInt(int64(d))
	case float64:
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return bad(err)
		}
		target.SetFloat(f)
	case int:
		n, err := strconv.Atoi(value)
		if err != nil {
			return bad(err)
		}
		target.SetInt(int64(n))
	case uint64:
		n, err := parseSize(value)
		if err != nil {
			return bad(err)
		}
		target.SetUint(n)
	case bool:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return bad(err)
		}
		target.SetBool(b)
	}
	return nil
}

func parseSize(s string) (uint64, error) {
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		m      uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, err
	}
	return n * mult, nil
}
