package flowtel

import "unsafe"

// Exchange is a compact ring entry that stands for schema v1 records of
// one exchange with one peer: a send and a receive posted together on one
// QP, and the whole collective they carry. A begin entry stands for
// coll_begin and the two wr_posts, an end entry for the two wcs and
// coll_end, all at the entry's time; a whole entry for all six, the
// begin's at TsNs and the end's EndAfter ns later. A call with more peers
// writes its further exchanges as posts and wcs entries, the two wr_posts
// or the two wcs alone, between its begin and end entries. The ring holds the
// entry; Ring.Drain (so the Collector, before any sink) expands it into
// those records, so that nothing downstream ever sees an Exchange. A
// 2-rank mailbox call writes one or two entries where it wrote six
// records: fewer stores on the caller's path, and a third of the ring's
// cache lines or less.
//
// The records it stands for are exactly what a writer of v1 records writes
// for such an exchange: both on Channel, path 0, in one part (coll Step 1);
// wr_ids WRID(WRSeq, false) for the send and WRID(WRSeq, true) for the
// receive; depths 1 and 2 after the posts, 1 and 0 after the completions
// (the send completes first). A dropped entry counts as the records it
// stands for, in the ring's Dropped and in its KindLost record.
type Exchange struct {
	TsNs      int64  // time of the entry's records (a whole entry: of its begin's)
	CollSeq   uint64 // the collective's sequence number
	WRSeq     uint64 // the WRs' sequence number on the QP (see WRID)
	CollBytes uint32 // the collective's payload (coll_begin/coll_end Bytes)
	EndAfter  uint32 // a whole entry's end records' time, in ns after TsNs

	Rank      int32  // this rank
	Peer      int32  // the other end
	QP        uint32 // the QP both WRs are on
	Comm      uint32 // communicator id
	SendBytes uint32 // the send's payload
	RecvBytes uint32 // the receive's payload

	Channel uint16

	kind   Kind   // kindExchange, where Record has Kind: set by ReserveExchange
	Status Status // how the WRs ended (a begin entry: ok); a whole entry's begin records are ok
	Op     uint8
	Algo   uint8
	Dtype  uint8
	part   ExchangePart // set by ReserveExchange
}

// ExchangePart says which of an exchange's records an Exchange entry
// stands for.
type ExchangePart uint8

const (
	ExchangeBegin ExchangePart = iota // coll_begin and the two wr_posts
	ExchangeEnd                       // the two wcs and coll_end
	ExchangeWhole                     // all six: a call whose begin was not written before its end
	ExchangePosts                     // the two wr_posts alone: a call's exchange with a further peer
	ExchangeWCs                       // the two wcs alone
)

// records returns how many records an entry of this part stands for.
func (p ExchangePart) records() int {
	switch p {
	case ExchangeWhole:
		return 2 * exchangeRecords
	case ExchangePosts, ExchangeWCs:
		return exchangeRecords - 1
	}
	return exchangeRecords
}

// kindExchange marks a ring slot holding an Exchange. It is not a schema v1
// kind and never leaves the ring.
const kindExchange Kind = 0xff

// exchangeRecords is how many records a begin or an end entry stands for.
const exchangeRecords = 3

// maxExchangeRecords is how many records the largest entry stands for.
const maxExchangeRecords = 2 * exchangeRecords

// An Exchange fills a Record's slot, with its kind where Record's Kind is.
var (
	_ [RecordSize - unsafe.Sizeof(Exchange{})]struct{}
	_ [unsafe.Sizeof(Exchange{}) - RecordSize]struct{}
	_ [unsafe.Offsetof(Exchange{}.kind) - unsafe.Offsetof(Record{}.Kind)]struct{}
	_ [unsafe.Offsetof(Record{}.Kind) - unsafe.Offsetof(Exchange{}.kind)]struct{}
)

// The shared words are where the constants below say.
var (
	_ [unsafe.Offsetof(Record{}.Rank) - 8*wordRankPeer]struct{}
	_ [8*wordRankPeer - unsafe.Offsetof(Exchange{}.Rank)]struct{}
	_ [unsafe.Offsetof(Record{}.Peer) - unsafe.Offsetof(Exchange{}.Peer)]struct{}
	_ [unsafe.Offsetof(Exchange{}.Peer) - unsafe.Offsetof(Record{}.Peer)]struct{}
	_ [unsafe.Offsetof(Record{}.QP) - 8*wordQPComm]struct{}
	_ [8*wordQPComm - unsafe.Offsetof(Exchange{}.QP)]struct{}
	_ [unsafe.Offsetof(Record{}.Comm) - unsafe.Offsetof(Exchange{}.Comm)]struct{}
	_ [unsafe.Offsetof(Exchange{}.Comm) - unsafe.Offsetof(Record{}.Comm)]struct{}
	_ [unsafe.Offsetof(Record{}.Channel) - 8*wordTail]struct{}
	_ [8*wordTail - unsafe.Offsetof(Exchange{}.Channel)]struct{}
	_ [unsafe.Offsetof(Record{}.Status) - unsafe.Offsetof(Exchange{}.Status)]struct{}
	_ [unsafe.Offsetof(Exchange{}.Status) - unsafe.Offsetof(Record{}.Status)]struct{}
	_ [unsafe.Offsetof(Record{}.Dtype) - unsafe.Offsetof(Exchange{}.Dtype)]struct{}
	_ [unsafe.Offsetof(Exchange{}.Dtype) - unsafe.Offsetof(Record{}.Dtype)]struct{}
)

// asExchange views a ring slot holding an Exchange.
func asExchange(r *Record) *Exchange { return (*Exchange)(unsafe.Pointer(r)) }

// expand writes the records x stands for into dst[0:x.part.records()].
func (x *Exchange) expand(dst []Record) {
	dst = dst[:x.part.records()]
	ts, st := x.TsNs, x.Status
	send, recv := WRID(x.WRSeq, false), WRID(x.WRSeq, true)
	switch x.part {
	case ExchangePosts:
		x.wr(&dst[0], ts, KindWRPost, st, send, 1, x.SendBytes)
		x.wr(&dst[1], ts, KindWRPost, st, recv, 2, x.RecvBytes)
		return
	case ExchangeWCs:
		x.wr(&dst[0], ts, KindWC, st, send, 1, x.SendBytes)
		x.wr(&dst[1], ts, KindWC, st, recv, 0, x.RecvBytes)
		return
	}
	if x.part != ExchangeEnd {
		if x.part == ExchangeWhole {
			st = StatusOK
		}
		x.coll(&dst[0], ts, KindCollBegin, st)
		x.wr(&dst[1], ts, KindWRPost, st, send, 1, x.SendBytes)
		x.wr(&dst[2], ts, KindWRPost, st, recv, 2, x.RecvBytes)
		if x.part == ExchangeBegin {
			return
		}
		dst = dst[exchangeRecords:]
		ts, st = ts+int64(x.EndAfter), x.Status
	}
	x.wr(&dst[0], ts, KindWC, st, send, 1, x.SendBytes)
	x.wr(&dst[1], ts, KindWC, st, recv, 0, x.RecvBytes)
	x.coll(&dst[2], ts, KindCollEnd, st)
}

// The words of an Exchange and a Record that hold the same fields at the
// same offsets: Rank and Peer, QP and Comm, and Channel to Dtype (where
// the Exchange has its mark and part, the Record Kind and Path, and both
// the status, which the writers below store over the copied word).
const (
	wordRankPeer = 4
	wordQPComm   = 5
	wordTail     = 7
)

func words(p unsafe.Pointer) *[RecordSize / 8]uint64 { return (*[RecordSize / 8]uint64)(p) }

// coll and wr write every field of a record of the batch the collector
// reuses, the shared ones a word at a time from the entry: 11 to 14 stores
// where field by field took 17, and expanding is most of a small call's
// drain.
func (x *Exchange) coll(r *Record, ts int64, kind Kind, st Status) {
	xw, rw := words(unsafe.Pointer(x)), words(unsafe.Pointer(r))
	r.TsNs, r.CollSeq, r.WrID, r.Bytes = ts, x.CollSeq, 0, uint64(x.CollBytes)
	rw[wordRankPeer], rw[wordQPComm], rw[wordTail] = xw[wordRankPeer], xw[wordQPComm], xw[wordTail]
	r.Peer, r.QP, r.Depth, r.Step, r.Kind, r.Status, r.Path = -1, 0, 0, 1, kind, st, 0
}

func (x *Exchange) wr(r *Record, ts int64, kind Kind, st Status, id uint64, depth, bytes uint32) {
	xw, rw := words(unsafe.Pointer(x)), words(unsafe.Pointer(r))
	r.TsNs, r.CollSeq, r.WrID, r.Bytes = ts, x.CollSeq, id, uint64(bytes)
	rw[wordRankPeer], rw[wordQPComm], rw[wordTail] = xw[wordRankPeer], xw[wordQPComm], xw[wordTail]
	r.Depth, r.Step, r.Kind, r.Status, r.Path = depth, 0, kind, st, 0
}
