package arrow

import (
	"context"
	"io"
	"testing"

	"github.com/vccl-go/vccl/flowtel"
)

// BenchmarkSink measures how many records a second the sink writes: Consume
// with the collector's batches of 4096 records, until every record is in
// the file (Shutdown included). The goal is at least 5 M records/s.
func BenchmarkSink(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"file", []Option{WithFormat(FormatFile)}},
		{"stream", []Option{WithFormat(FormatStream)}},
		{"parquet", []Option{WithFormat(FormatParquet)}},
		{"parquet-zstd", []Option{WithFormat(FormatParquet), WithCompression(CompressionZstd)}},
		{"file-lz4", []Option{WithFormat(FormatFile), WithCompression(CompressionLZ4)}},
		{"file-zstd", []Option{WithFormat(FormatFile), WithCompression(CompressionZstd)}},
		{"stream-lz4", []Option{WithFormat(FormatStream), WithCompression(CompressionLZ4)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			recs := genRecords(1, flowtel.DefaultBatchSize)
			s := newTestSink(b, tc.opts...)
			ctx := context.Background()
			b.SetBytes(int64(len(recs) * flowtel.RecordSize))
			b.ResetTimer()
			for range b.N {
				if err := s.Consume(ctx, recs); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			st := s.Stats()
			if st.Records != uint64(b.N*len(recs)) || st.Dropped != 0 {
				b.Fatalf("stats %+v after %d records", st, b.N*len(recs))
			}
			b.ReportMetric(float64(st.Records)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(st.Bytes)/float64(st.Records), "file-B/record")
		})
	}
}

// BenchmarkSinkFlushed is BenchmarkSink with a Flush every 1200 records,
// as vccl-bench settles its blocks of 200 small calls: the cost of a batch
// that shows in a record's share.
func BenchmarkSinkFlushed(b *testing.B) {
	for _, f := range []Format{FormatStream, FormatParquet} {
		b.Run(f.String(), func(b *testing.B) {
			recs := genRecords(1, 1200)
			s := newTestSink(b, WithFormat(f))
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				if err := s.Consume(ctx, recs); err != nil {
					b.Fatal(err)
				}
				if err := s.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := s.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
			st := s.Stats()
			b.ReportMetric(float64(st.Bytes)/float64(st.Records), "file-B/record")
		})
	}
}

// BenchmarkPipeline records through a Recorder, a Collector and the sink, as
// a communicator does, and reports the throughput and what was dropped
// (the producer outruns everything: drops measure the pipeline's limit).
func BenchmarkPipeline(b *testing.B) {
	s := newTestSink(b)
	col := flowtel.NewCollector()
	col.AddSink(s)
	col.Start()
	rec := col.NewRecorder()
	recs := genRecords(1, 1024)
	b.SetBytes(flowtel.RecordSize)
	b.ResetTimer()
	for i := range b.N {
		r := recs[i%len(recs)]
		rec.Record(&r)
	}
	if err := col.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	st := col.Stats()
	written := s.Stats().Records
	b.ReportMetric(float64(written)/b.Elapsed().Seconds(), "written-records/s")
	b.ReportMetric(float64(st.RingDropped+st.Sinks[0].DroppedRecords)/float64(b.N), "dropped/record")
}

// BenchmarkReader measures reading a trace back into records.
func BenchmarkReader(b *testing.B) {
	s := newTestSink(b)
	const n = 1 << 20
	consumeAll(b, s, genRecords(1, n), flowtel.DefaultBatchSize)
	if err := s.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
	path := s.Files()[0]
	b.SetBytes(n * flowtel.RecordSize)
	b.ResetTimer()
	for range b.N {
		r, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for {
			recs, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			got += len(recs)
		}
		r.Close()
		if got != n {
			b.Fatalf("read %d records, want %d", got, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
}
