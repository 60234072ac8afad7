package cuda

import (
	"fmt"
	"unsafe"
)

// DevicePtr is a CUdeviceptr: an address in the unified virtual address
// space, valid in the context that allocated (or mapped) it and, with peer
// access, in the other contexts of the process.
type DevicePtr uint64

// Add returns p advanced by n bytes.
func (p DevicePtr) Add(n int) DevicePtr { return p + DevicePtr(n) }

// MemAlloc allocates n bytes of device memory in the current context.
func MemAlloc(n int) (DevicePtr, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("cuda: MemAlloc of %d bytes", n)
	}
	var p DevicePtr
	err := check("cuMemAlloc_v2", call(syms.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)))
	return p, err
}

// MemFree frees memory from MemAlloc.
func MemFree(p DevicePtr) error {
	if err := ready(); err != nil {
		return err
	}
	return check("cuMemFree_v2", call(syms.cuMemFree, uintptr(p)))
}

// MemAddressRange returns the base address and size of the allocation
// that contains p (what IPC handles name: IpcGetMemHandle takes the base).
func MemAddressRange(p DevicePtr) (base DevicePtr, size int, err error) {
	if err := ready(); err != nil {
		return 0, 0, err
	}
	if syms.cuMemGetAddressRange == 0 {
		return 0, 0, &Error{Call: "cuMemGetAddressRange_v2", Code: ErrorNotSupported}
	}
	var n uint64
	err = check("cuMemGetAddressRange_v2", call(syms.cuMemGetAddressRange, uintptr(unsafe.Pointer(&base)), uintptr(unsafe.Pointer(&n)), uintptr(p)))
	return base, int(n), err
}

// MemGetInfo returns the free and total memory of the current context's device.
func MemGetInfo() (free, total int64, err error) {
	if err := ready(); err != nil {
		return 0, 0, err
	}
	var f, t uint64
	err = check("cuMemGetInfo_v2", call(syms.cuMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))))
	return int64(f), int64(t), err
}

// Host memory flags (CU_MEMHOSTALLOC_*).
const (
	HostAllocPortable      = 1 // pinned for every context, not only the current one
	HostAllocDeviceMap     = 2
	HostAllocWriteCombined = 4
)

// HostBuffer is page-locked (pinned) host memory: the copy engines read and
// write it directly, so asynchronous copies to and from it overlap with work.
type HostBuffer struct {
	p *byte
	n int
}

// MemHostAlloc allocates n bytes of pinned host memory (flags: HostAlloc*).
func MemHostAlloc(n int, flags uint32) (*HostBuffer, error) {
	if err := ready(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("cuda: MemHostAlloc of %d bytes", n)
	}
	var p *byte
	if err := check("cuMemHostAlloc", call(syms.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n), uintptr(flags))); err != nil {
		return nil, err
	}
	return &HostBuffer{p: p, n: n}, nil
}

// Bytes returns the buffer as a slice; it is valid until Free.
func (h *HostBuffer) Bytes() []byte { return unsafe.Slice(h.p, h.n) }

// Len returns the buffer's size.
func (h *HostBuffer) Len() int { return h.n }

// Free releases the buffer.
func (h *HostBuffer) Free() error {
	if h.p == nil {
		return nil
	}
	err := check("cuMemFreeHost", call(syms.cuMemFreeHost, uintptr(unsafe.Pointer(h.p))))
	h.p, h.n = nil, 0
	return err
}

func hostRange(h *HostBuffer, off, n int) (unsafe.Pointer, error) {
	if h == nil || h.p == nil {
		return nil, fmt.Errorf("cuda: freed or nil host buffer")
	}
	if off < 0 || n < 0 || off+n > h.n {
		return nil, fmt.Errorf("cuda: host range [%d,%d) outside a buffer of %d bytes", off, off+n, h.n)
	}
	return unsafe.Add(unsafe.Pointer(h.p), off), nil
}

// MemcpyHtoD copies src into device memory at dst and waits for it.
func MemcpyHtoD(dst DevicePtr, src []byte) error {
	if err := ready(); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoD_v2", call(syms.cuMemcpyHtoD, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src))))
}

// MemcpyDtoH copies len(dst) bytes of device memory at src into dst and waits for it.
func MemcpyDtoH(dst []byte, src DevicePtr) error {
	if err := ready(); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoH_v2", call(syms.cuMemcpyDtoH, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst))))
}

// MemcpyDtoD copies n bytes between device addresses and waits for it.
func MemcpyDtoD(dst, src DevicePtr, n int) error {
	if err := ready(); err != nil {
		return err
	}
	return check("cuMemcpyDtoD_v2", call(syms.cuMemcpyDtoD, uintptr(dst), uintptr(src), uintptr(n)))
}

// MemcpyHtoDAsync queues a copy of h[off:off+n] to dst on s.
func MemcpyHtoDAsync(dst DevicePtr, h *HostBuffer, off, n int, s Stream) error {
	p, err := hostRange(h, off, n)
	if err != nil {
		return err
	}
	return check("cuMemcpyHtoDAsync_v2", call(syms.cuMemcpyHtoDAsync, uintptr(dst), uintptr(p), uintptr(n), uintptr(s)))
}

// MemcpyDtoHAsync queues a copy of n bytes at src into h[off:] on s.
func MemcpyDtoHAsync(h *HostBuffer, off int, src DevicePtr, n int, s Stream) error {
	p, err := hostRange(h, off, n)
	if err != nil {
		return err
	}
	return check("cuMemcpyDtoHAsync_v2", call(syms.cuMemcpyDtoHAsync, uintptr(p), uintptr(src), uintptr(n), uintptr(s)))
}

// MemcpyDtoDAsync queues a device-to-device copy on s. With unified
// addressing the two addresses may be on different GPUs of the process (peer
// access enabled) or be IPC-mapped memory of another process: the copy
// engine moves the bytes over NVLink and no SM is used.
func MemcpyDtoDAsync(dst, src DevicePtr, n int, s Stream) error {
	return check("cuMemcpyDtoDAsync_v2", call(syms.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

// MemcpyPeerAsync queues a copy from src in srcCtx to dst in dstCtx on s (a
// stream of either context).
func MemcpyPeerAsync(dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, n int, s Stream) error {
	return check("cuMemcpyPeerAsync", call(syms.cuMemcpyPeerAsync, uintptr(dst), uintptr(dstCtx), uintptr(src), uintptr(srcCtx), uintptr(n), uintptr(s)))
}

// MemsetD8 sets n bytes at p to v and waits for it.
func MemsetD8(p DevicePtr, v byte, n int) error {
	if err := ready(); err != nil {
		return err
	}
	return check("cuMemsetD8_v2", call(syms.cuMemsetD8, uintptr(p), uintptr(v), uintptr(n)))
}

// MemsetD8Async queues setting n bytes at p to v on s.
func MemsetD8Async(p DevicePtr, v byte, n int, s Stream) error {
	return check("cuMemsetD8Async", call(syms.cuMemsetD8Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s)))
}
