package flowtel

// The record-writing primitives every execution path shares: the engine
// (coll_begin/coll_end, and through transport.Core each transfer's
// records), the mailbox path and gpu/ce write a call's and a work
// request's records through these, so that a record of a kind carries
// the same fields whichever path wrote it.
//
// Each writes every field of a ring slot (Ring.Reserve: the slot holds a
// record of the ring's previous lap) one store each. A record built on the
// stack and copied in would be read back in 16-byte loads straddling its
// narrow stores, which the CPU cannot forward: a stall per load. The same
// holds for the fields: a writer keeps its CallFields and WRFields (one per
// queue pair) where they live, sets the fields that never change once, and
// updates the others in place before Put. Fields built afresh for each
// record (a composite literal) are copied through the stack, and adjacent
// 32-bit fields are read back in one 64-bit load, both straddling their
// stores.

// CallFields are what a collective call's coll_begin and coll_end carry.
type CallFields struct {
	Seq     uint64 // the call's sequence number in its communicator
	Bytes   uint64 // the payload this channel's part of the call moves
	Rank    int32
	Comm    uint32
	Parts   uint32 // the channels the call is split across (the records' Step)
	Channel uint16
	Op      Op
	Algo    Algorithm
	Dtype   Datatype
}

// Put writes the call's record of kind (KindCollBegin or KindCollEnd) at ts
// with status st into r.
func (c *CallFields) Put(r *Record, ts int64, kind Kind, st Status) {
	r.TsNs, r.CollSeq, r.WrID, r.Bytes = ts, c.Seq, 0, c.Bytes
	r.Rank, r.Peer, r.QP, r.Comm, r.Depth, r.Step = c.Rank, -1, 0, c.Comm, 0, c.Parts
	r.Channel, r.Kind, r.Status, r.Op, r.Algo, r.Dtype, r.Path = c.Channel, kind, st, c.Op, c.Algo, c.Dtype, 0
}

// WRFields are what a work request's records (wr_post, the credit
// records, wc) carry besides what changes from one to the next.
type WRFields struct {
	Seq     uint64 // the call's sequence number
	Rank    int32
	Peer    int32
	QP      uint32
	Comm    uint32
	Step    uint32 // the algorithm step the request belongs to
	Channel uint16
	Op      Op
	Algo    Algorithm
	Dtype   Datatype
	Path    Path
}

// Put writes the request's record of kind at ts with status st into r: id
// is its WRID, bytes what it moves, depth the requests outstanding on its
// queue pair after this event.
func (w *WRFields) Put(r *Record, ts int64, kind Kind, st Status, id uint64, bytes int, depth int) {
	r.TsNs, r.CollSeq, r.WrID, r.Bytes = ts, w.Seq, id, uint64(bytes)
	r.Rank, r.Peer, r.QP, r.Comm, r.Depth, r.Step = w.Rank, w.Peer, w.QP, w.Comm, uint32(max(depth, 0)), w.Step
	r.Channel, r.Kind, r.Status, r.Op, r.Algo, r.Dtype, r.Path = w.Channel, kind, st, w.Op, w.Algo, w.Dtype, w.Path
}
