package transport

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestRendezvous(t *testing.T) {
	var r Rendezvous[int]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Values go out per key, oldest first.
	for _, o := range []struct {
		key string
		v   int
	}{{"a", 1}, {"b", 2}, {"a", 3}} {
		if err := r.Offer(o.key, o.v, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []struct {
		key string
		v   int
	}{{"a", 1}, {"a", 3}, {"b", 2}} {
		if v, err := r.Take(ctx, want.key, "here"); err != nil || v != want.v {
			t.Fatalf("Take(%q) = %d, %v; want %d", want.key, v, err, want.v)
		}
	}

	// A Take that comes first waits for its key's value.
	got := make(chan int)
	go func() {
		v, _ := r.Take(ctx, "late", "here")
		got <- v
	}()
	if err := r.Offer("late", 7, nil); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != 7 {
		t.Fatalf("waiting Take got %d, want 7", v)
	}

	// admit sees how many wait and may refuse.
	errFull := errors.New("full")
	admit := func(waiting int) error {
		if waiting >= 1 {
			return errFull
		}
		return nil
	}
	if err := r.Offer("x", 1, admit); err != nil {
		t.Fatalf("first admitted offer: %v", err)
	}
	if err := r.Offer("y", 2, admit); !errors.Is(err, errFull) {
		t.Fatalf("offer past the bound: %v, want the admit error", err)
	}

	// A Take past its context fails with ErrNotAccepted naming the key.
	short, cancelShort := context.WithTimeout(ctx, time.Millisecond)
	defer cancelShort()
	if _, err := r.Take(short, "nobody", "here"); !errors.Is(err, ErrNotAccepted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take with no offer: %v, want ErrNotAccepted and the deadline", err)
	}

	// Stop wakes waiters and refuses later offers; Drain returns what was
	// never taken.
	go func() {
		_, err := r.Take(ctx, "never", "here")
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Take across Stop: %v, want ErrClosed", err)
		}
		got <- 0
	}()
	r.Stop(ErrClosed)
	<-got
	if err := r.Offer("z", 3, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Offer after Stop: %v, want ErrClosed", err)
	}
	if left := r.Drain(); !slices.Equal(left, []int{1}) {
		t.Fatalf("Drain = %v, want the one value never taken", left)
	}
	if v, err := r.Take(ctx, "x", "here"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Take after Drain = %d, %v; want ErrClosed", v, err)
	}
}
