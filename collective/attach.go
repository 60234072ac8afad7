package collective

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// TelemetryAttacher connects exporters to a communicator's telemetry: it
// adds its sinks to c.Collector() and starts what serves them. Every
// communicator made with telemetry on by New, NewFromEnv or NewLocal (each
// rank) runs every registered attacher once, after it is set up (rank,
// size, UID, ID, Clock and Store are valid) and before a collector of its
// own starts draining, so the sinks see every record; the records wait in
// the rings meanwhile. A collector given with WithCollector is the
// program's to start. A child of Split runs none: it records into its
// parent's collector, whose exporters see its records already. ctx is
// New's: it bounds the attaching and may end when New returns, so what the
// exporters do in the background must not depend on it. An error fails New
// (naming the attacher) and aborts the communicator.
//
// detach, if not nil, runs once in Close or Abort (also when the attacher
// returned an error with it): after the communicator's own collector has
// shut down (which has delivered the last records and shut the sinks down:
// Arrow files finished, spans sent) and before the rendezvous store closes;
// a collector given with WithCollector is the program's to shut down, after
// Close. The ranks of NewLocal run their attachers concurrently, so an
// attacher must be safe for concurrent use.
type TelemetryAttacher func(ctx context.Context, c *Comm) (detach func(context.Context) error, err error)

var (
	attachersMu sync.RWMutex
	attachers   = map[string]TelemetryAttacher{}
)

// RegisterTelemetry makes a telemetry attacher available under name: every
// communicator made with telemetry on afterwards runs it (unless made with
// WithTelemetryAttachers(false)), in the order of the names. It is meant
// for a package's init, as database/sql drivers register themselves, so
// that a blank import of the package (github.com/vccl-go/vccl/telemetry)
// turns its exporters on. It panics if a is nil or name is taken.
func RegisterTelemetry(name string, a TelemetryAttacher) {
	attachersMu.Lock()
	defer attachersMu.Unlock()
	if a == nil {
		panic("collective: RegisterTelemetry of a nil attacher for " + name)
	}
	if _, dup := attachers[name]; dup {
		panic("collective: RegisterTelemetry called twice for " + name)
	}
	attachers[name] = a
}

// TelemetryAttachers returns the names of the registered attachers, sorted.
func TelemetryAttachers() []string {
	attachersMu.RLock()
	defer attachersMu.RUnlock()
	names := make([]string, 0, len(attachers))
	for name := range attachers {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// namedDetach is a detach func with the attacher's name, for its errors.
type namedDetach struct {
	name string
	fn   func(context.Context) error
}

// startTelemetry runs the registered attachers on a communicator just set
// up, then starts its own collector. With telemetry off it does nothing. On
// an attacher's error the communicator is aborted (the detach funcs of the
// attachers already run run then), after the other ranks have learned the
// error (failSetup), and the error names the attacher.
func (c *Comm) startTelemetry(ctx context.Context) error {
	if c.collector == nil {
		return nil
	}
	if c.opts.attach {
		attachersMu.RLock()
		names := make([]string, 0, len(attachers))
		for name := range attachers {
			names = append(names, name)
		}
		slices.Sort(names)
		run := make([]TelemetryAttacher, len(names))
		for i, name := range names {
			run[i] = attachers[name]
		}
		attachersMu.RUnlock()
		for i, a := range run {
			detach, err := a(ctx, c)
			if detach != nil {
				c.mu.Lock()
				c.detach = append(c.detach, namedDetach{names[i], detach})
				c.mu.Unlock()
			}
			if err != nil {
				err = fmt.Errorf("collective: rank %d: telemetry attacher %q: %w", c.rank, names[i], err)
				return c.failSetup(ctx, err)
			}
		}
	}
	if c.ownCollector {
		c.collector.Start()
	}
	return nil
}

// detachTelemetry runs the attachers' detach funcs once, last attached
// first.
func (c *Comm) detachTelemetry(ctx context.Context) error {
	c.mu.Lock()
	ds := c.detach
	c.detach = nil
	c.mu.Unlock()
	var errs []error
	for i := len(ds) - 1; i >= 0; i-- {
		if err := ds[i].fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("collective: rank %d: detaching telemetry %q: %w", c.rank, ds[i].name, err))
		}
	}
	return errors.Join(errs...)
}
