// Package cuda is the CUDA driver API, reached through
// github.com/ebitengine/purego: libcuda.so.1 is opened at run time and no cgo
// is involved, so a binary built with CGO_ENABLED=0 runs on a GPU machine and
// on one without a driver alike.
//
// # No driver
//
// Load (called by Init and by every entry point on first use) opens the
// driver once. Where there is none (no libcuda.so.1, another OS, or a driver
// that reports no device) every function returns an error for which
// errors.Is(err, ErrNoDriver) holds, and nothing else in the module is
// affected: only programs that ask for a GPU see the error.
//
// # Threads and contexts
//
// A CUDA context is current on an OS thread, not on a goroutine. A goroutine
// that calls the driver must therefore stay on one thread while it relies on
// a current context: call runtime.LockOSThread first, or use the helpers that
// do it for you. WithContext locks the calling goroutine, makes a context
// current, runs a function and undoes both; a Worker is a goroutine locked
// to its own thread with a context current for its whole life, running the
// functions submitted to it. Calls that take explicit handles (streams,
// events, device pointers) still expect the handle's context, or a context of
// the same process with peer access, to be current; gpu/ce drives each GPU
// from a proxy goroutine built on these helpers.
//
// # Costs
//
// A driver call goes through purego.SyscallN, no cgo; a kernel launch costs
// far more than a call (BENCHMARKS.md), which is why gpu/ce counts its
// launches and driver calls per operation. The binding
// allocates nothing per call on the hot paths (copies, event records and
// queries, launches through Args).
package cuda
