package collective

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFailureReachesEveryRank: rank 2 gives up on a receive that never
// comes (its deadline), while rank 0 waits on rank 2 and rank 1 waits on
// rank 0. Nobody's connection breaks, so without the abort board ranks 0
// and 1 would wait out their own 30-second deadlines and blame each other;
// with it they fail at once, naming rank 2 and its cause.
func TestFailureReachesEveryRank(t *testing.T) {
	for _, how := range []string{"local", "store", "local/split", "store/split"} {
		t.Run(how, func(t *testing.T) {
			ctx := testCtx(t, 30*time.Second)
			comms := newAbortJob(t, ctx, strings.TrimSuffix(how, "/split"))
			parents := comms
			if strings.HasSuffix(how, "/split") {
				// A Split child has a board of its own: rank 2 of the
				// child (rank 0 of the parent) fails.
				children := make([]*Comm, len(comms))
				if err := runOnAll(comms, func(c *Comm) (err error) {
					children[c.Rank()], err = c.Split(ctx, 0, len(comms)-c.Rank())
					return err
				}); err != nil {
					t.Fatal(err)
				}
				for _, c := range children {
					defer c.Close()
				}
				slices.SortFunc(children, func(a, b *Comm) int { return a.Rank() - b.Rank() })
				comms = children
			}
			// Every link has carried a call, so the failure below is
			// not a first-contact one.
			if err := allReduceOnAll(ctx, comms, 1); err != nil {
				t.Fatal(err)
			}

			took := make([]time.Duration, 3)
			start := time.Now()
			errs := onRanks(comms, func(c *Comm) error {
				r, buf := c.Rank(), []float32{0}
				defer func() { took[r] = time.Since(start) }()
				switch r {
				case 0:
					return Recv(ctx, c, buf, 2)
				case 1:
					return Recv(ctx, c, buf, 0)
				}
				short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				return Recv(short, c, buf, 1)
			})
			if !errors.Is(errs[2], context.DeadlineExceeded) {
				t.Fatalf("rank 2: got %v, want its deadline", errs[2])
			}
			for r := range 2 {
				var pf *PeerFailedError
				if !errors.As(errs[r], &pf) || pf.Rank != 2 {
					t.Fatalf("rank %d: got %v, want rank 2's failure", r, errs[r])
				}
				if !strings.Contains(pf.Cause.Error(), "deadline") || !strings.Contains(errs[r].Error(), "rank 2") {
					t.Errorf("rank %d's error does not carry rank 2's cause: %v", r, errs[r])
				}
				// Their own deadline is 30 s away.
				if took[r] > 15*time.Second {
					t.Errorf("rank %d learned of rank 2's failure after %v", r, took[r])
				}
				// The communicator stays aborted.
				if err := comms[r].Barrier(ctx); !errors.As(err, &pf) {
					t.Errorf("rank %d: a call after the abort got %v", r, err)
				}
			}
			if strings.HasSuffix(how, "/split") {
				// A child's failure is the child's alone.
				if err := allReduceOnAll(ctx, parents, 1); err != nil {
					t.Errorf("the parent communicator after its child failed: %v", err)
				}
			}
			t.Logf("ranks 0 and 1 failed %v and %v after the start, rank 2 (200 ms deadline) after %v: %v", took[0], took[1], took[2], errs[0])
		})
	}
}

// TestCallerErrorDoesNotAbort: a call refused before any transfer (a bad
// argument) breaks nothing, so it tells no other rank.
func TestCallerErrorDoesNotAbort(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	comms := newAbortJob(t, ctx, "local")
	if err := Broadcast(ctx, comms[1], []float32{1}, []float32{1}, 7); err == nil {
		t.Fatal("broadcast from rank 7 of 3 succeeded")
	}
	if err := allReduceOnAll(ctx, comms, 1); err != nil {
		t.Fatalf("all-reduce after a refused call: %v", err)
	}
}

func newAbortJob(t *testing.T, ctx context.Context, how string) []*Comm {
	t.Helper()
	if how == "store" {
		return newStoreJob(t, ctx, 3, WithTransport("tcp"))
	}
	comms, err := NewLocal(ctx, 3)
	closeAtEnd(t, comms)
	if err != nil {
		t.Fatal(err)
	}
	return comms
}

// A panic in a call (a bug) unwinds through the caller's deferred Close:
// Close fails the call and returns, and the panic goes on up. Close used to
// wait forever for the engine's token and the call (a driver's panic), or
// for the mailbox path's live lock the call held (a mailbox call's), so
// the process hung instead of crashing with the panic.
func TestPanicDoesNotHangClose(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(t *testing.T, c *Comm) *func() // the hook that makes the call panic
		count int
	}{
		{"driver", func(_ *testing.T, c *Comm) *func() { return &c.engines[0].testFault }, slotMax / 2}, // the engine's size: above the mailbox's, below loans' (loanedMin)
		{"mailbox", func(t *testing.T, c *Comm) *func() {
			if c.small == nil {
				t.Skip("no mailbox path here (shm not shared by every pair)")
			}
			return &c.small.testFault
		}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := newLocal(t, 2, WithTransport("shm"))
			c := comms[0]
			*tc.fault(t, c) = func() { panic("injected") }
			recovered := make(chan any, 1)
			closed := make(chan error, 1)
			go func() {
				defer func() { recovered <- recover() }()
				defer func() { closed <- c.Close() }()
				buf := make([]float32, tc.count)
				_ = AllReduce(context.Background(), c, buf, buf, Sum)
			}()
			select {
			case p := <-recovered:
				if p != "injected" {
					t.Fatalf("recovered %v, want the injected panic", p)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Close did not return after the call panicked")
			}
			if err := <-closed; err != nil {
				t.Fatalf("Close: %v", err)
			}
			buf := make([]float32, 4)
			if err := AllReduce(context.Background(), c, buf, buf, Sum); err == nil {
				t.Fatal("all-reduce on the closed communicator succeeded")
			}
		})
	}
}
