package cuda

import (
	"errors"
	"fmt"
)

// ErrNoDriver is returned (wrapped) by every entry point when no CUDA driver
// can be used: libcuda.so.1 is missing, the platform has no purego support,
// or cuInit fails (no device, a driver too old for a symbol the binding needs).
var ErrNoDriver = errors.New("cuda: no usable CUDA driver")

// Result is a CUresult, the status every driver call returns.
type Result int32

// Results the binding checks for by value.
const (
	Success                     Result = 0
	ErrorInvalidValue           Result = 1
	ErrorOutOfMemory            Result = 2
	ErrorNotInitialized         Result = 3
	ErrorNoDevice               Result = 100
	ErrorInvalidContext         Result = 201
	ErrorNotReady               Result = 600
	ErrorPeerAccessAlreadyOn    Result = 704
	ErrorPeerAccessNotEnabled   Result = 705
	ErrorPeerAccessUnsupported  Result = 217
	ErrorAlreadyMapped          Result = 208
	ErrorInvalidPTX             Result = 218
	ErrorNotSupported           Result = 801
	ErrorInvalidHandle          Result = 400
	ErrorIllegalAddress         Result = 700
	ErrorLaunchFailed           Result = 719
	ErrorUnsupportedPTXVersion  Result = 222
	ErrorJITCompilerNotFound    Result = 221
	ErrorSharedObjectInitFailed Result = 303
)

// Error is a failed driver call.
type Error struct {
	Call string // the driver function, e.g. "cuMemAlloc_v2"
	Code Result
	Log  string // extra detail (the JIT error log of a module load)
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, resultName(e.Code), int32(e.Code), resultString(e.Code))
	if e.Log != "" {
		s += "\n" + e.Log
	}
	return s
}

// Is makes errors.Is(err, ErrNoDriver) true for results that mean the
// driver cannot be used at all.
func (e *Error) Is(target error) bool {
	return target == ErrNoDriver && (e.Code == ErrorNoDevice || e.Code == ErrorNotInitialized && e.Call == "cuInit")
}

// IsResult reports whether err is a driver error with the given result.
func IsResult(err error, r Result) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == r
}

func check(call string, r uintptr) error {
	if Result(int32(r)) == Success {
		return nil
	}
	return &Error{Call: call, Code: Result(int32(r))}
}
