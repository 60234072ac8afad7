package collective

import (
	"context"
	"errors"
	"fmt"

	"github.com/vccl-go/vccl/transport"
)

// The kinds of failure a caller may act on. Errors that Comm methods
// return wrap them (or, for MismatchError and PeerFailedError, answer
// errors.Is for them), so errors.Is finds the kind through any context
// the library added. Transport failures wrap transport's own sentinels
// (transport.ErrPeerDead for a lost connection), and a call whose context
// ended wraps ctx.Err().
var (
	// ErrClosed: the communicator was closed (Close) before or while the
	// call ran.
	ErrClosed = errors.New("collective: communicator closed")
	// ErrAborted: the communicator was torn down by Abort.
	ErrAborted = errors.New("collective: communicator aborted")
	// ErrTimeout: the communicator's own deadline (WithTimeout,
	// VCCL_TIMEOUT) passed for a call whose context had none. It wraps
	// context.DeadlineExceeded, so a check for either finds it.
	ErrTimeout = fmt.Errorf("%w (VCCL_TIMEOUT)", context.DeadlineExceeded)
	// ErrMismatch: the ranks did not make the same call (see
	// MismatchError).
	ErrMismatch = errors.New("collective: ranks called different collectives")
)

// MismatchError reports ranks that made different calls at the same point
// of their sequence of collectives; every rank fails that call with it.
// errors.Is(err, ErrMismatch) holds for it.
type MismatchError struct {
	// Calls describes each rank's call, by rank, for example
	// "allreduce(count=4, float32, sum, algo=ring) at seq 3".
	Calls []string
}

func (e *MismatchError) Error() string {
	msg := ErrMismatch.Error() + ":"
	for r, c := range e.Calls {
		msg += fmt.Sprintf("\n  rank %d: %s", r, c)
	}
	return msg
}

// Is reports whether target is ErrMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// errorKinds are the sentinels whose identity crosses ranks: a failure
// travels to the other ranks as text (on the abort board), with a bit for
// each of these it is, and the rank that learns of it rebuilds a cause
// (remoteError) that errors.Is matches against the same ones. The order
// is the wire's: append only.
var errorKinds = []error{
	ErrClosed, ErrAborted, ErrTimeout, ErrMismatch,
	context.DeadlineExceeded, context.Canceled,
	transport.ErrPeerDead, transport.ErrClosed, transport.ErrTooLarge, transport.ErrBadToken,
	ErrNoDeviceEngine,
}

// kindsOf returns the bits of errorKinds that err is.
func kindsOf(err error) uint64 {
	var k uint64
	for i, s := range errorKinds {
		if errors.Is(err, s) {
			k |= 1 << i
		}
	}
	return k
}

// remoteError is another rank's error, rebuilt from its text and kinds.
type remoteError struct {
	msg   string
	kinds uint64
}

func (e *remoteError) Error() string { return e.msg }

// Is reports whether the error was, on its rank, target (one of
// errorKinds).
func (e *remoteError) Is(target error) bool {
	for i, s := range errorKinds {
		if e.kinds&(1<<i) != 0 && s == target {
			return true
		}
	}
	return false
}
