//go:build linux && amd64

package cuda

import "unsafe"

// noFlags marks a call whose C signature has no flags argument after the handle.
const noFlags = ^uintptr(0)

// openIpc calls fn(out *T, handle [64]byte by value[, flags uint32]). In the
// System V AMD64 ABI a 64-byte struct is passed in memory: it occupies the
// first eight stack slots, while the integer arguments around it take the
// registers in order (out in rdi, flags in rsi). purego.SyscallN puts its
// 7th and later arguments on the stack in order, so six register arguments
// (padded) followed by the handle's eight words lay the call out exactly.
func openIpc(fn uintptr, out *DevicePtr, h *IpcMemHandle, flags uintptr) uintptr {
	w := (*[8]uintptr)(unsafe.Pointer(h))
	second := flags
	if flags == noFlags {
		second = 0
	}
	return call(fn, uintptr(unsafe.Pointer(out)), second, 0, 0, 0, 0,
		w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])
}
