//go:build cgo

package main

/*
#cgo CFLAGS: -I${SRCDIR}/include -DVCCL_NO_CUDA_HEADERS
#define VCCL_CONST
#include "nccl.h"
*/
import "C"

import "unsafe"

// Calls of newer NCCL versions that VCCL does not implement. A program
// built against a newer nccl.h (PyTorch 2.11 against NCCL 2.28) imports
// them, and since this library's soname is libnccl.so.2, a preloaded VCCL
// is the only libnccl of the process: every symbol it imports must be
// here, or it fails to load. Each returns ncclInvalidUsage and says so in
// ncclGetLastError.

//export ncclGroupSimulateEnd
func ncclGroupSimulateEnd(simInfo unsafe.Pointer) C.ncclResult_t {
	return result("ncclGroupSimulateEnd", -1, unsupported("ncclGroupSimulateEnd"))
}

//export ncclCommWindowRegister
func ncclCommWindowRegister(comm C.ncclComm_t, buff unsafe.Pointer, size C.size_t, win *unsafe.Pointer, flags C.int) C.ncclResult_t {
	return result("ncclCommWindowRegister", -1, unsupported("ncclCommWindowRegister (symmetric memory)"))
}

//export ncclCommWindowDeregister
func ncclCommWindowDeregister(comm C.ncclComm_t, win unsafe.Pointer) C.ncclResult_t {
	return result("ncclCommWindowDeregister", -1, unsupported("ncclCommWindowDeregister (symmetric memory)"))
}

//export ncclCommShrink
func ncclCommShrink(comm C.ncclComm_t, excludeRanksList *C.int, excludeRanksCount C.int, newcomm *C.ncclComm_t, config *C.ncclConfig_t, shrinkFlags C.int) C.ncclResult_t {
	return result("ncclCommShrink", -1, unsupported("ncclCommShrink"))
}

//export ncclCommGetUniqueId
func ncclCommGetUniqueId(comm C.ncclComm_t, uniqueId *C.ncclUniqueId) C.ncclResult_t {
	return result("ncclCommGetUniqueId", -1, unsupported("ncclCommGetUniqueId"))
}

//export ncclCommGrow
func ncclCommGrow(comm C.ncclComm_t, nRanks C.int, uniqueId *C.ncclUniqueId, rank C.int, newcomm *C.ncclComm_t, config *C.ncclConfig_t) C.ncclResult_t {
	return result("ncclCommGrow", -1, unsupported("ncclCommGrow"))
}

//export ncclCommRevoke
func ncclCommRevoke(comm C.ncclComm_t, flags C.int) C.ncclResult_t {
	return result("ncclCommRevoke", -1, unsupported("ncclCommRevoke"))
}

//export ncclCommSuspend
func ncclCommSuspend(comm C.ncclComm_t, flags C.int) C.ncclResult_t {
	return result("ncclCommSuspend", -1, unsupported("ncclCommSuspend"))
}

//export ncclCommResume
func ncclCommResume(comm C.ncclComm_t) C.ncclResult_t {
	return result("ncclCommResume", -1, unsupported("ncclCommResume"))
}

//export ncclCommMemStats
func ncclCommMemStats(comm C.ncclComm_t, stat C.int, value *C.ulonglong) C.ncclResult_t {
	return result("ncclCommMemStats", -1, unsupported("ncclCommMemStats"))
}

//export ncclCommQueryProperties
func ncclCommQueryProperties(comm C.ncclComm_t, props unsafe.Pointer) C.ncclResult_t {
	return result("ncclCommQueryProperties", -1, unsupported("ncclCommQueryProperties"))
}

//export ncclDevCommCreate
func ncclDevCommCreate(comm C.ncclComm_t, reqs unsafe.Pointer, outDevComm unsafe.Pointer) C.ncclResult_t {
	return result("ncclDevCommCreate", -1, unsupported("ncclDevCommCreate (the device API)"))
}

//export ncclDevCommDestroy
func ncclDevCommDestroy(comm C.ncclComm_t, devComm unsafe.Pointer) C.ncclResult_t {
	return result("ncclDevCommDestroy", -1, unsupported("ncclDevCommDestroy (the device API)"))
}
