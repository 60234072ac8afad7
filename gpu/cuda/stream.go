package cuda

import "unsafe"

// Stream is a CUstream; 0 is the legacy default stream.
type Stream uintptr

// Stream flags.
const (
	StreamDefault     = 0
	StreamNonBlocking = 1 // no implicit synchronisation with the legacy default stream
)

// NewStream creates a stream in the current context.
func NewStream(flags uint32) (Stream, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var s Stream
	err := check("cuStreamCreate", call(syms.cuStreamCreate, uintptr(unsafe.Pointer(&s)), uintptr(flags)))
	return s, err
}

// Destroy releases the stream once its work is done.
func (s Stream) Destroy() error {
	return check("cuStreamDestroy_v2", call(syms.cuStreamDestroy, uintptr(s)))
}

// Synchronize waits for the stream's work.
func (s Stream) Synchronize() error {
	if err := ready(); err != nil {
		return err
	}
	return check("cuStreamSynchronize", call(syms.cuStreamSynchronize, uintptr(s)))
}

// Query reports whether all work queued on s is done.
func (s Stream) Query() (bool, error) {
	r := Result(int32(call(syms.cuStreamQuery, uintptr(s))))
	switch r {
	case Success:
		return true, nil
	case ErrorNotReady:
		return false, nil
	}
	return false, &Error{Call: "cuStreamQuery", Code: r}
}

// WaitEvent makes later work on s wait until e's most recent record has
// completed. e may belong to another context (another GPU) of the process,
// or be an IPC event opened from another process.
func (s Stream) WaitEvent(e Event) error {
	return check("cuStreamWaitEvent", call(syms.cuStreamWaitEvent, uintptr(s), uintptr(e), 0))
}
