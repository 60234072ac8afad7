package cuda

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// EnvLib names the driver library to open instead of libcuda.so.1; the
// program's configuration step (gpu/ce, a command) passes its value to
// SetLibrary.
const EnvLib = "VCCL_CUDA_LIB"

// syms holds the driver entry points. A zero entry is an optional symbol the
// driver does not export.
var syms struct {
	cuInit, cuDriverGetVersion, cuGetErrorName, cuGetErrorString                   uintptr
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute           uintptr
	cuDeviceTotalMem, cuDeviceGetPCIBusId, cuDeviceCanAccessPeer                   uintptr
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease                            uintptr
	cuCtxSetCurrent, cuCtxGetCurrent, cuCtxSynchronize, cuCtxEnablePeerAccess      uintptr
	cuMemAlloc, cuMemFree, cuMemHostAlloc, cuMemFreeHost, cuMemGetInfo             uintptr
	cuMemcpyHtoD, cuMemcpyDtoH, cuMemcpyDtoD                                       uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync, cuMemcpyPeerAsync     uintptr
	cuMemsetD8, cuMemsetD8Async                                                    uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize, cuStreamQuery            uintptr
	cuStreamWaitEvent                                                              uintptr
	cuStreamWriteValue32, cuStreamWaitValue32                                      uintptr
	cuEventCreate, cuEventDestroy, cuEventRecord, cuEventQuery, cuEventSynchronize uintptr
	cuEventElapsedTime                                                             uintptr
	cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle                     uintptr
	cuIpcGetEventHandle, cuIpcOpenEventHandle, cuMemGetAddressRange                uintptr
	cuModuleLoadDataEx, cuModuleGetFunction, cuModuleUnload, cuLaunchKernel        uintptr
	cuPointerGetAttribute, cuCtxGetDevice, cuMemsetD32Async                        uintptr
}

// symbol lists the names to try for one entry point, newest first; optional
// entries may be missing.
type symbol struct {
	dst      *uintptr
	names    []string
	optional bool
}

func symbolTable() []symbol {
	s := &syms
	return []symbol{
		{&s.cuInit, []string{"cuInit"}, false},
		{&s.cuDriverGetVersion, []string{"cuDriverGetVersion"}, false},
		{&s.cuGetErrorName, []string{"cuGetErrorName"}, true},
		{&s.cuGetErrorString, []string{"cuGetErrorString"}, true},
		{&s.cuDeviceGetCount, []string{"cuDeviceGetCount"}, false},
		{&s.cuDeviceGet, []string{"cuDeviceGet"}, false},
		{&s.cuDeviceGetName, []string{"cuDeviceGetName"}, false},
		{&s.cuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}, false},
		{&s.cuDeviceTotalMem, []string{"cuDeviceTotalMem_v2", "cuDeviceTotalMem"}, false},
		{&s.cuDeviceGetPCIBusId, []string{"cuDeviceGetPCIBusId"}, true},
		{&s.cuDeviceCanAccessPeer, []string{"cuDeviceCanAccessPeer"}, false},
		{&s.cuDevicePrimaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}, false},
		{&s.cuDevicePrimaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}, false},
		{&s.cuCtxSetCurrent, []string{"cuCtxSetCurrent"}, false},
		{&s.cuCtxGetCurrent, []string{"cuCtxGetCurrent"}, false},
		{&s.cuCtxSynchronize, []string{"cuCtxSynchronize"}, false},
		{&s.cuCtxEnablePeerAccess, []string{"cuCtxEnablePeerAccess"}, false},
		{&s.cuMemAlloc, []string{"cuMemAlloc_v2"}, false},
		{&s.cuMemFree, []string{"cuMemFree_v2"}, false},
		{&s.cuMemHostAlloc, []string{"cuMemHostAlloc"}, false},
		{&s.cuMemFreeHost, []string{"cuMemFreeHost"}, false},
		{&s.cuMemGetInfo, []string{"cuMemGetInfo_v2"}, false},
		{&s.cuMemcpyHtoD, []string{"cuMemcpyHtoD_v2"}, false},
		{&s.cuMemcpyDtoH, []string{"cuMemcpyDtoH_v2"}, false},
		{&s.cuMemcpyDtoD, []string{"cuMemcpyDtoD_v2"}, false},
		{&s.cuMemcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}, false},
		{&s.cuMemcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2"}, false},
		{&s.cuMemcpyDtoDAsync, []string{"cuMemcpyDtoDAsync_v2"}, false},
		{&s.cuMemcpyPeerAsync, []string{"cuMemcpyPeerAsync"}, false},
		{&s.cuMemsetD8, []string{"cuMemsetD8_v2"}, false},
		{&s.cuMemsetD8Async, []string{"cuMemsetD8Async"}, false},
		{&s.cuStreamCreate, []string{"cuStreamCreate"}, false},
		{&s.cuStreamDestroy, []string{"cuStreamDestroy_v2", "cuStreamDestroy"}, false},
		{&s.cuStreamSynchronize, []string{"cuStreamSynchronize"}, false},
		{&s.cuStreamQuery, []string{"cuStreamQuery"}, false},
		{&s.cuStreamWaitEvent, []string{"cuStreamWaitEvent"}, false},
		{&s.cuStreamWriteValue32, []string{"cuStreamWriteValue32_v2", "cuStreamWriteValue32"}, true},
		{&s.cuStreamWaitValue32, []string{"cuStreamWaitValue32_v2", "cuStreamWaitValue32"}, true},
		{&s.cuEventCreate, []string{"cuEventCreate"}, false},
		{&s.cuEventDestroy, []string{"cuEventDestroy_v2", "cuEventDestroy"}, false},
		{&s.cuEventRecord, []string{"cuEventRecord"}, false},
		{&s.cuEventQuery, []string{"cuEventQuery"}, false},
		{&s.cuEventSynchronize, []string{"cuEventSynchronize"}, false},
		{&s.cuEventElapsedTime, []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}, false},
		{&s.cuIpcGetMemHandle, []string{"cuIpcGetMemHandle"}, false},
		{&s.cuIpcOpenMemHandle, []string{"cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"}, false},
		{&s.cuIpcCloseMemHandle, []string{"cuIpcCloseMemHandle"}, false},
		{&s.cuIpcGetEventHandle, []string{"cuIpcGetEventHandle"}, true},
		{&s.cuIpcOpenEventHandle, []string{"cuIpcOpenEventHandle"}, true},
		{&s.cuMemGetAddressRange, []string{"cuMemGetAddressRange_v2"}, true},
		{&s.cuModuleLoadDataEx, []string{"cuModuleLoadDataEx"}, false},
		{&s.cuModuleGetFunction, []string{"cuModuleGetFunction"}, false},
		{&s.cuModuleUnload, []string{"cuModuleUnload"}, false},
		{&s.cuLaunchKernel, []string{"cuLaunchKernel"}, false},
		{&s.cuPointerGetAttribute, []string{"cuPointerGetAttribute"}, true},
		{&s.cuCtxGetDevice, []string{"cuCtxGetDevice"}, true},
		{&s.cuMemsetD32Async, []string{"cuMemsetD32Async"}, true},
	}
}

var (
	loadOnce sync.Once
	loadErr  error
	libMu    sync.Mutex
	libPath  string // SetLibrary's; "" is libcuda.so.1
)

// SetLibrary names the driver library Load opens ("": libcuda.so.1). The
// driver is opened once per process, so it has no effect after the first
// Load.
func SetLibrary(path string) {
	libMu.Lock()
	defer libMu.Unlock()
	libPath = path
}

// Load opens the driver, resolves its entry points and calls cuInit, once.
// It returns an error wrapping ErrNoDriver when no driver can be used. Every
// other function calls it, so calling it first is only needed to ask whether
// a GPU is there.
func Load() error {
	loadOnce.Do(func() { loadErr = load() })
	return loadErr
}

// Available reports whether the driver loaded and sees at least one device.
func Available() bool {
	if Load() != nil {
		return false
	}
	n, err := DeviceCount()
	return err == nil && n > 0
}

func load() error {
	libMu.Lock()
	path := libPath
	libMu.Unlock()
	if path == "" {
		path = "libcuda.so.1"
	}
	h, err := dlopen(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	var missing []string
	for _, s := range symbolTable() {
		for _, n := range s.names {
			if p, err := dlsym(h, n); err == nil && p != 0 {
				*s.dst = p
				break
			}
		}
		if *s.dst == 0 && !s.optional {
			missing = append(missing, s.names[0])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s lacks %s", ErrNoDriver, path, strings.Join(missing, ", "))
	}
	if err := check("cuInit", call(syms.cuInit, 0)); err != nil {
		return fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	return nil
}

// ready returns nil once the driver is loaded.
func ready() error {
	if err := Load(); err != nil {
		return err
	}
	return nil
}

// cString reads a NUL-terminated C string.
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

func resultName(r Result) string {
	if syms.cuGetErrorName != 0 {
		var p *byte
		if call(syms.cuGetErrorName, uintptr(r), uintptr(unsafe.Pointer(&p))) == 0 && p != nil {
			return cString(p)
		}
	}
	return fmt.Sprintf("CUDA_ERROR_%d", int32(r))
}

func resultString(r Result) string {
	if syms.cuGetErrorString != 0 {
		var p *byte
		if call(syms.cuGetErrorString, uintptr(r), uintptr(unsafe.Pointer(&p))) == 0 && p != nil {
			return cString(p)
		}
	}
	return "unknown error"
}

// DriverVersion returns the driver's CUDA version as 1000*major + 10*minor.
func DriverVersion() (int, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var v int32
	err := check("cuDriverGetVersion", call(syms.cuDriverGetVersion, uintptr(unsafe.Pointer(&v))))
	return int(v), err
}
