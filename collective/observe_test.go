package collective

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

type callerKey struct{}

// Observers see every call with the caller's context and the comm, rank
// and sequence number its coll_begin records carry: on the engine path, the
// mailbox path, for point-to-point calls and in Split children.
func TestObserveCalls(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	col, sink := memoryCollector()
	comms := newLocal(t, 2, WithCollector(col))
	type seen struct {
		comm   uint32
		rank   int
		seq    uint64
		caller any
	}
	var mu sync.Mutex
	var got []seen
	for _, c := range comms {
		c.ObserveCalls(func(ctx context.Context, comm uint32, rank int, seq uint64) {
			mu.Lock()
			got = append(got, seen{comm, rank, seq, ctx.Value(callerKey{})})
			mu.Unlock()
		})
	}
	if err := runOnAll(comms, func(c *Comm) error {
		cctx := context.WithValue(ctx, callerKey{}, c.Rank())
		big := make([]float32, 1<<16)
		if err := AllReduce(cctx, c, big, big, Sum); err != nil {
			return err
		}
		small := make([]float32, 8)
		if err := AllReduce(cctx, c, small, small, Sum); err != nil {
			return err
		}
		if c.Rank() == 0 {
			if err := Send(cctx, c, small, 1); err != nil {
				return err
			}
		} else if err := Recv(cctx, c, small, 0); err != nil {
			return err
		}
		sub, err := c.Split(cctx, 0, c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		return AllReduce(cctx, sub, big, big, Sum)
	}); err != nil {
		t.Fatal(err)
	}
	if err := col.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	begun := map[seen]bool{}
	for _, r := range sink.Records() {
		if r.Kind == flowtel.KindCollBegin {
			begun[seen{r.Comm, int(r.Rank), r.CollSeq, int(r.Rank)}] = true
		}
	}
	mu.Lock()
	defer mu.Unlock()
	observed := map[seen]bool{}
	for _, s := range got {
		if observed[s] {
			t.Errorf("call observed twice: %+v", s)
		}
		observed[s] = true
	}
	for s := range begun {
		if !observed[s] {
			t.Errorf("call %+v began but was not observed with its caller's context", s)
		}
	}
	for s := range observed {
		if !begun[s] {
			t.Errorf("observed %+v, which recorded no coll_begin", s)
		}
	}
	// Per rank: the two all-reduces, the send or receive, the Split's two
	// all-gathers and the child's all-reduce.
	if len(begun) != 2*6 {
		t.Errorf("%d calls began, want 12: %v", len(begun), begun)
	}
}
