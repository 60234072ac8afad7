package cuda

import "unsafe"

// IpcMemHandle is a CUipcMemHandle: 64 opaque bytes that name a device
// allocation to another process of the same host. Send it by any means (the
// collective bootstrap store, a host all-gather); the other process maps it
// with OpenIpcMemHandle.
type IpcMemHandle [64]byte

// IpcEventHandle is a CUipcEventHandle (64 bytes) naming an event created
// with EventInterprocess|EventDisableTiming.
type IpcEventHandle [64]byte

// IpcMemLazyEnablePeerAccess is the only flag of OpenIpcMemHandle.
const IpcMemLazyEnablePeerAccess = 1

// IpcGetMemHandle returns the handle of the allocation at p (the base
// address MemAlloc returned).
func IpcGetMemHandle(p DevicePtr) (IpcMemHandle, error) {
	var h IpcMemHandle
	if err := ready(); err != nil {
		return h, err
	}
	err := check("cuIpcGetMemHandle", call(syms.cuIpcGetMemHandle, uintptr(unsafe.Pointer(&h)), uintptr(p)))
	return h, err
}

// OpenIpcMemHandle maps another process's allocation into the current
// context and returns its address here. A process cannot open its own
// handles. Close with CloseIpcMemHandle.
func OpenIpcMemHandle(h IpcMemHandle) (DevicePtr, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var p DevicePtr
	// The handle is passed by value: openIpc does what the C ABI needs.
	err := check("cuIpcOpenMemHandle_v2", openIpc(syms.cuIpcOpenMemHandle, &p, &h, IpcMemLazyEnablePeerAccess))
	return p, err
}

// CloseIpcMemHandle unmaps memory opened with OpenIpcMemHandle.
func CloseIpcMemHandle(p DevicePtr) error {
	if err := ready(); err != nil {
		return err
	}
	return check("cuIpcCloseMemHandle", call(syms.cuIpcCloseMemHandle, uintptr(p)))
}

// IpcGetEventHandle returns the handle of an interprocess event.
func IpcGetEventHandle(e Event) (IpcEventHandle, error) {
	var h IpcEventHandle
	if err := ready(); err != nil {
		return h, err
	}
	err := check("cuIpcGetEventHandle", call(syms.cuIpcGetEventHandle, uintptr(unsafe.Pointer(&h)), uintptr(e)))
	return h, err
}

// OpenIpcEventHandle opens another process's interprocess event.
func OpenIpcEventHandle(h IpcEventHandle) (Event, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var e Event
	mh := IpcMemHandle(h)
	var p DevicePtr
	err := check("cuIpcOpenEventHandle", openIpc(syms.cuIpcOpenEventHandle, &p, &mh, noFlags))
	e = Event(p)
	return e, err
}
