package demo

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/telemetry"
)

// The demo on two in-process ranks: the report names each rank's Arrow
// trace and endpoint, and once the communicators close the traces hold
// every rank's records, finished.
func TestRunWritesTraces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "trace")
	t.Setenv(live.EnvAddr, "")
	comms, err := collective.NewLocal(ctx, 2, collective.WithTelemetry(true), collective.WithTelemetryAttachers(false))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Iters: 2, P2PSizes: []int{64 << 10}, CollSizes: []int{1 << 20}}
	var out [2]bytes.Buffer
	errs := make(chan error, 2)
	exs := make([]*telemetry.Exporters, 2)
	for r, c := range comms {
		ex, err := telemetry.Attach(ctx, c, telemetry.Config{Dir: dir, Live: true})
		if err != nil {
			t.Fatal(err)
		}
		exs[r] = ex
		win := flowtel.NewWindow(flowtel.WindowConfig{N: 1 << 16, T: time.Hour})
		colls := NewCollStats()
		c.Collector().AddSink(win)
		c.Collector().AddSink(colls)
		rcfg := cfg
		rcfg.Outputs = ex.Outputs
		go func() { errs <- Run(ctx, c, rcfg, win, colls, &out[r]) }()
	}
	for range comms {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for r, c := range comms {
		exs[r].Close(ctx)
		if err := c.Close(); err != nil { // shuts its collector down: the trace is finished
			t.Fatal(err)
		}
	}
	report := out[0].String()
	for r := range comms {
		for _, want := range []string{"== rank " + string(rune('0'+r)) + " of 2 ==", exs[r].Arrow.Files()[0], exs[r].Live.URL(),
			"ping-pong with rank " + string(rune('1'-r)) + ", one way: 64 KiB in ", "    allreduce   1 MiB      2 "} {
			if !strings.Contains(report, want) {
				t.Errorf("the report lacks %q:\n%s", want, report)
			}
		}
	}

	eps, err := live.ReadEndpoints(dir)
	if err != nil || len(eps.Endpoints) != 2 || eps.UID != comms[0].UID() {
		t.Errorf("endpoints.json: %+v, %v", eps, err)
	}
	r, err := arrow.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	perRank := map[int32]int{}
	kinds := map[flowtel.Kind]int{}
	for {
		recs, err := r.Next()
		if err != nil {
			break
		}
		m := r.File().Meta
		for _, rec := range recs {
			if rec.Rank != int32(m.Rank) || rec.Comm != comms[0].ID() {
				t.Fatalf("%s (rank %d) holds %v", r.File().Path, m.Rank, rec)
			}
			perRank[rec.Rank]++
			kinds[rec.Kind]++
		}
	}
	files := r.Files()
	if len(files) != 2 {
		t.Fatalf("%d trace files", len(files))
	}
	for _, f := range files {
		if !f.Finished || f.Meta.WorldSize != 2 || f.Meta.CommUID != comms[0].UID() {
			t.Errorf("%+v", f)
		}
	}
	if perRank[0] == 0 || perRank[1] == 0 || kinds[flowtel.KindWRPost] == 0 || kinds[flowtel.KindWC] == 0 || kinds[flowtel.KindCollEnd] == 0 {
		t.Errorf("records per rank %v, per kind %v", perRank, kinds)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".gitignore")); len(m) != 1 {
		t.Error("no .gitignore in the trace directory the demo made")
	}
}

// The report's units: a newcomer reads "423 MiB" and "2.78 ms", not
// 443026080 and 2.775371ms.
func TestUnits(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Bytes(0), "0 B"}, {Bytes(8), "8 B"}, {Bytes(1023), "1023 B"}, {Bytes(64 << 10), "64 KiB"}, {Bytes(443026080), "423 MiB"},
		{Bytes(3 << 29), "1.5 GiB"}, {Bytes(1<<20 + 1<<10), "1 MiB"},
		{Duration(0), "0"}, {Duration(721), "721 ns"}, {Duration(30520), "30.5 µs"}, {Duration(2775371), "2.78 ms"},
		{Duration(999_999), "1 ms"}, {Duration(999_400), "999 µs"}, {Duration(1_200_000_000), "1.2 s"},
		{Rate(252e6), "252 MB/s"}, {Rate(1.5123e9), "1.51 GB/s"}, {Rate(10), "10 B/s"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
