package arrow_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/flowtel"
)

// A rank's telemetry goes to Arrow files through its collector; the reader
// streams them back as records.
func Example() {
	dir, err := os.MkdirTemp("", "vccl-trace-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// With a communicator: arrow.New(arrow.MetaOf(comm), …) and
	// comm.Collector().AddSink(sink).
	meta := arrow.Meta{Rank: 0, WorldSize: 2, CommUID: "5eed5eed5eed5eed", CommID: 7, Host: "node0"}
	sink, err := arrow.New(meta, arrow.WithDir(dir))
	if err != nil {
		log.Fatal(err)
	}
	col := flowtel.NewCollector()
	col.AddSink(sink)
	col.Start()
	rec := col.NewRecorder()
	for i := range 3 {
		rec.Record(&flowtel.Record{TsNs: int64(100 + i), Kind: flowtel.KindWRPost, Peer: 1, WrID: flowtel.WRID(uint64(i), false), Bytes: 4096})
	}
	// Shutdown delivers everything and finishes the files.
	if err := col.Shutdown(context.Background()); err != nil {
		log.Fatal(err)
	}
	for _, f := range sink.Files() {
		fmt.Println(filepath.Base(f))
	}

	r, err := arrow.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	for {
		recs, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		m := r.File().Meta
		for _, rec := range recs {
			fmt.Println(m.Rank, rec.TsNs, m.KindName(rec.Kind), rec.Peer, rec.Bytes)
		}
	}
	// Output:
	// vccl-00000007-rank0-000.arrows
	// 0 100 wr_post 1 4096
	// 0 101 wr_post 1 4096
	// 0 102 wr_post 1 4096
}

// A trace converts between the Arrow formats and Parquet, record for
// record; the reader tells the formats apart by their first bytes.
func ExampleConvertFile() {
	dir, err := os.MkdirTemp("", "vccl-convert-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sink, err := arrow.New(arrow.Meta{Rank: 1, WorldSize: 2, CommID: 0xc0ffee}, arrow.WithDir(dir))
	if err != nil {
		log.Fatal(err)
	}
	recs := []flowtel.Record{{TsNs: 5, Kind: flowtel.KindWC, Rank: 1, Peer: 0, Comm: 0xc0ffee, Bytes: 512}}
	if err := sink.Consume(context.Background(), recs); err != nil {
		log.Fatal(err)
	}
	if err := sink.Shutdown(context.Background()); err != nil {
		log.Fatal(err)
	}
	src := sink.Files()[0]
	dst := filepath.Join(dir, arrow.ConvertedName(src, arrow.FormatParquet))
	info, err := arrow.ConvertFile(src, dst, arrow.FormatParquet)
	if err != nil {
		log.Fatal(err)
	}
	back, err := arrow.ReadAll(dst)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(filepath.Base(src), "->", filepath.Base(dst), info.Records, "record")
	fmt.Println(back[0].Kind, back[0].Bytes, flowtel.JobID(back[0].Comm))
	// Output:
	// vccl-00c0ffee-rank1-000.arrows -> vccl-00c0ffee-rank1-000.parquet 1 record
	// wc 512 00c0ffee
}

// A rank's trace in Parquet, for DuckDB, Spark or pandas: a row group and a
// footer per flushed batch, so the file opens at any time; this package
// reads it as it reads Arrow.
func ExampleWithFormat() {
	dir, err := os.MkdirTemp("", "vccl-parquet-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sink, err := arrow.New(arrow.Meta{Rank: 0, WorldSize: 2, CommID: 0x2a}, arrow.WithDir(dir), arrow.WithFormat(arrow.FormatParquet))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := sink.Consume(ctx, []flowtel.Record{{TsNs: 1, Kind: flowtel.KindCollBegin, Op: flowtel.OpAllReduce, Comm: 0x2a}}); err != nil {
		log.Fatal(err)
	}
	if err := sink.Flush(ctx); err != nil { // a complete Parquet file from here on
		log.Fatal(err)
	}
	if err := sink.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	recs, err := arrow.ReadAll(dir)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(filepath.Base(sink.Files()[0]), len(recs), recs[0].Op)
	fmt.Println(arrow.DerivedColumnNames)
	// Output:
	// vccl-0000002a-rank0-000.parquet 1 allreduce
	// [time job_id kind_name status_name op_name algo_name dtype_name path_name]
}

// Trace files are named by the job id, the same string metrics, spans and
// reports print.
func ExampleFilePrefix() {
	fmt.Println(arrow.FilePrefix(0xdeadbeef, 3))
	fmt.Println(arrow.IsTraceName("vccl-deadbeef-rank3-000.parquet"), arrow.IsTraceName("notes.txt"))
	// Output:
	// vccl-deadbeef-rank3
	// true false
}
