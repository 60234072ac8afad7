//go:build !(linux && (amd64 || arm64))

package cuda

const noFlags = ^uintptr(0)

func openIpc(uintptr, *DevicePtr, *IpcMemHandle, uintptr) uintptr {
	return uintptr(ErrorNotInitialized)
}
