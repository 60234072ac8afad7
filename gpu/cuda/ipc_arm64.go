//go:build linux && arm64

package cuda

import "unsafe"

const noFlags = ^uintptr(0)

// openIpc calls fn(out, handle by value[, flags]). AAPCS64 passes a
// composite larger than 16 bytes by reference to a caller-made copy, so the
// handle's address takes the second register.
func openIpc(fn uintptr, out *DevicePtr, h *IpcMemHandle, flags uintptr) uintptr {
	cp := *h
	if flags == noFlags {
		return call(fn, uintptr(unsafe.Pointer(out)), uintptr(unsafe.Pointer(&cp)))
	}
	return call(fn, uintptr(unsafe.Pointer(out)), uintptr(unsafe.Pointer(&cp)), flags)
}
