package capi

import (
	"context"
	"errors"
	"fmt"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// Result is an NCCL result code (ncclResult_t).
type Result int32

// The result codes, with NCCL's values.
const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
	NumResults         Result = 8
)

// String is the text ncclGetErrorString returns for r.
func (r Result) String() string {
	switch r {
	case Success:
		return "no error"
	case UnhandledCudaError:
		return "unhandled cuda error (run with VCCL_DEBUG=INFO for details)"
	case SystemError:
		return "unhandled system error (run with VCCL_DEBUG=INFO for details)"
	case InternalError:
		return "internal error - please report this issue to the VCCL developers"
	case InvalidArgument:
		return "invalid argument (run with VCCL_DEBUG=WARN for details)"
	case InvalidUsage:
		return "invalid usage (run with VCCL_DEBUG=WARN for details)"
	case RemoteError:
		return "remote process exited or there was a network error"
	case InProgress:
		return "NCCL operation in progress"
	}
	return "unknown result code"
}

// Error is a failed call: its result code and what went wrong.
type Error struct {
	Code Result
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(code Result, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// wrap gives err a result code (Code) unless it has one.
func wrap(code Result, msg string, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: code, Msg: msg, Err: err}
}

// Code returns the result code of err: Success for nil, the code of an
// *Error, and otherwise what the error is: no GPU or driver is an invalid
// usage, another driver failure an unhandled CUDA error, a peer gone or
// out of time a remote error.
func Code(err error) Result {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var pf *collective.PeerFailedError
	var ce *cuda.Error
	switch {
	case errors.Is(err, cuda.ErrNoDriver):
		return InvalidUsage
	case errors.As(err, &pf), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return RemoteError
	case errors.As(err, &ce):
		return UnhandledCudaError
	}
	return InternalError
}

// DataType is an NCCL datatype (ncclDataType_t).
type DataType int32

// The datatypes, with NCCL's values.
const (
	Int8       DataType = 0
	Uint8      DataType = 1
	Int32      DataType = 2
	Uint32     DataType = 3
	Int64      DataType = 4
	Uint64     DataType = 5
	Float16    DataType = 6
	Float32    DataType = 7
	Float64    DataType = 8
	BFloat16   DataType = 9
	Float8E4M3 DataType = 10
	Float8E5M2 DataType = 11
	NumTypes   DataType = 12
)

// dtypes maps the datatypes VCCL reduces to collective's.
var dtypes = map[DataType]collective.Datatype{
	Int8: collective.Int8, Uint8: collective.Uint8, Int32: collective.Int32, Uint32: collective.Uint32,
	Int64: collective.Int64, Uint64: collective.Uint64, Float16: collective.Float16, Float32: collective.Float32,
	Float64: collective.Float64, BFloat16: collective.BFloat16,
}

// Valid reports whether d is an NCCL datatype.
func (d DataType) Valid() bool { return d >= 0 && d < NumTypes }

// Size is the size of one element in bytes.
func (d DataType) Size() int {
	switch d {
	case Int8, Uint8, Float8E4M3, Float8E5M2:
		return 1
	case Float16, BFloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	}
	return 8
}

// elements returns the collective datatype of d for a call: d's own where
// VCCL reduces it, bytes for the 8-bit floats (which move but do not
// reduce).
func (d DataType) elements(reduces bool) (collective.Datatype, error) {
	if dt, ok := dtypes[d]; ok {
		return dt, nil
	}
	if !d.Valid() {
		return 0, errorf(InvalidArgument, "invalid datatype %d", d)
	}
	if reduces {
		return 0, errorf(InvalidUsage, "reductions of 8-bit floats (datatype %d) are not supported", d)
	}
	return collective.Uint8, nil
}

// RedOp is an NCCL reduction (ncclRedOp_t); values from NumOps up are
// pre-multiplied sums a communicator created.
type RedOp int32

// The built-in reductions, with NCCL's values.
const (
	Sum    RedOp = 0
	Prod   RedOp = 1
	Max    RedOp = 2
	Min    RedOp = 3
	Avg    RedOp = 4
	NumOps RedOp = 5
)

var redops = map[RedOp]collective.ReduceOp{Sum: collective.Sum, Prod: collective.Prod, Max: collective.Max, Min: collective.Min, Avg: collective.Avg}

// ScalarResidence says where a pre-multiplied sum's scalar lives
// (ncclScalarResidence_t).
type ScalarResidence int32

// The residences, with NCCL's values.
const (
	ScalarDevice        ScalarResidence = 0 // device memory, read when the operation runs
	ScalarHostImmediate ScalarResidence = 1 // host memory, read when the op is created
)

// Version is the NCCL version this library implements the API of
// (ncclGetVersion; NCCL_VERSION_CODE in include/nccl.h).
const (
	VersionMajor = 2
	VersionMinor = 21
	VersionPatch = 5
	VersionCode  = VersionMajor*10000 + VersionMinor*100 + VersionPatch
)

// SplitNoColor is the color of ranks that join no communicator in Split
// (NCCL_SPLIT_NOCOLOR).
const SplitNoColor = -1
