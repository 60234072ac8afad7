//go:build cgo

package main

/*
#cgo CFLAGS: -I${SRCDIR}/include -DVCCL_NO_CUDA_HEADERS
#define VCCL_CONST
#include "nccl.h"
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"math"
	"runtime/debug"
	"sync"
	"unsafe"

	"github.com/vccl-go/vccl/capi"
	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// Handles: an ncclComm_t is a small C allocation, unique while the
// communicator lives, that maps to its *capi.Comm.
var handles struct {
	sync.RWMutex
	m map[uintptr]*capi.Comm
}

func newHandle(c *capi.Comm) C.ncclComm_t {
	h := C.malloc(16)
	handles.Lock()
	if handles.m == nil {
		handles.m = map[uintptr]*capi.Comm{}
	}
	handles.m[uintptr(h)] = c
	handles.Unlock()
	return C.ncclComm_t(h)
}

func dropHandle(h C.ncclComm_t) {
	handles.Lock()
	delete(handles.m, uintptr(unsafe.Pointer(h)))
	handles.Unlock()
	C.free(unsafe.Pointer(h))
}

func commOf(h C.ncclComm_t) (*capi.Comm, error) {
	if h == nil {
		return nil, &capi.Error{Code: capi.InvalidArgument, Msg: "null communicator"}
	}
	handles.RLock()
	c := handles.m[uintptr(unsafe.Pointer(h))]
	handles.RUnlock()
	if c == nil {
		return nil, &capi.Error{Code: capi.InvalidArgument, Msg: fmt.Sprintf("%p is not a communicator (destroyed?)", h)}
	}
	return c, nil
}

func thread() *capi.Thread { return capi.ThreadOf(gettid()) }

// result turns an error into the result code the C caller gets, records
// it as the thread's last error and logs it (VCCL_DEBUG=WARN).
func result(call string, dev int, err error) C.ncclResult_t {
	if err == nil {
		return C.ncclSuccess
	}
	code := capi.Code(err)
	if code != capi.InProgress {
		err = fmt.Errorf("%s: %w", call, err)
		thread().SetLast(err)
		capi.Warn(dev, "%v", err)
	}
	return C.ncclResult_t(code)
}

func invalid(format string, args ...any) error {
	return &capi.Error{Code: capi.InvalidArgument, Msg: fmt.Sprintf(format, args...)}
}

func unsupported(call string) error {
	return &capi.Error{Code: capi.InvalidUsage, Msg: call + " is not supported by VCCL (docs/nccl-abi.md)"}
}

// guard keeps a Go panic from crashing the host program: the call returns
// ncclInternalError with the panic as its last error.
func guard(call string, res *C.ncclResult_t) {
	if p := recover(); p != nil {
		*res = result(call, -1, &capi.Error{Code: capi.InternalError, Msg: fmt.Sprintf("panic: %v\n%s", p, debug.Stack())})
	}
}

func count(n C.size_t) (int, error) {
	if uint64(n) > math.MaxInt64/16 {
		return 0, invalid("count %d", uint64(n))
	}
	return int(n), nil
}

//export ncclGetVersion
func ncclGetVersion(version *C.int) (res C.ncclResult_t) {
	defer guard("ncclGetVersion", &res)
	if version == nil {
		return result("ncclGetVersion", -1, invalid("null pointer"))
	}
	*version = C.int(capi.VersionCode)
	return C.ncclSuccess
}

//export ncclGetUniqueId
func ncclGetUniqueId(uniqueId *C.ncclUniqueId) (res C.ncclResult_t) {
	defer guard("ncclGetUniqueId", &res)
	if uniqueId == nil {
		return result("ncclGetUniqueId", -1, invalid("null pointer"))
	}
	id, err := capi.GetUniqueID()
	if err != nil {
		return result("ncclGetUniqueId", -1, err)
	}
	*(*capi.UniqueID)(unsafe.Pointer(uniqueId)) = id
	return C.ncclSuccess
}

// errText are ncclGetErrorString's answers, made once.
var errText = func() []*C.char {
	out := make([]*C.char, capi.NumResults+1)
	for r := capi.Success; r <= capi.NumResults; r++ {
		out[r] = C.CString(r.String())
	}
	return out
}()

//export ncclGetErrorString
func ncclGetErrorString(r C.ncclResult_t) *C.char {
	if uint(r) >= uint(len(errText)-1) { // also what C passed as negative
		return errText[capi.NumResults]
	}
	return errText[r]
}

// lastText holds each thread's last error as a C string, valid until the
// thread's next failure.
var lastText struct {
	sync.Mutex
	m map[int]*C.char
	s map[int]string
}

//export ncclGetLastError
func ncclGetLastError(comm C.ncclComm_t) *C.char {
	tid := gettid()
	msg := capi.ThreadOf(tid).Last()
	lastText.Lock()
	defer lastText.Unlock()
	if lastText.m == nil {
		lastText.m, lastText.s = map[int]*C.char{}, map[int]string{}
	}
	if p, ok := lastText.m[tid]; ok && lastText.s[tid] == msg {
		return p
	}
	if p, ok := lastText.m[tid]; ok {
		C.free(unsafe.Pointer(p))
	}
	p := C.CString(msg)
	lastText.m[tid], lastText.s[tid] = p, msg
	return p
}

func initRank(call string, comm *C.ncclComm_t, nranks C.int, id capi.UniqueID, rank C.int, config *C.ncclConfig_t) C.ncclResult_t {
	if comm == nil {
		return result(call, -1, invalid("null communicator pointer"))
	}
	*comm = nil
	if config != nil && config.magic != 0xcafebeef {
		return result(call, -1, invalid("config was not set up with NCCL_CONFIG_INITIALIZER"))
	}
	dev, err := capi.CurrentDevice()
	if err != nil {
		return result(call, -1, err)
	}
	c, err := capi.Pending(int(nranks), id, int(rank), dev)
	if err != nil {
		return result(call, dev, err)
	}
	h := newHandle(c)
	if t := thread(); t.InGroup() {
		t.DeferInit(c, id)
		*comm = h
		return C.ncclSuccess
	}
	if err := c.Init(id); err != nil {
		dropHandle(h)
		return result(call, dev, err)
	}
	*comm = h
	return C.ncclSuccess
}

//export ncclCommInitRank
func ncclCommInitRank(comm *C.ncclComm_t, nranks C.int, commId C.ncclUniqueId, rank C.int) (res C.ncclResult_t) {
	defer guard("ncclCommInitRank", &res)
	return initRank("ncclCommInitRank", comm, nranks, *(*capi.UniqueID)(unsafe.Pointer(&commId)), rank, nil)
}

//export ncclCommInitRankConfig
func ncclCommInitRankConfig(comm *C.ncclComm_t, nranks C.int, commId C.ncclUniqueId, rank C.int, config *C.ncclConfig_t) (res C.ncclResult_t) {
	defer guard("ncclCommInitRankConfig", &res)
	return initRank("ncclCommInitRankConfig", comm, nranks, *(*capi.UniqueID)(unsafe.Pointer(&commId)), rank, config)
}

//export ncclCommInitRankScalable
func ncclCommInitRankScalable(newcomm *C.ncclComm_t, nranks C.int, myrank C.int, nId C.int, commIds *C.ncclUniqueId, config *C.ncclConfig_t) (res C.ncclResult_t) {
	defer guard("ncclCommInitRankScalable", &res)
	if nId < 1 || commIds == nil {
		return result("ncclCommInitRankScalable", -1, invalid("%d ids", int(nId)))
	}
	// Every id names a store; VCCL's ranks all meet at the first.
	return initRank("ncclCommInitRankScalable", newcomm, nranks, *(*capi.UniqueID)(unsafe.Pointer(commIds)), myrank, config)
}

//export ncclCommInitAll
func ncclCommInitAll(comm *C.ncclComm_t, ndev C.int, devlist *C.int) (res C.ncclResult_t) {
	defer guard("ncclCommInitAll", &res)
	if comm == nil || ndev < 1 {
		return result("ncclCommInitAll", -1, invalid("%d devices", int(ndev)))
	}
	devs := make([]int, int(ndev))
	for i := range devs {
		devs[i] = i
	}
	if devlist != nil {
		for i, d := range unsafe.Slice(devlist, int(ndev)) {
			devs[i] = int(d)
		}
	}
	out := unsafe.Slice(comm, int(ndev))
	for i := range out {
		out[i] = nil
	}
	comms, err := capi.InitAll(devs)
	if err != nil {
		return result("ncclCommInitAll", -1, err)
	}
	for i, c := range comms {
		out[i] = newHandle(c)
	}
	return C.ncclSuccess
}

//export ncclCommSplit
func ncclCommSplit(comm C.ncclComm_t, color C.int, key C.int, newcomm *C.ncclComm_t, config *C.ncclConfig_t) (res C.ncclResult_t) {
	defer guard("ncclCommSplit", &res)
	c, err := commOf(comm)
	if err != nil {
		return result("ncclCommSplit", -1, err)
	}
	if newcomm == nil {
		return result("ncclCommSplit", c.Device(), invalid("null communicator pointer"))
	}
	*newcomm = nil
	nc, err := c.Split(int(color), int(key))
	if err != nil {
		return result("ncclCommSplit", c.Device(), err)
	}
	if nc != nil {
		*newcomm = newHandle(nc)
	}
	return C.ncclSuccess
}

//export ncclCommFinalize
func ncclCommFinalize(comm C.ncclComm_t) (res C.ncclResult_t) {
	defer guard("ncclCommFinalize", &res)
	c, err := commOf(comm)
	if err != nil {
		return result("ncclCommFinalize", -1, err)
	}
	return result("ncclCommFinalize", c.Device(), c.Finalize())
}

//export ncclCommDestroy
func ncclCommDestroy(comm C.ncclComm_t) (res C.ncclResult_t) {
	defer guard("ncclCommDestroy", &res)
	if comm == nil {
		return C.ncclSuccess
	}
	c, err := commOf(comm)
	if err != nil {
		return result("ncclCommDestroy", -1, err)
	}
	dropHandle(comm)
	return result("ncclCommDestroy", c.Device(), c.Destroy())
}

//export ncclCommAbort
func ncclCommAbort(comm C.ncclComm_t) (res C.ncclResult_t) {
	defer guard("ncclCommAbort", &res)
	if comm == nil {
		return C.ncclSuccess
	}
	c, err := commOf(comm)
	if err != nil {
		return result("ncclCommAbort", -1, err)
	}
	dropHandle(comm)
	return result("ncclCommAbort", c.Device(), c.Abort())
}

//export ncclCommGetAsyncError
func ncclCommGetAsyncError(comm C.ncclComm_t, asyncError *C.ncclResult_t) (res C.ncclResult_t) {
	defer guard("ncclCommGetAsyncError", &res)
	c, err := commOf(comm)
	if err != nil {
		return result("ncclCommGetAsyncError", -1, err)
	}
	if asyncError == nil {
		return result("ncclCommGetAsyncError", c.Device(), invalid("null pointer"))
	}
	*asyncError = C.ncclSuccess
	if e := c.AsyncError(); e != nil {
		*asyncError = C.ncclResult_t(e.Code)
		if e.Code != capi.InProgress {
			thread().SetLast(e)
		}
	}
	return C.ncclSuccess
}

func commInt(call string, comm C.ncclComm_t, out *C.int, get func(*capi.Comm) int) C.ncclResult_t {
	c, err := commOf(comm)
	if err != nil {
		return result(call, -1, err)
	}
	if out == nil {
		return result(call, c.Device(), invalid("null pointer"))
	}
	*out = C.int(get(c))
	return C.ncclSuccess
}

//export ncclCommCount
func ncclCommCount(comm C.ncclComm_t, count *C.int) (res C.ncclResult_t) {
	defer guard("ncclCommCount", &res)
	return commInt("ncclCommCount", comm, count, (*capi.Comm).Size)
}

//export ncclCommCuDevice
func ncclCommCuDevice(comm C.ncclComm_t, device *C.int) (res C.ncclResult_t) {
	defer guard("ncclCommCuDevice", &res)
	return commInt("ncclCommCuDevice", comm, device, (*capi.Comm).Device)
}

//export ncclCommUserRank
func ncclCommUserRank(comm C.ncclComm_t, rank *C.int) (res C.ncclResult_t) {
	defer guard("ncclCommUserRank", &res)
	return commInt("ncclCommUserRank", comm, rank, (*capi.Comm).Rank)
}

//export ncclCommRegister
func ncclCommRegister(comm C.ncclComm_t, buff unsafe.Pointer, size C.size_t, handle *unsafe.Pointer) (res C.ncclResult_t) {
	defer guard("ncclCommRegister", &res)
	if _, err := commOf(comm); err != nil {
		return result("ncclCommRegister", -1, err)
	}
	if handle == nil {
		return result("ncclCommRegister", -1, invalid("null handle pointer"))
	}
	*handle = buff // nothing to register: peers map a buffer when an operation first uses it
	return C.ncclSuccess
}

//export ncclCommDeregister
func ncclCommDeregister(comm C.ncclComm_t, handle unsafe.Pointer) (res C.ncclResult_t) {
	defer guard("ncclCommDeregister", &res)
	if _, err := commOf(comm); err != nil {
		return result("ncclCommDeregister", -1, err)
	}
	return C.ncclSuccess
}

//export ncclMemAlloc
func ncclMemAlloc(ptr *unsafe.Pointer, size C.size_t) (res C.ncclResult_t) {
	defer guard("ncclMemAlloc", &res)
	if ptr == nil {
		return result("ncclMemAlloc", -1, invalid("null pointer"))
	}
	n, err := count(size)
	if err != nil {
		return result("ncclMemAlloc", -1, err)
	}
	// On the caller's thread, in its current context (cudaSetDevice's).
	p, err := cuda.MemAlloc(max(n, 1))
	if err != nil {
		return result("ncclMemAlloc", -1, err)
	}
	*(*uintptr)(unsafe.Pointer(ptr)) = uintptr(p) // a device address, never dereferenced here
	return C.ncclSuccess
}

//export ncclMemFree
func ncclMemFree(ptr unsafe.Pointer) (res C.ncclResult_t) {
	defer guard("ncclMemFree", &res)
	if ptr == nil {
		return C.ncclSuccess
	}
	return result("ncclMemFree", -1, cuda.MemFree(cuda.DevicePtr(uintptr(ptr))))
}

//export ncclRedOpCreatePreMulSum
func ncclRedOpCreatePreMulSum(op *C.ncclRedOp_t, scalar unsafe.Pointer, datatype C.ncclDataType_t, residence C.ncclScalarResidence_t, comm C.ncclComm_t) (res C.ncclResult_t) {
	defer guard("ncclRedOpCreatePreMulSum", &res)
	c, err := commOf(comm)
	if err != nil {
		return result("ncclRedOpCreatePreMulSum", -1, err)
	}
	if op == nil || scalar == nil {
		return result("ncclRedOpCreatePreMulSum", c.Device(), invalid("null pointer"))
	}
	dt := capi.DataType(datatype)
	if !dt.Valid() {
		return result("ncclRedOpCreatePreMulSum", c.Device(), invalid("datatype %d", int(datatype)))
	}
	var r capi.RedOp
	switch capi.ScalarResidence(residence) {
	case capi.ScalarHostImmediate:
		r, err = c.CreatePreMulSum(dt, 0, C.GoBytes(scalar, C.int(dt.Size())))
	case capi.ScalarDevice:
		r, err = c.CreatePreMulSum(dt, cuda.DevicePtr(uintptr(scalar)), nil)
	default:
		err = invalid("scalar residence %d", int(residence))
	}
	if err != nil {
		return result("ncclRedOpCreatePreMulSum", c.Device(), err)
	}
	*op = C.ncclRedOp_t(r)
	return C.ncclSuccess
}

//export ncclRedOpDestroy
func ncclRedOpDestroy(op C.ncclRedOp_t, comm C.ncclComm_t) (res C.ncclResult_t) {
	defer guard("ncclRedOpDestroy", &res)
	c, err := commOf(comm)
	if err != nil {
		return result("ncclRedOpDestroy", -1, err)
	}
	return result("ncclRedOpDestroy", c.Device(), c.DestroyRedOp(capi.RedOp(op)))
}

// enqueue makes one call of the C API.
func enqueue(call string, comm C.ncclComm_t, k capi.Call, n C.size_t) C.ncclResult_t {
	c, err := commOf(comm)
	if err != nil {
		return result(call, -1, err)
	}
	if k.Count, err = count(n); err != nil {
		return result(call, c.Device(), err)
	}
	return result(call, c.Device(), thread().Enqueue(c, k))
}

func addr(p unsafe.Pointer) uintptr { return uintptr(p) }

func stream(s C.cudaStream_t) uintptr { return uintptr(unsafe.Pointer(s)) }

//export ncclAllReduce
func ncclAllReduce(sendbuff, recvbuff unsafe.Pointer, count C.size_t, datatype C.ncclDataType_t, op C.ncclRedOp_t, comm C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	defer guard("ncclAllReduce", &res)
	return enqueue("ncclAllReduce", comm, capi.Call{Op: collective.OpAllReduce, Send: addr(sendbuff), Recv: addr(recvbuff),
		Type: capi.DataType(datatype), Red: capi.RedOp(op), Stream: stream(s)}, count)
}

//export ncclBroadcast
func ncclBroadcast(sendbuff, recvbuff unsafe.Pointer, count C.size_t, datatype C.ncclDataType_t, root C.int, comm C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	defer guard("ncclBroadcast", &res)
	return enqueue("ncclBroadcast", comm, capi.Call{Op: collective.OpBroadcast, Send: addr(sendbuff), Recv: addr(recvbuff),
		Type: capi.DataType(datatype), Root: int(root), Stream: stream(s)}, count)
}

//export ncclBcast
func ncclBcast(buff unsafe.Pointer, count C.size_t, datatype C.ncclDataType_t, root C.int, comm C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	defer guard("ncclBcast", &res)
	return enqueue("ncclBcast", comm, capi.Call{Op: collective.OpBroadcast, Send: addr(buff), Recv: addr(buff),
		Type: capi.DataType(datatype), Root: int(root), Stream: stream(s)}, count)
}

//export ncclReduce
func ncclReduce(sendbuff, recvbuff unsafe.Pointer, count C.size_t, datatype C.ncclDataType_t, op C.ncclRedOp_t, root C.int, comm C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	defer guard("ncclReduce", &res)
	return enqueue("ncclReduce", comm, capi.Call{Op: collective.OpReduce, Send: addr(sendbuff), Recv: addr(recvbuff),
		Type: capi.DataType(datatype), Red: capi.RedOp(op), Root: int(root), Stream: stream(s)}, count)
}

//export ncclAllGather
func ncclAllGather(sendbuff, recvbuff unsafe.Pointer, sendcount C.size_t, datatype C.ncclDataType_t, comm C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	defer guard("ncclAllGather", &res)
	return enqueue("ncclAllGather", comm, capi.Call{Op: collective.OpAllGather, Send: addr(sendbuff), Recv: addr(recvbuff),
		Type: capi.DataType(datatype), Stream: stream(s)}, sendcount)
}

//export ncclReduceScatter
func ncclReduceScatter(sendbuff, recvbuff unsafe.Pointer, recvcount C.size_t, datatype C.ncclDataType_t, op C.ncclRedOp_t, comm C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	defer guard("ncclReduceScatter", &res)
	return enqueue("ncclReduceScatter", comm, capi.Call{Op: collective.OpReduceScatter, Send: addr(sendbuff), Recv: addr(recvbuff),
		Type: capi.DataType(datatype), Red: capi.RedOp(op), Stream: stream(s)}, recvcount)
}

//export ncclAlltoAll
func ncclAlltoAll(sendbuff, recvbuff unsafe.Pointer, count C.size_t, datatype C.ncclDataType_t, comm C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	defer guard("ncclAlltoAll", &res)
	return enqueue("ncclAlltoAll", comm, capi.Call{Op: collective.OpAllToAll, Send: addr(sendbuff), Recv: addr(recvbuff),
		Type: capi.DataType(datatype), Stream: stream(s)}, count)
}

//export ncclGather
func ncclGather(sendbuff, recvbuff unsafe.Pointer, count C.size_t, datatype C.ncclDataType_t, root C.int, comm C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	defer guard("ncclGather", &res)
	return enqueue("ncclGather", comm, capi.Call{Op: collective.OpGather, Send: addr(sendbuff), Recv: addr(recvbuff),
		Type: capi.DataType(datatype), Root: int(root), Stream: stream(s)}, count)
}

//export ncclScatter
func ncclScatter(sendbuff, recvbuff unsafe.Pointer, count C.size_t, datatype C.ncclDataType_t, root C.int, comm C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	defer guard("ncclScatter", &res)
	return enqueue("ncclScatter", comm, capi.Call{Op: collective.OpScatter, Send: addr(sendbuff), Recv: addr(recvbuff),
		Type: capi.DataType(datatype), Root: int(root), Stream: stream(s)}, count)
}

//export ncclSend
func ncclSend(sendbuff unsafe.Pointer, count C.size_t, datatype C.ncclDataType_t, peer C.int, comm C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	defer guard("ncclSend", &res)
	return enqueue("ncclSend", comm, capi.Call{Op: collective.OpSend, Send: addr(sendbuff),
		Type: capi.DataType(datatype), Root: int(peer), Stream: stream(s)}, count)
}

//export ncclRecv
func ncclRecv(recvbuff unsafe.Pointer, count C.size_t, datatype C.ncclDataType_t, peer C.int, comm C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	defer guard("ncclRecv", &res)
	return enqueue("ncclRecv", comm, capi.Call{Op: collective.OpRecv, Recv: addr(recvbuff),
		Type: capi.DataType(datatype), Root: int(peer), Stream: stream(s)}, count)
}

//export ncclGroupStart
func ncclGroupStart() (res C.ncclResult_t) {
	defer guard("ncclGroupStart", &res)
	thread().GroupStart()
	return C.ncclSuccess
}

//export ncclGroupEnd
func ncclGroupEnd() (res C.ncclResult_t) {
	defer guard("ncclGroupEnd", &res)
	return result("ncclGroupEnd", -1, thread().GroupEnd())
}
