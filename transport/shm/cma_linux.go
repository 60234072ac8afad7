package shm

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Single copy (cross-memory attach, as Open MPI's vader BTL does). A send
// of at least cmaMin bytes whose receive offered it (a bit in the credit)
// puts only its buffer's address in the ring; the receiver copies the
// payload straight from the sender's memory into the posted receive with
// one process_vm_readv and acknowledges, and only then does the send
// complete. The ring's two copies make the sender write lines the
// receiver's core just read; when the two cores are far apart (on a VM the
// placement can change from one launch to the next) each such write waits
// for the line to come back, and a large transfer takes several times
// longer. A single copy by the receiver only reads the sender's lines and
// writes its own.
//
// It is used only where it is known to work: each process allows any
// process of its user to read it (PR_SET_PTRACER_ANY, for Yama's
// ptrace_scope 1, as Open MPI does); each receiver reads a probe word of
// the sender's memory and compares it with the cookie the sender published;
// if that fails (no permission, a seccomp filter, another pid namespace)
// its receives never offer single copy. A read that fails later is
// acknowledged as failed: the sender resends that message through the ring
// and keeps to the ring. Either way the process logs a warning (slog's
// default logger) naming the peer and why, once.
//
// Safety: after each read the receiver checks, through a pidfd taken at
// set-up, that the peer process still exists, so a recycled pid is never
// read from; and that the peer has not closed its QP, since Close flushes
// the send and its owner may then reuse the buffer (Close publishes
// "closed" before it flushes).

// Single copy costs more than the ring where the two cores are close and
// far less where they are far, so the sender chooses: it times its copies
// into the ring (rateSample bytes or more, one clock read either side) and
// takes single copy while their moving average is below cmaBelow, a rate
// between what close and far placements show. Once single copy carries a QP,
// the ring's copies cannot say when to leave it (they write lines no one
// touched for a while, slow in either placement); the receiver times each
// single-copy record's trip from the sender's clock instead (noteHandoff).
//
// Where the ring's plain copies run slow, a one-way send (a broadcast's)
// then chooses between single copy and a ring it streams into, by what
// each delivered last (QP.streamWins): on this VM single copy reads 5-8
// bytes per ns on pages holding data in either placement, and a far
// broadcast through a streamed ring delivered about twice that
// (BENCHMARKS.md, ninth round).
const (
	rateSample = 32 << 10
	cmaBelow   = 8.0 // bytes per ns
	// rateStart: the copy rate starts at the median of this many timed
	// copies (QP.noteCopy).
	rateStart = 5
	// restreamAfter: while the rate is below cmaBelow, records go into
	// the ring with non-temporal stores (QP.ringCopyFor); after this many
	// bytes, a lap of the ring goes plainly and the rate is measured
	// afresh.
	restreamAfter = 64 << 20
	// replainAfter: while the rate is below cmaBelow and the plain ring
	// delivers more than a streamed one did, records go in plainly; after
	// this many bytes a streamed spell measures that again.
	replainAfter = 256 << 20
	// reduceQuiet: after a reducing receive, this many plain receives
	// on the QP do not offer single copy (QP.drainPosts): an all-reduce
	// reduces out of the ring in one pass, and offering single copy in
	// between broke its streamed ring into slow single-copy reads.
	reduceQuiet = 16
	// handoffWindow, closeHandoff, closeWindows, cmaCloseRest: a receiver
	// that reads single-copy records handoffWindow at a time and finds,
	// closeWindows windows in a row, the least publish-to-read time of
	// one below closeHandoff (the cores are close: their cache-line
	// hand-off is several times quicker than far cores') does not offer
	// single copy for its next cmaCloseRest receives. The least of a
	// window filters out the reads that waited; several windows in a row
	// are needed because a far pair's window now and then reads low: one
	// such window alone is no verdict.
	handoffWindow = 32
	closeHandoff  = 100 // ns
	closeWindows  = 2
	cmaCloseRest  = 64
)

// cmaMin is the smallest message sent by single copy; 0 turns it off. The
// collectives send a 1 MiB call in 128 KiB chunks (see docs/design.md).
var cmaMin = 64 << 10

// cmaAlways makes every eligible send take single copy, whatever the rate,
// for the tests of the path.
var cmaAlways atomic.Bool

var (
	probeCookie = rand.Uint64() | 1
	probeWord   atomic.Uint64
	ptracerOnce sync.Once
)

func init() { probeWord.Store(probeCookie) }

var (
	errPeerExited = errors.New("peer process exited")
	errNoCMA      = errors.New("no single copy from this peer")
)

// cmaFault makes reads fail, for the tests of the fallback.
var cmaFault atomic.Bool

// publishProbe lets peers read this process (Yama) and tells the peer where
// to read this process's probe word.
func publishProbe(sc sideCtl) {
	ptracerOnce.Do(func() {
		// EINVAL without Yama: nothing to allow then.
		unix.Prctl(unix.PR_SET_PTRACER, unix.PR_SET_PTRACER_ANY, 0, 0, 0)
	})
	sc.cookie.Store(probeCookie)
	sc.probe.Store(uint64(uintptr(unsafe.Pointer(&probeWord))))
}

// cmaPeer is a receiver's handle on the sending process.
type cmaPeer struct {
	pid   int
	pidfd int
	mem   *peerMem // the peer's shared buffers (AllocShared) mapped here
}

func openCMAPeer(pid int) (*cmaPeer, error) {
	if pid <= 0 {
		return nil, errors.New("the peer's pid is unknown")
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open(%d): %w", pid, err)
	}
	return &cmaPeer{pid: pid, pidfd: fd, mem: &peerMem{pid: pid}}, nil
}

func (c *cmaPeer) close() {
	if c != nil {
		unix.Close(c.pidfd)
	}
}

// probe returns nil if the peer's probe word reads back as its cookie,
// else why not.
func (c *cmaPeer) probe(sc sideCtl) error {
	addr, cookie := sc.probe.Load(), sc.cookie.Load()
	if addr == 0 {
		return errors.New("the peer published no probe word")
	}
	v := new(uint64)
	if err := c.read(unsafe.Slice((*byte)(unsafe.Pointer(v)), 8), addr, false); err != nil {
		return err
	}
	if *v != cookie {
		return fmt.Errorf("the peer's probe word read %#x, not its cookie", *v)
	}
	return nil
}

// cmaWarned: the process has said that single copy is off for a peer.
var cmaWarned atomic.Bool

// warnNoCMA says, once a process, that single copy is off for a peer and
// why: messages of cmaMin bytes and more then take the ring's two copies,
// which a job should learn from its log rather than from a profile.
func (q *QP) warnNoCMA(why error) {
	if !cmaWarned.CompareAndSwap(false, true) {
		return
	}
	cfg := q.core.Config()
	slog.Warn(fmt.Sprintf("vccl shm: single copy (process_vm_readv) is off; messages of %d KiB and more take the ring's two copies", cmaMin>>10),
		"rank", cfg.Rank, "peer", cfg.Peer, "peer_pid", q.peerPid, "why", why.Error(),
		"hint", "ranks must run as one user in one PID namespace, with kernel.yama.ptrace_scope 0 or 1, and no seccomp filter refusing process_vm_readv")
}

// read copies len(dst) bytes at addr in the peer into dst, from this
// process's mapping where they lie in a shared buffer of the peer's, then
// checks that the peer is still the process it was at set-up. With stream,
// dst is written past the caches: from the mapping directly, and by single
// copy a piece at a time into a bounce buffer that stays in this core's
// cache, streamed from there (the kernel's copy writes plainly, reading
// each line of dst before overwriting it). 16 ranks on the 16-core host
// gathered 64 MiB 1.7x faster so from heap buffers, and 8 ranks' all-reduce
// of 64 MiB ran 1.15-1.25x faster (decision 0062's addendum).
func (c *cmaPeer) read(dst []byte, addr uint64, stream bool) error {
	if cmaFault.Load() {
		return fmt.Errorf("process_vm_readv from pid %d: %w (injected)", c.pid, unix.EFAULT)
	}
	if v := c.mem.view(addr, len(dst)); v != nil {
		if stream {
			copyStream(dst, v)
		} else {
			copy(dst, v)
		}
		dst = nil
	}
	if stream && len(dst) >= pullPiece {
		bp := bounces.Get().(*[pullPiece]byte)
		defer bounces.Put(bp)
		for len(dst) > 0 {
			b := bp[:min(len(dst), pullPiece)]
			if err := c.readVM(b, addr); err != nil {
				return err
			}
			copyStream(dst, b)
			dst, addr = dst[len(b):], addr+uint64(len(b))
		}
	} else if err := c.readVM(dst, addr); err != nil {
		return err
	}
	return c.alive()
}

// readVM copies len(dst) bytes at addr in the peer into dst by single
// copy.
func (c *cmaPeer) readVM(dst []byte, addr uint64) error {
	for len(dst) > 0 {
		n, err := processVMReadv(c.pid, dst, addr)
		if err != nil {
			// An exiting process's memory may already be gone (EFAULT).
			if err == unix.ESRCH || unix.PidfdSendSignal(c.pidfd, 0, nil, 0) != nil {
				return errPeerExited
			}
			return fmt.Errorf("process_vm_readv of %d bytes at %#x from pid %d: %w", len(dst), addr, c.pid, err)
		}
		if n <= 0 {
			return io.ErrUnexpectedEOF
		}
		dst, addr = dst[n:], addr+uint64(n)
	}
	return nil
}

// alive returns errPeerExited unless the peer is still the process it was
// at set-up: memory read from a pid recycled since is no message.
func (c *cmaPeer) alive() error {
	if unix.PidfdSendSignal(c.pidfd, 0, nil, 0) != nil {
		return errPeerExited
	}
	return nil
}

// processVMReadv copies len(dst) bytes at addr in process pid into dst
// with one process_vm_readv. It is a raw system call, which the Go
// scheduler does not see: a copy of a megabyte is long, and a rank bound
// to one CPU (GOMAXPROCS=1) that enters a scheduler-visible call that long
// has its P taken away by sysmon, which then keeps waking at its shortest
// period on that CPU instead of backing off (as transport/tcp's socket
// calls did). The call never waits for anything but the copy, as a raw
// call must.
func processVMReadv(pid int, dst []byte, addr uint64) (int, error) {
	local := unix.Iovec{Base: &dst[0]}
	local.SetLen(len(dst))
	remote := unix.RemoteIovec{Base: uintptr(addr), Len: len(dst)}
	n, _, e := unix.RawSyscall6(unix.SYS_PROCESS_VM_READV, uintptr(pid), uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
