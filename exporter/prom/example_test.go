package prom_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/prom"
	"github.com/vccl-go/vccl/flowtel"
)

// A rank serves its metrics on /metrics; Prometheus scrapes them.
func Example_job() {
	ctx := context.Background()
	comm, err := collective.NewFromEnv(ctx, collective.WithTelemetry(true))
	if err != nil {
		log.Fatal(err)
	}
	defer comm.Close()
	metrics := prom.New()
	metrics.AddComm(comm) // the world size, for bus bandwidth
	comm.Collector().AddSink(metrics)
	http.Handle("/metrics", metrics.Handler())
	go http.ListenAndServe("127.0.0.1:9464", nil)

	grads := make([]float32, 1<<20)
	for range 100 {
		if err := collective.AllReduce(ctx, comm, grads, grads, collective.Sum); err != nil {
			log.Fatal(err)
		}
	}
}

// Records in, metrics out.
func ExampleCollector() {
	ctx := context.Background()
	metrics := prom.New(prom.WithWorldSize(2))
	col := flowtel.NewCollector()
	col.AddSink(metrics)
	col.Start()
	defer col.Shutdown(ctx)

	// Rank 0 of a 2-rank all-reduce of 1 MiB in 100µs: one 512 KiB send to
	// rank 1, completed after 60µs. Real records come from the engines.
	rec := col.NewRecorder()
	ar := flowtel.Record{Comm: 0x2a, Rank: 0, CollSeq: 1, Op: collective.OpAllReduce, Algo: collective.AlgoRing}
	at := func(us int64, kind flowtel.Kind, peer int32, bytes uint64) {
		r := ar
		r.TsNs, r.Kind, r.Peer, r.WrID, r.Bytes = 1e9+us*1000, kind, peer, flowtel.WRID(0, false), bytes
		rec.Record(&r)
	}
	at(0, flowtel.KindCollBegin, -1, 1<<20)
	at(1, flowtel.KindWRPost, 1, 1<<19)
	at(61, flowtel.KindWC, 1, 1<<19)
	at(100, flowtel.KindCollEnd, -1, 1<<20)
	col.Flush(ctx)

	srv := httptest.NewServer(metrics.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, m := range []string{"vccl_bus_bandwidth_bytes_per_second_sum", "vccl_collective_exec_time_seconds_sum",
			"vccl_link_bytes_total", "vccl_link_wr_latency_seconds_sum"} {
			if strings.HasPrefix(line, m+"{") {
				fmt.Println(line)
			}
		}
	}
	// Output:
	// vccl_bus_bandwidth_bytes_per_second_sum{algorithm="ring",collective="allreduce",comm="0000002a",message_size="1MiB",rank="0"} 1.048576e+10
	// vccl_collective_exec_time_seconds_sum{algorithm="ring",collective="allreduce",comm="0000002a",message_size="1MiB",rank="0"} 0.0001
	// vccl_link_bytes_total{channel="0",comm="0000002a",direction="send",path="0",peer="1",rank="0"} 524288
	// vccl_link_wr_latency_seconds_sum{channel="0",comm="0000002a",direction="send",path="0",peer="1",rank="0"} 6e-05
}
