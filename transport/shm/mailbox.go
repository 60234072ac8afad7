//go:build linux

package shm

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vccl-go/vccl/transport"
)

// Mailboxes (transport.Mailboxer). Besides its rings, a segment holds one
// mailbox per side, which only that side writes: two sequence lines, a
// "waiting" word, the tags of the last mbTags publications and two slots of
// MailboxSlot bytes. They are for callers above the transport that
// exchange small fixed messages in lockstep (collective's small all-reduce):
// write the slot of call k (parity k&1), Publish(k), wait until the peer's
// sequence reaches k, read the peer's slot. No WR, no credit, no ring
// record.
//
// Sequence line k&1 holds the number and tag of the side's last call of
// that parity (tag<<32 | k), and, for calls of at most MailboxInline bytes,
// their slot: a peer in step then reads the call, its tag and its bytes in
// one cache-line hand-off, where a separate slot line (and a tag history
// line) would each cost one more, a few hundred ns between far cores.
// Larger calls' slots follow in their own lines.
//
// Reuse is the caller's protocol: a side may rewrite slot k&1 at call k+2
// only once the peer has finished reading it, which a lockstep caller knows
// when the peer published k+1 (it does so only after finishing call k).
// Publish itself rewrites only the sequence word of line k&1, never the
// bytes a peer may still be reading.
//
// Lending: a call of more than MailboxInline bytes may leave its data in
// the caller's own memory instead of the slot (Lend): the first two words
// of the sequence line's inline bytes, unused by such a call, then carry
// the call's number as a mark and the buffer's address, and the peer reads
// the data with one single-copy read (ReadLent, the cross-memory attach of
// cma_linux.go) straight into its destination, where the slot cost a copy
// in and a copy out. Only an end whose peer said it can read it lends
// (PeerReadsMine): each end probes, once, whether it can read its peer
// (ReadsPeer) and publishes the answer in its waiting line's second word.
// A lender that gives up on its call withdraws the mark (Withdraw) before
// its buffer may change, and a read that finds the mark gone after it
// copied fails, so a late reader never takes bytes its writer no longer
// held for it.
//
// Waiting: a caller polls Arrived, and when it wants to stop spinning calls
// Sleep, which raises the side's waiting word and sleeps on the peer's
// sequence word of the call's parity (a futex in the shared mapping: the
// word's low half); Publish wakes it only when that word is up, so a polling
// peer costs the publisher no system call. Both words are written with
// sequentially consistent atomics (XCHG on amd64), so either the publisher
// sees the waiter's flag or the waiter sees the new sequence before it
// sleeps.
const (
	// MailboxSlot is the size of a mailbox slot in bytes: four of them
	// per QP, 1 MiB beside the rings' 4 MiB. Collective's path takes
	// broadcasts of up to a slot between 2 ranks, and any of its calls
	// up to a slot a rank where ranks outnumber cores.
	MailboxSlot = 256 << 10

	// MailboxInline is the largest slot kept in its call's sequence line:
	// a 64-byte line less the sequence word.
	MailboxInline = 64 - 8

	// mbTags is how many publications' tags a mailbox keeps: a peer that
	// reads a tag after the publisher has gone that many calls further
	// finds it overwritten (PeerTag's ok is false).
	mbTags = 256

	offMbSeq   = 0 // two sequence lines, one a parity
	offMbWait  = 2 * line
	offMbTags  = 3 * line
	offMbSlots = offMbTags + 8*mbTags
	mbStride   = offMbSlots + 2*MailboxSlot
)

// lowHalf is the offset of a uint64's low 32 bits within it: 0 on little-
// endian machines, 4 on big-endian ones; highHalf that of its high 32.
var lowHalf = func() int {
	x := uint64(1)
	if *(*byte)(unsafe.Pointer(&x)) == 1 {
		return 0
	}
	return 4
}()

var highHalf = 4 - lowHalf

// mbSide is one side's mailbox in the mapping.
type mbSide struct {
	seq    [2]*atomic.Uint64 // sequence line p's word: tag<<32 | k of the last call of parity p, or i<<32 | k of part i of call k
	futex  [2]*atomic.Uint32 // its low half, the futex word of calls
	pfutex [2]*atomic.Uint32 // its high half, the futex word of parts (a part leaves the low half as it was)
	inline [2][]byte         // the rest of sequence line p: the slot of a call of at most MailboxInline bytes
	wait   *atomic.Uint32
	reads  *atomic.Uint32    // 1 once this side found it can read its peer (ReadsPeer), 2 once it found it cannot
	lent   [2]*atomic.Uint64 // inline word 0 of line p: k<<32 | 1 while call k's data is lent
	addr   [2]*atomic.Uint64 // inline word 1 of line p: the lent buffer's address
	tags   []atomic.Uint64   // publication k's tag, with k in the high half
	slots  [2][]byte
}

// Mailbox is one QP's pair of mailboxes, seen from this side. It lives in
// the QP's mapping: use it only while the QP is open (Close unmaps it).
type Mailbox struct {
	q          *QP
	mine, peer mbSide

	probe sync.Once
	born  time.Time // when the QP was made: ReadsPeer's wait counts from it
	rd    *cmaPeer  // nil: this side cannot read the peer (ReadsPeer)
}

func newMailbox(q *QP) *Mailbox {
	mem, g := q.seg.mem, q.seg.geo
	side := func(s int) (m mbSide) {
		b := g.mailboxBase(s)
		for p := range 2 {
			o := b + offMbSeq + p*line
			m.seq[p], m.futex[p], m.pfutex[p] = u64At(mem, o), u32At(mem, o+lowHalf), u32At(mem, o+highHalf)
			m.inline[p] = mem[o+8 : o+8+MailboxInline : o+8+MailboxInline]
			m.lent[p], m.addr[p] = u64At(mem, o+8), u64At(mem, o+16)
			o = b + offMbSlots + p*MailboxSlot
			m.slots[p] = mem[o : o+MailboxSlot : o+MailboxSlot]
		}
		m.wait, m.reads = u32At(mem, b+offMbWait), u32At(mem, b+offMbWait+4)
		m.tags = unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&mem[b+offMbTags])), mbTags)
		return m
	}
	return &Mailbox{q: q, mine: side(q.side), peer: side(1 - q.side), born: time.Now()}
}

var _ transport.Mailboxer = (*QP)(nil)

// Mailbox returns the QP's mailboxes.
func (q *QP) Mailbox() transport.Mailbox { return q.mbox }

// place is side m's slot of n bytes for call k.
func (m *mbSide) place(k uint32, n int) []byte {
	if n <= MailboxInline {
		return m.inline[k&1][:n]
	}
	return m.slots[k&1][:n]
}

// SlotSize returns MailboxSlot.
func (m *Mailbox) SlotSize() int { return MailboxSlot }

// Slot returns this side's slot of n bytes (at most MailboxSlot) for call k.
func (m *Mailbox) Slot(k uint32, n int) []byte { return m.mine.place(k, n) }

// StreamSlot copies src into this side's slot for call k past the caches
// (a slot in the sequence line is written plainly).
func (m *Mailbox) StreamSlot(k uint32, src []byte) {
	if len(src) <= MailboxInline {
		copy(m.mine.inline[k&1], src)
		return
	}
	copyStream(m.mine.slots[k&1], src)
}

// PeerSlot returns the peer's slot of n bytes for call k; read it only once
// Arrived(k), and only if the peer's call had n bytes too.
func (m *Mailbox) PeerSlot(k uint32, n int) []byte { return m.peer.place(k, n) }

// Publish tells the peer that this side is done with call k (its slot, if
// it wrote one, is ready), with tag saying what the call was.
func (m *Mailbox) Publish(k uint32, tag uint32) {
	m.mine.tags[k%mbTags].Store(uint64(k)<<32 | uint64(tag))
	m.mine.seq[k&1].Store(uint64(tag)<<32 | uint64(k))
	if m.peer.wait.Load() != 0 {
		futexWake(m.mine.futex[k&1], 1)
	}
}

// PeerTag returns the tag the peer published call k with; ok is false
// when the peer has not published k yet or has gone mbTags calls further.
func (m *Mailbox) PeerTag(k uint32) (tag uint32, ok bool) {
	if e := m.peer.seq[k&1].Load(); uint32(e) == k && !isPart(e) {
		return uint32(e >> 32), true
	}
	e := m.peer.tags[k%mbTags].Load()
	return uint32(e), uint32(e>>32) == k
}

// Arrived reports whether the peer has published call k (or a later one).
// Publications come in order, so line k&1 holds k or a later call once k
// came, and k-2 or an earlier one before.
func (m *Mailbox) Arrived(k uint32) bool { return int32(uint32(m.peer.seq[k&1].Load())-k) >= 0 }

// Sleep waits until the peer publishes call k, at most d; it may return
// early (a signal, a spurious wake-up): the caller checks Arrived again.
func (m *Mailbox) Sleep(k uint32, d time.Duration) {
	m.mine.wait.Store(1)
	if v := uint32(m.peer.seq[k&1].Load()); int32(v-k) < 0 {
		futexWait(m.peer.futex[k&1], v, d)
	}
	m.mine.wait.Store(0)
}

// isPart reports whether sequence word e announces a part (its high half a
// part number, which call tags of calls with parts never are: transport
// docs), not a call.
func isPart(e uint64) bool { hi := uint32(e >> 32); return hi != 0 && hi < 1<<31 }

// PublishPart tells the peer that this side is done with part i (i >= 1)
// of call k, whose slot is call k+i's. It rewrites the sequence line of
// that parity, whose call-k+i-2 bytes the peer has read (its part i-1
// says so), and wakes a peer asleep on the line's part futex.
func (m *Mailbox) PublishPart(k, i uint32) {
	m.mine.seq[(k+i)&1].Store(uint64(i)<<32 | uint64(k))
	if m.peer.wait.Load() != 0 {
		futexWake(m.mine.pfutex[(k+i)&1], 1)
	}
}

// ArrivedPart reports whether the peer has published part i of call k
// (part 0: the call), or gone on to a later call (on either line). Parts
// come in order and a peer publishes part i+2 only after this side's part
// i+1, so line (k+i)&1 holds part i exactly once it came, until a later
// call.
func (m *Mailbox) ArrivedPart(k, i uint32) bool {
	if i == 0 {
		return m.Arrived(k)
	}
	e := m.peer.seq[(k+i)&1].Load()
	return e == uint64(i)<<32|uint64(k) || int32(uint32(e)-k) > 0 || int32(uint32(m.peer.seq[(k+i+1)&1].Load())-k) > 0
}

// SleepPart waits until the peer publishes part i of call k, at most d, or
// earlier: the caller checks ArrivedPart again.
func (m *Mailbox) SleepPart(k, i uint32, d time.Duration) {
	if i == 0 {
		m.Sleep(k, d)
		return
	}
	m.mine.wait.Store(1)
	if e := m.peer.seq[(k+i)&1].Load(); !m.ArrivedPart(k, i) {
		futexWait(m.peer.pfutex[(k+i)&1], uint32(e>>32), d)
	}
	m.mine.wait.Store(0)
}

// Err returns why the peer is gone (transport.ErrPeerDead: died or closed)
// once it is, else nil. What the peer published before it went stays
// readable.
func (m *Mailbox) Err() error {
	if g := m.q.gone.Load(); g != nil {
		return g.err
	}
	return nil
}

// probeWait bounds how long after the QP was made ReadsPeer waits for the
// peer to attach its end of the segment (and publish its probe word): a
// peer that has not by then is failing its own set-up. Counted from the
// QP's making, so that a rank asking each of its peers in turn waits about
// that long in all.
const probeWait = 5 * time.Second

// ReadsPeer reports whether this side can read the peer process's memory
// (ReadLent), finding out the first time it is asked, and publishes the
// answer for the peer (PeerReadsMine). A peer that has not attached yet is
// waited for, up to probeWait after the QP was made.
func (m *Mailbox) ReadsPeer() bool {
	m.probe.Do(func() {
		q := m.q
		err := q.noCMA
		if err == nil {
			for q.seg.peer.probe.Load() == 0 {
				if time.Since(m.born) >= probeWait {
					err = fmt.Errorf("the peer published no probe word in %v", probeWait)
					break
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
		var rd *cmaPeer
		if err == nil {
			if rd, err = openCMAPeer(q.peerPid); err == nil {
				if err = q.probePeer(rd); err != nil {
					rd.close()
					rd = nil
				}
			}
		}
		if err != nil {
			q.warnNoCMA(err)
			m.mine.reads.Store(2)
			return
		}
		m.rd = rd
		m.mine.reads.Store(1)
	})
	return m.rd != nil
}

// PeerReadsMine reports whether the peer has found that it can read this
// process's memory (its ReadsPeer); false until it has asked.
func (m *Mailbox) PeerReadsMine() bool { return m.peer.reads.Load() == 1 }

// Lend says, for call k of more than MailboxInline bytes, that its data
// lies at addr in this process rather than in the slot; call it before
// Publish(k), and keep the data there unchanged until the peer has said
// (by the caller's protocol) that it read it, or until Withdraw(k). A call
// that does not lend calls Lend(k, 0): a mark left from an earlier call is
// never taken for this one's, but a cleared one costs the peer nothing to
// check.
func (m *Mailbox) Lend(k uint32, addr uintptr) {
	if addr == 0 {
		m.mine.lent[k&1].Store(0)
		return
	}
	m.mine.addr[k&1].Store(uint64(addr))
	m.mine.lent[k&1].Store(uint64(k)<<32 | 1)
}

// Withdraw takes back call k's lent buffer: a peer's read that has not
// finished by now fails (ReadLent) instead of returning what the buffer
// holds next.
func (m *Mailbox) Withdraw(k uint32) { m.mine.lent[k&1].CompareAndSwap(uint64(k)<<32|1, 0) }

// PeerLent reports whether the peer's call k (of more than MailboxInline
// bytes, published) lent its data; read it with ReadLent then, not from
// the slot.
func (m *Mailbox) PeerLent(k uint32) bool { return m.peer.lent[k&1].Load() == uint64(k)<<32|1 }

// errWithdrawn: a lent buffer was taken back while it was read.
var errWithdrawn = errors.New("the peer withdrew its buffer (its call failed) while it was read")

// ReadLent copies len(dst) bytes at offset off of the buffer the peer lent
// with call k into dst (off may be negative: from the lent address to
// other memory the peer keeps for the call). It fails if this side cannot
// read the peer, if the peer did not lend call k, or withdrew it before
// the copy ended, or is gone.
func (m *Mailbox) ReadLent(k uint32, dst []byte, off int) error {
	return m.readLent(k, dst, off, false)
}

// ReadLentStream is ReadLent writing dst past the caches (non-temporal
// stores): from this process's mapping where the lent buffer is one of the
// peer's shared buffers (AllocShared), else by process_vm_readv a piece at
// a time into a buffer in this core's cache, streamed from there. For a
// destination nothing reads before it leaves the caches anyway: an
// all-reduce of 64 MiB at 8 and 16 ranks then ran 1.1-1.4x faster from
// shared buffers, 8 ranks' 1.15-1.25x from heap ones (decision 0062 and
// its addendum).
func (m *Mailbox) ReadLentStream(k uint32, dst []byte, off int) error {
	return m.readLent(k, dst, off, true)
}

func (m *Mailbox) readLent(k uint32, dst []byte, off int, stream bool) error {
	if m.rd == nil {
		return errNoCMA
	}
	if !m.PeerLent(k) {
		return fmt.Errorf("shm: call %d of pid %d lent no buffer", k, m.q.peerPid)
	}
	if len(dst) == 0 {
		return nil
	}
	if err := m.rd.read(dst, m.peer.addr[k&1].Load()+uint64(off), stream); err != nil {
		if err == errPeerExited {
			return fmt.Errorf("%w: shm peer (pid %d) left during a single-copy read", transport.ErrPeerDead, m.q.peerPid)
		}
		return fmt.Errorf("shm: reading call %d's lent buffer: %w", k, err)
	}
	if !m.PeerLent(k) {
		return fmt.Errorf("shm: call %d of pid %d: %w", k, m.q.peerPid, errWithdrawn)
	}
	return nil
}

// closeReader releases the single-copy handle on the peer (QP.release).
func (m *Mailbox) closeReader() {
	if m.rd != nil {
		m.rd.close()
	}
}
