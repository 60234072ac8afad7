package cuda

import (
	"time"
	"unsafe"
)

// Event is a CUevent.
type Event uintptr

// Event flags.
const (
	EventDefault       = 0
	EventBlockingSync  = 1
	EventDisableTiming = 2 // cheaper; required for EventInterprocess
	EventInterprocess  = 4
)

// NewEvent creates an event in the current context.
func NewEvent(flags uint32) (Event, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var e Event
	err := check("cuEventCreate", call(syms.cuEventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags)))
	return e, err
}

// Destroy releases the event.
func (e Event) Destroy() error {
	return check("cuEventDestroy_v2", call(syms.cuEventDestroy, uintptr(e)))
}

// Record captures the work queued on s so far.
func (e Event) Record(s Stream) error {
	return check("cuEventRecord", call(syms.cuEventRecord, uintptr(e), uintptr(s)))
}

// Query reports whether the work the event captured is done.
func (e Event) Query() (bool, error) {
	r := Result(int32(call(syms.cuEventQuery, uintptr(e))))
	switch r {
	case Success:
		return true, nil
	case ErrorNotReady:
		return false, nil
	}
	return false, &Error{Call: "cuEventQuery", Code: r}
}

// Synchronize waits for the work the event captured.
func (e Event) Synchronize() error {
	return check("cuEventSynchronize", call(syms.cuEventSynchronize, uintptr(e)))
}

// Elapsed returns the time between two completed events (both created
// with timing), with the driver's resolution of about half a microsecond.
func Elapsed(start, end Event) (time.Duration, error) {
	var ms float32
	if err := check("cuEventElapsedTime", call(syms.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end))); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * 1e6), nil
}
