package arrow

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"os"

	arrowgo "github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// MaxParquetRowGroups is the number of row groups (batches) after which the
// sink starts the next Parquet file, whatever its size: each footer lists
// every row group, and one is written per batch, so the footers' cost grows
// with the row groups of the file.
const MaxParquetRowGroups = 64

// KeyFinished is the Parquet key-value metadata entry of the last footer a
// writer writes when it closes the file: a file whose last footer lacks it
// was cut short (its writer killed), though it reads up to that footer.
const KeyFinished = "vccl.finished"

var parquetMagic = []byte("PAR1")

// parquetWriter writes one row group per record batch and the footer after
// each (file.Writer's FlushWithFooter: every footer lists every row group so
// far, and readers read only the last), so the file is a complete Parquet
// file after every batch.
type parquetWriter struct {
	fw     *file.Writer
	ctx    context.Context
	schema *arrowgo.Schema
}

func newParquetWriter(w io.Writer, schema *arrowgo.Schema, comp Compression) (*parquetWriter, error) {
	codec := compress.Codecs.Snappy
	switch comp {
	case CompressionLZ4:
		codec = compress.Codecs.Lz4Raw
	case CompressionZstd:
		codec = compress.Codecs.Zstd
	}
	// Statistics only for the time columns (what range queries prune on):
	// every footer repeats every row group's, and a footer is written per
	// batch.
	props := parquet.NewWriterProperties(parquet.WithCompression(codec), parquet.WithVersion(parquet.V2_LATEST),
		parquet.WithStats(false), parquet.WithStatsFor("ts_ns", true), parquet.WithStatsFor("time", true))
	arrProps := pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
	pqSchema, err := pqarrow.ToParquet(schema, props, arrProps)
	if err != nil {
		return nil, err
	}
	// The Arrow schema rides along (as pqarrow's own writer stores it) so
	// that Arrow readers get back uint8 codes, dictionaries and the
	// timestamp's zone rather than Parquet's nearest types.
	md := schema.Metadata()
	kv := metadata.NewKeyValueMetadata()
	for i, k := range md.Keys() {
		kv.Append(k, md.Values()[i])
	}
	kv.Append("ARROW:schema", base64.StdEncoding.EncodeToString(flight.SerializeSchema(schema, memory.DefaultAllocator)))
	fw, err := file.NewParquetWriterWithError(w, pqSchema.Root(), file.WithWriterProps(props), file.WithWriteMetadata(kv))
	if err != nil {
		return nil, err
	}
	pw := &parquetWriter{fw: fw, ctx: pqarrow.NewArrowWriteContext(context.Background(), &arrProps), schema: schema}
	// A footer with no row groups: the file opens from the start.
	if err := fw.FlushWithFooter(); err != nil {
		return nil, err
	}
	return pw, nil
}

func (pw *parquetWriter) Write(rec arrowgo.RecordBatch) error {
	if rec.NumRows() == 0 {
		return nil
	}
	return pw.writeRowGroup(rec)
}

func (pw *parquetWriter) writeRowGroup(rec arrowgo.RecordBatch) error {
	rgw, err := pw.fw.AppendRowGroupChecked()
	if err != nil {
		return err
	}
	for i := range int(rec.NumCols()) {
		cw, err := rgw.NextColumn()
		if err != nil {
			return err
		}
		if err := pqarrow.WriteArrowToColumn(pw.ctx, cw, rec.Column(i), nil, nil, false); err != nil {
			return err
		}
		if err := cw.Close(); err != nil {
			return err
		}
	}
	if err := rgw.Close(); err != nil {
		return err
	}
	return pw.fw.FlushWithFooter()
}

// rowGroups returns the row groups written so far.
func (pw *parquetWriter) rowGroups() int { return pw.fw.NumRowGroups() }

// Close writes the last footer, which says the file is finished. The
// writer writes a footer only after a new row group, so an empty one
// comes first.
func (pw *parquetWriter) Close() error {
	if err := pw.fw.AppendKeyValueMetadata(KeyFinished, "true"); err != nil {
		return err
	}
	empty := newColBatch(0).record(pw.schema, 0)
	defer empty.Release()
	if err := pw.writeRowGroup(empty); err != nil {
		return err
	}
	return pw.fw.Close()
}

// maxFooterCandidates bounds how many "PAR1" strings findParquetEnd tries
// as the end of a footer, scanning back from the end of a cut file.
const maxFooterCandidates = 256

// findParquetEnd returns where the Parquet file in ra ends: size when its
// last 8 bytes close a footer, else the end of the last complete footer
// before (what a writer killed while appending a row group leaves), and
// the footer's metadata. ok is false when there is none.
func findParquetEnd(ra io.ReaderAt, size int64) (end int64, md *metadata.FileMetaData, ok bool) {
	if md, ok := parquetFooterAt(ra, size); ok {
		return size, md, true
	}
	const chunk = 64 << 10
	buf := make([]byte, chunk+len(parquetMagic)-1)
	tried := 0
	for hi := size - 1; hi > int64(len(parquetMagic)); {
		lo := max(hi-chunk, 0)
		n := int(min(int64(len(buf)), size-lo))
		if _, err := ra.ReadAt(buf[:n], lo); err != nil && err != io.EOF {
			return 0, nil, false
		}
		b := buf[:n]
		for i := bytes.LastIndex(b, parquetMagic); i >= 0; i = bytes.LastIndex(b[:i], parquetMagic) {
			e := lo + int64(i) + int64(len(parquetMagic))
			if e >= size {
				continue
			}
			if tried++; tried > maxFooterCandidates {
				return 0, nil, false
			}
			if md, ok := parquetFooterAt(ra, e); ok {
				return e, md, true
			}
		}
		hi = lo
	}
	return 0, nil, false
}

// parquetFooterAt reports whether a complete Parquet footer ends at end, and
// decodes it.
func parquetFooterAt(ra io.ReaderAt, end int64) (md *metadata.FileMetaData, ok bool) {
	defer func() {
		if recover() != nil {
			md, ok = nil, false
		}
	}()
	if end < 12 {
		return nil, false
	}
	var tail [8]byte
	if _, err := ra.ReadAt(tail[:], end-8); err != nil || !bytes.Equal(tail[4:], parquetMagic) {
		return nil, false
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n <= 0 || n > end-12 || n > maxMetadataBytes {
		return nil, false
	}
	footer := make([]byte, n)
	if _, err := ra.ReadAt(footer, end-8-n); err != nil {
		return nil, false
	}
	md, err := metadata.NewFileMetaData(footer, nil)
	if err != nil || md.Schema == nil || md.Schema.NumColumns() == 0 {
		return nil, false
	}
	return md, true
}

// parquetTrace reads the record batches of a Parquet trace, only its v1
// columns, one row group at a time (a row group is a batch of the writer).
type parquetTrace struct {
	pf     *file.Reader
	fr     *pqarrow.FileReader
	leaves []int
	nextRG int
	rr     pqarrow.RecordReader // of row group nextRG-1
}

// openParquet opens the Parquet trace in ra, up to its last complete footer.
func (tf *traceFile) openParquet(ra io.ReaderAt, size int64) (err error) {
	defer protect(&err)
	tf.info.Format = FormatParquet
	end, md, ok := findParquetEnd(ra, size)
	if !ok {
		// The writer commits a footer before anything else: a file without
		// one was cut before that, or is not a trace.
		if size <= int64(len(parquetMagic)) {
			tf.empty, tf.info.Truncated = true, true
			return nil
		}
		return fmt.Errorf("%w: a Parquet file with no complete footer", ErrNotTrace)
	}
	if err := checkParquetBounds(md); err != nil {
		return err
	}
	if err := verifyStoredSchema(md); err != nil {
		return err
	}
	tf.info.Truncated = end < size
	props := parquet.NewReaderProperties(cappedAllocator{memory.DefaultAllocator})
	props.BufferedStreamEnabled = true
	pf, err := file.NewParquetReader(io.NewSectionReader(ra, 0, end), file.WithReadProps(props), file.WithMetadata(md))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotTrace, err)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: maxChunk}, cappedAllocator{memory.DefaultAllocator})
	if err != nil {
		pf.Close()
		return fmt.Errorf("%w: %v", ErrNotTrace, err)
	}
	schema, err := fr.Schema()
	if err != nil {
		pf.Close()
		return fmt.Errorf("%w: %v", ErrNotTrace, err)
	}
	m, idx, err := parseSchema(schema)
	if err != nil {
		pf.Close()
		return err
	}
	// Read the v1 columns alone, in ColumnNames order: the batches' columns
	// are then 0…nCols-1. A flat schema's fields are its leaf columns.
	leaves := make([]int, nCols)
	for c := range nCols {
		leaves[c] = idx[c]
		if leaves[c] >= md.Schema.NumColumns() {
			pf.Close()
			return fmt.Errorf("%w: column %q is not a leaf column", ErrNotTrace, ColumnNames[c])
		}
	}
	for c := range nCols {
		idx[c] = c
	}
	tf.info.Meta, tf.idx = m, idx
	if v := md.KeyValueMetadata().FindValue(KeyFinished); v != nil && *v == "true" && end == size {
		tf.info.Finished = true
	}
	tf.pq = &parquetTrace{pf: pf, fr: fr, leaves: leaves}
	return nil
}

// verifyStoredSchema checks the Arrow schema a Parquet file stores
// (ARROW:schema: an IPC schema message, base64) as the IPC reader checks
// its messages, before pqarrow decodes it unverified.
func verifyStoredSchema(md *metadata.FileMetaData) error {
	v := md.KeyValueMetadata().FindValue("ARROW:schema")
	if v == nil {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(*v)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(*v); err != nil {
			return fmt.Errorf("%w: ARROW:schema is not base64: %v", ErrNotTrace, err)
		}
	}
	if len(b) >= 4 && binary.LittleEndian.Uint32(b) == 0xffffffff {
		b = b[4:]
	}
	if len(b) < 4 {
		return fmt.Errorf("%w: ARROW:schema of %d bytes", ErrNotTrace, len(b))
	}
	n := int64(int32(binary.LittleEndian.Uint32(b)))
	if n <= 0 || n > int64(len(b)-4) {
		return fmt.Errorf("%w: ARROW:schema claims %d bytes of %d", ErrNotTrace, n, len(b)-4)
	}
	h, _, err := verifyMessage(b[4 : 4+n])
	if err == nil && h != fbHeaderSchema {
		err = fmt.Errorf("an IPC message of type %d", h)
	}
	if err != nil {
		return fmt.Errorf("%w: ARROW:schema: %v", ErrNotTrace, err)
	}
	return nil
}

// checkParquetBounds refuses metadata that claims more than a reader
// should allocate for one batch: row groups and column chunks past the
// limits of the IPC reader.
func checkParquetBounds(md *metadata.FileMetaData) error {
	if md.Schema.NumColumns() > 1024 {
		return fmt.Errorf("%w: %d Parquet columns", ErrNotTrace, md.Schema.NumColumns())
	}
	for i := range md.NumRowGroups() {
		rg := md.RowGroup(i)
		if rg.NumRows() < 0 || rg.NumRows() > MaxBatchRows {
			return fmt.Errorf("%w: Parquet row group %d has %d rows (at most %d)", ErrNotTrace, i, rg.NumRows(), MaxBatchRows)
		}
		for c := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				return fmt.Errorf("%w: Parquet row group %d column %d: %v", ErrNotTrace, i, c, err)
			}
			if cc.TotalUncompressedSize() < 0 || cc.TotalUncompressedSize() > maxBodyBytes ||
				cc.TotalCompressedSize() < 0 || cc.TotalCompressedSize() > maxBodyBytes {
				return fmt.Errorf("%w: Parquet row group %d column %d claims %d bytes (%d compressed)",
					ErrNotTrace, i, c, cc.TotalUncompressedSize(), cc.TotalCompressedSize())
			}
		}
	}
	return nil
}

// next returns the next record batch (the caller releases it), or io.EOF.
func (pt *parquetTrace) next() (arrowgo.RecordBatch, error) {
	for {
		if pt.rr != nil {
			if pt.rr.Next() {
				rb := pt.rr.RecordBatch()
				rb.Retain()
				return rb, nil
			}
			err := pt.rr.Err()
			pt.rr.Release()
			pt.rr = nil
			if err != nil && err != io.EOF {
				return nil, fmt.Errorf("%w: row group %d: %v", ErrNotTrace, pt.nextRG-1, err)
			}
		}
		if pt.nextRG >= pt.pf.NumRowGroups() {
			return nil, io.EOF
		}
		rr, err := pt.fr.GetRecordReader(context.Background(), pt.leaves, []int{pt.nextRG})
		pt.nextRG++
		if err != nil {
			return nil, fmt.Errorf("%w: row group %d: %v", ErrNotTrace, pt.nextRG-1, err)
		}
		pt.rr = rr
	}
}

func (pt *parquetTrace) close() {
	if pt.rr != nil {
		pt.rr.Release()
		pt.rr = nil
	}
	pt.pf.Close()
}

// repairParquet cuts a Parquet trace after its last complete footer, what a
// writer killed while appending a row group leaves after it.
func repairParquet(path string, tf *traceFile, size int64) (FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return tf.info, fmt.Errorf("arrow: %w", err)
	}
	end, _, ok := findParquetEnd(f, size)
	f.Close()
	if !ok {
		return tf.info, fmt.Errorf("arrow: %s: cannot repair: no complete Parquet footer", path)
	}
	for {
		_, err := tf.nextRecords(nil)
		if err == io.EOF {
			break
		}
		if err != nil {
			return tf.info, fmt.Errorf("arrow: repairing %s: %w", path, err)
		}
	}
	info := tf.info
	if end < size {
		if err := os.Truncate(path, end); err != nil {
			return info, fmt.Errorf("arrow: %w", err)
		}
	}
	info.Truncated = false
	return info, nil
}
