package collective

import (
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective/bootstrap"
)

// A store served before the ranks start (a C API's unique id serves it in
// the process that made the id): with WithServedStore rank 0 dials it
// instead of serving its address again.
func TestServedStore(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	const token = "served-store-test-token"
	srv, err := bootstrap.Serve(ctx, "127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	addr := srv.Addr().String()
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = New(ctx, WithRank(r, 2), WithMaster(addr), WithToken(token), WithServedStore(), WithTelemetry(false))
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	out := make([][]int32, 2)
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[r] = []int32{int32(r + 1), 10}
			errs[r] = AllReduce(ctx, comms[r], out[r], out[r], Sum)
		}()
	}
	wg.Wait()
	for r := range comms {
		if errs[r] != nil || out[r][0] != 3 || out[r][1] != 20 {
			t.Errorf("rank %d: %v %v", r, out[r], errs[r])
		}
		comms[r].Close()
	}
}
