package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vccl-go/vccl/analyzer"
	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/ui"
)

// ReplayConfig configures a Replay.
type ReplayConfig struct {
	// Dir holds the traces, Arrow or Parquet (one file series per rank). With traces
	// of several communicators, the one with the most ranks is replayed.
	Dir string
	// Speed: 1 is real time (default), 2 twice as fast.
	Speed float64
	// Window sizes the per-link windows (zero: flowtel's defaults;
	// vccl-top passes VCCL_TELEMETRY_WINDOW's).
	Window flowtel.WindowConfig
	// Tick is how often the cursor moves (default 50ms).
	Tick time.Duration
	// Manual: no clock of its own; the cursor moves only with AdvanceTo
	// (tests, --once).
	Manual bool
	// Analyzer configures the analyzer whose findings the replay shows.
	Analyzer analyzer.Options
	// Grace: a rank whose trace ends this long (trace time) before the
	// others' is shown down from its last record on (default 1s).
	Grace time.Duration
}

// lostTail is how much of its end a killed rank's trace may lack (the
// Arrow sink's flush interval, and then some).
const lostTail = 2 * time.Second

// Speed limits of a replay.
const (
	MinSpeed = 1.0 / 16
	MaxSpeed = 256.0
)

// Replay replays Arrow traces through a flowtel.Window, as the live
// endpoints would have shown them: the same screens, post mortem.
type Replay struct {
	cfg   ReplayConfig
	uid   string
	jobID string // of the trace files' metadata
	size  int

	mu       sync.Mutex
	ranks    []*rankStream
	win      *flowtel.Window
	colls    *collTracker
	start    int64
	end      int64
	cursor   int64
	speed    float64
	paused   bool
	seq      uint64
	wallUnix int64 // wall time (Unix ns) at trace time wallTs
	wallTs   int64
	err      error
	skipped  []string // files, or metadata, the replay left out

	// The analyzer's findings over the whole trace (it has no incremental
	// API); each shows once the cursor passes its end, as a live analyzer
	// would have reported it then.
	findings    []analyzer.Finding
	analyzeErr  error
	analyzed    chan struct{}
	stopAnalyze context.CancelFunc

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type rankStream struct {
	rank        int
	paths       []string
	rd          *arrow.Reader
	buf         []flowtel.Record
	i           int
	eof         bool
	first, last int64
	lost        uint64
	meta        arrow.Meta
	// downAt: when the others first reported a failure on a link to this
	// rank after it went quiet (0: never); from then on it is down.
	downAt int64
}

// NewReplay opens the traces in cfg.Dir and starts replaying them from
// their first record (unless cfg.Manual). Close stops it.
func NewReplay(cfg ReplayConfig) (*Replay, error) {
	if cfg.Speed <= 0 {
		cfg.Speed = 1
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 50 * time.Millisecond
	}
	if cfg.Grace <= 0 {
		cfg.Grace = time.Second
	}
	paths, err := arrow.ListFiles(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("source: no Arrow traces (*.arrow, *.arrows) in %s", cfg.Dir)
	}
	// Group the files by communicator and rank, from their metadata.
	type fileMeta struct {
		path string
		meta arrow.Meta
	}
	byUID := map[string][]fileMeta{}
	var skipped []string
	for _, p := range paths {
		rd, err := arrow.OpenFiles(p)
		if err != nil {
			return nil, err
		}
		m := rd.File().Meta
		rd.Close()
		// A trace's metadata is input like any other: a rank or a world
		// size no job has would have the replay allocate or loop by it.
		if m.Rank < 0 || m.Rank >= MaxRanks {
			skipped = append(skipped, fmt.Sprintf("%s: skipped: rank %d out of range [0, %d)", p, m.Rank, MaxRanks))
			continue
		}
		if m.WorldSize < 0 || m.WorldSize > MaxRanks {
			skipped = append(skipped, fmt.Sprintf("%s: world size %d out of range [0, %d]: taken from the ranks present", p, m.WorldSize, MaxRanks))
			m.WorldSize = 0
		}
		byUID[m.CommUID] = append(byUID[m.CommUID], fileMeta{p, m})
	}
	if len(byUID) == 0 {
		return nil, fmt.Errorf("source: no usable trace in %s: %s", cfg.Dir, strings.Join(skipped, "; "))
	}
	var uid string
	for u, fs := range byUID {
		if uid == "" || fs[0].meta.WorldSize > byUID[uid][0].meta.WorldSize ||
			(fs[0].meta.WorldSize == byUID[uid][0].meta.WorldSize && u < uid) {
			uid = u
		}
	}
	files := byUID[uid]
	slices.SortFunc(files, func(a, b fileMeta) int {
		return cmp.Or(cmp.Compare(a.meta.Rank, b.meta.Rank), cmp.Compare(a.meta.Segment, b.meta.Segment))
	})
	r := &Replay{cfg: cfg, uid: uid, jobID: flowtel.JobID(files[0].meta.CommID), speed: min(max(cfg.Speed, MinSpeed), MaxSpeed),
		stop: make(chan struct{}), done: make(chan struct{}), skipped: skipped}
	for _, f := range files {
		if n := len(r.ranks); n == 0 || r.ranks[n-1].rank != f.meta.Rank {
			r.ranks = append(r.ranks, &rankStream{rank: f.meta.Rank, meta: f.meta})
		}
		rs := r.ranks[len(r.ranks)-1]
		rs.paths = append(rs.paths, f.path)
		r.size = max(r.size, f.meta.WorldSize, f.meta.Rank+1)
		if f.meta.Rank == 0 || r.wallUnix == 0 {
			r.wallUnix, r.wallTs = f.meta.WallUnixNs, f.meta.WallTsNs
		}
	}
	// A first pass for the time span of every rank, and the failures
	// ranks reported on links to a peer.
	r.start, r.end = int64(1<<63-1), int64(-1<<63)
	blamed := blame{}
	failures := flowtel.NewFold(blamed, flowtel.FoldConfig{GapNs: -1})
	for _, rs := range r.ranks {
		rs.first, rs.last = 1<<63-1, -1<<63
		rd, err := arrow.OpenFiles(rs.paths...)
		if err != nil {
			return nil, err
		}
		for {
			recs, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				rd.Close()
				return nil, err
			}
			for i := range recs {
				rs.first, rs.last = min(rs.first, recs[i].TsNs), max(rs.last, recs[i].TsNs)
			}
			failures.Add(recs)
		}
		rd.Close()
		if rs.first <= rs.last {
			r.start, r.end = min(r.start, rs.first), max(r.end, rs.last)
		}
		if rs.rd, err = arrow.OpenFiles(rs.paths...); err != nil {
			r.closeReaders()
			return nil, err
		}
	}
	// A rank is down once a peer reports a failure on a link to it at or
	// after its last record (less what an unflushed trace may have lost).
	for _, rs := range r.ranks {
		for _, ts := range blamed[int32(rs.rank)] {
			if ts >= rs.last-int64(lostTail) && (rs.downAt == 0 || ts < rs.downAt) {
				rs.downAt = max(ts, rs.last)
			}
		}
	}
	if r.start > r.end {
		r.closeReaders()
		return nil, fmt.Errorf("source: the traces in %s hold no records", cfg.Dir)
	}
	actx, cancel := context.WithCancel(context.Background())
	r.stopAnalyze, r.analyzed = cancel, make(chan struct{})
	go func() {
		defer close(r.analyzed)
		rep, err := analyzer.AnalyzeFiles(actx, []string{cfg.Dir}, cfg.Analyzer)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			r.analyzeErr = err
			return
		}
		r.findings = rep.Findings
		r.seq++
	}()
	r.win = flowtel.NewWindow(cfg.Window)
	r.colls = newCollTracker(int64(time.Second), r.size)
	r.cursor = r.start
	if cfg.Manual {
		close(r.done)
	} else {
		go r.run()
	}
	return r, nil
}

func (r *Replay) closeReaders() {
	for _, rs := range r.ranks {
		if rs.rd != nil {
			rs.rd.Close()
		}
	}
}

// Close stops the replay and closes the traces.
func (r *Replay) Close() error {
	r.once.Do(func() { close(r.stop) })
	<-r.done
	r.stopAnalyze()
	<-r.analyzed
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closeReaders()
	return nil
}

func (r *Replay) run() {
	defer close(r.done)
	t := time.NewTicker(r.cfg.Tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			dt := now.Sub(last)
			last = now
			r.mu.Lock()
			if !r.paused && r.cursor < r.end {
				r.advanceLocked(r.cursor + int64(float64(dt)*r.speed))
			}
			r.mu.Unlock()
		}
	}
}

// WaitAnalyzed waits until the analyzer has gone over the trace (or ctx
// ends): from then on frames carry its findings.
func (r *Replay) WaitAnalyzed(ctx context.Context) error {
	select {
	case <-r.analyzed:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.analyzeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetPaused pauses or resumes the replay.
func (r *Replay) SetPaused(p bool) {
	r.mu.Lock()
	r.paused = p
	r.seq++
	r.mu.Unlock()
}

// SetSpeed sets the speed, within [MinSpeed, MaxSpeed], and returns it.
func (r *Replay) SetSpeed(s float64) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.speed = min(max(s, MinSpeed), MaxSpeed)
	r.seq++
	return r.speed
}

// Span returns the trace time of the first and the last record.
func (r *Replay) Span() (start, end int64) { return r.start, r.end }

// AdvanceTo moves the cursor forward to trace time ts (not past the end),
// feeding the records up to it.
func (r *Replay) AdvanceTo(ts int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advanceLocked(ts)
	return r.err
}

func (r *Replay) advanceLocked(ts int64) {
	ts = min(ts, r.end)
	if ts <= r.cursor && r.seq > 0 {
		return
	}
	for _, rs := range r.ranks {
		for !rs.eof {
			if rs.i == len(rs.buf) {
				recs, err := rs.rd.Next()
				if err != nil {
					if !errors.Is(err, io.EOF) && r.err == nil {
						r.err = err
					}
					rs.eof, rs.buf, rs.i = true, nil, 0
					break
				}
				rs.buf, rs.i = recs, 0
				continue
			}
			rec := &rs.buf[rs.i]
			if rec.TsNs > ts {
				break
			}
			if rec.Kind == flowtel.KindLost {
				rs.lost += rec.Bytes
			}
			r.win.Add(rec)
			r.colls.add(rec)
			rs.i++
		}
	}
	r.cursor = max(r.cursor, ts)
	r.seq++
}

// blame keeps, by peer, when a rank reported a failure on a link to it: a
// WR that failed, or a path declared dead.
type blame map[int32][]int64

func (b blame) add(peer int32, ts int64) {
	if peer >= 0 && len(b[peer]) < 1<<16 {
		b[peer] = append(b[peer], ts)
	}
}

func (b blame) Completed(t *flowtel.Transfer) {
	if t.Failed() {
		b.add(t.Link.Peer, t.DoneNs)
	}
}

func (b blame) PathChanged(p *flowtel.PathChange) {
	if p.Kind == flowtel.KindLinkDown {
		b.add(p.Link.Peer, p.TsNs)
	}
}

func (blame) Posted(*flowtel.Transfer)      {}
func (blame) WaitBegan(*flowtel.CreditWait) {}
func (blame) WaitEnded(*flowtel.CreditWait) {}
func (blame) CallBegan(*flowtel.Call)       {}
func (blame) CallEnded(*flowtel.Call)       {}
func (blame) Gap(*flowtel.Gap)              {}
func (blame) Lost(*flowtel.Lost)            {}

func (r *Replay) wall(ts int64) time.Time {
	if r.wallUnix == 0 {
		return time.Unix(0, ts)
	}
	return time.Unix(0, r.wallUnix+(ts-r.wallTs))
}

// Frame returns the state at the cursor.
func (r *Replay) Frame() ui.Frame {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cursor
	f := ui.Frame{Source: "replay", Target: r.cfg.Dir, UID: r.uid, JobID: r.jobID, Time: r.wall(now), Seq: r.seq, Size: r.size,
		Replay: &ui.Replay{StartNs: r.start, EndNs: r.end, PosNs: now, Speed: r.speed, Paused: r.paused, Done: now >= r.end}}
	grace := int64(r.cfg.Grace)
	for _, rs := range r.ranks {
		rk := ui.Rank{Rank: rs.rank, Host: rs.meta.Host, PID: rs.meta.PID, Lost: rs.lost}
		switch {
		case rs.first > rs.last:
			rk.Err, rk.Since = "no records", r.wall(r.start)
		case now < rs.first:
			rk.Err, rk.Since = "not started", r.wall(r.start)
		case rs.downAt > 0 && now >= rs.downAt:
			rk.Err, rk.Since = "gone: its peers' transfers to it failed", r.wall(rs.last)
		case rs.last < r.end-grace && now > rs.last+grace:
			rk.Err, rk.Since = "its trace ends", r.wall(rs.last)
		default:
			rk.Up, rk.Since = true, r.wall(rs.first)
		}
		f.Ranks = append(f.Ranks, rk)
	}
	for _, ls := range r.win.SnapshotAt(now) {
		f.Links = append(f.Links, ui.Link{Rank: ls.Key.Rank, Peer: ls.Key.Peer, Channel: ls.Key.Channel, Path: uint8(ls.Key.Path),
			Dir: ls.Key.Dir.String(), BandwidthBps: ls.BandwidthBps, LatP50Ns: ls.LatP50Ns, LatP99Ns: ls.LatP99Ns,
			Backlog: ls.Backlog, PendingWRs: ls.PendingWRs, CreditWaitNs: ls.CreditWaitNs, CreditWaiting: ls.CreditWaiting,
			Completions: ls.Completions, Failed: ls.Failed, Bytes: ls.Bytes, WindowNs: int64(r.win.Config().T)})
	}
	f.Colls = r.colls.colls(now)
	for _, fd := range r.findings {
		if fd.EndNs <= now {
			f.Findings = append(f.Findings, ui.Finding{Finding: fd, Seen: r.wall(fd.EndNs)})
		}
	}
	select {
	case <-r.analyzed:
		if r.analyzeErr != nil {
			f.Notes = append(f.Notes, "analyzer: "+r.analyzeErr.Error())
		}
	default:
		f.Notes = append(f.Notes, "the analyzer is going over the trace; its findings follow")
	}
	if r.err != nil {
		f.Notes = append(f.Notes, "trace: "+r.err.Error())
	}
	for _, s := range r.skipped {
		f.Notes = append(f.Notes, "trace: "+s)
	}
	f.Normalize()
	return f
}
