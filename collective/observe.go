package collective

import "context"

// CallObserver learns of a call as the communicator numbers it, on the
// caller's goroutine and before the call starts: the caller's context,
// the communicator's id and this rank's (Record.Comm and Record.Rank of the
// call's records) and the call's sequence number (Record.CollSeq). An
// exporter that builds spans from the records after the fact takes the
// caller's span from ctx here, so that the collective's span can be its
// child, without the comm library knowing of any tracing API. It runs on
// the call's path, under the communicator's lock: it must be quick and must
// not call into the communicator.
type CallObserver func(ctx context.Context, comm uint32, rank int, seq uint64)

// ObserveCalls adds an observer of the communicator's calls and of those
// of its Split children, made before or after (they record into its
// collector). A telemetry attacher (RegisterTelemetry) adds it before the
// first call; one added later sees the calls numbered after it.
func (c *Comm) ObserveCalls(f CallObserver) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var fs []CallObserver
	if p := c.observers.Load(); p != nil {
		fs = append(fs, *p...)
	}
	fs = append(fs, f)
	c.observers.Store(&fs)
}

// observeCall tells the observers of c and of the communicators it was
// split from of the call seq.
func (c *Comm) observeCall(ctx context.Context, seq uint64) {
	for x := c; x != nil; x = x.splitFrom {
		if p := x.observers.Load(); p != nil {
			for _, f := range *p {
				f(ctx, c.id, c.rank, seq)
			}
		}
	}
}
