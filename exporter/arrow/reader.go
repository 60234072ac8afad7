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
	// record batch, and Repair finishes it for other Arrow tools. For the
	// stream format it is known once the file has been read to its end.
	Finished bool
	// Truncated: the file ends inside a message (a batch, or the schema),
	// which was skipped. Known once the file has been read to its end.
	Truncated bool

	Batches int   // record batches read so far
	Records int64 // records read so far
}

// Reader limits, against malformed input.
const (
	maxMetadataBytes = 16 << 20
	maxBodyBytes     = 256 << 20
)

// allocLimit bounds a single allocation while decoding (a compressed buffer
// claims its decompressed size). A variable for the fuzz test.
var allocLimit = maxBodyBytes

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

// Open opens a trace file, or every trace file (*.arrow, *.arrows) in a
// directory. The first file is opened and checked at once.
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
		return nil, fmt.Errorf("arrow: no trace files (*.arrow, *.arrows) in %s", path)
	}
	return OpenFiles(paths...)
}

// ListFiles returns the trace files (*.arrow, *.arrows) in dir, sorted by
// name.
func ListFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("arrow: %w", err)
	}
	var paths []string
	for _, e := range ents {
		n := e.Name()
		if e.Type().IsRegular() && (strings.HasSuffix(n, ".arrow") || strings.HasSuffix(n, ".arrows")) {
			paths = append(paths, filepath.Join(dir, n))
		}
	}
	slices.Sort(paths)
	return paths, nil
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

// traceFile is one open trace.
type traceFile struct {
	info   FileInfo
	closer io.Closer
	schema *arrowgo.Schema
	idx    [nCols]int
	fr     *ipc.FileReader // the file format, finished
	sr     *ipc.Reader     // the stream format, or an unfinished file
	next   int             // fr: the next batch
	empty  bool            // the file ends before its schema

	stream   *countingReader // under sr
	boundary int64           // where the message after the last one read starts
	tailEOS  bool            // a stream file ends with the end-of-stream marker
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

func ipcOptions() []ipc.Option {
	return []ipc.Option{
		ipc.WithAllocator(cappedAllocator{memory.DefaultAllocator}),
		ipc.WithMetadataSizeLimit(maxMetadataBytes),
		ipc.WithBodySizeLimit(maxBodyBytes),
	}
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
	if size == 0 {
		// A writer killed before its first flush leaves an empty file.
		tf.empty, tf.info.Truncated = true, true
		if strings.HasSuffix(name, ".arrows") {
			tf.info.Format = FormatStream
		}
		return tf, nil
	}
	head := make([]byte, min(size, 8))
	if _, err := ra.ReadAt(head, 0); err != nil {
		return nil, err
	}
	if size < 8 && (bytes.HasPrefix([]byte("ARROW1\x00\x00"), head) || bytes.HasPrefix(eosMarker[:4], head)) {
		// Cut inside the header: as empty as an empty file.
		tf.empty, tf.info.Truncated = true, true
		if head[0] == 0xff {
			tf.info.Format = FormatStream
		}
		return tf, nil
	}
	if bytes.HasPrefix(head, arrowMagic) {
		tf.info.Format = FormatFile
		var ferr error
		if size >= 8+4+int64(len(arrowMagic)) {
			tail := make([]byte, len(arrowMagic))
			if _, err := ra.ReadAt(tail, size-int64(len(tail))); err != nil {
				return nil, err
			}
			if bytes.Equal(tail, arrowMagic) {
				if ferr = tf.openFile(ra, size); ferr == nil {
					tf.info.Finished = true
					return tf, nil
				}
				if errors.Is(ferr, ErrSchemaVersion) {
					return nil, ferr
				}
			}
		}
		// No footer: what a killed writer leaves. The file holds a stream
		// after its 8-byte header.
		if err := tf.openStream(io.NewSectionReader(ra, 8, size-8)); err != nil {
			if ferr != nil {
				return nil, fmt.Errorf("%w: neither a finished Arrow file (%v) nor an unfinished one (%v)", ErrNotTrace, ferr, err)
			}
			return nil, err
		}
		return tf, nil
	}
	if len(head) < 4 || binary.LittleEndian.Uint32(head) != 0xffffffff {
		return nil, fmt.Errorf("%w: neither the Arrow IPC file nor the stream format", ErrNotTrace)
	}
	tf.info.Format = FormatStream
	if size >= int64(len(eosMarker)) {
		tail := make([]byte, len(eosMarker))
		if _, err := ra.ReadAt(tail, size-int64(len(tail))); err != nil {
			return nil, err
		}
		tf.tailEOS = bytes.Equal(tail, eosMarker)
	}
	if err := tf.openStream(io.NewSectionReader(ra, 0, size)); err != nil {
		return nil, err
	}
	return tf, nil
}

// countingReader counts the bytes read through it. The IPC stream reader
// reads message by message, without reading ahead, so the count after a
// message is where the next one starts.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (tf *traceFile) openFile(ra io.ReaderAt, size int64) (err error) {
	defer protect(&err)
	fr, err := ipc.NewFileReader(io.NewSectionReader(ra, 0, size), ipcOptions()...)
	if err != nil {
		return err
	}
	if err := tf.setSchema(fr.Schema()); err != nil {
		fr.Close()
		return err
	}
	if fr.NumDictionaries() != 0 {
		fr.Close()
		return fmt.Errorf("%w: dictionaries in a trace file", ErrNotTrace)
	}
	tf.fr = fr
	return nil
}

// openStream opens the IPC stream of size bytes in rd: a stream file, or
// the body of an unfinished file.
func (tf *traceFile) openStream(rd *io.SectionReader) (err error) {
	defer protect(&err)
	var cont [4]byte
	n, _ := rd.ReadAt(cont[:], 0)
	tf.stream = &countingReader{r: rd}
	sr, err := ipc.NewReader(tf.stream, ipcOptions()...)
	if err != nil {
		if (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)) && bytes.HasPrefix(eosMarker[:4], cont[:n]) {
			// Cut inside the schema message: nothing was flushed after it.
			tf.empty, tf.info.Truncated = true, true
			return nil
		}
		return fmt.Errorf("%w: %v", ErrNotTrace, err)
	}
	if err := tf.setSchema(sr.Schema()); err != nil {
		sr.Release()
		return err
	}
	tf.sr = sr
	tf.boundary = tf.stream.n
	return nil
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
	switch {
	case tf.empty:
		return nil, io.EOF
	case tf.fr != nil:
		if tf.next >= tf.fr.NumRecords() {
			return nil, io.EOF
		}
		rb, err := tf.fr.RecordBatchAt(tf.next)
		if err != nil {
			return nil, fmt.Errorf("%w: record batch %d: %v", ErrNotTrace, tf.next, err)
		}
		tf.next++
		return rb, nil
	default:
		if !tf.sr.Next() {
			err := tf.sr.Err()
			switch {
			case err == nil:
				// A clean end: the end-of-stream marker right after the
				// last message, or a cut between two messages.
				if tf.info.Format == FormatStream && tf.tailEOS && tf.stream.n-tf.boundary == int64(len(eosMarker)) {
					tf.info.Finished = true
				}
				return nil, io.EOF
			case errors.Is(err, io.ErrUnexpectedEOF):
				// The last message runs past the end: a cut.
				tf.info.Truncated = true
				return nil, io.EOF
			}
			return nil, fmt.Errorf("%w: record batch %d: %v", ErrNotTrace, tf.info.Batches, err)
		}
		tf.boundary = tf.stream.n
		rb := tf.sr.RecordBatch()
		rb.Retain()
		return rb, nil
	}
}

func (tf *traceFile) nextRecords(buf []flowtel.Record) (recs []flowtel.Record, err error) {
	rb, err := tf.nextBatch()
	if err != nil {
		return buf[:0], err
	}
	defer rb.Release()
	defer protect(&err)
	if !rb.Schema().Equal(tf.schema) {
		return buf[:0], fmt.Errorf("%w: record batch %d has another schema", ErrNotTrace, tf.info.Batches)
	}
	recs, err = toRecords(buf, rb, &tf.idx)
	if err != nil {
		return recs, fmt.Errorf("record batch %d: %w", tf.info.Batches, err)
	}
	tf.info.Batches++
	tf.info.Records += int64(len(recs))
	return recs, nil
}

func (tf *traceFile) close() {
	if tf.fr != nil {
		tf.fr.Close()
	}
	if tf.sr != nil {
		tf.sr.Release()
	}
	if tf.closer != nil {
		tf.closer.Close()
	}
}

func errBadBatch(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotTrace, fmt.Sprintf(format, args...))
}

// Repair finishes an unfinished trace file, as a killed writer leaves it, so
// that any Arrow tool reads it: it rewrites the file's complete record
// batches, in the same format, into a finished file that replaces it
// (through a temporary file and a rename). A finished file is left alone.
// It returns the file's description after the repair.
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
	if tf.info.Finished { // a finished file-format file
		return tf.info, nil
	}
	if tf.empty {
		return tf.info, fmt.Errorf("arrow: %s: cannot repair: the file ends before its schema (it holds no records)", path)
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
	if tf.info.Finished { // a stream that was finished after all
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
