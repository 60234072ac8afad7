package live

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/vccl-go/vccl/flowtel"
)

// Records endpoint defaults.
const (
	// DefaultRecordRing is how many of its latest records a server keeps
	// for /v1/records (4 MiB).
	DefaultRecordRing = 1 << 16
	// MaxRecordsPerRead bounds one /v1/records answer.
	MaxRecordsPerRead = 1 << 14
)

// Headers of a /v1/records answer.
const (
	HeaderNext    = "X-Vccl-Next"    // the cursor to ask for next (?after=)
	HeaderMissed  = "X-Vccl-Missed"  // records the client missed: overwritten before it asked
	HeaderPending = "X-Vccl-Pending" // records newer than this answer, still in the ring
)

// recordRing keeps a rank's latest records, numbered from 1, for clients
// that follow them (vccl-top runs the analyzer over them). A Sink: it copies
// each batch and never blocks the collector for longer than that.
type recordRing struct {
	mu    sync.Mutex
	buf   []flowtel.Record
	total uint64 // records ever added; the newest is number total
}

func newRecordRing(n int) *recordRing { return &recordRing{buf: make([]flowtel.Record, n)} }

func (r *recordRing) Consume(_ context.Context, recs []flowtel.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := uint64(len(r.buf))
	if len(recs) > len(r.buf) {
		r.total += uint64(len(recs) - len(r.buf))
		recs = recs[len(recs)-len(r.buf):]
	}
	for i := range recs {
		r.buf[(r.total+uint64(i))%n] = recs[i]
	}
	r.total += uint64(len(recs))
	return nil
}

func (r *recordRing) Shutdown(context.Context) error { return nil }

// read returns up to max records numbered after after, the number of the
// last one returned, how many asked for were overwritten already, and how
// many newer ones remain.
func (r *recordRing) read(after uint64, max int) (out []flowtel.Record, next, missed, pending uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := uint64(len(r.buf))
	oldest := uint64(1)
	if r.total > n {
		oldest = r.total - n + 1
	}
	from := after + 1
	if after > r.total { // a cursor from a previous life of the server
		from = oldest
	}
	if from < oldest {
		missed, from = oldest-from, oldest
	}
	to := min(r.total, from+uint64(max)-1)
	for i := from; i <= to; i++ {
		out = append(out, r.buf[(i-1)%n])
	}
	return out, max64(to, from-1), missed, r.total - max64(to, from-1)
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// serveRecords answers GET /v1/records?after=N: the records numbered after
// N (0: from the oldest kept) in flowtel's wire form, at most
// MaxRecordsPerRead (or ?max=), with the cursor to ask for next in
// X-Vccl-Next.
func (s *Server) serveRecords(w http.ResponseWriter, req *http.Request) {
	var after uint64
	if v := req.URL.Query().Get("after"); v != "" {
		a, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("after=%q: want the X-Vccl-Next of the previous answer (a record number)", v), http.StatusBadRequest)
			return
		}
		after = a
	}
	limit := MaxRecordsPerRead
	if v := req.URL.Query().Get("max"); v != "" {
		m, err := strconv.Atoi(v)
		if err != nil || m < 1 || m > MaxRecordsPerRead {
			http.Error(w, fmt.Sprintf("max=%q: want 1 to %d records", v, MaxRecordsPerRead), http.StatusBadRequest)
			return
		}
		limit = m
	}
	recs, next, missed, pending := s.records.read(after, limit)
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderNext, strconv.FormatUint(next, 10))
	h.Set(HeaderMissed, strconv.FormatUint(missed, 10))
	h.Set(HeaderPending, strconv.FormatUint(pending, 10))
	w.Write(flowtel.AppendRecords(make([]byte, 0, len(recs)*flowtel.RecordSize), recs))
}

// RecordSink returns the sink that keeps the records /v1/records serves.
// Start attaches it to the communicator's collector; a server made with New
// serves only what is given to it.
func (s *Server) RecordSink() flowtel.Sink { return s.records }
