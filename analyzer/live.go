package analyzer

import (
	"context"
	"sync"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// Live defaults.
const (
	// DefaultLiveSpan is how much of the latest trace a Live judges: long
	// enough for the detectors' baselines (a link's usual rate is learnt
	// over its healthy slices).
	DefaultLiveSpan = 2 * time.Second
	// DefaultLiveRecords bounds the records a Live keeps (16 MiB): a rank
	// writing faster than this over the span is judged on its newest
	// records only, so that an update costs a bounded time.
	DefaultLiveRecords = 1 << 18
)

// Live is the offline analysis run on a sliding window: it keeps the records
// of the last span and, at each Update, runs the very detectors, thresholds
// and reports vccl-analyze runs over a whole trace on them, so that a
// finding live and a finding afterwards mean the same. Records come from
// sources (a rank's process each, as its trace file would: vccl-top reads
// every rank's live endpoint), each source's in its order; Update merges
// the sources in time order as vccl-analyze merges files. It is also a
// flowtel.Sink, of one source.
//
// Consume and Update may be called concurrently; Update may not be called
// concurrently with itself.
type Live struct {
	o    Options
	span int64
	max  int

	mu      sync.Mutex
	buf     []liveRec // ring, oldest at head
	head, n int
	sizes   map[uint32]int
	dropped uint64             // records pushed out by newer ones before they left the span
	scratch [][]flowtel.Record // by source
}

type liveRec struct {
	flowtel.Record
	src int
}

var _ flowtel.Sink = (*Live)(nil)

// NewLive returns a live analysis of the last span of records (0:
// DefaultLiveSpan) with opts' thresholds, keeping at most DefaultLiveRecords.
func NewLive(opts Options, span time.Duration) (*Live, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if span <= 0 {
		span = DefaultLiveSpan
	}
	return &Live{o: opts, span: int64(span), max: DefaultLiveRecords, sizes: map[uint32]int{}}, nil
}

// SetWorldSize tells the analysis how many ranks communicator comm has (see
// Analyzer.SetWorldSize).
func (lv *Live) SetWorldSize(comm uint32, size int) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.sizes[comm] = size
}

// Add keeps recs of source 0 (see AddFrom).
func (lv *Live) Add(recs []flowtel.Record) { lv.AddFrom(0, recs) }

// maxLiveSources bounds the sources of a Live.
const maxLiveSources = maxRanks

// AddFrom keeps recs of source src (0 <= src < 16384), the oldest records
// of any source going first once the window is full.
func (lv *Live) AddFrom(src int, recs []flowtel.Record) {
	if src < 0 || src >= maxLiveSources {
		return
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if len(lv.buf) == 0 {
		lv.buf = make([]liveRec, min(lv.max, 1<<12))
	}
	for i := range recs {
		if lv.n == len(lv.buf) {
			if len(lv.buf) < lv.max {
				lv.grow(min(2*len(lv.buf), lv.max))
			} else {
				lv.head = (lv.head + 1) % len(lv.buf)
				lv.n--
				lv.dropped++
			}
		}
		lv.buf[(lv.head+lv.n)%len(lv.buf)] = liveRec{recs[i], src}
		lv.n++
	}
}

func (lv *Live) grow(c int) {
	buf := make([]liveRec, c)
	k := copy(buf, lv.buf[lv.head:lv.head+min(lv.n, len(lv.buf)-lv.head)])
	copy(buf[k:], lv.buf[:lv.n-k])
	lv.buf, lv.head = buf, 0
}

// Consume implements flowtel.Sink: it is Add.
func (lv *Live) Consume(_ context.Context, recs []flowtel.Record) error {
	lv.Add(recs)
	return nil
}

// Shutdown implements flowtel.Sink.
func (lv *Live) Shutdown(context.Context) error { return nil }

// Dropped returns how many records were pushed out of the window by newer
// ones before they were older than the span: the analysis then covered less
// than the span.
func (lv *Live) Dropped() uint64 {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.dropped
}

// Update forgets the records older than now-span (ns, the records' time
// base) and returns the findings of the offline analysis of the rest,
// worst first.
func (lv *Live) Update(now int64) []Finding {
	lv.mu.Lock()
	from := now - lv.span
	for lv.n > 0 && lv.buf[lv.head].TsNs < from {
		lv.head = (lv.head + 1) % len(lv.buf)
		lv.n--
	}
	for i := range lv.scratch {
		lv.scratch[i] = lv.scratch[i][:0]
	}
	for i := range lv.n {
		if r := &lv.buf[(lv.head+i)%len(lv.buf)]; r.TsNs <= now {
			for r.src >= len(lv.scratch) {
				lv.scratch = append(lv.scratch, nil)
			}
			lv.scratch[r.src] = append(lv.scratch[r.src], r.Record)
		}
	}
	var streams []*stream
	for _, recs := range lv.scratch {
		if len(recs) > 0 {
			streams = append(streams, sliceStream(recs))
		}
	}
	a, err := New(lv.o)
	if err != nil {
		lv.mu.Unlock()
		return nil // options were validated by NewLive
	}
	for comm, size := range lv.sizes {
		a.SetWorldSize(comm, size)
	}
	lv.mu.Unlock()
	// Analysed outside the lock: the collector keeps adding meanwhile.
	// The scratch slices are only reused by the next Update, which callers
	// do not run concurrently with this one.
	merge(context.Background(), a, streams)
	return a.Finish().Findings
}

// sliceStream is a stream of the records in recs, for merge.
func sliceStream(recs []flowtel.Record) *stream {
	s := &stream{batches: make(chan []flowtel.Record, 1), free: make(chan []flowtel.Record, 1)}
	s.batches <- recs
	close(s.batches)
	return s
}
