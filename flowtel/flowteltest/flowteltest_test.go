package flowteltest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/flowtel/flowteltest"
)

const testDeadline = 20 * time.Second

func TestMemorySinkWaitDeadline(t *testing.T) {
	s := flowteltest.NewMemorySink()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Wait(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on an empty sink with a cancelled context = %v", err)
	}
	go func() { _ = s.Consume(context.Background(), []flowtel.Record{{}, {}}) }()
	recs, err := s.WaitTimeout(2, testDeadline)
	if err != nil || len(recs) != 2 {
		t.Fatalf("Wait = %d records, %v", len(recs), err)
	}
	s.Reset()
	if s.Len() != 0 {
		t.Fatalf("Len after Reset = %d", s.Len())
	}
}

func TestFakeClock(t *testing.T) {
	fc := flowteltest.NewFakeClock(10)
	clk := flowtel.NewClockFrom(fc, 100, 3)
	for _, step := range []struct {
		do   func()
		want int64
	}{
		{func() {}, 110},
		{func() { fc.Advance(time.Microsecond) }, 1110},
		{func() { fc.Set(0) }, 100},
	} {
		step.do()
		if got := clk.Now(); got != step.want {
			t.Fatalf("Now() = %d, want %d", got, step.want)
		}
	}
	if clk.ErrorNs() != 3 || clk.Offset() != 100 {
		t.Fatalf("offset %d err %d", clk.Offset(), clk.ErrorNs())
	}
}

// TestMemorySinkWaitWakes checks Wait is woken by Consume, not by polling:
// it waits for more records than exist, and a later Consume releases it.
func TestMemorySinkWaitWakes(t *testing.T) {
	s := flowteltest.NewMemorySink()
	_ = s.Consume(context.Background(), []flowtel.Record{{TsNs: 1}})
	got := make(chan int, 1)
	go func() {
		recs, err := s.WaitTimeout(3, testDeadline)
		if err != nil {
			t.Error(err)
		}
		got <- len(recs)
	}()
	_ = s.Consume(context.Background(), []flowtel.Record{{TsNs: 2}})
	_ = s.Consume(context.Background(), []flowtel.Record{{TsNs: 3}, {TsNs: 4}})
	select {
	case n := <-got:
		if n != 4 {
			t.Fatalf("Wait returned %d records, want 4", n)
		}
	case <-time.After(testDeadline):
		t.Fatal("Wait never returned")
	}
	if recs := s.Records(); recs[3].TsNs != 4 || s.Consumes() != 3 {
		t.Fatalf("records %v after %d consumes", recs, s.Consumes())
	}
}
