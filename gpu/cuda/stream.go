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

// Stream memory operations: a stream writes a 32-bit flag into device
// memory (its own GPU's, or a peer's mapped through IPC) after its earlier
// work, or waits until a flag there reaches a value. Two GPUs synchronise
// through flags in each other's memory this way with no host in the loop
// and no SM.
const (
	// WaitValueGEQ waits until (int32)(*addr - value) >= 0: a cyclic
	// comparison, so sequence numbers may wrap.
	WaitValueGEQ = 0x0
	WaitValueEQ  = 0x1
)

// HasStreamMemOps reports whether the driver exports the stream memory
// operations.
func HasStreamMemOps() bool {
	return ready() == nil && syms.cuStreamWriteValue32 != 0 && syms.cuStreamWaitValue32 != 0
}

// WriteValue32 queues on s a write of v to addr, made visible after the
// stream's earlier work (a memory barrier precedes it).
func (s Stream) WriteValue32(addr DevicePtr, v uint32) error {
	if syms.cuStreamWriteValue32 == 0 {
		return &Error{Call: "cuStreamWriteValue32", Code: ErrorNotSupported}
	}
	return check("cuStreamWriteValue32", call(syms.cuStreamWriteValue32, uintptr(s), uintptr(addr), uintptr(v), 0))
}

// WaitValue32 makes later work on s wait until the 32-bit value at addr
// satisfies flags (WaitValueGEQ, WaitValueEQ) against v.
func (s Stream) WaitValue32(addr DevicePtr, v uint32, flags uint32) error {
	if syms.cuStreamWaitValue32 == 0 {
		return &Error{Call: "cuStreamWaitValue32", Code: ErrorNotSupported}
	}
	return check("cuStreamWaitValue32", call(syms.cuStreamWaitValue32, uintptr(s), uintptr(addr), uintptr(v), uintptr(flags)))
}
