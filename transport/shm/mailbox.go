//go:build linux

package shm

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vccl-go/vccl/transport"
)

// Mailboxes (transport.Mailboxer). Besides its rings, a segment holds one
// mailbox per side: a sequence word, a "waiting" word, the tags of the last
// mbTags publications and two slots of MailboxSlot bytes, which only that
// side writes. They are for callers above the transport that
// exchange small fixed messages in lockstep (collective's small all-reduce):
// write the slot of call k (parity k&1), Publish(k), wait until the peer's
// sequence reaches k, read the peer's slot. No WR, no credit, no ring
// record: one cache line hand-off each way carries the sequence, and the
// slot's lines follow.
//
// Reuse is the caller's protocol: a side may rewrite slot k&1 at call k+2
// only once the peer has finished reading it, which a lockstep caller knows
// when the peer published k+1 (it does so only after finishing call k).
//
// Waiting: a caller polls Arrived, and when it wants to stop spinning calls
// Sleep, which raises the side's waiting word and sleeps on the peer's
// sequence word (a futex in the shared mapping); Publish wakes it only when
// that word is up, so a polling peer costs the publisher no system call.
// Both words are written with sequentially consistent atomics (XCHG on
// amd64), so either the publisher sees the waiter's flag or the waiter sees
// the new sequence before it sleeps.
const (
	// MailboxSlot is the size of a mailbox slot in bytes: four of them
	// per QP, 1 MiB beside the rings' 4 MiB. Collective's path takes
	// broadcasts of up to a slot between 2 ranks, and any of its calls
	// up to a slot a rank where ranks outnumber cores.
	MailboxSlot = 256 << 10

	// mbTags is how many publications' tags a mailbox keeps: a peer that
	// reads a tag after the publisher has gone that many calls further
	// finds it overwritten (PeerTag's ok is false).
	mbTags = 256

	offMbSeq   = 0
	offMbWait  = line
	offMbTags  = 2 * line
	offMbSlots = offMbTags + 8*mbTags
	mbStride   = offMbSlots + 2*MailboxSlot
)

// Mailbox is one QP's pair of mailboxes, seen from this side. It lives in
// the QP's mapping: use it only while the QP is open (Close unmaps it).
type Mailbox struct {
	q                *QP
	mySeq, peerSeq   *atomic.Uint32
	myWait, peerWait *atomic.Uint32
	myTags, peerTags []atomic.Uint64 // publication k's tag, with k in the high half
	mine, peer       [2][]byte
}

func newMailbox(q *QP) *Mailbox {
	mem, g := q.seg.mem, q.seg.geo
	m := &Mailbox{q: q}
	side := func(s int) (seq, wait *atomic.Uint32, tags []atomic.Uint64, slots [2][]byte) {
		b := g.mailboxBase(s)
		for i := range slots {
			o := b + offMbSlots + i*MailboxSlot
			slots[i] = mem[o : o+MailboxSlot : o+MailboxSlot]
		}
		tags = unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&mem[b+offMbTags])), mbTags)
		return u32At(mem, b+offMbSeq), u32At(mem, b+offMbWait), tags, slots
	}
	m.mySeq, m.myWait, m.myTags, m.mine = side(q.side)
	m.peerSeq, m.peerWait, m.peerTags, m.peer = side(1 - q.side)
	return m
}

var _ transport.Mailboxer = (*QP)(nil)

// Mailbox returns the QP's mailboxes.
func (q *QP) Mailbox() transport.Mailbox { return q.mbox }

// Slot returns this side's slot for call k (MailboxSlot bytes).
func (m *Mailbox) Slot(k uint32) []byte { return m.mine[k&1] }

// StreamSlot copies src into this side's slot for call k past the caches.
func (m *Mailbox) StreamSlot(k uint32, src []byte) { copyStream(m.mine[k&1], src) }

// PeerSlot returns the peer's slot for call k; read it only once Arrived(k).
func (m *Mailbox) PeerSlot(k uint32) []byte { return m.peer[k&1] }

// Publish tells the peer that this side is done with call k (its slot, if
// it wrote one, is ready), with tag saying what the call was.
func (m *Mailbox) Publish(k uint32, tag uint32) {
	m.myTags[k%mbTags].Store(uint64(k)<<32 | uint64(tag))
	m.mySeq.Store(k)
	if m.peerWait.Load() != 0 {
		futexWake(m.mySeq, 1)
	}
}

// PeerTag returns the tag the peer published call k with; ok is false
// when the peer has not published k yet or has gone mbTags calls further.
func (m *Mailbox) PeerTag(k uint32) (tag uint32, ok bool) {
	e := m.peerTags[k%mbTags].Load()
	return uint32(e), uint32(e>>32) == k
}

// Arrived reports whether the peer has published call k (or a later one).
func (m *Mailbox) Arrived(k uint32) bool { return int32(m.peerSeq.Load()-k) >= 0 }

// Sleep waits until the peer publishes call k, at most d; it may return
// early (a signal, a spurious wake-up): the caller checks Arrived again.
func (m *Mailbox) Sleep(k uint32, d time.Duration) {
	m.myWait.Store(1)
	if v := m.peerSeq.Load(); int32(v-k) < 0 {
		futexWait(m.peerSeq, v, d)
	}
	m.myWait.Store(0)
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
