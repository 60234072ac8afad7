//go:build linux

package fault

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
)

// TestLoopback runs a fault-tolerant communicator of three ranks in this
// process over loopback (both paths of every link on 127.0.0.1): the
// plumbing from VCCL_FAULT_TOLERANCE to transport/ft, with no root needed.
func TestLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	master := ln.Addr().String()
	ln.Close()
	const n = 3
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms := make([]*collective.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = collective.New(ctx, collective.WithRank(r, n), collective.WithMaster(master),
				collective.WithTransport("tcp"), collective.WithFaultTolerance(true), collective.WithSocketInterface(""),
				collective.WithToken("loopback"), collective.WithTimeout(30*time.Second))
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	for r, c := range comms {
		for p := range n {
			if p != r && c.Transport(p) != "ft" {
				t.Fatalf("rank %d reaches %d over %s", r, p, c.Transport(p))
			}
		}
	}
	cfg := workerConfig{Sizes: "mixed", Seed: 3}
	for i := range 60 {
		count := cfg.count(i)
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]float32, count)
				for j := range buf {
					buf[j] = value(i, r, j)
				}
				if err := collective.AllReduce(ctx, c, buf, buf, collective.Sum); err != nil {
					errs[r] = err
					return
				}
				for j := range buf {
					var want float32
					for q := range n {
						want += value(i, q, j)
					}
					if buf[j] != want {
						errs[r] = fmt.Errorf("iteration %d element %d: %v, want %v", i, j, buf[j], want)
						return
					}
				}
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
}
