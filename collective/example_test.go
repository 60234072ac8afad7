package collective_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/loop"
)

// onLocalRanks makes an n-rank job in this process (NewLocal), runs fn on
// every rank at once, as each process of a job would, then closes the ranks
// and returns their errors. In a real job every process calls
// collective.NewFromEnv, holds one *Comm and runs fn's body.
func onLocalRanks(n int, fn func(c *collective.Comm) error, opts ...collective.Option) []error {
	comms, err := collective.NewLocal(context.Background(), n, opts...)
	if err != nil {
		panic(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(c)
		}()
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	return errs
}

// Each process of a job makes its own communicator. Under torchrun,
// mpirun, srun or vcclrun, NewFromEnv finds the rank, the world size and
// the rendezvous address in the launcher's environment.
func ExampleNewFromEnv() {
	ctx := context.Background()
	c, err := collective.NewFromEnv(ctx, collective.WithTimeout(time.Minute))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	grad := make([]float32, 1<<20)
	if err := collective.AllReduce(ctx, c, grad, grad, collective.Avg); err != nil {
		panic(err)
	}
}

// Without a launcher, each process names its rank, the world size and
// where rank 0 serves the rendezvous store.
func ExampleNew() {
	ctx := context.Background()
	rank := 1 // this process's, for example from a flag
	c, err := collective.New(ctx, collective.WithRank(rank, 4), collective.WithMaster("node0:29500"))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fmt.Println("rank", c.Rank(), "of", c.Size())
}

// NewLocal makes every rank of a job in this process: each Comm is one
// rank, to be driven from its own goroutine.
func ExampleNewLocal() {
	ctx := context.Background()
	comms, err := collective.NewLocal(ctx, 2)
	if err != nil {
		panic(err)
	}
	for _, c := range comms {
		fmt.Println("rank", c.Rank(), "of", c.Size(), "reaches rank", 1-c.Rank(), "over", c.Transport(1-c.Rank()))
		defer c.Close()
	}
	// Output:
	// rank 0 of 2 reaches rank 1 over loop
	// rank 1 of 2 reaches rank 0 over loop
}

// Four ranks sum a vector in place.
func ExampleAllReduce() {
	ctx := context.Background()
	sums := make([][]float32, 4)
	onLocalRanks(4, func(c *collective.Comm) error {
		buf := []float32{float32(c.Rank()), 1}
		sums[c.Rank()] = buf
		return collective.AllReduce(ctx, c, buf, buf, collective.Sum) // in place
	})
	fmt.Println(sums[0], sums[3])
	// Output: [6 4] [6 4]
}

// Every rank contributes one block; every rank gets all of them in rank
// order.
func ExampleAllGather() {
	ctx := context.Background()
	got := make([][]int32, 3)
	onLocalRanks(3, func(c *collective.Comm) error {
		got[c.Rank()] = make([]int32, 2*c.Size())
		mine := []int32{int32(10 * c.Rank()), int32(10*c.Rank() + 1)}
		return collective.AllGather(ctx, c, mine, got[c.Rank()])
	})
	fmt.Println(got[1])
	// Output: [0 1 10 11 20 21]
}

// Root 1's send lands in every rank's recv. Other ranks' send is not read;
// passing one slice twice broadcasts in place.
func ExampleBroadcast() {
	ctx := context.Background()
	got := make([][]int32, 3)
	onLocalRanks(3, func(c *collective.Comm) error {
		send := []int32{int32(100 * c.Rank()), 7}
		got[c.Rank()] = make([]int32, 2)
		return collective.Broadcast(ctx, c, send, got[c.Rank()], 1)
	})
	fmt.Println(got)
	// Output: [[100 7] [100 7] [100 7]]
}

// An async call returns once it is queued; the caller does other work and
// waits for it later. Here two all-reduces are in flight at once.
func ExampleAllReduceAsync() {
	ctx := context.Background()
	sums := make([][2]float64, 2)
	onLocalRanks(2, func(c *collective.Comm) error {
		a, b := []float64{1}, []float64{float64(c.Rank())}
		ha, err := collective.AllReduceAsync(ctx, c, a, a, collective.Sum)
		if err != nil {
			return err
		}
		hb, err := collective.AllReduceAsync(ctx, c, b, b, collective.Max)
		if err != nil {
			return err
		}
		// ... compute something else while they run ...
		if err := errors.Join(ha.Wait(ctx), hb.Wait(ctx)); err != nil {
			return err
		}
		sums[c.Rank()] = [2]float64{a[0], b[0]}
		return nil
	})
	fmt.Println(sums)
	// Output: [[2 1] [2 1]]
}

// The method forms take Buffers, which also carry raw bytes with their
// element type (and device memory, see DeviceBuf).
func ExampleComm_AllReduceAsync() {
	ctx := context.Background()
	out := make([][]int64, 2)
	onLocalRanks(2, func(c *collective.Comm) error {
		out[c.Rank()] = []int64{int64(c.Rank() + 1), 10}
		buf := collective.Buf(out[c.Rank()])
		h, err := c.AllReduceAsync(ctx, buf, buf, collective.Prod)
		if err != nil {
			return err
		}
		return h.Wait(ctx)
	})
	fmt.Println(out[0])
	// Output: [2 100]
}

// Split groups ranks by color; key orders them in the new communicator.
func ExampleComm_Split() {
	ctx := context.Background()
	lines := make([]string, 4)
	onLocalRanks(4, func(c *collective.Comm) error {
		half, err := c.Split(ctx, c.Rank()%2, c.Rank()) // even and odd ranks
		if err != nil {
			return err
		}
		defer half.Close()
		buf := []int64{int64(c.Rank())}
		if err := collective.AllReduce(ctx, half, buf, buf, collective.Sum); err != nil {
			return err
		}
		lines[c.Rank()] = fmt.Sprintf("rank %d is rank %d of %d, sum %d", c.Rank(), half.Rank(), half.Size(), buf[0])
		return nil
	})
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// rank 0 is rank 0 of 2, sum 2
	// rank 1 is rank 0 of 2, sum 4
	// rank 2 is rank 1 of 2, sum 2
	// rank 3 is rank 1 of 2, sum 4
}

// quietLoop is a backend of the program's own: transport/loop's links
// under another name, with capabilities that tell the communicator not to
// spin on its Poll.
type quietLoop struct{ loop.Backend }

func (quietLoop) Name() string { return "quiet-loop" }

func (quietLoop) Capabilities() transport.Capabilities {
	return transport.Capabilities{Reach: transport.ReachProcess}
}

// WithBackend carries every link over a transport.Backend of the caller's.
func ExampleWithBackend() {
	ctx := context.Background()
	sums := make([][]float32, 2)
	over := make([]string, 2)
	onLocalRanks(2, func(c *collective.Comm) error {
		over[c.Rank()] = c.Transport(1 - c.Rank())
		sums[c.Rank()] = []float32{1.5}
		return collective.AllReduce(ctx, c, sums[c.Rank()], sums[c.Rank()], collective.Sum)
	}, collective.WithBackend(quietLoop{}))
	fmt.Println("over", over[0], "the sum is", sums[0][0])
	// Output: over quiet-loop the sum is 3
}

// Ranks that call different collectives at the same point all fail that
// call with a MismatchError, which names every rank's call.
func ExampleMismatchError() {
	ctx := context.Background()
	errs := onLocalRanks(2, func(c *collective.Comm) error {
		buf := make([]float32, 4+4*c.Rank()) // rank 1 passes more
		return collective.AllReduce(ctx, c, buf, buf, collective.Sum)
	})
	var mm *collective.MismatchError
	if errors.Is(errs[1], collective.ErrMismatch) && errors.As(errs[1], &mm) {
		for r, call := range mm.Calls {
			fmt.Printf("rank %d called %s\n", r, call)
		}
	}
	// Output:
	// rank 0 called allreduce(count=4, float32, sum, algo=rd) at seq 1
	// rank 1 called allreduce(count=8, float32, sum, algo=rd) at seq 1
}

// When one rank's call breaks the communicator (here: rank 1 waits for a
// message nobody sends and gives up), the others' calls fail at once with a
// *PeerFailedError naming it, instead of waiting out their own deadlines.
func ExamplePeerFailedError() {
	ctx := context.Background()
	errs := onLocalRanks(2, func(c *collective.Comm) error {
		buf := []float32{0}
		if c.Rank() == 1 {
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			return collective.Recv(short, c, buf, 0)
		}
		long, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return collective.Recv(long, c, buf, 1) // would wait a minute
	})
	var pf *collective.PeerFailedError
	if errors.As(errs[0], &pf) {
		fmt.Println("rank 0's call failed because rank", pf.Rank, "failed")
	}
	fmt.Println("rank 0's error carries rank 1's cause:", errors.Is(errs[0], context.DeadlineExceeded))
	fmt.Println("rank 1's own error is its deadline:", errors.Is(errs[1], context.DeadlineExceeded))
	// Output:
	// rank 0's call failed because rank 1 failed
	// rank 0's error carries rank 1's cause: true
	// rank 1's own error is its deadline: true
}

// A call on a closed communicator fails with ErrClosed; after Abort,
// calls fail with ErrAborted.
func ExampleErrClosed() {
	ctx := context.Background()
	comms, err := collective.NewLocal(ctx, 1)
	if err != nil {
		panic(err)
	}
	c := comms[0]
	c.Close()
	err = collective.AllReduce(ctx, c, []float32{1}, []float32{1}, collective.Sum)
	fmt.Println(errors.Is(err, collective.ErrClosed), err)
	// Output: true collective: communicator closed
}

// A program whose ranks share a host allocates the buffers it passes to
// large collectives with SharedSlice: peers then read them from a mapping
// of their own. They are ordinary slices otherwise.
func ExampleSharedSlice() {
	grads, err := collective.SharedSlice[float32](1 << 20)
	if err != nil {
		log.Fatal(err)
	}
	defer collective.FreeSharedSlice(grads)
	grads[0] = 1.5
	fmt.Println(len(grads), grads[0])
	// Output: 1048576 1.5
}
