//go:build linux && (amd64 || arm64)

package cuda

import "github.com/ebitengine/purego"

func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func dlsym(h uintptr, name string) (uintptr, error) { return purego.Dlsym(h, name) }

// call invokes a driver entry point with integer and pointer arguments and
// returns its CUresult.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) uintptr {
	if fn == 0 { // not loaded: Load failed or was never called
		return uintptr(ErrorNotInitialized)
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return uintptr(uint32(r))
}
