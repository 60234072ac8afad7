package collective

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/vccl-go/vccl/transport/shm"
)

// SharedSlice returns n zeroed elements of host memory that the ranks on
// this host read from a mapping of their own, not by process_vm_readv,
// which pins every page it reads (shm.AllocShared; decision 0053): the
// direct algorithms of ranks with a core each come near the memory bound
// with such buffers. Pass it to any operation as a buffer; other memory
// works as before. FreeSharedSlice gives it back for a later SharedSlice.
func SharedSlice[T Element](n int) ([]T, error) {
	var z T
	size := int(unsafe.Sizeof(z))
	if n <= 0 || n > math.MaxInt/size {
		return nil, fmt.Errorf("collective: SharedSlice of %d elements: want a positive count of at most %d", n, math.MaxInt/size)
	}
	b, err := shm.AllocShared(n * size)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n), nil
}

// FreeSharedSlice gives back a slice SharedSlice returned (whole, as it
// returned it). The caller must not use it after.
func FreeSharedSlice[T Element](s []T) { shm.FreeShared(AsBytes(s)) }
