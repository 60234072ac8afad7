package shm

import (
	"errors"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Single copy (cross-memory attach, as Open MPI's vader/CMA does). A send of
// at least cmaMin bytes puts only its buffer's address in the ring; the
// receiver copies the payload straight from the sender's memory into the
// posted receive with process_vm_readv and acknowledges, and only then does
// the send complete. One copy instead of two, on the receiver's core.
//
// It is used only where it is known to work: at set-up each receiver reads a
// probe word of the sender's memory through process_vm_readv and compares it
// with the cookie the sender published; if that fails (no permission, a
// seccomp filter, another pid namespace) the direction stays on the ring. A
// read that fails later (a buffer the kernel cannot read, say device memory)
// is acknowledged as failed and the sender resends that message through the
// ring, then keeps to the ring.
//
// Safety: after each read the receiver checks, through a pidfd taken at
// set-up, that the peer process still exists, so a recycled pid is never
// read from; and that the peer has not closed its QP, since Close flushes the
// send and its owner may then reuse the buffer (Close publishes "closed"
// before it flushes).

// cmaMin is the smallest message sent by single copy; 0 turns it off.
var cmaMin = 256 << 10

var (
	probeCookie = rand.Uint64() | 1
	probeWord   atomic.Uint64
)

func init() { probeWord.Store(probeCookie) }

var errPeerExited = errors.New("peer process exited")

// cmaFault makes reads fail, for the tests of the fallback.
var cmaFault atomic.Bool

// publishProbe tells the peer where to read this process's probe word.
func publishProbe(sc sideCtl) {
	sc.cookie.Store(probeCookie)
	sc.probe.Store(uint64(uintptr(unsafe.Pointer(&probeWord))))
}

// cmaPeer is a receiver's handle on the sending process.
type cmaPeer struct {
	pid   int
	pidfd int
}

func openCMAPeer(pid int) *cmaPeer {
	if pid <= 0 {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil
	}
	return &cmaPeer{pid: pid, pidfd: fd}
}

func (c *cmaPeer) close() {
	if c != nil {
		unix.Close(c.pidfd)
	}
}

// probe reports whether the peer's probe word reads back as its cookie.
func (c *cmaPeer) probe(sc sideCtl) bool {
	addr, cookie := sc.probe.Load(), sc.cookie.Load()
	if addr == 0 {
		return false
	}
	v := new(uint64)
	if err := c.read(unsafe.Slice((*byte)(unsafe.Pointer(v)), 8), addr); err != nil {
		return false
	}
	return *v == cookie
}

// read copies len(dst) bytes at addr in the peer into dst, then checks that
// the peer is still the process it was at set-up.
func (c *cmaPeer) read(dst []byte, addr uint64) error {
	if cmaFault.Load() {
		return unix.EFAULT
	}
	for len(dst) > 0 {
		local := []unix.Iovec{{Base: &dst[0]}}
		local[0].SetLen(len(dst))
		remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(dst)}}
		n, err := unix.ProcessVMReadv(c.pid, local, remote, 0)
		if err != nil {
			if err == unix.ESRCH {
				return errPeerExited
			}
			return err
		}
		if n <= 0 {
			return io.ErrUnexpectedEOF
		}
		dst, addr = dst[n:], addr+uint64(n)
	}
	if err := unix.PidfdSendSignal(c.pidfd, 0, nil, 0); err != nil {
		return errPeerExited
	}
	return nil
}
