package cuda

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

// Module is a CUmodule: code loaded into the current context.
type Module uintptr

// Function is a CUfunction: a kernel of a loaded module.
type Function uintptr

// JIT options of cuModuleLoadDataEx (CUjit_option).
const (
	jitInfoLogBuffer           = 3
	jitInfoLogBufferSizeBytes  = 4
	jitErrorLogBuffer          = 5
	jitErrorLogBufferSizeBytes = 6
)

// LoadPTX JIT-compiles PTX text for the current context's device. On a
// compile error, the returned *Error carries the compiler's log.
func LoadPTX(ptx string) (Module, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	img := make([]byte, len(ptx)+1) // NUL-terminated
	copy(img, ptx)
	const logSize = 16 << 10
	errLog := make([]byte, logSize)
	infoLog := make([]byte, logSize)
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufferSizeBytes, jitInfoLogBuffer, jitInfoLogBufferSizeBytes}
	vals := []uintptr{uintptr(unsafe.Pointer(&errLog[0])), logSize, uintptr(unsafe.Pointer(&infoLog[0])), logSize}
	var m Module
	r := call(syms.cuModuleLoadDataEx, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&img[0])),
		uintptr(len(opts)), uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	runtime.KeepAlive(errLog)
	runtime.KeepAlive(infoLog)
	if err := check("cuModuleLoadDataEx", r); err != nil {
		err.(*Error).Log = strings.TrimSpace(cString(&errLog[0]))
		return 0, err
	}
	return m, nil
}

// Function returns the kernel named name.
func (m Module) Function(name string) (Function, error) {
	cname := append([]byte(name), 0)
	var f Function
	if err := check("cuModuleGetFunction", call(syms.cuModuleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&cname[0])))); err != nil {
		return 0, fmt.Errorf("%w (kernel %q)", err, name)
	}
	return f, nil
}

// Unload releases the module.
func (m Module) Unload() error { return check("cuModuleUnload", call(syms.cuModuleUnload, uintptr(m))) }

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// D1 returns the one-dimensional shape n.
func D1(n int) Dim3 { return Dim3{uint32(n), 1, 1} }

// MaxArgs is the most kernel parameters Args holds.
const MaxArgs = 16

// Args launches kernels whose parameters are all 64-bit (pointers, sizes,
// scalars widened to 64 bits). It owns the parameter array the driver reads,
// so a launch allocates nothing; one Args must not be used by two goroutines
// at once.
type Args struct {
	vals [MaxArgs]uint64
	ptrs [MaxArgs]uintptr
}

// Launch queues f on s with the given shape and parameters.
func (a *Args) Launch(f Function, grid, block Dim3, sharedMem uint32, s Stream, params ...uint64) error {
	if len(params) > MaxArgs {
		return fmt.Errorf("cuda: %d kernel parameters, at most %d", len(params), MaxArgs)
	}
	for i, p := range params {
		a.vals[i] = p
		a.ptrs[i] = uintptr(unsafe.Pointer(&a.vals[i]))
	}
	// The conversion stays inside the call expression so that a (and the
	// values its pointer array points into) lives on the heap.
	r := call(syms.cuLaunchKernel, uintptr(f),
		uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
		uintptr(sharedMem), uintptr(s), uintptr(unsafe.Pointer(&a.ptrs[0])), 0)
	runtime.KeepAlive(a)
	return check("cuLaunchKernel", r)
}
