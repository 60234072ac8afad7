package live_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/flowtel"
)

// A rank serves its windows; a client reads them. With a communicator,
// live.Start(ctx, comm, live.Config{}) does the wiring and announces the
// endpoint in the rendezvous store and in endpoints.json.
func Example() {
	col := flowtel.NewCollector()
	srv, err := live.New(live.Config{
		Addr: "127.0.0.1:0",
		Info: live.Info{Rank: 0, Size: 2, UID: "5eed5eed"},
		// Without a Window the server makes one (VCCL_TELEMETRY_WINDOW,
		// timed by Clock); here: the last minute, as of the latest record.
		Window:    flowtel.NewWindow(flowtel.WindowConfig{N: 1024, T: time.Minute}),
		Collector: col,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close(context.Background())
	col.AddSink(srv.Window())
	col.Start()
	defer col.Shutdown(context.Background())

	rec := col.NewRecorder()
	now := rec.Now()
	for i := range 4 {
		post := flowtel.Record{TsNs: now + int64(i)*1000, Kind: flowtel.KindWRPost, Rank: 0, Peer: 1, QP: 1,
			WrID: flowtel.WRID(uint64(i), false), Bytes: 1 << 20}
		wc := post
		wc.TsNs, wc.Kind = post.TsNs+500, flowtel.KindWC
		rec.Record(&post)
		rec.Record(&wc)
	}
	col.Flush(context.Background())

	resp, err := http.Get(srv.URL() + "/v1/windows")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var snap live.Snapshot
	json.NewDecoder(resp.Body).Decode(&snap)
	for _, l := range snap.Links {
		fmt.Printf("%d->%d %s: %d WRs, %d bytes, p50 latency %dns\n", l.Rank, l.Peer, l.Dir, l.Completions, l.Bytes, l.LatP50Ns)
	}
	// Output:
	// 0->1 send: 4 WRs, 4194304 bytes, p50 latency 500ns
}
