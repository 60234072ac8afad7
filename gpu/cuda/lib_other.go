//go:build !(linux && (amd64 || arm64))

package cuda

import (
	"errors"
	"runtime"
)

func dlopen(string) (uintptr, error) {
	return 0, errors.New("no CUDA driver binding on " + runtime.GOOS + "/" + runtime.GOARCH)
}

func dlsym(uintptr, string) (uintptr, error) { return 0, errors.New("unsupported") }

func call(uintptr, ...uintptr) uintptr { return uintptr(ErrorNotInitialized) }
