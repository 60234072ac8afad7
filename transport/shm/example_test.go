package shm_test

import (
	"fmt"
	"log"

	"github.com/vccl-go/vccl/transport/shm"
)

// Buffers from AllocShared are ordinary byte slices to the collectives;
// the shm transport's peers on the host read them from a mapping of their
// own instead of by process_vm_readv.
func ExampleAllocShared() {
	buf, err := shm.AllocShared(1 << 20)
	if err != nil {
		log.Fatal(err)
	}
	defer shm.FreeShared(buf) // kept for the next AllocShared, not unmapped
	fmt.Println(len(buf), buf[0])
	// Output: 1048576 0
}
