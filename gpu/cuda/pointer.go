package cuda

import "unsafe"

// Pointer attributes (CUpointer_attribute) the binding reads.
const (
	attrBufferID          = 7  // unsigned long long, unique per allocation in the process
	attrLegacyIPCCapable  = 10 // bool: cuIpcGetMemHandle works on the allocation
	attrDeviceOrdinal     = 9  // int
	maxPointerAttrPayload = 8
)

// Allocation describes the allocation that holds a device address, as
// memory a caller brings (cudaMalloc'd buffers of a C program) needs it:
// where it starts, how big it is, an id that tells it apart from an
// earlier allocation at the same address, whether CUDA IPC can share it,
// and its device.
type Allocation struct {
	Base       DevicePtr
	Size       int
	BufferID   uint64
	IPCCapable bool
	Ordinal    int
}

// PointerAllocation returns the allocation that contains p. It needs no
// current context for memory of the unified address space.
func PointerAllocation(p DevicePtr) (Allocation, error) {
	var a Allocation
	base, size, err := MemAddressRange(p)
	if err != nil {
		return a, err
	}
	a.Base, a.Size = base, size
	if syms.cuPointerGetAttribute == 0 {
		return a, &Error{Call: "cuPointerGetAttribute", Code: ErrorNotSupported}
	}
	get := func(attr int) (uint64, error) {
		var v [maxPointerAttrPayload]byte
		err := check("cuPointerGetAttribute", call(syms.cuPointerGetAttribute, uintptr(unsafe.Pointer(&v[0])), uintptr(attr), uintptr(p)))
		return *(*uint64)(unsafe.Pointer(&v[0])), err
	}
	if a.BufferID, err = get(attrBufferID); err != nil {
		return a, err
	}
	ord, err := get(attrDeviceOrdinal)
	if err != nil {
		return a, err
	}
	a.Ordinal = int(int32(uint32(ord)))
	// Drivers that predate the attribute share every cuMemAlloc'd buffer.
	ipc, err := get(attrLegacyIPCCapable)
	a.IPCCapable = err != nil || uint8(ipc) != 0
	return a, nil
}

// BufferID returns the allocation id of p (cheaper than PointerAllocation
// when only a reallocation must be told apart).
func BufferID(p DevicePtr) (uint64, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	if syms.cuPointerGetAttribute == 0 {
		return 0, &Error{Call: "cuPointerGetAttribute", Code: ErrorNotSupported}
	}
	var v uint64
	err := check("cuPointerGetAttribute", call(syms.cuPointerGetAttribute, uintptr(unsafe.Pointer(&v)), attrBufferID, uintptr(p)))
	return v, err
}

// CurrentDevice returns the device of the context current on the calling
// OS thread; ok is false when none is current.
func CurrentDevice() (d Device, ok bool, err error) {
	c, err := Current()
	if err != nil || c == 0 {
		return 0, false, err
	}
	if syms.cuCtxGetDevice == 0 {
		return 0, false, &Error{Call: "cuCtxGetDevice", Code: ErrorNotSupported}
	}
	err = check("cuCtxGetDevice", call(syms.cuCtxGetDevice, uintptr(unsafe.Pointer(&d))))
	return d, err == nil, err
}

// MemsetD32Async queues setting n 32-bit words at p to v on s.
func MemsetD32Async(p DevicePtr, v uint32, n int, s Stream) error {
	if err := ready(); err != nil {
		return err
	}
	if syms.cuMemsetD32Async == 0 {
		return &Error{Call: "cuMemsetD32Async", Code: ErrorNotSupported}
	}
	return check("cuMemsetD32Async", call(syms.cuMemsetD32Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s)))
}
