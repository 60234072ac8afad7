package collective_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vccl-go/vccl/collective"
)

// onEveryRank runs fn on every rank at once, as each process of a job would,
// and returns the ranks' errors.
func onEveryRank(comms []*collective.Comm, fn func(c *collective.Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(c)
		}()
	}
	wg.Wait()
	return errs
}

// Four ranks as goroutines sum a vector. In a real job every process calls
// collective.NewFromEnv instead and holds one *Comm.
func ExampleAllReduce() {
	ctx := context.Background()
	comms, err := collective.NewLocal(ctx, 4)
	if err != nil {
		panic(err)
	}
	sums := make([][]float32, len(comms))
	onEveryRank(comms, func(c *collective.Comm) error {
		defer c.Close()
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
	comms, err := collective.NewLocal(ctx, 3)
	if err != nil {
		panic(err)
	}
	got := make([][]int32, len(comms))
	onEveryRank(comms, func(c *collective.Comm) error {
		defer c.Close()
		got[c.Rank()] = make([]int32, 2*c.Size())
		mine := []int32{int32(10 * c.Rank()), int32(10*c.Rank() + 1)}
		return collective.AllGather(ctx, c, mine, got[c.Rank()])
	})
	fmt.Println(got[1])
	// Output: [0 1 10 11 20 21]
}

// Split groups ranks by color; key orders them in the new communicator.
func ExampleComm_Split() {
	ctx := context.Background()
	comms, err := collective.NewLocal(ctx, 4)
	if err != nil {
		panic(err)
	}
	lines := make([]string, len(comms))
	onEveryRank(comms, func(c *collective.Comm) error {
		defer c.Close()
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

// When one rank's call breaks the communicator (here: rank 1 waits for a
// message nobody sends and gives up), the others' calls fail at once with a
// *PeerFailedError naming it, instead of waiting out their own deadlines.
func ExamplePeerFailedError() {
	ctx := context.Background()
	comms, err := collective.NewLocal(ctx, 2)
	if err != nil {
		panic(err)
	}
	errs := onEveryRank(comms, func(c *collective.Comm) error {
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
	for _, c := range comms {
		c.Close()
	}
	// Output:
	// rank 0's call failed because rank 1 failed
	// rank 0's error carries rank 1's cause: true
	// rank 1's own error is its deadline: true
}
