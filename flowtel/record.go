package flowtel

import (
	"fmt"
	"unsafe"
)

// SchemaVersion is the version of the Record layout. Trace writers store it in
// their metadata; readers refuse a version they do not know.
const SchemaVersion = 1

// RecordSize is the size of a Record in bytes.
const RecordSize = 64

// Record is one telemetry event: schema v1 of ARCHITECTURE.md. It holds no
// pointers and is written by value; fields are laid out widest first so the
// struct is exactly 64 bytes with no padding.
type Record struct {
	TsNs    int64  // event time, ns, on the job's common time base
	CollSeq uint64 // collective sequence number within the communicator
	WrID    uint64 // links a KindWC to its KindWRPost; see WRID
	Bytes   uint64 // WR payload, collective payload, or dropped count for KindLost

	Rank  int32  // this rank
	Peer  int32  // the other end (-1 when none)
	QP    uint32 // queue pair id, unique within the rank
	Comm  uint32 // communicator id (32-bit hash of its unique id)
	Depth uint32 // WRs outstanding on the QP after this event
	Step  uint32 // algorithm step; for coll_begin/coll_end, the channels the call was split across

	Channel uint16 // channel (parallel ring / stream)

	Kind   Kind      // what happened
	Status Status    // ok, error, flushed, retransmitted
	Op     Op        // collective operation, where it applies
	Algo   Algorithm // algorithm, where it applies
	Dtype  Datatype  // datatype, where it applies
	Path   Path      // PathPrimary or PathBackup
}

// WRID returns the telemetry id of the seq'th send (recv false) or receive
// (recv true) posted on a QP. Transports number sends and receives separately,
// in posting order, and keep the direction in the low bit, so a record says
// which way its bytes flow and a WC pairs with its post in FIFO order.
func WRID(seq uint64, recv bool) uint64 {
	if recv {
		return seq<<1 | 1
	}
	return seq << 1
}

// IsRecv reports whether a WR record describes a receive.
func (r *Record) IsRecv() bool { return r.WrID&1 == 1 }

// The compile-time size check: both array lengths must be non-negative.
var (
	_ [RecordSize - unsafe.Sizeof(Record{})]struct{}
	_ [unsafe.Sizeof(Record{}) - RecordSize]struct{}
)

// Kind says what a Record describes.
type Kind uint8

// Record kinds. Values are part of schema v1: append, never renumber.
const (
	KindInvalid     Kind = iota
	KindCollBegin        // a collective started (Bytes: its payload)
	KindCollEnd          // a collective finished (Status says how)
	KindWRPost           // a work request was posted on a QP
	KindWC               // a work request completed (WrID matches its post)
	KindCreditWait       // a send found no credit and waits (WrID: the send)
	KindCreditGrant      // the credit a waiting send needed arrived (WrID: the send)
	KindFailover         // traffic moved from the primary to the backup path
	KindFailback         // traffic returned to the primary path
	KindLinkDown         // a path was declared dead
	KindLinkUp           // a dead path answered again
	KindLost             // records were dropped before this one (Bytes: how many)
	KindHeartbeat        // the rank ran, waiting with work in flight (Depth: its calls in flight)
	kindCount

	// 0xff is taken: it marks a ring slot holding an Exchange entry.
)

var kindNames = [...]string{
	KindInvalid:     "invalid",
	KindCollBegin:   "coll_begin",
	KindCollEnd:     "coll_end",
	KindWRPost:      "wr_post",
	KindWC:          "wc",
	KindCreditWait:  "credit_wait",
	KindCreditGrant: "credit_grant",
	KindFailover:    "failover",
	KindFailback:    "failback",
	KindLinkDown:    "link_down",
	KindLinkUp:      "link_up",
	KindLost:        "lost",
	KindHeartbeat:   "heartbeat",
}

func (k Kind) String() string { return codeName(kindNames[:], k, "kind") }

// ParseKind returns the Kind named s, as String prints it.
func ParseKind(s string) (Kind, error) {
	k, err := parseCode[Kind](kindNames[:], nil, s, "record kind")
	if k == KindInvalid && err == nil {
		// It prints so, but is no kind a record may have.
		return 0, fmt.Errorf("flowtel: %q is no record kind", s)
	}
	return k, err
}

// Status says how the event a Record describes went.
type Status uint8

// Record statuses. Values are part of schema v1.
const (
	StatusOK            Status = iota
	StatusError                // the WR or collective failed
	StatusFlushed              // the WR was cancelled by a close or a failover
	StatusRetransmitted        // the WR was replayed on another path
	statusCount
)

var statusNames = [...]string{"ok", "error", "flushed", "retransmitted"}

func (s Status) String() string { return codeName(statusNames[:], s, "status") }

// String formats a record compactly for logs and test failures.
func (r Record) String() string {
	return fmt.Sprintf("%d %s/%s rank=%d peer=%d qp=%d ch=%d path=%d comm=%08x seq=%d step=%d wr=%d bytes=%d depth=%d op=%d algo=%d dtype=%d",
		r.TsNs, r.Kind, r.Status, r.Rank, r.Peer, r.QP, r.Channel, r.Path, r.Comm, r.CollSeq, r.Step, r.WrID, r.Bytes, r.Depth, uint8(r.Op), uint8(r.Algo), uint8(r.Dtype))
}
