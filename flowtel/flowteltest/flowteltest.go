// Package flowteltest provides test helpers for code that produces or
// consumes flowtel records: an in-memory Sink and a fake clock.
package flowteltest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// MemorySink is a flowtel.Sink that keeps every record it is given, in order.
// It is safe for concurrent use. The zero value is ready to use.
type MemorySink struct {
	mu       sync.Mutex
	recs     []flowtel.Record
	changed  chan struct{} // closed and replaced whenever recs grows or Reset runs
	shutdown int
	consumes int
}

var _ flowtel.Sink = (*MemorySink)(nil)

// NewMemorySink returns an empty MemorySink.
func NewMemorySink() *MemorySink { return &MemorySink{} }

// Consume appends a copy of recs.
func (m *MemorySink) Consume(_ context.Context, recs []flowtel.Record) error {
	m.mu.Lock()
	m.recs = append(m.recs, recs...)
	m.consumes++
	m.notifyLocked()
	m.mu.Unlock()
	return nil
}

// Shutdown records that it was called.
func (m *MemorySink) Shutdown(context.Context) error {
	m.mu.Lock()
	m.shutdown++
	m.notifyLocked()
	m.mu.Unlock()
	return nil
}

func (m *MemorySink) notifyLocked() {
	if m.changed != nil {
		close(m.changed)
		m.changed = nil
	}
}

// Records returns a copy of the records consumed so far.
func (m *MemorySink) Records() []flowtel.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]flowtel.Record(nil), m.recs...)
}

// Len returns how many records were consumed so far.
func (m *MemorySink) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.recs)
}

// Consumes returns how many times Consume was called.
func (m *MemorySink) Consumes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.consumes
}

// ShutdownCalls returns how many times Shutdown was called.
func (m *MemorySink) ShutdownCalls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shutdown
}

// Reset forgets the records consumed so far (and the call counts).
func (m *MemorySink) Reset() {
	m.mu.Lock()
	m.recs = nil
	m.consumes = 0
	m.shutdown = 0
	m.notifyLocked()
	m.mu.Unlock()
}

// Wait blocks until the sink holds at least n records, then returns a copy of
// them; it returns an error, with the records consumed so far, when ctx ends
// first. It waits on a channel, never by polling.
func (m *MemorySink) Wait(ctx context.Context, n int) ([]flowtel.Record, error) {
	for {
		m.mu.Lock()
		if len(m.recs) >= n {
			recs := append([]flowtel.Record(nil), m.recs...)
			m.mu.Unlock()
			return recs, nil
		}
		if m.changed == nil {
			m.changed = make(chan struct{})
		}
		ch := m.changed
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			recs := m.Records()
			return recs, fmt.Errorf("flowteltest: waiting for %d records, have %d: %w", n, len(recs), ctx.Err())
		}
	}
}

// WaitTimeout is Wait with a deadline d from now.
func (m *MemorySink) WaitTimeout(n int, d time.Duration) ([]flowtel.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return m.Wait(ctx, n)
}

// FakeClock is a settable time source. Its Clock method gives a *flowtel.Clock
// reading it, to pass wherever a clock is needed (flowtel.WithClock,
// flowtel.NewRecorder, flowtel.WithWindowClock). It is safe for concurrent use
// and only moves when told to.
type FakeClock struct {
	ns atomic.Int64
}

var _ flowtel.TimeSource = (*FakeClock)(nil)

// NewFakeClock returns a fake clock reading startNs.
func NewFakeClock(startNs int64) *FakeClock {
	f := &FakeClock{}
	f.ns.Store(startNs)
	return f
}

// Nanotime returns the fake time in nanoseconds (flowtel.TimeSource).
func (f *FakeClock) Nanotime() int64 { return f.ns.Load() }

// Now is Nanotime.
func (f *FakeClock) Now() int64 { return f.ns.Load() }

// Set sets the fake time to ns.
func (f *FakeClock) Set(ns int64) { f.ns.Store(ns) }

// Advance moves the fake time forward by d and returns the new time.
func (f *FakeClock) Advance(d time.Duration) int64 { return f.ns.Add(int64(d)) }

// Clock returns a flowtel clock reading f with a zero offset.
func (f *FakeClock) Clock() *flowtel.Clock { return flowtel.NewClockFrom(f, 0, 0) }
