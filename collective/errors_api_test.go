package collective

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/transport"
)

// peerFailure runs, on a 2-rank job, a receive on rank 0 that ends by its
// own short deadline while rank 1 waits for rank 0, and returns rank 1's
// error: the failure it learnt of through the job's abort board.
func peerFailure(t *testing.T, comms []*Comm) error {
	ctx := testCtx(t, 30*time.Second)
	errs := onRanks(comms, func(c *Comm) error {
		buf := []float32{0}
		if c.Rank() == 0 {
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			return Recv(short, c, buf, 1)
		}
		return Recv(ctx, c, buf, 0)
	})
	if !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("rank 0: %v, want its deadline", errs[0])
	}
	return errs[1]
}

// TestErrorKinds provokes each kind of failure a caller may act on and
// checks that errors.Is and errors.As find it through the chain the
// library wraps around it, including on a rank that learnt of another
// rank's failure.
func TestErrorKinds(t *testing.T) {
	bg := context.Background()
	for _, tc := range []struct {
		name    string
		provoke func(t *testing.T) error
		is      []error // errors.Is must hold for each
		isNot   []error // and must not for these
		as      func(t *testing.T, err error)
	}{
		{"closed", func(t *testing.T) error {
			c := newLocal(t, 2)[0]
			c.Close()
			return AllReduce(bg, c, []float32{1}, []float32{1}, Sum)
		}, []error{ErrClosed}, []error{ErrAborted, context.DeadlineExceeded}, nil},

		{"aborted", func(t *testing.T) error {
			c := newLocal(t, 2)[0]
			buf := []float32{1}
			h, err := AllReduceAsync(bg, c, buf, buf, Sum) // rank 1 never joins
			if err != nil {
				t.Fatal(err)
			}
			c.Abort()
			return h.Wait(bg)
		}, []error{ErrAborted}, []error{ErrClosed, context.DeadlineExceeded}, nil},

		{"communicator timeout", func(t *testing.T) error {
			c := newLocal(t, 2, WithTimeout(time.Second))[0]
			return Recv(bg, c, []float32{0}, 1) // rank 1 never sends
		}, []error{ErrTimeout, context.DeadlineExceeded}, []error{ErrAborted, ErrClosed, context.Canceled}, nil},

		{"context canceled", func(t *testing.T) error {
			c := newLocal(t, 2)[0]
			ctx, cancel := context.WithCancel(bg)
			cancel()
			return Recv(ctx, c, []float32{0}, 1)
		}, []error{context.Canceled}, []error{ErrTimeout, context.DeadlineExceeded}, nil},

		{"peer gone", func(t *testing.T) error {
			comms := newLocal(t, 2)
			errc := make(chan error, 1)
			go func() { errc <- Recv(bg, comms[0], []float32{0}, 1) }()
			comms[1].Abort()
			return <-errc
		}, []error{transport.ErrPeerDead}, []error{ErrAborted, ErrTimeout}, nil},

		{"mismatch", func(t *testing.T) error {
			comms := newLocal(t, 2)
			errs := make([]error, 2)
			runOnAll(comms, func(c *Comm) error {
				buf := make([]float32, 4+4*c.Rank())
				errs[c.Rank()] = AllReduce(bg, c, buf, buf, Sum)
				return nil
			})
			if !errors.Is(errs[1], ErrMismatch) {
				t.Errorf("rank 1: %v, want a mismatch too", errs[1])
			}
			return errs[0]
		}, []error{ErrMismatch}, []error{ErrAborted}, func(t *testing.T, err error) {
			var me *MismatchError
			if !errors.As(err, &me) {
				t.Fatalf("errors.As(%v, *MismatchError) failed", err)
			}
			if len(me.Calls) != 2 || !strings.Contains(me.Calls[0], "count=4") || !strings.Contains(me.Calls[1], "count=8") {
				t.Errorf("Calls = %q, want rank 0's count=4 and rank 1's count=8", me.Calls)
			}
		}},

		{"peer failed, in-process board", func(t *testing.T) error {
			return peerFailure(t, newLocal(t, 2))
		}, []error{context.DeadlineExceeded}, []error{ErrTimeout, ErrAborted, context.Canceled}, asPeerFailed(0, 0)},

		{"peer failed, store board", func(t *testing.T) error {
			ctx, cancel := context.WithTimeout(bg, 30*time.Second)
			defer cancel()
			return peerFailure(t, newStoreJob(t, ctx, 2))
		}, []error{context.DeadlineExceeded}, []error{ErrTimeout, ErrAborted, context.Canceled}, asPeerFailed(0, 0)},

		{"no device engine", func(t *testing.T) error {
			c := newLocal(t, 2)[0]
			d := DeviceBuf(fakeMem(64), Float32)
			return c.AllReduce(bg, d, d, Sum)
		}, []error{ErrNoDeviceEngine}, []error{ErrClosed}, nil},

		{"no token", func(t *testing.T) error {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			c, err := New(ctx, WithRank(1, 2), WithMaster("192.0.2.1:29500"), WithToken(""), WithInsecureNoToken(false))
			if err == nil {
				c.Close()
			}
			return err
		}, nil, []error{ErrTimeout}, func(t *testing.T, err error) {
			var nt *NoTokenError
			if !errors.As(err, &nt) || nt.Addr != "192.0.2.1:29500" {
				t.Errorf("errors.As(%v, *NoTokenError) failed or names another address", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.provoke(t)
			if err == nil {
				t.Fatal("no error")
			}
			for _, target := range tc.is {
				if !errors.Is(err, target) {
					t.Errorf("errors.Is(err, %q) = false; err: %v", target, err)
				}
			}
			for _, target := range tc.isNot {
				if errors.Is(err, target) {
					t.Errorf("errors.Is(err, %q) = true; err: %v", target, err)
				}
			}
			if tc.as != nil {
				tc.as(t, err)
			}
		})
	}
}

// asPeerFailed checks an error is another rank's failure, blamed on rank
// and reported by reporter, whose cause survives as an error.
func asPeerFailed(rank, reporter int) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		var pf *PeerFailedError
		if !errors.As(err, &pf) {
			t.Fatalf("errors.As(%v, *PeerFailedError) failed", err)
		}
		if pf.Rank != rank || pf.Reporter != reporter {
			t.Errorf("PeerFailedError names rank %d reported by %d, want %d by %d", pf.Rank, pf.Reporter, rank, reporter)
		}
		if pf.Cause == nil || errors.Unwrap(pf) != pf.Cause || !strings.Contains(err.Error(), pf.Cause.Error()[len("collective: "):]) {
			t.Errorf("the cause %v is not the error's chain or message: %v", pf.Cause, err)
		}
	}
}
