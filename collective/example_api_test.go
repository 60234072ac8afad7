package collective_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/loop"
)

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

// Root 1's send lands in every rank's recv. Other ranks' send is not read;
// passing one slice twice broadcasts in place.
func ExampleBroadcast() {
	ctx := context.Background()
	comms, err := collective.NewLocal(ctx, 3)
	if err != nil {
		panic(err)
	}
	got := make([][]int32, len(comms))
	onEveryRank(comms, func(c *collective.Comm) error {
		defer c.Close()
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
	comms, err := collective.NewLocal(ctx, 2)
	if err != nil {
		panic(err)
	}
	sums := make([][2]float64, len(comms))
	onEveryRank(comms, func(c *collective.Comm) error {
		defer c.Close()
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
	comms, err := collective.NewLocal(ctx, 2)
	if err != nil {
		panic(err)
	}
	out := make([][]int64, len(comms))
	onEveryRank(comms, func(c *collective.Comm) error {
		defer c.Close()
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
	comms, err := collective.NewLocal(ctx, 2, collective.WithBackend(quietLoop{}))
	if err != nil {
		panic(err)
	}
	sums := make([][]float32, len(comms))
	onEveryRank(comms, func(c *collective.Comm) error {
		defer c.Close()
		sums[c.Rank()] = []float32{1.5}
		return collective.AllReduce(ctx, c, sums[c.Rank()], sums[c.Rank()], collective.Sum)
	})
	fmt.Println("over", comms[0].Transport(1), "the sum is", sums[0][0])
	// Output: over quiet-loop the sum is 3
}

// Ranks that call different collectives at the same point all fail that
// call with a MismatchError, which names every rank's call.
func ExampleMismatchError() {
	ctx := context.Background()
	comms, err := collective.NewLocal(ctx, 2)
	if err != nil {
		panic(err)
	}
	errs := onEveryRank(comms, func(c *collective.Comm) error {
		defer c.Close()
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
