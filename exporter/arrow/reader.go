package arrow

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	arrowgo "github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/vccl-go/vccl/flowtel"
)

// FileInfo describes one trace file a Reader opened.
type FileInfo struct {
	Path   string
	Format Format
	Meta   Meta // zero when the file ends before its schema

	// Finished: the writer closed the file properly (the file format's
	// footer, the stream format's end-of-stream marker). An unfinished file
	// is what a killed writer leaves; it reads up to its last complete
	// record batch, and Repair finishes it for other Arrow tools. Known
	// once the file has been read to its end.
	Finished bool
	// Truncated: the file ends inside a message (a batch, or the schema),
	// which was skipped. Known once the file has been read to its end.
	Truncated bool

	Batches int   // record batches read so far
	Records int64 // records read so far
}

// Reader limits, against malformed input: the largest message metadata and
// body, and the largest single allocation while decoding (a compressed
// buffer claims its decompressed size). Variables for the fuzz test.
var (
	maxMetadataBytes int64 = 16 << 20
	maxBodyBytes     int64 = 256 << 20
	allocLimit             = 256 << 20
)

var (
	arrowMagic = []byte("ARROW1")
	eosMarker  = []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}
)

// Reader reads the records of trace files one record batch at a time, so
// memory stays bounded by the largest batch however large the trace. Files
// are read in the order given (for a directory: by name, which is rank then
// segment for the sink's names); each is checked when the reader reaches it.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	paths []string
	next  int
	cur   *traceFile
	files []FileInfo // every file opened so far; the last is cur's while it is open
	buf   []flowtel.Record
	err   error // sticky
}

// Open opens a trace file, or every trace file (*.arrow, *.arrows,
// *.parquet) in a directory. The first file is opened and checked at once.
func Open(path string) (*Reader, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("arrow: %w", err)
	}
	if !st.IsDir() {
		return OpenFiles(path)
	}
	paths, err := ListFiles(path)
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("arrow: no trace files (*.arrow, *.arrows, *.parquet) in %s", path)
	}
	return OpenFiles(paths...)
}

// ListFiles returns the trace files (*.arrow, *.arrows, *.parquet) in dir,
// sorted by name.
func ListFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("arrow: %w", err)
	}
	var paths []string
	for _, e := range ents {
		n := e.Name()
		if e.Type().IsRegular() && IsTraceName(n) {
			paths = append(paths, filepath.Join(dir, n))
		}
	}
	slices.Sort(paths)
	return paths, nil
}

// IsTraceName reports whether a file name has the extension of a trace
// format.
func IsTraceName(name string) bool {
	for _, f := range []Format{FormatFile, FormatStream, FormatParquet} {
		if strings.HasSuffix(name, f.Ext()) {
			return true
		}
	}
	return false
}

// OpenFiles opens trace files, read in the order given. The first is opened
// and checked at once.
func OpenFiles(paths ...string) (*Reader, error) {
	r := &Reader{paths: paths}
	if len(paths) > 0 {
		if err := r.openNext(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// NewReaderAt reads one trace of size bytes from ra; name is what errors and
// FileInfo call it.
func NewReaderAt(name string, ra io.ReaderAt, size int64) (*Reader, error) {
	tf, err := openTrace(name, ra, size, nil)
	if err != nil {
		return nil, err
	}
	r := &Reader{cur: tf, files: []FileInfo{tf.info}}
	return r, nil
}

// ReadAll reads every record of a trace file or directory into memory.
func ReadAll(path string) ([]flowtel.Record, error) {
	r, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var all []flowtel.Record
	for {
		recs, err := r.Next()
		if err == io.EOF {
			return all, nil
		}
		if err != nil {
			return all, err
		}
		all = append(all, recs...)
	}
}

func (r *Reader) openNext() error {
	path := r.paths[r.next]
	r.next++
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("arrow: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("arrow: %w", err)
	}
	tf, err := openTrace(path, f, st.Size(), f)
	if err != nil {
		f.Close()
		return err
	}
	r.cur = tf
	r.files = append(r.files, tf.info)
	return nil
}

// Next returns the records of the next record batch, and io.EOF after the
// last. The slice is valid until the next call. An error names the file; it
// is sticky.
func (r *Reader) Next() ([]flowtel.Record, error) {
	for r.err == nil {
		if r.cur == nil {
			if r.next >= len(r.paths) {
				return nil, io.EOF
			}
			if r.err = r.openNext(); r.err != nil {
				break
			}
			continue
		}
		recs, err := r.cur.nextRecords(r.buf)
		r.files[len(r.files)-1] = r.cur.info
		if err == io.EOF {
			r.cur.close()
			r.cur = nil
			continue
		}
		if err != nil {
			r.err = fmt.Errorf("arrow: %s: %w", r.cur.info.Path, err)
			break
		}
		r.buf = recs
		if len(recs) == 0 {
			continue
		}
		return recs, nil
	}
	return nil, r.err
}

// File describes the file the last batch came from (or the file being
// opened, after an error), and the zero FileInfo before any.
func (r *Reader) File() FileInfo {
	if len(r.files) == 0 {
		return FileInfo{}
	}
	return r.files[len(r.files)-1]
}

// Files describes every file opened so far, in order.
func (r *Reader) Files() []FileInfo { return slices.Clone(r.files) }

// Close closes the file being read.
func (r *Reader) Close() error {
	if r.cur != nil {
		r.cur.close()
		r.cur = nil
	}
	r.next = len(r.paths)
	if r.err == nil {
		r.err = errors.New("arrow: reader closed")
	}
	return nil
}

// traceFile is one open trace; its format is told by its first bytes, not
// its name. Both Arrow formats are read as the IPC stream they hold (a file
// holds one after its 8-byte header), through msgReader, which verifies
// each message before the Arrow library decodes it; a file's footer only
// tells whether the writer finished it. Parquet is read through pq.
type traceFile struct {
	info   FileInfo
	closer io.Closer
	schema *arrowgo.Schema
	idx    [nCols]int
	sr     *ipc.Reader
	msgs   *msgReader
	empty  bool // the file ends before its schema
	pq     *parquetTrace

	end      int64 // where the stream ends in the file
	boundary int64 // in the stream: where the message after the last one read starts
	footer   bool  // a file-format file with a valid footer after the stream
	tailEOS  bool  // the stream's last 8 bytes are the end-of-stream marker

	rb   arrowgo.RecordBatch // the batch being returned
	cols *batchCols          // its columns
	row  int                 // its next row
}

type cappedAllocator struct{ memory.Allocator }

func (a cappedAllocator) Allocate(n int) []byte {
	if n < 0 || n > allocLimit {
		panic(fmt.Errorf("a buffer of %d bytes (limit %d)", n, allocLimit))
	}
	return a.Allocator.Allocate(n)
}

func (a cappedAllocator) Reallocate(n int, b []byte) []byte {
	if n < 0 || n > allocLimit {
		panic(fmt.Errorf("a buffer of %d bytes (limit %d)", n, allocLimit))
	}
	return a.Allocator.Reallocate(n, b)
}

// protect turns a panic in the Arrow library on malformed input into err.
func protect(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%w: malformed Arrow data: %v", ErrNotTrace, p)
	}
}

// openTrace opens and checks the trace in ra; closer (may be nil) is closed
// with it.
func openTrace(name string, ra io.ReaderAt, size int64, closer io.Closer) (tf *traceFile, err error) {
	tf = &traceFile{info: FileInfo{Path: name}, closer: closer}
	defer func() {
		if err != nil {
			err = fmt.Errorf("arrow: %s: %w", name, err)
			tf = nil
		}
	}()
	defer protect(&err)
	if strings.HasSuffix(name, ".arrows") {
		tf.info.Format = FormatStream
	}
	if size == 0 {
		// A writer killed before its first flush leaves an empty file.
		tf.empty, tf.info.Truncated = true, true
		return tf, nil
	}
	head := make([]byte, min(size, 8))
	if _, err := ra.ReadAt(head, 0); err != nil {
		return nil, err
	}
	if bytes.HasPrefix(head, parquetMagic) || size < int64(len(parquetMagic)) && bytes.HasPrefix(parquetMagic, head) {
		if err := tf.openParquet(ra, size); err != nil {
			return nil, err
		}
		return tf, nil
	}
	fileHeader := []byte("ARROW1\x00\x00")
	if size < 8 && (bytes.HasPrefix(fileHeader, head) || bytes.HasPrefix(eosMarker[:4], head)) {
		// Cut inside the header: as empty as an empty file.
		tf.empty, tf.info.Truncated = true, true
		if head[0] == 0xff {
			tf.info.Format = FormatStream
		} else {
			tf.info.Format = FormatFile
		}
		return tf, nil
	}
	start := int64(0)
	tf.end = size
	switch {
	case bytes.Equal(head, fileHeader):
		tf.info.Format = FormatFile
		start = 8
		if fs, ok := findFooter(ra, size); ok {
			tf.end, tf.footer = fs, true
		}
	case binary.LittleEndian.Uint32(head) == 0xffffffff:
		tf.info.Format = FormatStream
	default:
		return nil, fmt.Errorf("%w: neither the Arrow IPC file or stream format nor Parquet", ErrNotTrace)
	}
	if tf.end-start >= int64(len(eosMarker)) {
		tail := make([]byte, len(eosMarker))
		if _, err := ra.ReadAt(tail, tf.end-int64(len(tail))); err != nil {
			return nil, err
		}
		tf.tailEOS = bytes.Equal(tail, eosMarker)
	}
	if err := tf.openStream(io.NewSectionReader(ra, start, tf.end-start)); err != nil {
		return nil, err
	}
	return tf, nil
}

// findFooter looks for a valid IPC file footer at the end of the file and
// returns where it starts: the end of the stream.
func findFooter(ra io.ReaderAt, size int64) (int64, bool) {
	const trailer = 4 + 6 // footer length, magic
	if size < 8+trailer {
		return 0, false
	}
	tail := make([]byte, trailer)
	if _, err := ra.ReadAt(tail, size-trailer); err != nil || !bytes.Equal(tail[4:], arrowMagic) {
		return 0, false
	}
	n := int64(int32(binary.LittleEndian.Uint32(tail)))
	if n <= 0 || n > size-8-trailer || n > maxMetadataBytes {
		return 0, false
	}
	footer := make([]byte, n)
	if _, err := ra.ReadAt(footer, size-trailer-n); err != nil {
		return 0, false
	}
	if _, err := verifyFooter(footer); err != nil {
		return 0, false
	}
	return size - trailer - n, true
}

// openStream opens the IPC stream in rd.
func (tf *traceFile) openStream(rd *io.SectionReader) (err error) {
	defer protect(&err)
	tf.msgs = &msgReader{r: &countingReader{r: rd}, size: rd.Size()}
	sr, err := ipc.NewReaderFromMessageReader(tf.msgs,
		ipc.WithAllocator(cappedAllocator{memory.DefaultAllocator}))
	if err != nil {
		if tf.msgs.cut || tf.msgs.r.n == 0 && errors.Is(err, io.EOF) {
			// Cut before or inside the schema message: nothing was
			// flushed after it.
			tf.empty, tf.info.Truncated = true, true
			return nil
		}
		if errors.Is(err, ErrNotTrace) || errors.Is(err, ErrSchemaVersion) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrNotTrace, err)
	}
	if err := tf.setSchema(sr.Schema()); err != nil {
		sr.Release()
		return err
	}
	tf.sr = sr
	tf.boundary = tf.msgs.r.n
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// msgReader reads IPC messages (the current format: continuation marker,
// metadata length, metadata, body) and verifies each before the Arrow
// library decodes it. A message that runs past the end of the input is a
// cut: it returns an error wrapping io.ErrUnexpectedEOF and sets cut.
type msgReader struct {
	r    *countingReader
	size int64
	msg  *ipc.Message
	cut  bool
}

func (m *msgReader) Retain() {}

func (m *msgReader) Release() {
	if m.msg != nil {
		m.msg.Release()
		m.msg = nil
	}
}

func (m *msgReader) truncated(what string) error {
	m.cut = true
	return fmt.Errorf("the input ends inside %s: %w", what, io.ErrUnexpectedEOF)
}

func (m *msgReader) Message() (*ipc.Message, error) {
	m.Release()
	at := m.r.n
	var hdr [4]byte
	n, err := io.ReadFull(m.r, hdr[:])
	if n == 0 && err == io.EOF {
		return nil, io.EOF // a cut between two messages
	}
	if err != nil {
		return nil, m.truncated("a message header")
	}
	switch binary.LittleEndian.Uint32(hdr[:]) {
	case 0xffffffff:
	case 0:
		return nil, io.EOF // the end-of-stream marker of old writers
	default:
		return nil, fmt.Errorf("%w: no message at byte %d of the stream", ErrNotTrace, at)
	}
	if _, err := io.ReadFull(m.r, hdr[:]); err != nil {
		return nil, m.truncated("a message header")
	}
	metaLen := int64(int32(binary.LittleEndian.Uint32(hdr[:])))
	switch {
	case metaLen == 0:
		return nil, io.EOF // the end-of-stream marker
	case metaLen < 0 || metaLen > maxMetadataBytes:
		return nil, fmt.Errorf("%w: message metadata of %d bytes at byte %d of the stream", ErrNotTrace, metaLen, at)
	case metaLen > m.size-m.r.n:
		return nil, m.truncated("message metadata")
	}
	meta := make([]byte, metaLen)
	if _, err := io.ReadFull(m.r, meta); err != nil {
		return nil, m.truncated("message metadata")
	}
	_, bodyLen, err := verifyMessage(meta)
	if err != nil {
		if errors.Is(err, ErrNotTrace) {
			return nil, fmt.Errorf("message at byte %d of the stream: %w", at, err)
		}
		return nil, fmt.Errorf("%w: message at byte %d of the stream: %v", ErrNotTrace, at, err)
	}
	switch {
	case bodyLen < 0 || bodyLen > maxBodyBytes:
		return nil, fmt.Errorf("%w: a message body of %d bytes at byte %d of the stream", ErrNotTrace, bodyLen, at)
	case bodyLen > m.size-m.r.n:
		return nil, m.truncated("a message body")
	}
	body := make([]byte, bodyLen)
	if _, err := io.ReadFull(m.r, body); err != nil {
		return nil, m.truncated("a message body")
	}
	m.msg = ipc.NewMessage(memory.NewBufferBytes(meta), memory.NewBufferBytes(body))
	return m.msg, nil
}

func (tf *traceFile) setSchema(s *arrowgo.Schema) error {
	if s == nil {
		return fmt.Errorf("%w: no schema", ErrNotTrace)
	}
	m, idx, err := parseSchema(s)
	if err != nil {
		return err
	}
	tf.schema, tf.info.Meta, tf.idx = s, m, idx
	return nil
}

// nextBatch returns the next Arrow record batch (the caller releases it),
// or io.EOF.
func (tf *traceFile) nextBatch() (rb arrowgo.RecordBatch, err error) {
	defer protect(&err)
	if tf.empty {
		return nil, io.EOF
	}
	if tf.pq != nil {
		return tf.pq.next()
	}
	if !tf.sr.Next() {
		err := tf.sr.Err()
		switch {
		case err == nil:
			// A clean end: the end-of-stream marker right after the last
			// message, or a cut between two messages.
			end := tf.msgs.size
			if tf.tailEOS && tf.boundary == end-int64(len(eosMarker)) && tf.msgs.r.n == end {
				tf.info.Finished = tf.info.Format == FormatStream || tf.footer
			}
			return nil, io.EOF
		case tf.msgs.cut:
			// The last message runs past the end: a cut.
			tf.info.Truncated = true
			return nil, io.EOF
		case tf.info.Batches == 0 && tf.msgs.r.n == tf.msgs.size:
			// Cut between the schema and the dictionaries the first
			// batch brings: nothing was flushed after the schema.
			tf.info.Truncated = true
			return nil, io.EOF
		case errors.Is(err, ErrNotTrace):
			return nil, fmt.Errorf("record batch %d: %w", tf.info.Batches, err)
		}
		return nil, fmt.Errorf("%w: record batch %d: %v", ErrNotTrace, tf.info.Batches, err)
	}
	tf.boundary = tf.msgs.r.n
	rb = tf.sr.RecordBatch()
	rb.Retain()
	return rb, nil
}

// maxChunk bounds the records Next returns at once: a larger record batch
// is returned in parts, so memory stays bounded whatever wrote the file.
const maxChunk = DefaultBatchRows

// nextRecords returns the next records of the file, at most maxChunk, or
// io.EOF.
func (tf *traceFile) nextRecords(buf []flowtel.Record) (recs []flowtel.Record, err error) {
	defer protect(&err)
	for tf.cols == nil || tf.row == tf.cols.n {
		tf.releaseBatch()
		rb, err := tf.nextBatch()
		if err != nil {
			return buf[:0], err
		}
		if tf.pq == nil && !rb.Schema().Equal(tf.schema) {
			rb.Release()
			return buf[:0], fmt.Errorf("%w: record batch %d has another schema", ErrNotTrace, tf.info.Batches)
		}
		if rb.NumRows() == 0 {
			// The stream writer's first batch, which brings the
			// dictionaries: not a batch of the trace.
			rb.Release()
			continue
		}
		cols, err := columnsOf(rb, &tf.idx)
		if err != nil {
			rb.Release()
			return buf[:0], fmt.Errorf("record batch %d: %w", tf.info.Batches, err)
		}
		tf.rb, tf.cols, tf.row = rb, cols, 0
		tf.info.Batches++
	}
	hi := min(tf.row+maxChunk, tf.cols.n)
	recs = tf.cols.records(buf, tf.row, hi)
	tf.row = hi
	tf.info.Records += int64(len(recs))
	return recs, nil
}

func (tf *traceFile) releaseBatch() {
	if tf.rb != nil {
		tf.rb.Release()
		tf.rb, tf.cols = nil, nil
	}
}

func (tf *traceFile) close() {
	tf.releaseBatch()
	if tf.sr != nil {
		tf.sr.Release()
		tf.sr = nil
	}
	if tf.pq != nil {
		tf.pq.close()
		tf.pq = nil
	}
	if tf.closer != nil {
		tf.closer.Close()
		tf.closer = nil
	}
}

func errBadBatch(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotTrace, fmt.Sprintf(format, args...))
}

// Repair finishes an unfinished trace file, as a killed writer leaves it, so
// that any Arrow or Parquet tool reads it. An Arrow file's complete record
// batches are rewritten, in the same format, into a finished file that
// replaces it (through a temporary file and a rename); a Parquet file is cut
// after its last complete footer (its writer wrote one after every batch).
// A finished file is left alone. It returns the file's description after
// the repair.
func Repair(path string) (FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileInfo{}, fmt.Errorf("arrow: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return FileInfo{}, fmt.Errorf("arrow: %w", err)
	}
	tf, err := openTrace(path, f, st.Size(), nil)
	if err != nil {
		return FileInfo{}, err
	}
	defer tf.close()
	if tf.empty {
		return tf.info, fmt.Errorf("arrow: %s: cannot repair: the file ends before its schema (it holds no records)", path)
	}
	if tf.info.Format == FormatParquet {
		return repairParquet(path, tf, st.Size())
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".repair-*")
	if err != nil {
		return tf.info, fmt.Errorf("arrow: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if err := rewrite(tf, tmp); err != nil {
		tmp.Close()
		return tf.info, fmt.Errorf("arrow: repairing %s: %w", path, err)
	}
	if tf.info.Finished { // finished after all: leave it alone
		tmp.Close()
		return tf.info, nil
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return tf.info, fmt.Errorf("arrow: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return tf.info, fmt.Errorf("arrow: %w", err)
	}
	if err := os.Chmod(tmp.Name(), st.Mode().Perm()); err != nil {
		return tf.info, fmt.Errorf("arrow: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return tf.info, fmt.Errorf("arrow: %w", err)
	}
	info := tf.info
	info.Finished, info.Truncated = true, false
	return info, nil
}

func rewrite(tf *traceFile, out io.Writer) error {
	var w interface {
		Write(arrowgo.RecordBatch) error
		Close() error
	}
	if tf.info.Format == FormatStream {
		w = ipc.NewWriter(out, ipc.WithSchema(tf.schema))
	} else {
		fw, err := ipc.NewFileWriter(out, ipc.WithSchema(tf.schema))
		if err != nil {
			return err
		}
		w = fw
	}
	for {
		rb, err := tf.nextBatch()
		if err == io.EOF {
			break
		}
		if err != nil {
			w.Close()
			return err
		}
		if rb.NumRows() == 0 { // the stream writer's dictionaries: not a batch of the trace
			rb.Release()
			continue
		}
		tf.info.Batches++
		tf.info.Records += rb.NumRows()
		err = w.Write(rb)
		rb.Release()
		if err != nil {
			w.Close()
			return err
		}
	}
	return w.Close()
}
