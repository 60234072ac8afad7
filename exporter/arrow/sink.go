package arrow

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	arrowgo "github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/vccl-go/vccl/flowtel"
)

// Environment variables OptionsFromEnv reads; options given after its win.
const (
	EnvDir         = "VCCL_TELEMETRY_DIR"          // directory of the trace files
	EnvTraceFormat = "VCCL_TELEMETRY_FORMAT"       // "stream" (.arrows, default), "file" (.arrow) or "parquet" (.parquet)
	EnvFormat      = "VCCL_TELEMETRY_ARROW_FORMAT" // the older name of VCCL_TELEMETRY_FORMAT, read when it is unset
	EnvRotate      = "VCCL_TELEMETRY_ARROW_ROTATE" // rotate after this many bytes (512K, 64M, 1G; 0: never)
)

// Defaults.
const (
	DefaultBatchRows     = 1 << 16
	DefaultFlushInterval = time.Second
	DefaultMaxFileBytes  = 256 << 20
	DefaultQueuedBatches = 4
	// MaxBatchRows bounds WithBatchRows: a batch of that many rows is 64 MiB.
	MaxBatchRows = 1 << 20
)

// Format is the layout of the trace files.
type Format uint8

const (
	// FormatFile is the Arrow IPC file format (.arrow): random access
	// through the footer written when the file is closed. A killed
	// writer's file needs Repair before tools other than this package's
	// Reader open it.
	FormatFile Format = iota
	// FormatStream is the Arrow IPC stream format (.arrows), the default:
	// read front to back, and every batch flushed is readable by any Arrow
	// reader at any time, the writer killed or not (docs/decisions/crash-safe-traces.md).
	FormatStream
	// FormatParquet is Apache Parquet (.parquet): one row group per batch,
	// the footer rewritten after each, so that a killed writer's file opens
	// up to its last flush in DuckDB, Spark, pandas or polars.
	FormatParquet
)

// DefaultFormat is the format the sink writes unless told otherwise.
const DefaultFormat = FormatStream

// Ext returns the file name extension of the format, with its dot.
func (f Format) Ext() string {
	switch f {
	case FormatStream:
		return ".arrows"
	case FormatParquet:
		return ".parquet"
	}
	return ".arrow"
}

func (f Format) String() string {
	switch f {
	case FormatStream:
		return "stream"
	case FormatParquet:
		return "parquet"
	}
	return "file"
}

// ParseFormat parses "file" (or "arrow"), "stream" (or "arrows") and
// "parquet"; empty is DefaultFormat.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return DefaultFormat, nil
	case "file", "arrow", ".arrow":
		return FormatFile, nil
	case "stream", "arrows", ".arrows":
		return FormatStream, nil
	case "parquet", ".parquet", "pq":
		return FormatParquet, nil
	}
	return DefaultFormat, fmt.Errorf("arrow: unknown trace format %q (want stream, file or parquet)", s)
}

// Compression is the body compression of the record batches.
type Compression uint8

// Compressions. Readers of the Arrow JS library do not decompress: keep the
// default where a browser or Node.js reads the traces.
const (
	CompressionNone Compression = iota
	CompressionLZ4
	CompressionZstd
)

// Option configures a Sink.
type Option func(*config)

type config struct {
	dir           string
	format        Format
	batchRows     int
	flushInterval time.Duration
	maxFileBytes  int64
	queued        int
	compression   Compression
	prefix        string

	// Test hooks.
	tick    <-chan time.Time // replaces the flush ticker
	onWrite func()           // called after each batch is written (writer goroutine)
}

// WithDir sets the directory the files go to (required; the telemetry
// package passes VCCL_TELEMETRY_DIR).
// It is created if missing.
func WithDir(dir string) Option { return func(c *config) { c.dir = dir } }

// WithFormat sets the file layout (default VCCL_TELEMETRY_FORMAT, else
// VCCL_TELEMETRY_ARROW_FORMAT, else DefaultFormat).
func WithFormat(f Format) Option { return func(c *config) { c.format = f } }

// WithBatchRows sets the rows of a record batch: a batch is written when it
// is full (default DefaultBatchRows, at most MaxBatchRows).
func WithBatchRows(n int) Option { return func(c *config) { c.batchRows = n } }

// WithFlushInterval sets how long records may wait in a partly filled batch
// before it is written anyway (default DefaultFlushInterval).
func WithFlushInterval(d time.Duration) Option { return func(c *config) { c.flushInterval = d } }

// WithMaxFileBytes sets the size after which the sink closes the file and
// starts the next one (default VCCL_TELEMETRY_ARROW_ROTATE, else
// DefaultMaxFileBytes; 0 or less: never rotate). A file ends at the first
// batch boundary past the size.
func WithMaxFileBytes(n int64) Option { return func(c *config) { c.maxFileBytes = n } }

// WithQueuedBatches sets how many full batches may wait for the disk before
// Consume waits (and so the collector, once its own queue is full, drops
// batches for this sink, counted). Default DefaultQueuedBatches.
func WithQueuedBatches(n int) Option { return func(c *config) { c.queued = n } }

// WithCompression compresses record batch bodies (default none).
func WithCompression(comp Compression) Option { return func(c *config) { c.compression = comp } }

// WithFilePrefix sets the file name prefix; files are named
// PREFIX-NNN.arrows (or .arrow, .parquet). The default is vccl-JOB-rankR,
// JOB being flowtel.JobID of the communicator's 32-bit id.
func WithFilePrefix(p string) Option { return func(c *config) { c.prefix = p } }

func defaultConfig() config {
	return config{
		batchRows:     DefaultBatchRows,
		flushInterval: DefaultFlushInterval,
		maxFileBytes:  DefaultMaxFileBytes,
		queued:        DefaultQueuedBatches,
		format:        DefaultFormat,
	}
}

// OptionsFromEnv returns the options the VCCL_TELEMETRY_FORMAT (or its
// older name) and VCCL_TELEMETRY_ARROW_ROTATE variables, read through
// getenv, ask for; the caller reads VCCL_TELEMETRY_DIR for WithDir. The
// sink itself reads no environment (telemetry.ConfigFromEnv passes these).
// Its errors name the variable.
func OptionsFromEnv(getenv func(string) string) ([]Option, error) {
	var opts []Option
	var errs []error
	for _, env := range []string{EnvTraceFormat, EnvFormat} {
		if v := getenv(env); v != "" {
			f, err := ParseFormat(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("arrow: %s: %w", env, err))
			} else {
				opts = append(opts, WithFormat(f))
			}
			break
		}
	}
	if v := getenv(EnvRotate); v != "" {
		n, err := ParseSize(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("arrow: %s: %w", EnvRotate, err))
		} else {
			opts = append(opts, WithMaxFileBytes(n))
		}
	}
	return opts, errors.Join(errs...)
}

// ParseSize parses a byte count: a decimal number with an optional suffix K,
// M, G or T (powers of 1024, case-insensitive, an optional trailing B or iB).
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	shift := 0
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift > 0 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("bad size %q (want a byte count such as 512K, 64M, 1G)", s)
	}
	return n << shift, nil
}

// FilePrefix is the name every trace file of a rank starts with:
// vccl-JOB-rankR, JOB being flowtel.JobID(comm).
func FilePrefix(comm uint32, rank int) string {
	return fmt.Sprintf("vccl-%s-rank%d", flowtel.JobID(comm), rank)
}

var errClosed = errors.New("arrow: sink is shut down")

// Sink is a flowtel.Sink that writes every record it consumes to trace
// files (Arrow IPC stream or file, or Parquet), one rank per file series
// (see the package documentation).
//
// Consume copies records into a column batch and returns; full batches are
// written to disk by the sink's own goroutine. When that goroutine falls
// more than WithQueuedBatches batches behind, Consume waits for it, which
// makes the collector drop batches for this sink (counted by the collector,
// and written into the trace in band as KindLost records): the data path is
// never slowed.
type Sink struct {
	cfg  config
	meta Meta

	mu        sync.Mutex
	cur       *colBatch // the batch Consume fills; nil: take one from free
	allocated int       // batches made so far (Consume only)
	shut      bool

	free     chan *colBatch // written batches, for reuse
	full     chan *colBatch // batches to write, in order; never blocks (capacity = every batch)
	flushReq chan chan struct{}
	stop     chan struct{}
	done     chan struct{} // closed when the writer goroutine has finished
	aborting atomic.Bool   // Shutdown's deadline passed: stop writing
	stopOnce sync.Once
	tickStop func()

	// Writer goroutine only.
	seg    *segment
	segNum int

	filesMu sync.Mutex
	files   []string

	errMu sync.Mutex
	err   error // the first write error; later batches are dropped

	records atomic.Uint64
	batches atomic.Uint64
	bytes   atomic.Uint64
	dropped atomic.Uint64
}

var _ flowtel.Sink = (*Sink)(nil)

// New returns a sink writing the records of the rank meta describes into the
// directory given by WithDir; it creates the directory and the first file.
// Options come after OptionsFromEnv's, when the caller passes them, so they
// win over the environment. Attach it to a collector with AddSink; the
// collector's Shutdown closes the files.
func New(meta Meta, opts ...Option) (*Sink, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.dir == "" {
		return nil, fmt.Errorf("arrow: no trace directory (use WithDir, or set %s where the program reads it)", EnvDir)
	}
	if cfg.batchRows <= 0 {
		cfg.batchRows = DefaultBatchRows
	}
	cfg.batchRows = min(cfg.batchRows, MaxBatchRows)
	if cfg.flushInterval <= 0 {
		cfg.flushInterval = DefaultFlushInterval
	}
	if cfg.queued < 1 {
		cfg.queued = 1
	}
	if cfg.format > FormatParquet {
		return nil, fmt.Errorf("arrow: unknown format %d", cfg.format)
	}
	if cfg.compression > CompressionZstd {
		return nil, fmt.Errorf("arrow: unknown compression %d", cfg.compression)
	}
	if cfg.prefix == "" {
		cfg.prefix = FilePrefix(meta.CommID, meta.Rank)
	}
	if strings.ContainsRune(cfg.prefix, filepath.Separator) {
		return nil, fmt.Errorf("arrow: file prefix %q holds a path separator", cfg.prefix)
	}
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return nil, fmt.Errorf("arrow: trace directory: %w", err)
	}
	meta.SchemaVersion = flowtel.SchemaVersion
	meta.KindNames, meta.StatusNames = kindNames, statusNames
	// One batch filling, the rest queued or being written.
	nbatches := cfg.queued + 1
	s := &Sink{
		cfg:      cfg,
		meta:     meta,
		free:     make(chan *colBatch, nbatches),
		full:     make(chan *colBatch, nbatches),
		flushReq: make(chan chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if err := s.openSegment(); err != nil {
		return nil, err
	}
	tick := cfg.tick
	if tick == nil {
		t := time.NewTicker(cfg.flushInterval)
		tick, s.tickStop = t.C, t.Stop
	}
	go s.run(tick)
	return s, nil
}

// Dir returns the directory the files go to.
func (s *Sink) Dir() string { return s.cfg.dir }

// Format returns the layout of the files.
func (s *Sink) Format() Format { return s.cfg.format }

// Files returns the paths of the files written so far, in order; the last
// may still be open.
func (s *Sink) Files() []string {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	return append([]string(nil), s.files...)
}

// SinkStats are a Sink's counters.
type SinkStats struct {
	Records uint64 // records written to files (handed to the OS)
	Batches uint64 // record batches written
	Bytes   uint64 // bytes written, all files together
	Files   int    // files opened
	Dropped uint64 // records consumed but not written (a write failed, or Shutdown's deadline passed)
	Err     error  // the first write error, if any
}

// Stats returns the sink's counters; safe from any goroutine.
func (s *Sink) Stats() SinkStats {
	s.filesMu.Lock()
	files := len(s.files)
	s.filesMu.Unlock()
	return SinkStats{
		Records: s.records.Load(),
		Batches: s.batches.Load(),
		Bytes:   s.bytes.Load(),
		Files:   files,
		Dropped: s.dropped.Load(),
		Err:     s.writeErr(),
	}
}

func (s *Sink) writeErr() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

func (s *Sink) setErr(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
}

// Consume implements flowtel.Sink: it copies recs into the current batch and
// hands full batches to the writer. It waits only when every batch is queued
// for the disk, and returns the sink's write error, if any, once records are
// being dropped because of it.
func (s *Sink) Consume(ctx context.Context, recs []flowtel.Record) error {
	for len(recs) > 0 {
		s.mu.Lock()
		if s.shut {
			s.mu.Unlock()
			s.dropped.Add(uint64(len(recs)))
			return errClosed
		}
		if s.cur == nil {
			s.mu.Unlock()
			b, err := s.getBatch(ctx)
			if err != nil {
				s.dropped.Add(uint64(len(recs)))
				return err
			}
			s.mu.Lock()
			s.cur = b
		}
		k := s.cur.append(recs)
		recs = recs[k:]
		if s.cur.full() {
			s.full <- s.cur // never blocks: full holds every batch there is
			s.cur = nil
		}
		s.mu.Unlock()
	}
	return s.writeErr()
}

// getBatch returns an empty batch: a written one, a new one while fewer than
// the limit exist, or the next one the writer is done with.
func (s *Sink) getBatch(ctx context.Context) (*colBatch, error) {
	select {
	case b := <-s.free:
		return b, nil
	default:
	}
	if s.allocated < cap(s.free) {
		s.allocated++
		return newColBatch(s.cfg.batchRows), nil
	}
	select {
	case b := <-s.free:
		return b, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("arrow: waiting for the writer: %w", ctx.Err())
	case <-s.done:
		return nil, errClosed
	}
}

// Flush writes the records consumed so far to the current file (the batch
// being filled included) and returns once they are handed to the OS: from
// then on they survive the process being killed. It returns the sink's write
// error, if any.
func (s *Sink) Flush(ctx context.Context) error {
	req := make(chan struct{})
	select {
	case s.flushReq <- req:
	case <-s.done:
		return errClosed
	case <-ctx.Done():
		return fmt.Errorf("arrow: flush: %w", ctx.Err())
	}
	select {
	case <-req:
		return s.writeErr()
	case <-ctx.Done():
		return fmt.Errorf("arrow: flush: %w", ctx.Err())
	}
}

// Shutdown implements flowtel.Sink: it writes what is left, finishes the
// current file (the footer of the file format, the end-of-stream marker of
// the stream format) and returns when done, or when ctx expires: the sink
// then stops writing batches, counting them as dropped, and finishes the file
// in the background.
func (s *Sink) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shut = true
	s.mu.Unlock()
	s.stopOnce.Do(func() { close(s.stop) })
	select {
	case <-s.done:
		return s.writeErr()
	case <-ctx.Done():
		s.aborting.Store(true)
		return fmt.Errorf("arrow: shutdown: %w", ctx.Err())
	}
}

// run is the writer goroutine.
func (s *Sink) run(tick <-chan time.Time) {
	defer close(s.done)
	if s.tickStop != nil {
		defer s.tickStop()
	}
	for {
		select {
		case b := <-s.full:
			s.write(b)
		case <-tick:
			s.cutCurrent()
		case req := <-s.flushReq:
			s.cutCurrent()
			s.writeQueued()
			close(req)
		case <-s.stop:
			s.cutCurrent()
			s.writeQueued()
			s.closeSegment()
			return
		}
	}
}

// cutCurrent queues the batch being filled, if it holds anything, behind
// the full ones.
func (s *Sink) cutCurrent() {
	s.mu.Lock()
	if s.cur != nil && s.cur.n > 0 {
		s.full <- s.cur
		s.cur = nil
	}
	s.mu.Unlock()
}

// writeQueued writes every queued batch.
func (s *Sink) writeQueued() {
	for {
		select {
		case b := <-s.full:
			s.write(b)
		default:
			return
		}
	}
}

// write writes b to the current file (opening the next one first if the
// last was rotated out) and recycles it.
func (s *Sink) write(b *colBatch) {
	n := b.n
	defer func() {
		b.n = 0
		s.free <- b // never blocks: free holds every batch there is
	}()
	if s.aborting.Load() || s.writeErr() != nil {
		s.dropped.Add(uint64(n))
		return
	}
	if s.seg == nil {
		if err := s.openSegment(); err != nil {
			s.setErr(err)
			s.dropped.Add(uint64(n))
			return
		}
	}
	before := s.seg.cw.n
	if err := s.seg.write(b); err != nil {
		s.setErr(fmt.Errorf("arrow: writing %s: %w", s.seg.path, err))
		s.dropped.Add(uint64(n))
		s.abandonSegment()
		return
	}
	s.records.Add(uint64(n))
	s.batches.Add(1)
	s.bytes.Add(uint64(s.seg.cw.n - before))
	if s.cfg.maxFileBytes > 0 && s.seg.cw.n >= s.cfg.maxFileBytes {
		s.closeSegment()
	} else if pw, ok := s.seg.w.(*parquetWriter); ok && pw.rowGroups() >= MaxParquetRowGroups {
		s.closeSegment()
	}
	if s.cfg.onWrite != nil {
		s.cfg.onWrite()
	}
}

// segment is one open file. Writers write into cw; commit hands what they
// wrote to the OS, in the way that keeps the file readable if the process
// dies at any point of it.
type segment struct {
	path      string
	f         *os.File
	cw        *countingWriter
	schema    *arrowgo.Schema
	wallDelta int64 // Unix time minus trace time
	w         interface {
		Write(arrowgo.RecordBatch) error
		Close() error
	}
	commit func() error
	drop   dropBehind
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (s *Sink) openSegment() error {
	path := filepath.Join(s.cfg.dir, fmt.Sprintf("%s-%03d%s", s.cfg.prefix, s.segNum, s.cfg.format.Ext()))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("arrow: %w", err)
	}
	meta := s.meta
	meta.Segment = s.segNum
	seg := &segment{path: path, f: f, schema: schemaFor(meta), wallDelta: meta.WallUnixNs - meta.WallTsNs}
	if err := seg.start(s.cfg); err != nil {
		f.Close()
		return fmt.Errorf("arrow: %s: %w", path, err)
	}
	s.seg = seg
	s.bytes.Add(uint64(seg.cw.n))
	s.segNum++
	s.filesMu.Lock()
	s.files = append(s.files, path)
	s.filesMu.Unlock()
	return nil
}

// start makes the segment's writer and commits the file's head, so that a
// writer killed before its first batch still leaves a trace that opens (with
// no rows) in the stream and Parquet formats.
func (seg *segment) start(cfg config) error {
	opts := []ipc.Option{ipc.WithSchema(seg.schema)}
	switch cfg.compression {
	case CompressionLZ4:
		opts = append(opts, ipc.WithLZ4(), ipc.WithCompressConcurrency(1))
	case CompressionZstd:
		opts = append(opts, ipc.WithZstd(), ipc.WithCompressConcurrency(1))
	}
	switch cfg.format {
	case FormatStream:
		pend := &vectorWriter{}
		seg.cw = &countingWriter{w: pend}
		seg.w = ipc.NewWriter(seg.cw, opts...)
		seg.commit = func() error { return commitOrdered(seg.f, seg.cw.n, pend) }
		// The schema and the enum dictionaries go out with an empty
		// batch: from now on the file is a stream any reader opens.
		empty := newColBatch(0).record(seg.schema, 0)
		defer empty.Release()
		if err := seg.w.Write(empty); err != nil {
			return err
		}
		return seg.commit()
	case FormatParquet:
		pend := &bytes.Buffer{}
		seg.cw = &countingWriter{w: pend}
		pw, err := newParquetWriter(seg.cw, seg.schema, cfg.compression)
		if err != nil {
			return err
		}
		seg.w = pw
		seg.commit = func() error { return commitAppend(seg.f, pend) }
		return seg.commit()
	}
	bw := bufio.NewWriterSize(seg.f, 1<<20)
	seg.cw = &countingWriter{w: bw}
	fw, err := ipc.NewFileWriter(seg.cw, opts...)
	if err != nil {
		return err
	}
	seg.w = fw
	seg.commit = bw.Flush
	return nil
}

// commitOrdered appends pend, one or more IPC stream messages that end at
// offset end of the stream, to f, and empties it. The first 8 bytes (the
// continuation marker and length of the first message) are written last:
// until then the stream reads as ending where pend starts (a hole reads as
// zeros, the end-of-stream marker of the IPC format's older readers and
// writers, which every reader still takes). So a writer killed in the
// middle of a write leaves a stream that ends at its last complete batch,
// whatever reads it. An 8-byte write at an offset that is a multiple of 8
// never crosses a page and is never cut short.
func commitOrdered(f *os.File, end int64, pend *vectorWriter) error {
	defer pend.reset()
	if pend.n == 0 {
		return nil
	}
	at := end - int64(pend.n)
	if pend.n > 8 {
		if err := writeVectorAt(f, pend.from(8), at+8); err != nil {
			return err
		}
	}
	_, err := f.WriteAt(pend.head(8), at)
	return err
}

// commitAppend writes pend to f in one write call and empties it.
func commitAppend(f *os.File, pend *bytes.Buffer) error {
	defer pend.Reset()
	_, err := f.Write(pend.Bytes())
	return err
}

// write writes b as one record batch and hands it to the OS.
func (seg *segment) write(b *colBatch) error {
	rec := b.record(seg.schema, seg.wallDelta)
	defer rec.Release()
	if err := seg.w.Write(rec); err != nil {
		return err
	}
	if err := seg.commit(); err != nil {
		return err
	}
	// The file format's buffer may hold up to 1 MiB of cw.n: a chunk
	// behind, that makes no difference.
	seg.drop.wrote(seg.f, seg.cw.n)
	return nil
}

// closeSegment finishes the current file, if any.
func (s *Sink) closeSegment() {
	seg := s.seg
	if seg == nil {
		return
	}
	s.seg = nil
	before := seg.cw.n
	err := seg.w.Close()
	if err == nil {
		err = seg.commit()
	}
	s.bytes.Add(uint64(seg.cw.n - before))
	if cerr := seg.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.setErr(fmt.Errorf("arrow: closing %s: %w", seg.path, err))
	}
}

// abandonSegment closes the current file after a write error, as it is.
func (s *Sink) abandonSegment() {
	if s.seg != nil {
		s.seg.f.Close()
		s.seg = nil
	}
}
