// Package fault is the fault-tolerance harness: jobs of three ranks, each in
// its own network namespace with a primary rail (nic0), a backup rail (nic1)
// and a bootstrap rail, run loops of all-reduces while links go down and up,
// rails are rate limited and ranks are killed, and every result is checked
// element by element. It is the end-to-end check of transport/ft and of a
// failure reaching every rank; docs/fault-tolerance.md tables what it
// measures. It needs root (network namespaces) and skips without it;
// VCCL_FAULT_FULL=1 runs the full acceptance counts (make fault-full); the
// default is what CI runs.
package fault
