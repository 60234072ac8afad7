package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Device is a CUDA device ordinal.
type Device int32

// Context is a CUcontext.
type Context uintptr

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int32

// Device attributes the project reads.
const (
	AttrClockRate            DeviceAttribute = 13
	AttrMultiprocessorCount  DeviceAttribute = 16
	AttrPCIBusID             DeviceAttribute = 33
	AttrPCIDeviceID          DeviceAttribute = 34
	AttrMemoryClockRate      DeviceAttribute = 36
	AttrGlobalMemoryBusWidth DeviceAttribute = 37
	AttrAsyncEngineCount     DeviceAttribute = 40
	AttrUnifiedAddressing    DeviceAttribute = 41
	AttrComputeCapMajor      DeviceAttribute = 75
	AttrComputeCapMinor      DeviceAttribute = 76
)

// DeviceCount returns the number of CUDA devices.
func DeviceCount() (int, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var n int32
	err := check("cuDeviceGetCount", call(syms.cuDeviceGetCount, uintptr(unsafe.Pointer(&n))))
	return int(n), err
}

// GetDevice returns the device with the given ordinal.
func GetDevice(ordinal int) (Device, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var d int32
	err := check("cuDeviceGet", call(syms.cuDeviceGet, uintptr(unsafe.Pointer(&d)), uintptr(ordinal)))
	return Device(d), err
}

// Name returns the device's name.
func (d Device) Name() (string, error) {
	if err := ready(); err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	if err := check("cuDeviceGetName", call(syms.cuDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(d))); err != nil {
		return "", err
	}
	return cString(&buf[0]), nil
}

// PCIBusID returns the device's PCI address ("0000:18:00.0").
func (d Device) PCIBusID() (string, error) {
	if err := ready(); err != nil {
		return "", err
	}
	if syms.cuDeviceGetPCIBusId == 0 {
		return "", fmt.Errorf("cuda: cuDeviceGetPCIBusId not exported by the driver")
	}
	buf := make([]byte, 64)
	if err := check("cuDeviceGetPCIBusId", call(syms.cuDeviceGetPCIBusId, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(d))); err != nil {
		return "", err
	}
	return cString(&buf[0]), nil
}

// Attribute returns a device attribute.
func (d Device) Attribute(a DeviceAttribute) (int, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var v int32
	err := check("cuDeviceGetAttribute", call(syms.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(d)))
	return int(v), err
}

// TotalMem returns the device's memory in bytes.
func (d Device) TotalMem() (int64, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var v uint64
	err := check("cuDeviceTotalMem_v2", call(syms.cuDeviceTotalMem, uintptr(unsafe.Pointer(&v)), uintptr(d)))
	return int64(v), err
}

// CanAccessPeer reports whether d can map peer's memory.
func (d Device) CanAccessPeer(peer Device) (bool, error) {
	if err := ready(); err != nil {
		return false, err
	}
	var v int32
	err := check("cuDeviceCanAccessPeer", call(syms.cuDeviceCanAccessPeer, uintptr(unsafe.Pointer(&v)), uintptr(d), uintptr(peer)))
	return v != 0, err
}

// PrimaryContext retains the device's primary context (the one the CUDA
// runtime, and so NCCL and PyTorch, use). Release it with ReleasePrimaryContext.
func (d Device) PrimaryContext() (Context, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var c Context
	err := check("cuDevicePrimaryCtxRetain", call(syms.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&c)), uintptr(d)))
	return c, err
}

// ReleasePrimaryContext drops one reference taken by PrimaryContext.
func (d Device) ReleasePrimaryContext() error {
	if err := ready(); err != nil {
		return err
	}
	return check("cuDevicePrimaryCtxRelease_v2", call(syms.cuDevicePrimaryCtxRelease, uintptr(d)))
}

// SetCurrent makes c current on the calling OS thread. The caller must be
// locked to its thread (runtime.LockOSThread) for this to mean anything.
func SetCurrent(c Context) error {
	if err := ready(); err != nil {
		return err
	}
	return check("cuCtxSetCurrent", call(syms.cuCtxSetCurrent, uintptr(c)))
}

// Current returns the context current on the calling OS thread (0: none).
func Current() (Context, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var c Context
	err := check("cuCtxGetCurrent", call(syms.cuCtxGetCurrent, uintptr(unsafe.Pointer(&c))))
	return c, err
}

// Synchronize waits for all work of the current context.
func Synchronize() error {
	if err := ready(); err != nil {
		return err
	}
	return check("cuCtxSynchronize", call(syms.cuCtxSynchronize))
}

// EnablePeerAccess lets the current context access peer's memory (and
// kernels read it over NVLink). Enabling it twice is not an error.
func EnablePeerAccess(peer Context) error {
	if err := ready(); err != nil {
		return err
	}
	err := check("cuCtxEnablePeerAccess", call(syms.cuCtxEnablePeerAccess, uintptr(peer), 0))
	if IsResult(err, ErrorPeerAccessAlreadyOn) {
		return nil
	}
	return err
}

// WithContext runs f on the calling goroutine locked to its OS thread with c
// current, then restores the thread's previous context and unlocks it.
func WithContext(c Context, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := Current()
	if err != nil {
		return err
	}
	if err := SetCurrent(c); err != nil {
		return err
	}
	defer SetCurrent(prev)
	return f()
}

// Worker is a goroutine locked to its own OS thread with one context
// current for its whole life. Every function given to Do runs there, in
// order, so code that uses the context never needs to think about threads.
type Worker struct {
	ctx  Context
	reqs chan func()
	done chan struct{}
}

// NewWorker starts a worker with c current.
func NewWorker(c Context) (*Worker, error) {
	if err := ready(); err != nil {
		return nil, err
	}
	w := &Worker{ctx: c, reqs: make(chan func()), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer close(w.done)
		// Leave the thread with no context current and give it back to
		// Go: a locked goroutine's thread would exit with it, and in a cgo
		// build that runs the driver's thread destructors against contexts
		// that may be gone by then.
		defer runtime.UnlockOSThread()
		defer SetCurrent(0)
		if err := SetCurrent(c); err != nil {
			errc <- err
			return
		}
		errc <- nil
		for f := range w.reqs {
			f()
		}
	}()
	if err := <-errc; err != nil {
		return nil, err
	}
	return w, nil
}

// Context returns the worker's context.
func (w *Worker) Context() Context { return w.ctx }

// Do runs f on the worker's thread and returns its error.
func (w *Worker) Do(f func() error) error {
	var err error
	done := make(chan struct{})
	w.reqs <- func() { err = f(); close(done) }
	<-done
	return err
}

// Close stops the worker after the functions already given to it.
func (w *Worker) Close() {
	close(w.reqs)
	<-w.done
}
