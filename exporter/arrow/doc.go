// Package arrow writes flow telemetry to trace files, Apache Arrow IPC or
// Apache Parquet, and reads it back: the trace formats of VCCL-Go, which
// any Arrow or Parquet tool opens (pyarrow, polars, DuckDB, Spark, the
// Arrow JS library).
//
// # Files
//
// A Sink is a flowtel.Sink. Each rank writes its own series of files into a
// directory (WithDir; the telemetry package passes VCCL_TELEMETRY_DIR), named
//
//	vccl-JOB-rankR-000.arrows, vccl-JOB-rankR-001.arrows, …
//
// where JOB is flowtel.JobID of the communicator's 32-bit id. A file is
// rotated (closed, and the next one started) at the first batch boundary
// after VCCL_TELEMETRY_ARROW_ROTATE bytes (default 256 MiB; WithMaxFileBytes),
// and a Parquet file also after MaxParquetRowGroups batches. The layout
// (VCCL_TELEMETRY_FORMAT, or WithFormat) is the Arrow IPC stream format
// (.arrows) by default, Parquet (.parquet, one row group per batch), or
// the Arrow IPC file format (.arrow).
//
// # Columns and metadata
//
// One row per flowtel.Record, one column per field of schema v1, with the
// same names and matching types, none nullable in practice, then the
// DerivedColumnNames (time, job_id and the *_name columns):
//
//	ts_ns int64, kind uint8, status uint8, op uint8, algo uint8, dtype uint8,
//	path uint8, channel uint16, rank int32, peer int32, qp uint32,
//	comm uint32, coll_seq uint64, wr_id uint64, bytes uint64, depth uint32,
//	step uint32
//
// kind and status hold the numeric codes of flowtel.Kind and
// flowtel.Status; the schema metadata maps them to names
// (vccl.kind_names, vccl.status_names: JSON arrays indexed by code), so a
// reader never depends on this build's numbering. The other metadata keys
// (see the Key constants) give the schema version (vccl.schema_version,
// flowtel.SchemaVersion), the rank, world size, communicator unique id and
// 32-bit id, host, process id, the clock offset to rank 0 and its error, a
// wall-clock anchor (vccl.wall_unix_ns is the wall time at trace time
// vccl.wall_ts_ns) and the file's segment number.
//
// # Writing never blocks the data path
//
// Consume copies the records into a column batch (a few ns per record) and
// returns; the sink's own goroutine writes a batch when it is full
// (WithBatchRows, default 65536 rows) or when it has waited for the flush
// interval (WithFlushInterval, default 1s), each as one Arrow record batch
// handed to the OS at once. When the disk falls behind by more than a few
// batches (WithQueuedBatches), Consume waits, the collector's queue for this
// sink fills and the collector drops batches for it: counted in
// flowtel.CollectorStats, and written into the trace as KindLost records.
//
// # Killed writers
//
// A .arrows stream is valid at every instant: each flush's first 8 bytes
// are written after the rest, so a writer killed inside a write (SIGKILL
// included) leaves a stream that ends at its last complete batch for any
// Arrow reader. A .parquet file is complete after every batch (a footer
// follows each row group); a kill inside a write leaves a tail after the
// last footer, which the Reader skips and Repair cuts. The IPC file format
// needs a footer, written when the file is closed (by the collector's
// Shutdown, or at rotation); until then a .arrow file holds the 8-byte file
// header and a valid IPC stream of every batch flushed so far, which this
// package's Reader reads and Repair rewrites into a finished file. In every
// case the Reader reports an unfinished file with FileInfo.Finished false
// (Truncated true when a partial batch was skipped). Sink.Flush hands
// everything consumed so far to the OS. See
// docs/decisions/crash-safe-traces.md.
//
// # Reading
//
// Open reads a file or a whole directory, streaming, whatever the format
// (told by the first bytes, not the name): Reader.Next returns one
// record batch at a time as []flowtel.Record, so memory stays bounded by a
// batch. It refuses an unknown schema version (ErrSchemaVersion) and
// anything that is not a well-formed trace (ErrNotTrace) with an error naming
// the file.
package arrow
