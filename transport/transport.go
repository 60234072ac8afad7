package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// Opcode says what a WR does.
type Opcode uint8

const (
	OpSend Opcode = iota
	OpRecv
)

func (o Opcode) String() string {
	if o == OpRecv {
		return "recv"
	}
	return "send"
}

// Tag labels a WR for telemetry: the collective it belongs to and its step.
type Tag struct {
	CollSeq uint64
	Step    uint32
	Op      flowtel.Op
	Algo    flowtel.Algorithm
	Dtype   flowtel.Datatype
}

// WR is a work request. For a send, Buf holds the payload; for a receive,
// Buf is where the payload lands and its length is the most it accepts. The
// caller must not touch Buf until the WR's completion has been polled.
type WR struct {
	ID  uint64 // the caller's id, returned in the WC
	Buf []byte
	MR  *MR // registered region holding Buf, or nil for unregistered memory
	Tag Tag

	// Reduce and Src, on a receive posted to a QP that implements
	// Reducer, make the message land reduced instead of copied: the
	// backend calls Reduce(Buf[i:j], msg[i:j], Src[i:j]) over the message
	// in pieces that start at multiples of ReducePiece bytes, and the
	// caller's function stores msg op Src into Buf. Src is at least as
	// long as Buf (PostRecv refuses it otherwise); it may be Buf itself.
	// Neither is touched beyond the message, and a receive that fails may
	// have reduced part of it. Telemetry is that of any receive. A QP that
	// does not implement Reducer ignores both fields.
	Reduce ReduceFunc
	Src    []byte

	// Stream, on a receive, says that nothing reads Buf again soon (a
	// large collective's last landing of that part of its output): a
	// backend that copies into Buf may write it with non-temporal
	// stores, past the caches, and so skip reading every line from
	// memory before overwriting it. A hint; backends may ignore it.
	Stream bool

	// Tee, on a send posted to a QP that implements Teer, is a buffer as
	// long as Buf that the backend also copies the payload into as it
	// sends it (an out-of-place all-gather's own block): where the
	// backend copies Buf anyway, each piece is read once, while it is in
	// the core's first-level cache, and written twice. Tee must not
	// overlap Buf. By the send's successful completion Tee holds Buf's
	// bytes; a send that fails may have copied part of them. A QP that
	// does not implement Teer ignores it.
	Tee []byte

	// More, on a send, says that another send to the same QP is posted
	// right after this one: a backend may hold this one's write until that
	// post, or the next Poll, and write both at once (over TCP one
	// system call and one pass through the stack then carry both). A
	// hint; backends may ignore it.
	More bool

	// Pull, on a receive, asks the backend to read the message out of the
	// sender's memory where it can (single copy), whatever it would
	// choose by its own measurements: the caller knows that every rank is
	// moving data at once, where a copy into a link and out again costs
	// the memory bandwidth that all of them share. A reducing receive
	// then reduces as it reads. A hint; backends may ignore it.
	Pull bool
}

// ReduceFunc combines a piece of a received message with the matching
// piece of a source buffer into dst (dst = msg op src). dst may be src.
type ReduceFunc func(dst, msg, src []byte)

// ReducePiece divides the offsets at which a backend cuts a reduced
// receive into pieces, so a piece never splits an element of up to 16
// bytes.
const ReducePiece = 16

// Reducer is implemented by QPs that honour WR.Reduce: a receive reduced
// as it arrives saves the copy into Buf and the pass over it that a
// separate reduction would make.
type Reducer interface {
	QP
	// ReducesOnReceive reports whether this QP honours WR.Reduce.
	ReducesOnReceive() bool
}

// Teer is implemented by QPs that honour WR.Tee.
type Teer interface {
	QP
	// TeesOnSend reports whether this QP honours WR.Tee.
	TeesOnSend() bool
}

// Mailboxer is implemented by QPs whose two ends share memory (shm): each
// end owns a mailbox of two slots that the other end reads in place, for
// callers that exchange small messages in lockstep without WRs
// (collective's small all-reduce). The protocol is the caller's: write the
// slot of call k (parity k&1), Publish(k, tag), wait until the peer has
// published k, check its tag, read its slot; rewrite slot k&1 at call k+2
// only after the peer has published k+1, which a lockstep peer does only
// after it finished reading call k. A mailbox lives as long as its QP: stop
// using it before Close.
type Mailboxer interface {
	QP
	Mailbox() Mailbox
}

// Mailbox is one end's view of a QP's mailboxes (see Mailboxer).
type Mailbox interface {
	// Slot returns this end's slot of n bytes for call k; PeerSlot the
	// peer's, to be read only once Arrived(k) and only for a call of the
	// same n on both ends (where a slot lies may depend on n). n is at
	// most the backend's slot size.
	Slot(k uint32, n int) []byte
	PeerSlot(k uint32, n int) []byte
	// SlotSize is the most bytes a slot holds.
	SlotSize() int
	// StreamSlot copies src into this end's slot for call k as Slot's
	// copy would, but past this core's caches (non-temporal stores), for
	// a slot that this end does not read back and the peer reads once:
	// a plain store first takes each line back from the core that read
	// it last, which between far cores costs more than the copy.
	StreamSlot(k uint32, src []byte)
	// Publish tells the peer that this end is done with call k, whose slot
	// (if the call wrote one) is ready, and what the call was (tag).
	Publish(k uint32, tag uint32)
	// PeerTag returns the tag of the peer's call k; ok is false until the
	// peer published k, and again once it has gone many calls further.
	PeerTag(k uint32) (tag uint32, ok bool)
	// Arrived reports whether the peer has published call k or a later one.
	Arrived(k uint32) bool
	// Sleep blocks until the peer publishes call k, at most d, or earlier
	// (callers check Arrived again); it is for waits that have stopped
	// spinning.
	Sleep(k uint32, d time.Duration)
	// A call published at k may go on in parts i = 1, 2, ...: part i's
	// slot is that of call k+i (Slot(k+i, n)), written under the same
	// rule (rewrite it only once the peer published part i-1), announced
	// by PublishPart(k, i). ArrivedPart and SleepPart are Arrived and
	// Sleep for part i (part 0 is the call itself); a peer that went on
	// to a later call counts as arrived. A call that goes on in parts must
	// be published with a tag of at least 1<<31, and the peer must not
	// start call k+1 before this end has seen its last part.
	PublishPart(k, i uint32)
	ArrivedPart(k, i uint32) bool
	SleepPart(k, i uint32, d time.Duration)
	// Err returns why the peer is gone once it is (what it published
	// before stays readable), else nil.
	Err() error
	// A call of more than 56 bytes may lend its data instead of writing
	// its slot: Lend(k, addr) before Publish(k) says it lies at addr in
	// this process (Lend(k, 0): in the slot), and the peer, seeing
	// PeerLent(k), copies it straight out of this process's memory with
	// ReadLent. The lender keeps it unchanged until the peer says (the
	// caller's protocol, a part) that it read it, or withdraws it first
	// (Withdraw), after which a read that was still copying fails. Lend
	// only to a peer that can read this process: ReadsPeer finds out, once,
	// whether this end can read the peer, and PeerReadsMine is the peer's
	// answer, false until it asked. ReadLent's offset is from the lent
	// address and may reach other memory the lender keeps for the call
	// (collective's all-reduce by loans reads its output that way, at a
	// distance the lender's slot gives); its bounds are the caller's
	// protocol, and a read outside the lender's memory fails.
	// ReadLentStream is ReadLent for a destination nothing reads soon: where
	// the copy is this process's own (the peer's buffer is mapped here) it
	// writes past the caches.
	ReadsPeer() bool
	PeerReadsMine() bool
	Lend(k uint32, addr uintptr)
	Withdraw(k uint32)
	PeerLent(k uint32) bool
	ReadLent(k uint32, dst []byte, off int) error
	ReadLentStream(k uint32, dst []byte, off int) error
}

// WC is a work completion.
type WC struct {
	ID     uint64 // the WR's ID
	Op     Opcode
	Status flowtel.Status
	Bytes  int   // bytes moved (for a receive, the message length)
	Err    error // why Status is not OK
	TsNs   int64 // when the backend completed it, on the recorder's time base; 0 with telemetry off
}

// QP is a connected queue pair to one peer.
type QP interface {
	// PostSend queues a send. It never blocks; it fails only for a closed
	// QP or an invalid WR. Transfer errors arrive as WCs.
	PostSend(wr WR) error
	// PostRecv queues a receive and grants the peer one credit.
	PostRecv(wr WR) error
	// Poll moves up to len(dst) completions into dst and returns how many.
	Poll(dst []WC) int
	// Outstanding returns the WRs posted and not yet polled.
	Outstanding() int
	// Info describes the QP.
	Info() Info
	// Close flushes outstanding WRs (they complete with StatusFlushed) and
	// releases the connection. It is safe from any goroutine and idempotent.
	Close() error
}

// Info describes a QP.
type Info struct {
	Backend string
	Rank    int32
	Peer    int32
	QPID    uint32
	Channel uint16
	Path    flowtel.Path
	Local   string // local address, where the backend has one
	Remote  string // remote address, where the backend has one
}

// Config sets up one QP.
type Config struct {
	Rank     int32
	Peer     int32
	QPID     uint32
	Comm     uint32
	Channel  uint16
	Path     flowtel.Path
	Recorder *flowtel.Recorder // nil: telemetry off
	Notifier *Notifier         // signalled when completions arrive; may be nil
	Token    string            // job token presented in the handshake
}

// ListenConfig sets up a listener.
type ListenConfig struct {
	Addr  string // backend-specific; "" picks a default (free port, fresh name)
	Token string // connections presenting another token are refused
}

// Listener accepts QPs dialled by peers. Connections are matched by key, a
// string both ends agree on (for example "comm/channel/from->to"), so many
// peers may dial at once in any order.
type Listener interface {
	Addr() string
	Accept(ctx context.Context, key string, cfg Config) (QP, error)
	Close() error
}

// Backend creates QPs of one kind.
type Backend interface {
	// Name is the backend's name: it keys the listen addresses ranks
	// exchange, so every rank that uses a backend names it alike.
	Name() string
	// Capabilities says what its QPs are, for callers that choose and
	// tune around backends without knowing them.
	Capabilities() Capabilities
	Listen(ctx context.Context, lc ListenConfig) (Listener, error)
	Dial(ctx context.Context, addr, key string, cfg Config) (QP, error)
}

// Capabilities describes a backend's QPs in the terms a caller chooses and
// tunes by (collective picks a backend per peer by Reach, and sizes its
// pipeline and its waiting by the rest). The zero value is the most
// cautious: a backend that reaches only its own process, where a caller
// sleeps between polls.
type Capabilities struct {
	// Reach is how far apart the two ends of a QP may be.
	Reach Reach
	// SharedMemory: the ends of a QP share memory, and its QPs implement
	// Mailboxer, so callers may exchange small messages through it in
	// place.
	SharedMemory bool
	// StreamSocket: every message crosses a kernel byte stream (TCP), so
	// each costs system calls and a pass through the kernel's stack at
	// both ends; callers move data in fewer, larger messages and flag
	// WR.More to let sends leave in one write.
	StreamSocket bool
	// PollProgresses: Poll moves the data itself, so a caller that polls
	// without pause makes progress with every poll. False where
	// goroutines of the backend move it, which a caller polling on would
	// keep off their core.
	PollProgresses bool
}

// Reach is how far a backend's links reach, from nearest to farthest: a
// backend that reaches farther also reaches nearer.
type Reach uint8

const (
	ReachProcess Reach = iota // ranks in one process
	ReachHost                 // processes on one host: one kernel and network namespace
	ReachNetwork              // any host the network reaches
)

func (r Reach) String() string {
	switch r {
	case ReachProcess:
		return "process"
	case ReachHost:
		return "host"
	case ReachNetwork:
		return "network"
	}
	return fmt.Sprintf("Reach(%d)", uint8(r))
}

// Errors shared by every backend. Completions wrap them, so errors.Is works.
var (
	ErrClosed      = errors.New("transport: queue pair closed")
	ErrPeerDead    = errors.New("transport: peer connection lost")
	ErrTooLarge    = errors.New("transport: message larger than the posted receive")
	ErrBadToken    = errors.New("transport: job token mismatch")
	ErrMRMismatch  = errors.New("transport: buffer outside its memory region")
	ErrNotAccepted = errors.New("transport: no connection for key")
	ErrKeyClaimed  = errors.New("transport: connection key claimed already")
)

// TooLargeError is the error of a message that does not fit the receive
// posted for it; it names both sizes.
func TooLargeError(msg, buf int) error {
	return fmt.Errorf("%w: message of %d bytes, receive buffer of %d bytes", ErrTooLarge, msg, buf)
}

// Notifier wakes a progress engine that sleeps between polls. Backends signal
// it when a completion is queued; a signal is never blocked on and repeated
// signals coalesce.
type Notifier struct{ ch chan struct{} }

// NewNotifier returns a notifier.
func NewNotifier() *Notifier { return &Notifier{ch: make(chan struct{}, 1)} }

// Signal wakes the waiter, if any. It is safe on a nil Notifier.
func (n *Notifier) Signal() {
	if n == nil {
		return
	}
	select {
	case n.ch <- struct{}{}:
	default:
	}
}

// C returns the channel a waiter selects on.
func (n *Notifier) C() <-chan struct{} { return n.ch }
