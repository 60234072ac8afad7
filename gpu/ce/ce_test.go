package ce_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/flowtel/flowteltest"
	"github.com/vccl-go/vccl/gpu/ce"
	"github.com/vccl-go/vccl/gpu/cuda"
	"github.com/vccl-go/vccl/gpu/gpubench"
)

func twoGPUs(t *testing.T) {
	t.Helper()
	if !cuda.Available() {
		t.Skipf("no CUDA GPU here (%v); this test runs on a machine with 2 GPUs", cuda.Load())
	}
	if n, _ := cuda.DeviceCount(); n < 2 {
		t.Skipf("%d GPU; this test needs 2", n)
	}
}

func TestNewWithoutDriver(t *testing.T) {
	if cuda.Available() {
		t.Skip("a GPU is present")
	}
	if _, err := ce.New(ce.Config{}); !errors.Is(err, cuda.ErrNoDriver) {
		t.Fatalf("New without a driver: %v, want ErrNoDriver", err)
	}
}

// TestCheck runs the whole correctness matrix against the host reference.
func TestCheck(t *testing.T) {
	twoGPUs(t)
	g, err := ce.New(ce.Config{Devices: []int{0, 1}, SMs: 8, Chunk: 256 << 10, SmallMax: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	failed, err := gpubench.Check(context.Background(), g, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if failed > 0 {
		t.Fatalf("%d cases failed", failed)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// TestTelemetry: every copy and kernel is a wr_post/wc pair with matching
// ids, and the per-link window sees both directions.
func TestTelemetry(t *testing.T) {
	twoGPUs(t)
	ctx := context.Background()
	col := flowtel.NewCollector()
	sink := flowteltest.NewMemorySink()
	col.AddSink(sink)
	col.Start()
	defer col.Shutdown(ctx)
	g, err := ce.New(ce.Config{Devices: []int{0, 1}, Collector: col, Chunk: 1 << 20, SmallMax: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const n = 8 << 20
	var send, recv [2]cuda.DevicePtr
	for r := 0; r < 2; r++ {
		send[r], _ = g.Alloc(r, n)
		recv[r], _ = g.Alloc(r, n)
		defer g.Free(r, send[r])
		defer g.Free(r, recv[r])
	}
	if err := g.SendRecv(ctx, ce.Transfer{From: 0, To: 1, Src: send[0], Dst: recv[1], Bytes: n}); err != nil {
		t.Fatal(err)
	}
	if err := g.AllReduce(ctx, send[:], recv[:], n/4, collective.Float32, collective.Sum); err != nil {
		t.Fatal(err)
	}
	if err := g.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if err := col.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := sink.Records()
	type key struct {
		rank int32
		qp   uint32
		id   uint64
	}
	posts := map[key]flowtel.Record{}
	wcs := 0
	type call struct {
		rank int32
		seq  uint64
	}
	begins := map[call]flowtel.Record{}
	ends := 0
	for _, r := range recs {
		k := key{r.Rank, r.QP, r.WrID}
		switch r.Kind {
		case flowtel.KindCollBegin:
			begins[call{r.Rank, r.CollSeq}] = r
		case flowtel.KindCollEnd:
			ends++
			b, ok := begins[call{r.Rank, r.CollSeq}]
			if !ok || r.TsNs < b.TsNs || r.Bytes != n || b.Bytes != n || r.Op != b.Op || r.Step != 1 || r.Peer != -1 {
				t.Errorf("coll_end %v: its coll_begin %v (found %v), want one %d-byte call on one channel", r, b, ok, n)
			}
		case flowtel.KindWRPost:
			posts[k] = r
		case flowtel.KindWC:
			wcs++
			p, ok := posts[k]
			if !ok {
				t.Fatalf("wc without post: %v", r)
			}
			if r.TsNs < p.TsNs || r.Bytes != p.Bytes {
				t.Errorf("wc %v does not follow its post %v", r, p)
			}
		}
	}
	// send/recv: 1 copy = 2 WRs; all-reduce of 8 MiB in 1 MiB chunks: 4
	// chunks per half, each a copy (2 WRs), a kernel (1) and a copy back (2),
	// for each of the 2 halves.
	if want := 2 + 2*4*5; wcs != want || len(posts) != want {
		t.Errorf("%d posts and %d completions, want %d each", len(posts), wcs, want)
	}
	// Each rank: the send/recv and the all-reduce, each bracketed.
	if len(begins) != 4 || ends != 4 {
		t.Errorf("%d coll_begin and %d coll_end, want 4 each (2 calls on 2 ranks)", len(begins), ends)
	}
	_ = time.Second
}
