package transport

import (
	"context"
	"fmt"
	"sync"
)

// Rendezvous is where a listener meets its Accept calls: values (the
// Acceptor's connections, the loop backend's links) arrive under a key and
// go, oldest first, to the Accept that asks for that key; an Accept that
// comes first waits for one. Its zero value is ready.
type Rendezvous[T any] struct {
	mu      sync.Mutex
	arrived map[string][]T
	n       int // values arrived and not taken
	waiters map[string]chan struct{}
	err     error // set by Stop
}

// Offer queues v under key and wakes the Accept waiting for it. admit, when
// not nil, runs first under the lock with the number of values not yet
// taken, and its error refuses v (a bound, a key seen before; its last
// word to the peer, written under the lock, then goes out before any
// Accept returns v). After Stop, Offer refuses with Stop's error.
func (r *Rendezvous[T]) Offer(key string, v T, admit func(waiting int) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	if admit != nil {
		if err := admit(r.n); err != nil {
			return err
		}
	}
	if r.arrived == nil {
		r.arrived = map[string][]T{}
	}
	r.arrived[key] = append(r.arrived[key], v)
	r.n++
	if w, ok := r.waiters[key]; ok {
		close(w)
		delete(r.waiters, key)
	}
	return nil
}

// Take returns the oldest value offered under key, waiting within ctx; it
// fails with ErrNotAccepted (naming addr, the listener's) when ctx ends
// first, and with Stop's error once nothing is left under key after Stop.
func (r *Rendezvous[T]) Take(ctx context.Context, key, addr string) (T, error) {
	var zero T
	for {
		r.mu.Lock()
		if q := r.arrived[key]; len(q) > 0 {
			v := q[0]
			if len(q) == 1 {
				delete(r.arrived, key)
			} else {
				r.arrived[key] = q[1:]
			}
			r.n--
			r.mu.Unlock()
			return v, nil
		}
		if r.err != nil {
			err := r.err
			r.mu.Unlock()
			return zero, err
		}
		w, ok := r.waiters[key]
		if !ok {
			if r.waiters == nil {
				r.waiters = map[string]chan struct{}{}
			}
			w = make(chan struct{})
			r.waiters[key] = w
		}
		r.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return zero, fmt.Errorf("%w %q on %s: %w", ErrNotAccepted, key, addr, ctx.Err())
		}
	}
}

// Stop refuses every later Offer with err, and every Take that finds
// nothing under its key, waking those that wait; the first err sticks.
func (r *Rendezvous[T]) Stop(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
	for _, w := range r.waiters {
		close(w)
	}
	r.waiters = nil
}

// Drain removes and returns every value not taken, for the listener to
// close.
func (r *Rendezvous[T]) Drain() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []T
	for _, q := range r.arrived {
		out = append(out, q...)
	}
	r.arrived, r.n = nil, 0
	return out
}
