package collective

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/internal/syncbuf"
)

func TestNewOverTCPStoreAndClockOffset(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	comms := newStoreJob(t, ctx, 3, WithToken("secret"), WithTransport("tcp"))
	for _, c := range comms {
		if c.UID() != comms[0].UID() || c.ID() != comms[0].ID() {
			t.Fatalf("rank %d has communicator %s, rank 0 %s", c.Rank(), c.UID(), comms[0].UID())
		}
		// One kernel, one monotonic clock: the offset is 0, not a
		// measurement of it (bootstrap's tests measure one).
		if off, e := c.Clock().Offset(), c.Clock().ErrorNs(); off != 0 || e != 0 {
			t.Errorf("rank %d clock offset %dns ± %dns on one host, want 0 ± 0", c.Rank(), off, e)
		}
	}
	if err := runOnAll(comms, func(c *Comm) error {
		buf := []float64{1}
		return AllReduce(ctx, c, buf, buf, Sum)
	}); err != nil {
		t.Fatal(err)
	}
}

// closeAtEnd closes the communicators of comms that were made when the
// test ends.
func closeAtEnd(t testing.TB, comms []*Comm) {
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	})
}

// newStoreJob starts n ranks as goroutines that meet through rank 0's
// rendezvous store at a free address, as a launcher's processes would; they
// close when the test ends.
func newStoreJob(t *testing.T, ctx context.Context, n int, opts ...Option) []*Comm {
	t.Helper()
	addr := freeAddr(t)
	comms, errs := eachRank(n, func(r int) (*Comm, error) {
		return New(ctx, append([]Option{WithRank(r, n), WithMaster(addr)}, opts...)...)
	})
	closeAtEnd(t, comms)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return comms
}

func TestWrongJobTokenRefused(t *testing.T) {
	ctx := testCtx(t, 2*time.Second)
	addr := freeAddr(t)
	var logged syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, tok := range []string{"right", "wrong"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := New(ctx, WithRank(r, 2), WithMaster(addr), WithToken(tok), WithLogger(log))
			if err == nil {
				c.Abort()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "token") {
		t.Fatalf("rank with the wrong token: %v, want a token error", errs[1])
	}
	if errs[0] == nil {
		t.Fatal("rank 0 formed a job without rank 1")
	}
	if !strings.Contains(logged.String(), "token") {
		t.Fatalf("refusal not logged with its reason; log:\n%s", logged.String())
	}
}

func TestFaultToleranceMustAgree(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	addr := freeAddr(t)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := New(ctx, WithRank(r, 2), WithMaster(addr), WithTransport("tcp"), WithFaultTolerance(r == 0))
			if err == nil {
				c.Abort()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	// Every rank fails; the one that sees every rank's settings first names
	// the mismatch (if that is rank 0, the store closes under the other).
	named := false
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d joined a job whose ranks disagree on fault tolerance", r)
		}
		named = named || strings.Contains(err.Error(), "fault tolerance")
	}
	if !named {
		t.Errorf("no rank named the fault-tolerance mismatch: %v", errs)
	}
}

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
