package collective

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/flowtel/flowteltest"
)

// memoryCollector returns a started collector whose records a memory sink
// keeps, for tests that read what a call recorded.
func memoryCollector() (*flowtel.Collector, *flowteltest.MemorySink) {
	col := flowtel.NewCollector()
	sink := flowteltest.NewMemorySink()
	col.AddSink(sink)
	col.Start()
	return col, sink
}

// recordRun runs fn on every rank of an n-rank local job whose records go
// to memory, and returns the ranks and the sink once the records of the
// calls are in it.
func recordRun(t *testing.T, ctx context.Context, n int, fn func(c *Comm) error, opts ...Option) ([]*Comm, *flowteltest.MemorySink) {
	t.Helper()
	col, sink := memoryCollector()
	comms := newLocal(t, n, append([]Option{WithCollector(col)}, opts...)...)
	if err := runOnAll(comms, fn); err != nil {
		t.Fatal(err)
	}
	if err := col.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return comms, sink
}

func TestBusBWFactor(t *testing.T) {
	for _, tc := range []struct {
		op    Op
		ranks int
		want  float64
	}{
		{OpAllReduce, 1, 0}, {OpAllReduce, 2, 1}, {OpAllReduce, 4, 1.5}, {OpBarrier, 8, 0}, {OpBroadcast, 0, 0},
		{OpAllGather, 4, 0.75}, {OpReduceScatter, 8, 0.875}, {OpAllToAll, 2, 0.5},
		{OpBroadcast, 8, 1}, {OpReduce, 8, 1}, {OpSend, 2, 1},
	} {
		if got := BusBWFactor(tc.op, tc.ranks); got != tc.want {
			t.Errorf("BusBWFactor(%v, %d) = %v, want %v", tc.op, tc.ranks, got, tc.want)
		}
	}
}

// Every collective is bracketed by coll_begin/coll_end on every channel it
// used, its work requests carry its sequence number and steps, and queue
// pair ids stay unique within a rank across communicators.
func TestCollectiveRecords(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	comms, sink := recordRun(t, ctx, 2, func(c *Comm) error {
		buf := make([]float32, 1<<16)
		if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
			return err
		}
		sub, err := c.Split(ctx, 0, c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		return AllReduce(ctx, sub, buf[:8], buf[:8], Sum)
	}, WithChannels(2))
	type qpOwner struct {
		rank int32
		qp   uint32
	}
	comms0 := map[qpOwner]uint32{}
	begins := map[uint64]int{}
	var partBytes uint64
	var sawStep bool
	for _, r := range sink.Records() {
		switch r.Kind {
		case flowtel.KindCollBegin:
			if r.Comm == comms[0].ID() && r.CollSeq == 1 {
				begins[r.CollSeq]++
				partBytes += r.Bytes
				if r.Step != 2 || r.Op != OpAllReduce || r.Dtype != Float32 {
					t.Errorf("coll_begin %v: want one of 2 channel parts of a float32 allreduce", r)
				}
			}
		case flowtel.KindWRPost:
			k := qpOwner{r.Rank, r.QP}
			if c, ok := comms0[k]; ok && c != r.Comm {
				t.Errorf("rank %d uses QP id %d in communicators %08x and %08x", r.Rank, r.QP, c, r.Comm)
			}
			comms0[k] = r.Comm
			if r.Comm == comms[0].ID() && r.CollSeq == 1 && r.Step > 0 {
				sawStep = true
			}
		}
	}
	if begins[1] != 4 { // 2 ranks × 2 channels
		t.Errorf("%d coll_begin records for the first all-reduce, want 4", begins[1])
	}
	if partBytes != 2<<18 { // each channel's record carries its own part
		t.Errorf("channel parts of the 256 KiB all-reduce add up to %d bytes on 2 ranks", partBytes)
	}
	if !sawStep {
		t.Error("no work request of the ring all-reduce carries a step beyond 0")
	}
}

// Shared stamps stay honest: within a call's records on one channel of one
// rank, coll_begin comes no later than any post, every completion no earlier
// than its post, and coll_end no earlier than any completion. Small calls
// post everything in the step that admits them; the 256 KiB ring all-reduce
// posts after completions and after local reductions of 64 KiB and more.
func TestRecordTimesOrdered(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	_, sink := recordRun(t, ctx, 2, func(c *Comm) error {
		for _, n := range []int{256, 1 << 16, 256, 1 << 16} {
			buf := make([]float32, n)
			if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
				return err
			}
		}
		return nil
	})
	type callKey struct {
		rank    int32
		seq     uint64
		channel uint16
	}
	type wrKey struct {
		rank int32
		qp   uint32
		wr   uint64
	}
	begin, end := map[callKey]int64{}, map[callKey]int64{}
	posts := map[wrKey]int64{}
	var wrs []flowtel.Record
	for _, r := range sink.Records() {
		k := callKey{r.Rank, r.CollSeq, r.Channel}
		switch r.Kind {
		case flowtel.KindCollBegin:
			begin[k] = r.TsNs
		case flowtel.KindCollEnd:
			end[k] = r.TsNs
		case flowtel.KindWRPost:
			posts[wrKey{r.Rank, r.QP, r.WrID}] = r.TsNs
			wrs = append(wrs, r)
		case flowtel.KindWC, flowtel.KindCreditWait, flowtel.KindCreditGrant:
			wrs = append(wrs, r)
		}
	}
	if len(begin) != 8 || len(end) != 8 {
		t.Fatalf("%d coll_begin and %d coll_end records, want 8 each (4 calls on 2 ranks)", len(begin), len(end))
	}
	for _, r := range wrs {
		k := callKey{r.Rank, r.CollSeq, r.Channel}
		b, ok := begin[k]
		if !ok {
			continue // the communicator's setup traffic
		}
		if r.TsNs < b || r.TsNs > end[k] {
			t.Errorf("%v at %d outside its call [%d, %d]", r.Kind, r.TsNs, b, end[k])
		}
		if r.Kind == flowtel.KindWC {
			if p, ok := posts[wrKey{r.Rank, r.QP, r.WrID}]; !ok || r.TsNs < p {
				t.Errorf("wc of rank %d qp %d wr %d at %d, its post at %d (seen %v)", r.Rank, r.QP, r.WrID, r.TsNs, p, ok)
			}
		}
	}
}

// SetTelemetry(false) stops a communicator's records between calls and
// SetTelemetry(true) resumes them; without telemetry it is an error.
func TestSetTelemetry(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	comms, sink := recordRun(t, ctx, 2, func(c *Comm) error {
		buf := make([]float32, 256)
		for i, on := range []bool{true, false, true} {
			if err := c.setTelemetry(on); err != nil {
				return err
			}
			if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
		}
		return nil
	})
	// Counted by kind: how many credit waits a call writes depends on
	// which rank posts first.
	type seqKind struct {
		seq  uint64
		kind flowtel.Kind
	}
	got := map[seqKind]int{}
	for _, r := range sink.Records() {
		if r.Comm == comms[0].ID() {
			got[seqKind{r.CollSeq, r.Kind}]++
		}
	}
	for _, k := range []flowtel.Kind{flowtel.KindCollBegin, flowtel.KindWRPost, flowtel.KindWC, flowtel.KindCollEnd} {
		if got[seqKind{1, k}] == 0 || got[seqKind{3, k}] != got[seqKind{1, k}] || got[seqKind{2, k}] != 0 {
			t.Errorf("%v records of calls 1, 2, 3: %d, %d, %d; want the first and third alike, none of the second",
				k, got[seqKind{1, k}], got[seqKind{2, k}], got[seqKind{3, k}])
		}
	}
	off := newLocal(t, 1, WithTelemetry(false))
	if err := off[0].setTelemetry(true); err == nil {
		t.Error("SetTelemetry on a communicator without telemetry succeeded")
	}
}

// A rank that waits with a call in flight writes heartbeats, at most one per
// flowtel.HeartbeatInterval, so that its silence can tell it does not run
// from it waiting for a peer.
func TestWaitingRankWritesHeartbeats(t *testing.T) {
	col, sink := memoryCollector()
	comms := newLocal(t, 2, WithCollector(col), WithTransport("tcp"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		buf := make([]float32, 1<<18)                   // the engine's path, not the mailbox
		done <- AllReduce(ctx, comms[0], buf, buf, Sum) // rank 1 never calls
	}()
	defer func() {
		cancel()
		<-done
	}()
	wait, cancelWait := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelWait()
	for {
		if err := col.Flush(wait); err != nil {
			t.Fatalf("fewer than 3 heartbeats from the waiting rank: %v", err)
		}
		var beats []int64
		for _, r := range sink.Records() {
			if r.Kind == flowtel.KindHeartbeat && r.Comm == comms[0].ID() {
				if r.Rank != 0 || r.Depth != 1 {
					t.Fatalf("heartbeat %v: want rank 0 with one call in flight", r)
				}
				beats = append(beats, r.TsNs)
			}
		}
		if len(beats) >= 3 {
			for i := 1; i < len(beats); i++ {
				if beats[i]-beats[i-1] < flowtel.HeartbeatInterval {
					t.Fatalf("heartbeats %d ns apart, want at least %d", beats[i]-beats[i-1], flowtel.HeartbeatInterval)
				}
			}
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the call ended: %v", err)
		case <-wait.Done():
			t.Fatalf("%d heartbeats after 20 s", len(beats))
		case <-time.After(5 * time.Millisecond):
		}
	}
}
