package ce

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// The mailbox is a file in host shared memory (/dev/shm) that the
// processes of one job map: for each ordered pair of ranks (from, to) it
// holds the receiver's posts (which registered buffer, offset and size the
// next transfer goes to, and that its ready event has been recorded) and the
// sender's and receiver's progress counters. Each field is written by one
// process only; sequence numbers are published last with atomic stores, so
// a reader that sees a number also sees what it covers. A transfer's host
// handshake is a few cache-line round trips (well under a microsecond),
// against tens of microseconds for a message over the host transport.

// mailSlots is how many transfers of one ordered pair may be in flight:
// the IPC events of a pair are reused round robin, so a rank records slot
// s%mailSlots only after the peer has waited on its use by transfer
// s-mailSlots. One call may hold at most this many transfers per pair.
const mailSlots = 16

// post is one receive posted by the receiver: seq is written last.
type post struct {
	seq   uint64
	reg   uint64
	off   uint64
	bytes uint64
}

// pairBox is the mailbox of the ordered pair (from, to).
type pairBox struct {
	posts   [mailSlots]post // written by to: the receive of transfer seq, its ready event recorded
	done    uint64          // written by from: last transfer whose copy and done event are queued
	_       [56]byte
	bad     uint64 // written by from: last transfer it refused (the post did not match the send)
	_       [56]byte
	ackRdy  uint64 // written by from: last transfer whose ready event it has waited on
	_       [56]byte
	ackDone uint64 // written by to: last transfer whose done event it has waited on
	_       [56]byte
	// The flag path's pipelined all-reduce writes into the peer's output:
	// where that lies (registration and offset) is posted here by to for
	// its seq-th such operation, and from acknowledges having read it.
	outs   [mailSlots]post // written by to
	ackOut uint64          // written by from
	_      [56]byte
}

const (
	boxMagic  = 0x76636c6c2d636531 // "vccl-ce1"
	boxHeader = 64
)

// mailbox is the mapped file.
type mailbox struct {
	mem  []byte
	n    int
	path string
}

// After the pair boxes come each rank's export table (exportSlots
// entries) and each rank's state word.
func mailboxSize(n int) int {
	return boxHeader + n*n*int(unsafe.Sizeof(pairBox{})) + n*exportSlots*int(unsafe.Sizeof(exportEntry{})) + n*stateBytes
}

// createMailbox makes and maps the file for n ranks in dir (empty: /dev/shm
// when it exists, else the temporary directory).
func createMailbox(dir string, n int) (*mailbox, error) {
	if dir == "" {
		dir = os.TempDir()
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			dir = "/dev/shm"
		}
	}
	f, err := os.CreateTemp(dir, "vccl-ce-*")
	if err != nil {
		return nil, fmt.Errorf("ce: mailbox: %w", err)
	}
	defer f.Close()
	size := mailboxSize(n)
	if err := f.Truncate(int64(size)); err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("ce: mailbox: %w", err)
	}
	mem, err := mapFile(f, size)
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("ce: mailbox: %w", err)
	}
	m := &mailbox{mem: mem, n: n, path: f.Name()}
	atomic.StoreUint64(m.word(8), uint64(n))
	atomic.StoreUint64(m.word(0), boxMagic)
	return m, nil
}

// openMailbox maps a mailbox another process created.
func openMailbox(path string, n int) (*mailbox, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("ce: mailbox: %w (is every rank on the same host?)", err)
	}
	defer f.Close()
	size := mailboxSize(n)
	if st, err := f.Stat(); err != nil || st.Size() != int64(size) {
		return nil, fmt.Errorf("ce: mailbox %s: size does not match a job of %d ranks", path, n)
	}
	mem, err := mapFile(f, size)
	if err != nil {
		return nil, fmt.Errorf("ce: mailbox: %w", err)
	}
	m := &mailbox{mem: mem, n: n, path: path}
	if atomic.LoadUint64(m.word(0)) != boxMagic || atomic.LoadUint64(m.word(8)) != uint64(n) {
		unmapFile(mem)
		return nil, fmt.Errorf("ce: mailbox %s: not a mailbox of %d ranks", path, n)
	}
	return m, nil
}

func (m *mailbox) word(off int) *uint64 { return (*uint64)(unsafe.Pointer(&m.mem[off])) }

// pair returns the box of transfers from rank from to rank to.
func (m *mailbox) pair(from, to int) *pairBox {
	off := boxHeader + (from*m.n+to)*int(unsafe.Sizeof(pairBox{}))
	return (*pairBox)(unsafe.Pointer(&m.mem[off]))
}

func (m *mailbox) close() error {
	if m == nil || m.mem == nil {
		return nil
	}
	err := unmapFile(m.mem)
	m.mem = nil
	return err
}

// postRecv publishes the receive of transfer seq.
func (b *pairBox) postRecv(seq uint64, reg, off, bytes int) {
	b.posts[seq%mailSlots].publish(seq, reg, off, bytes)
}

// posted returns the receive of transfer seq if the receiver has posted it.
func (b *pairBox) posted(seq uint64) (reg, off, bytes int, ok bool) {
	return b.posts[seq%mailSlots].read(seq)
}

// postOut publishes where this rank's output of pipelined operation seq
// lies.
func (b *pairBox) postOut(seq uint64, reg, off, bytes int) {
	b.outs[seq%mailSlots].publish(seq, reg, off, bytes)
}

// postedOut returns the output the receiver posted for operation seq.
func (b *pairBox) postedOut(seq uint64) (reg, off, bytes int, ok bool) {
	return b.outs[seq%mailSlots].read(seq)
}

// publish writes the slot for seq, its sequence number last: a reader that
// sees seq sees the rest.
func (p *post) publish(seq uint64, reg, off, bytes int) {
	atomic.StoreUint64(&p.reg, uint64(reg))
	atomic.StoreUint64(&p.off, uint64(off))
	atomic.StoreUint64(&p.bytes, uint64(bytes))
	atomic.StoreUint64(&p.seq, seq)
}

// read returns the slot's contents if they are those of seq.
func (p *post) read(seq uint64) (reg, off, bytes int, ok bool) {
	if atomic.LoadUint64(&p.seq) != seq {
		return 0, 0, 0, false
	}
	return int(atomic.LoadUint64(&p.reg)), int(atomic.LoadUint64(&p.off)), int(atomic.LoadUint64(&p.bytes)), true
}

// errPeerTimeout is wrapped by the error of a wait that ran out of time.
var errPeerTimeout = errors.New("peer did not take part in time")

// waiter spins on a condition set by another process: tight at first (the
// peer is usually microseconds behind), then yielding, then sleeping, and
// runs idle (telemetry polling) between tries. It gives up at the deadline
// or when ctx is done.
type waiter struct {
	ctx     context.Context
	timeout time.Duration
	idle    func()
}

func (w waiter) until(what func() string, cond func() bool) error {
	if cond() {
		return nil
	}
	start := time.Now()
	for spins := 1; ; spins++ {
		if cond() {
			return nil
		}
		if w.idle != nil && spins&63 == 0 {
			w.idle()
		}
		switch {
		case spins < 20000:
		case spins < 40000:
			runtime.Gosched()
		default:
			time.Sleep(20 * time.Microsecond)
		}
		if spins&1023 == 0 {
			if err := w.ctx.Err(); err != nil {
				return fmt.Errorf("ce: waiting for %s: %w", what(), err)
			}
			if w.timeout > 0 && time.Since(start) > w.timeout {
				return fmt.Errorf("ce: waiting for %s: %w after %v", what(), errPeerTimeout, w.timeout)
			}
		}
	}
}

func atomicLoad(p *uint64) uint64     { return atomic.LoadUint64(p) }
func atomicStore(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
