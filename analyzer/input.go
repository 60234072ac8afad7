package analyzer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/flowtel"
)

// traceFile is one trace file of the job, as its metadata describes it.
type traceFile struct {
	path string
	meta arrow.Meta
}

// ExpandPaths lists the trace files named by paths: files as given,
// directories by their *.arrow, *.arrows and *.parquet files. A path that cannot be
// read becomes a warning.
func ExpandPaths(paths []string) (files []string, warnings []string) {
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		fs, err := arrow.ListFiles(p)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		if len(fs) == 0 {
			warnings = append(warnings, fmt.Sprintf("%s: no trace files (*.arrow, *.arrows, *.parquet)", p))
		}
		files = append(files, fs...)
	}
	return files, warnings
}

// AnalyzeFiles analyses the trace files and directories named by paths: the
// files of one job, all ranks merged on the common time base, streamed one
// record batch at a time per rank. Files that cannot be read, or that belong
// to another job than the one most files belong to, become warnings in the
// report and the rest is analysed; the error is for options out of range,
// no readable trace at all, or ctx ending.
func AnalyzeFiles(ctx context.Context, paths []string, opts Options) (*Report, error) {
	a, err := New(opts)
	if err != nil {
		return nil, err
	}
	names, warnings := ExpandPaths(paths)
	files, w := readMetas(names)
	warnings = append(warnings, w...)
	if len(files) == 0 {
		if len(warnings) > 0 {
			return nil, fmt.Errorf("analyzer: no readable trace: %s", warnings[0])
		}
		return nil, errors.New("analyzer: no trace files given")
	}
	job, w := pickJob(files)
	warnings = append(warnings, w...)
	ranks, w := byRank(job)
	warnings = append(warnings, w...)
	meta := job[0].meta
	if meta.CommID != 0 {
		a.SetWorldSize(meta.CommID, len(ranks))
	}
	streams := make([]*stream, len(ranks))
	done := make(chan struct{})
	defer close(done)
	for i, fs := range ranks {
		streams[i] = startStream(fs, done)
	}
	if err := merge(ctx, a, streams); err != nil {
		return nil, err
	}
	r := a.Finish()
	for _, s := range streams {
		r.Job.Files = append(r.Job.Files, s.files...)
		warnings = append(warnings, s.warnings...)
	}
	for i := range r.Job.Comms {
		if c := &r.Job.Comms[i]; c.ID == meta.CommID {
			c.UID = meta.CommUID
		}
	}
	r.Warnings = append(warnings, r.Warnings...)
	if r.Warnings == nil {
		r.Warnings = []string{}
	}
	return r, nil
}

// readMetas opens each file to read its metadata.
func readMetas(names []string) (files []traceFile, warnings []string) {
	for _, n := range names {
		r, err := arrow.OpenFiles(n)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s: skipped: %v", n, unwrapArrow(err, n)))
			continue
		}
		m := r.File().Meta
		r.Close()
		if m.SchemaVersion == 0 {
			warnings = append(warnings, fmt.Sprintf("%s: skipped: the file ends before its schema (no records)", n))
			continue
		}
		files = append(files, traceFile{path: n, meta: m})
	}
	return files, warnings
}

// unwrapArrow keeps the arrow package's error, which already names the file.
func unwrapArrow(err error, _ string) error { return err }

// pickJob keeps the files of the job most ranks belong to.
func pickJob(files []traceFile) (job []traceFile, warnings []string) {
	type jobInfo struct {
		uid   string
		ranks map[int]bool
		n     int
	}
	jobs := map[string]*jobInfo{}
	var order []string
	for _, f := range files {
		j := jobs[f.meta.CommUID]
		if j == nil {
			j = &jobInfo{uid: f.meta.CommUID, ranks: map[int]bool{}}
			jobs[f.meta.CommUID] = j
			order = append(order, f.meta.CommUID)
		}
		j.ranks[f.meta.Rank] = true
		j.n++
	}
	best := order[0]
	for _, u := range order[1:] {
		x, y := jobs[u], jobs[best]
		if len(x.ranks) > len(y.ranks) || len(x.ranks) == len(y.ranks) && x.n > y.n {
			best = u
		}
	}
	for _, f := range files {
		if f.meta.CommUID == best {
			job = append(job, f)
			continue
		}
		warnings = append(warnings, fmt.Sprintf("%s: skipped: another job (communicator %s, rank %d) than the one analysed (%s)",
			f.path, short(f.meta.CommUID), f.meta.Rank, short(best)))
	}
	return job, warnings
}

func short(uid string) string {
	if len(uid) > 8 {
		return uid[:8]
	}
	if uid == "" {
		return "(none)"
	}
	return uid
}

// byRank orders the job's files by rank, then segment.
func byRank(job []traceFile) (ranks [][]traceFile, warnings []string) {
	slices.SortStableFunc(job, func(x, y traceFile) int {
		return cmp.Or(cmp.Compare(x.meta.Rank, y.meta.Rank), cmp.Compare(x.meta.Segment, y.meta.Segment))
	})
	world := 0
	for i, f := range job {
		if i > 0 && f.meta.Rank == job[i-1].meta.Rank && f.meta.Segment == job[i-1].meta.Segment {
			warnings = append(warnings, fmt.Sprintf("%s: skipped: rank %d segment %d again (also in %s)", f.path, f.meta.Rank, f.meta.Segment, job[i-1].path))
			continue
		}
		if len(ranks) == 0 || ranks[len(ranks)-1][0].meta.Rank != f.meta.Rank {
			ranks = append(ranks, nil)
		}
		ranks[len(ranks)-1] = append(ranks[len(ranks)-1], f)
		if f.meta.WorldSize < 0 || f.meta.WorldSize > maxRanks {
			// Metadata is input: a world size no job has must not size
			// what is allocated or looped over below.
			warnings = append(warnings, fmt.Sprintf("%s: world size %d out of range [0, %d]: ignored", f.path, f.meta.WorldSize, maxRanks))
			continue
		}
		if f.meta.WorldSize != world && world != 0 {
			warnings = append(warnings, fmt.Sprintf("%s: world size %d, other files say %d", f.path, f.meta.WorldSize, world))
		}
		world = max(world, f.meta.WorldSize)
	}
	if world > 0 && len(ranks) < world {
		have := map[int]bool{}
		for _, fs := range ranks {
			have[fs[0].meta.Rank] = true
		}
		var missing []int
		for r := range world {
			if !have[r] {
				missing = append(missing, r)
			}
		}
		warnings = append(warnings, fmt.Sprintf("no trace of rank(s) %v of %d: what is said of them rests on their peers' records, and stragglers are judged among the ranks present", missing, world))
	}
	return ranks, warnings
}

// stream reads one rank's files in a goroutine, a batch at a time.
type stream struct {
	batches  chan []flowtel.Record
	free     chan []flowtel.Record
	files    []FileSummary
	warnings []string
	cur      []flowtel.Record
	pos      int
}

const streamBuffers = 3

func startStream(fs []traceFile, done <-chan struct{}) *stream {
	s := &stream{batches: make(chan []flowtel.Record, streamBuffers-1), free: make(chan []flowtel.Record, streamBuffers)}
	for range streamBuffers {
		s.free <- nil
	}
	go s.run(fs, done)
	return s
}

// run reads the files; files and warnings are complete once batches is
// closed.
func (s *stream) run(fs []traceFile, done <-chan struct{}) {
	defer close(s.batches)
	for _, f := range fs {
		r, err := arrow.OpenFiles(f.path)
		if err != nil {
			s.warnings = append(s.warnings, fmt.Sprintf("%s: skipped: %v", f.path, err))
			continue
		}
		for {
			recs, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				info := r.File()
				s.warnings = append(s.warnings, fmt.Sprintf("%s: records after batch %d not analysed: %v", f.path, info.Batches, err))
				break
			}
			var buf []flowtel.Record
			select {
			case buf = <-s.free:
			case <-done:
				r.Close()
				return
			}
			buf = append(buf[:0], recs...)
			select {
			case s.batches <- buf:
			case <-done:
				r.Close()
				return
			}
		}
		info := r.File()
		r.Close()
		s.files = append(s.files, FileSummary{Path: f.path, Rank: f.meta.Rank, Segment: f.meta.Segment,
			Records: info.Records, Finished: info.Finished, Truncated: info.Truncated})
		if info.Truncated {
			s.warnings = append(s.warnings, fmt.Sprintf("%s: cut short (its writer was killed?): read up to its last complete batch", f.path))
		}
	}
}

// next loads the stream's next batch; false at its end.
func (s *stream) next() bool {
	if s.cur != nil {
		s.free <- s.cur
		s.cur = nil
	}
	for {
		b, ok := <-s.batches
		if !ok {
			return false
		}
		if len(b) == 0 {
			s.free <- b
			continue
		}
		s.cur, s.pos = b, 0
		return true
	}
}

// mergeTolerance: how far past another stream's next record a run of one
// stream's records may go.
const mergeTolerance = 100 * time.Microsecond

// merge feeds the streams to a in time order: each time, the records of the
// stream whose next record is earliest, up to the next record of any other
// stream (plus the slice width, so runs are not cut too fine).
func merge(ctx context.Context, a *Analyzer, streams []*stream) error {
	var active []*stream
	for _, s := range streams {
		if s.next() {
			active = append(active, s)
		}
	}
	tol := min(a.w/10, int64(mergeTolerance))
	var sinceExpire int64 = math.MinInt64
	for len(active) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The earliest stream, and the earliest of the others.
		best := 0
		for i, s := range active {
			if s.cur[s.pos].TsNs < active[best].cur[active[best].pos].TsNs {
				best = i
			}
		}
		limit := int64(math.MaxInt64)
		for i, s := range active {
			if i != best {
				limit = min(limit, s.cur[s.pos].TsNs)
			}
		}
		if limit < math.MaxInt64-tol {
			limit += tol
		}
		s := active[best]
		j := s.pos + 1
		for j < len(s.cur) && s.cur[j].TsNs <= limit {
			j++
		}
		a.Add(s.cur[s.pos:j])
		s.pos = j
		if s.pos == len(s.cur) && !s.next() {
			active = slices.Delete(active, best, best+1)
		}
		// Every stream's next record is at or after the watermark.
		wm := int64(math.MaxInt64)
		for _, s := range active {
			wm = min(wm, s.cur[s.pos].TsNs)
		}
		if wm == math.MaxInt64 {
			break
		}
		a.fold.Advance(wm)
		a.judgeUpTo((wm - a.slack) / a.w)
		if wm-sinceExpire > 1e9 {
			a.expireCollectives(wm - a.slack)
			sinceExpire = wm
		}
	}
	return nil
}
