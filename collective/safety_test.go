package collective

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// testCtx is a context that ends d from now or when the test ends, so
// that a hang fails the test at its own deadline.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newLocal(t *testing.T, n int, opts ...Option) []*Comm {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	comms, err := NewLocal(ctx, n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Abort()
		}
	})
	return comms
}

func TestMismatchNamedOnEveryRank(t *testing.T) {
	cases := []struct {
		name string
		call func(ctx context.Context, c *Comm) error
		want []string
	}{
		{"count", func(ctx context.Context, c *Comm) error {
			buf := make([]float32, 10+2*c.Rank()%4) // rank 1 differs
			return AllReduce(ctx, c, buf, buf, Sum)
		}, []string{"count=10", "count=12"}},
		{"datatype", func(ctx context.Context, c *Comm) error {
			if c.Rank() == 2 {
				buf := make([]int32, 8)
				return AllReduce(ctx, c, buf, buf, Sum)
			}
			buf := make([]float32, 8)
			return AllReduce(ctx, c, buf, buf, Sum)
		}, []string{"int32", "float32"}},
		{"operation", func(ctx context.Context, c *Comm) error {
			buf := make([]float64, 8)
			if c.Rank() == 0 {
				return Broadcast(ctx, c, buf, buf, 0)
			}
			return AllReduce(ctx, c, buf, buf, Sum)
		}, []string{"rank 0: broadcast", "rank 1: allreduce"}},
		{"root", func(ctx context.Context, c *Comm) error {
			buf := make([]float64, 8)
			return Broadcast(ctx, c, buf, buf, min(c.Rank(), 1))
		}, []string{"root=0", "root=1"}},
		{"reduction", func(ctx context.Context, c *Comm) error {
			buf := make([]float64, 8)
			op := Sum
			if c.Rank() == 1 {
				op = Max
			}
			return AllReduce(ctx, c, buf, buf, op)
		}, []string{"sum", "max"}},
		// The headers carry small payloads: a rank whose payload is past
		// the eager limit sends a bare header, the others theirs with data.
		{"count past the eager limit", func(ctx context.Context, c *Comm) error {
			n := 10
			if c.Rank() == 1 {
				n = 100000
			}
			send, recv := make([]float32, n), make([]float32, n)
			for i := range recv {
				recv[i] = 7
			}
			err := AllReduce(ctx, c, send, recv, Sum)
			for i, v := range recv {
				if v != 7 {
					return fmt.Errorf("failed call wrote %v at index %d of the receive buffer (and returned %w)", v, i, err)
				}
			}
			return err
		}, []string{"count=10,", "count=100000,"}},
		// Past the eager limit a broadcast posts its receives ahead of the
		// verify: a mismatch fills them with empty messages, writing nothing.
		{"broadcast root past the eager limit", func(ctx context.Context, c *Comm) error {
			return untouched(100000, func(buf []float32) error { return Broadcast(ctx, c, buf, buf, min(c.Rank(), 1)) })
		}, []string{"root=0", "root=1"}},
		{"broadcast count past the eager limit", func(ctx context.Context, c *Comm) error {
			return untouched(100000+c.Rank()/2, func(buf []float32) error { return Broadcast(ctx, c, buf, buf, 1) })
		}, []string{"count=100000,", "count=100001,"}},
		{"broadcast against all-reduce past the eager limit", func(ctx context.Context, c *Comm) error {
			return untouched(100000, func(buf []float32) error {
				if c.Rank() == 0 {
					return AllReduce(ctx, c, buf, buf, Sum)
				}
				return Broadcast(ctx, c, buf, buf, 1)
			})
		}, []string{"rank 0: allreduce", "rank 1: broadcast"}},
		// Different operations exchange different numbers of messages.
		{"message pattern", func(ctx context.Context, c *Comm) error {
			send := make([]float32, 8)
			switch c.Rank() {
			case 0:
				return AllGather(ctx, c, send, make([]float32, 8*c.Size()))
			case 1:
				return c.Barrier(ctx)
			}
			return AllReduce(ctx, c, send, make([]float32, 8), Sum)
		}, []string{"rank 0: allgather", "rank 1: barrier", "rank 2: allreduce"}},
	}
	for _, tr := range []string{"loop", "shm", "tcp"} {
		t.Run(tr, func(t *testing.T) { testMismatches(t, tr, cases) })
	}
}

// untouched runs call on a buffer of n sevens and fails if the call, which
// should fail its signature check, wrote any of them.
func untouched(n int, call func(buf []float32) error) error {
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = 7
	}
	err := call(buf)
	for i, v := range buf {
		if v != 7 {
			return fmt.Errorf("failed call wrote %v at index %d (and returned %w)", v, i, err)
		}
	}
	return err
}

func testMismatches(t *testing.T, transport string, cases []struct {
	name string
	call func(ctx context.Context, c *Comm) error
	want []string
}) {
	comms := newLocal(t, 3, WithTransport(transport))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t, 20*time.Second)
			errs := make([]error, len(comms))
			runOnAll(comms, func(c *Comm) error {
				errs[c.Rank()] = tc.call(ctx, c)
				return nil
			})
			for r, err := range errs {
				var mm *MismatchError
				if !errors.As(err, &mm) {
					t.Fatalf("rank %d: %v, want a MismatchError", r, err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("rank %d: error %q does not mention %q", r, err, w)
					}
				}
			}
			// No payload moved: the communicator is still usable.
			if err := runOnAll(comms, func(c *Comm) error {
				buf := []float32{float32(c.Rank())}
				if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
					return err
				}
				if buf[0] != 3 {
					t.Errorf("sum after mismatch = %v, want 3", buf[0])
				}
				return nil
			}); err != nil {
				t.Fatalf("communicator unusable after a mismatch: %v", err)
			}
		})
	}
}

func TestMismatchWithoutCheckStillErrors(t *testing.T) {
	comms := newLocal(t, 2, WithSignatureCheck(false))
	ctx := testCtx(t, 10*time.Second)
	start := time.Now()
	errs := make([]error, 2)
	runOnAll(comms, func(c *Comm) error {
		buf := make([]float32, 100+100*c.Rank())
		errs[c.Rank()] = AllReduce(ctx, c, buf, buf, Sum)
		return nil
	})
	if errs[0] == nil && errs[1] == nil {
		t.Fatal("mismatched counts with the check off: both ranks succeeded")
	}
	if time.Since(start) > 9*time.Second {
		t.Fatalf("mismatch took %v to surface", time.Since(start))
	}
	t.Logf("errors: %v / %v", errs[0], errs[1])
}

func TestDeadlineNamesWhatIsMissing(t *testing.T) {
	comms := newLocal(t, 3)
	ctx := testCtx(t, 300*time.Millisecond)
	start := time.Now()
	// Ranks 0 and 1 call; rank 2 never does.
	errs := make([]error, 2)
	runOnAll(comms[:2], func(c *Comm) error {
		buf := make([]float32, 1000)
		errs[c.Rank()] = AllReduce(ctx, c, buf, buf, Sum)
		return nil
	})
	for r, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("rank %d: %v, want a deadline error", r, err)
		}
		if !strings.Contains(err.Error(), "2") {
			t.Errorf("rank %d: %q does not name rank 2", r, err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("deadline of 300ms honoured after %v", d)
	}
	// The communicator failed: later calls say so at once.
	buf := []float32{1}
	if err := AllReduce(context.Background(), comms[0], buf, buf, Sum); err == nil {
		t.Fatal("call on a failed communicator succeeded")
	}
}

func TestDeadPeerNamedOnEverySurvivor(t *testing.T) {
	for _, tr := range []string{"loop", "tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			const n = 4
			comms := newLocal(t, n, WithTransport(tr))
			ctx := testCtx(t, 20*time.Second)
			// A warm-up proves the job works, then rank 2 dies while the
			// others wait in an all-reduce.
			if err := allReduceOnAll(ctx, comms, 1<<16); err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, n-1)
			for _, c := range comms {
				if c.Rank() == 2 {
					continue
				}
				go func() {
					buf := make([]float32, 1<<16)
					errs <- AllReduce(ctx, c, buf, buf, Sum)
				}()
			}
			comms[2].Abort()
			start := time.Now()
			for range n - 1 {
				err := <-errs
				if err == nil {
					t.Fatal("a survivor's all-reduce succeeded without rank 2")
				}
				if !strings.Contains(err.Error(), "rank 2") {
					t.Errorf("error %q does not name rank 2", err)
				}
			}
			t.Logf("every survivor failed within %v", time.Since(start))
		})
	}
}

func TestAbortFromAnotherGoroutine(t *testing.T) {
	comms := newLocal(t, 2)
	ctx := testCtx(t, 20*time.Second)
	done := make(chan error, 1)
	go func() {
		buf := make([]float32, 10)
		done <- AllReduce(ctx, comms[0], buf, buf, Sum) // rank 1 never joins
	}()
	// Abort whenever the call is in flight or about to be: either way it
	// must return an error, not hang.
	comms[0].Abort()
	if err := <-done; err == nil {
		t.Fatal("all-reduce on an aborted communicator succeeded")
	}
	if err := comms[0].Close(); err != nil {
		t.Fatalf("Close after Abort: %v", err)
	}
}

// Close waits for the calls in flight, not for their handles: async calls
// nobody waits for, on the engine and on the mailbox path, end and Close
// returns once they have.
func TestCloseWithUnwaitedHandles(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			comms := newLocal(t, 2, WithTransport(tr))
			ctx := testCtx(t, 20*time.Second)
			big := make([]float32, slotMax) // the engine's, on either transport
			err := runOnAll(comms, func(c *Comm) error {
				bufs := [][]float32{make([]float32, len(big)), make([]float32, 4), make([]float32, len(big))}
				var hs []*Handle
				for _, b := range bufs {
					h, err := c.AllReduceAsync(ctx, Buf(b), Buf(b), Sum)
					if err != nil {
						return err
					}
					hs = append(hs, h)
				}
				closed := make(chan error, 1)
				go func() { closed <- c.Close() }()
				select {
				case err := <-closed:
					if err != nil {
						return fmt.Errorf("Close: %w", err)
					}
				case <-ctx.Done():
					return errors.New("Close did not return with async calls nobody waited for")
				}
				// Their handles still answer, with the calls' results.
				for i, h := range hs {
					if err := h.Wait(ctx); err != nil {
						return fmt.Errorf("call %d, waited after Close: %w", i, err)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestAsyncHandles(t *testing.T) {
	comms := newLocal(t, 3)
	ctx := testCtx(t, 20*time.Second)
	if err := runOnAll(comms, func(c *Comm) error {
		// Several operations in flight at once, waited in reverse.
		var hs []*Handle
		bufs := make([][]int64, 5)
		for i := range bufs {
			bufs[i] = []int64{int64(c.Rank() + i)}
			h, err := c.AllReduceAsync(ctx, Buf(bufs[i]), Buf(bufs[i]), Sum)
			if err != nil {
				return err
			}
			hs = append(hs, h)
		}
		for i := len(hs) - 1; i >= 0; i-- {
			if err := hs[i].Wait(ctx); err != nil {
				return err
			}
			if want := int64(3 + 3*i); bufs[i][0] != want {
				t.Errorf("rank %d op %d = %d, want %d", c.Rank(), i, bufs[i][0], want)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestSplit(t *testing.T) {
	comms := newLocal(t, 5)
	ctx := testCtx(t, 30*time.Second)
	subs := make([]*Comm, 5)
	if err := runOnAll(comms, func(c *Comm) error {
		color := c.Rank() % 2
		if c.Rank() == 4 {
			color = NoColor
		}
		sub, err := c.Split(ctx, color, -c.Rank()) // reverse order by key
		subs[c.Rank()] = sub
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if subs[4] != nil {
		t.Fatal("NoColor rank got a communicator")
	}
	// Evens {0,2} ordered by key -rank: 2 is rank 0. Odds {1,3}: 3 is rank 0.
	for r, want := range map[int][2]int{0: {1, 2}, 2: {0, 2}, 1: {1, 2}, 3: {0, 2}} {
		if subs[r].Rank() != want[0] || subs[r].Size() != want[1] {
			t.Errorf("rank %d in split: %d of %d, want %d of %d", r, subs[r].Rank(), subs[r].Size(), want[0], want[1])
		}
	}
	if err := runOnAll(subs[:4], func(c *Comm) error {
		buf := []int32{1}
		if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
			return err
		}
		if buf[0] != 2 {
			t.Errorf("sum in a sub-communicator of 2 = %d", buf[0])
		}
		return c.Close()
	}); err != nil {
		t.Fatal(err)
	}
}

func TestBadArguments(t *testing.T) {
	comms := newLocal(t, 2)
	ctx := context.Background()
	c := comms[0]
	shared := make([]byte, 16)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"allreduce lengths", AllReduce(ctx, c, make([]float32, 3), make([]float32, 4), Sum), "3 elements but receive has 4"},
		{"allgather size", AllGather(ctx, c, make([]float32, 3), make([]float32, 5)), "want 2 ranks × 3"},
		{"root", Broadcast(ctx, c, make([]float32, 3), make([]float32, 3), 7), "root 7 out of range"},
		{"reduction", AllReduce(ctx, c, make([]float32, 3), make([]float32, 3), ReduceOp(99)), "invalid reduction"},
		{"datatype", c.AllReduce(ctx, Bytes(make([]byte, 3), Float32), Bytes(make([]byte, 3), Float32), Sum), "not a whole number of float32"},
		{"types differ", c.AllReduce(ctx, Buf(make([]float32, 2)), Buf(make([]int32, 2)), Sum), "send buffer is float32 but receive buffer is int32"},
		{"peer", Send(ctx, c, make([]byte, 1), 5), "peer 5 out of range"},
		{"self", Send(ctx, c, make([]byte, 1), 0), "this rank itself"},
		{"overlap", c.SendRecv(ctx, SendTo(1, Buf(shared[:8])), RecvFrom(1, Buf(shared[4:12]))), "overlapping memory"},
	}
	for _, tc := range cases {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
	}
}

func TestNewValidatesOptions(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{nil, "needs WithRank"},
		{[]Option{WithRank(3, 2)}, "rank 3 out of range"},
		{[]Option{WithRank(0, 2)}, "rendezvous address"},
		{[]Option{WithRank(0, 1), WithTransport("carrier-pigeon")}, "unknown transport"},
		{[]Option{WithRank(0, 1), WithChannels(0)}, "channels"},
	} {
		_, err := New(ctx, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%d options): %v, want %q", len(tc.opts), err, tc.want)
		}
	}
}

// A rank that finishes its last call and closes is gone, not dead: ranks
// still finishing the same call must not fail because of it. Over ft, the
// closing rank's sockets reset the peers' writes while its last messages
// may still wait unread in their sockets (seen in test/fault's
// TestFailoverLatency, and here in about 1 run of 40 rounds in 2 before the fix).
func TestEarlyFinisherIsNotDeath(t *testing.T) {
	for _, tr := range []string{"tcp", "shm", "ft"} {
		t.Run(tr, func(t *testing.T) {
			opts := []Option{WithTransport(tr)}
			if tr == "ft" {
				opts = []Option{WithTransport("tcp"), WithFaultTolerance(true)}
			}
			for round := range 40 {
				comms := newLocal(t, 3, opts...)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := runOnAll(comms, func(c *Comm) error {
					buf := make([]float32, 32<<10+1)
					for range 20 {
						if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
							return err
						}
					}
					return c.Close()
				})
				cancel()
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
		})
	}
}

func TestCommunicatorTimeoutBoundsCallsWithoutDeadline(t *testing.T) {
	comms := newLocal(t, 2, WithTimeout(300*time.Millisecond))
	start := time.Now()
	buf := []float32{1}
	err := AllReduce(context.Background(), comms[0], buf, buf, Sum) // rank 1 never calls
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "VCCL_TIMEOUT") {
		t.Fatalf("call without a deadline: %v, want the communicator timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a 300ms communicator timeout fired after %v", d)
	}
}

// Over TCP (stream sockets) a call whose first send is too large to fold
// sends its first bytes with the signature and the rest after the verify
// (withSignature, call.prefix): the check costs no round trip. A mismatch
// there still fails the call on every rank with the mismatch error, and
// no rank reports success, whichever rank's first data carried it: a
// broadcast's root, every rank of a ring all-reduce.
func TestMismatchWithFirstData(t *testing.T) {
	const n = 1 << 18 // 1 MiB of float32: past the eager limit
	for _, tc := range []struct {
		name string
		op   Op
		call func(ctx context.Context, c *Comm, buf []float32) error
	}{
		{"broadcast count", OpBroadcast, func(ctx context.Context, c *Comm, buf []float32) error {
			return Broadcast(ctx, c, buf[:n-c.Rank()], buf[:n-c.Rank()], 0)
		}},
		{"broadcast root", OpBroadcast, func(ctx context.Context, c *Comm, buf []float32) error {
			return Broadcast(ctx, c, buf, buf, c.Rank())
		}},
		{"all-reduce reduction", OpAllReduce, func(ctx context.Context, c *Comm, buf []float32) error {
			return AllReduce(ctx, c, buf, buf, []ReduceOp{Sum, Max}[c.Rank()])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := newLocal(t, 2, WithTransport("tcp"), WithAlgorithm(AlgoRing))
			// The header does carry the first data: this is the path under test.
			cl := call{op: tc.op, n: 2, count: n, esize: 4, redop: Sum, chunk: comms[0].chunkFor(&call{op: tc.op, n: 2, count: n, esize: 4}, AlgoRing), prefix: comms[0].overStream}
			body, err := build(&cl, AlgoRing)
			if err != nil {
				t.Fatal(err)
			}
			s, err := withSignature(body, &cl, AlgoRing)
			if err != nil {
				t.Fatal(err)
			}
			if s.hdr.sendLen[1] <= 0 {
				t.Fatalf("rank 0's header to rank 1 carries %d bytes of data, want its first send's first bytes", s.hdr.sendLen[1])
			}
			ctx := testCtx(t, 20*time.Second)
			errs := make([]error, len(comms))
			runOnAll(comms, func(c *Comm) error {
				errs[c.Rank()] = tc.call(ctx, c, make([]float32, n))
				return nil
			})
			for r, err := range errs {
				var mm *MismatchError
				if !errors.As(err, &mm) {
					t.Errorf("rank %d: %v, want a *MismatchError", r, err)
				}
			}
			// Nothing is left in flight: the next call is right.
			if err := runOnAll(comms, func(c *Comm) error {
				buf := make([]float32, n)
				buf[n-1] = float32(c.Rank() + 1)
				if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
					return err
				}
				if buf[n-1] != 3 {
					return fmt.Errorf("sum after the mismatch = %v, want 3", buf[n-1])
				}
				return nil
			}); err != nil {
				t.Fatalf("communicator unusable after a mismatch: %v", err)
			}
		})
	}
}
