package flowtel

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"
)

const cacheLine = 64

// Ring is a bounded single-producer single-consumer queue of Records.
//
// One goroutine pushes (the producer: a progress engine or a collective
// caller) and one drains (the Collector). The producer never locks and never
// waits: when the ring is full it drops the record and counts it, and the next
// record it manages to push is preceded by a KindLost record carrying the
// number dropped, so the consumer sees the loss in order.
type Ring struct {
	_    [cacheLine]byte
	head atomic.Uint64 // next slot to read; written by the consumer
	part int           // consumer only: records of the Exchange at head already drained
	_    [cacheLine - 16]byte
	tail atomic.Uint64 // next slot to write; written by the producer
	_    [cacheLine - 8]byte

	// Producer-local state.
	cachedHead  uint64 // producer's last view of head
	pendingLost uint64 // dropped records not yet reported in band
	next        uint64 // next slot Reserve hands out (tail while none is reserved)
	lostAt      uint64 // 1 + the slot of a reserved KindLost record, to complete at Commit; 0: none
	_           [cacheLine - 32]byte

	dropped atomic.Uint64 // total records dropped by the producer
	wake    func()        // called when the ring crosses half full; may be nil
	mask    uint64
	buf     []Record
}

// NewRing returns a ring holding capacity records; capacity must be a power
// of two of at least 2.
func NewRing(capacity int) (*Ring, error) {
	if capacity < 2 || capacity&(capacity-1) != 0 {
		return nil, fmt.Errorf("flowtel: ring capacity %d is not a power of two >= 2", capacity)
	}
	buf := make([]Record, capacity)
	// A fresh allocation this large comes from the OS untouched: without
	// this the producer would take a page fault every 64 records of the
	// ring's first lap, on the data path (1,400 faults in a 2-rank 2000-call
	// 1 KiB all-reduce run, which made telemetry cost 33% instead of 8%).
	// Writing, not reading, maps each page for good.
	step := max(os.Getpagesize()/int(unsafe.Sizeof(Record{})), 1)
	for i := 0; i < len(buf); i += step {
		buf[i].TsNs = 0
	}
	return &Ring{mask: uint64(capacity - 1), buf: buf}, nil
}

// Cap returns the ring's capacity in records.
func (r *Ring) Cap() int { return len(r.buf) }

// Len returns the number of entries waiting to be drained (an Exchange
// entry is one, and drains as three records).
func (r *Ring) Len() int { return int(r.tail.Load() - r.head.Load()) }

// Dropped returns how many records the producer has dropped so far.
func (r *Ring) Dropped() uint64 { return r.dropped.Load() }

// Push appends rec; it reports false, and counts the record as dropped, when
// the ring is full. It publishes the slots reserved before it too (a
// recorder may hold their Commit for the end of a pass). Only the
// producer goroutine may call Push.
func (r *Ring) Push(rec *Record) bool {
	slot := r.reserve(1)
	if slot == nil {
		return false
	}
	*slot = *rec
	r.Commit()
	return true
}

// room reports whether the entry the producer writes at slot t fits,
// with the KindLost record that must precede it after a loss; when not, it
// counts the entry dropped, as the w records it stands for (an Exchange:
// 3).
func (r *Ring) room(t, w uint64) bool {
	need := uint64(1)
	if r.pendingLost != 0 {
		need = 2
	}
	size := uint64(len(r.buf))
	if t+need-r.cachedHead > size {
		r.cachedHead = r.head.Load()
		if t+need-r.cachedHead > size {
			r.pendingLost += w
			// The producer is the only writer: a store, not an add.
			// (On amd64 sync/atomic's Store is an XCHG, a full barrier
			// like a locked add; a plain release store made no
			// difference in BenchmarkRecord/full, so the portable form
			// stays.)
			r.dropped.Store(r.dropped.Load() + w)
			return false
		}
	}
	return true
}

// publish moves tail from t0 to t and wakes the consumer when that crosses
// half full.
func (r *Ring) publish(t0, t uint64) {
	r.storeTail(t)
	if r.wake != nil {
		// Wake the consumer when the ring crosses half full. The producer's
		// view of head is stale (it overestimates the fill), so on an
		// apparent crossing refresh it and wake only on a real one; the
		// check runs at most once per half ring of pushes. (A plain
		// equality test would miss the crossing when a KindLost record
		// and a record are written together.)
		half := uint64(len(r.buf)) / 2
		if t0-r.cachedHead < half && t-r.cachedHead >= half {
			r.cachedHead = r.head.Load()
			if t-r.cachedHead >= half {
				r.wake()
				// The hook may have yielded to the consumer (one P):
				// look again, or the next crossing goes unseen.
				r.cachedHead = r.head.Load()
			}
		}
	}
}

// Reserve returns the next free slot for the producer to fill in place, or
// nil when the ring is full (the record is then dropped and counted, as by
// Push). The caller must write every field (the slot holds a record of the
// previous lap); reserved slots reach the consumer at Commit. A producer
// writing several records at once (a small collective's begin and posts)
// saves building each on its stack, copying it, and publishing it alone.
// Producer only; a Push publishes what was reserved before it.
func (r *Ring) Reserve() *Record { return r.reserve(1) }

// ReserveExchange is Reserve for an Exchange entry standing for part's
// records (counted as those when dropped). The caller writes every
// exported field, one at a time: assigning a whole Exchange would clear
// the mark that makes the slot an entry (and a composite literal is built
// on the stack and copied in, the stall Reserve's in-place writes avoid).
// Producer only.
func (r *Ring) ReserveExchange(part ExchangePart) *Exchange {
	slot := r.reserve(uint64(part.records()))
	if slot == nil {
		return nil
	}
	x := asExchange(slot)
	x.kind, x.part = kindExchange, part
	return x
}

// reserve hands out the next slot for an entry standing for w records.
func (r *Ring) reserve(w uint64) *Record {
	t := r.next
	if !r.room(t, w) {
		return nil
	}
	if r.pendingLost != 0 {
		r.buf[t&r.mask] = Record{Kind: KindLost, Peer: -1, Bytes: r.pendingLost}
		r.pendingLost = 0
		r.lostAt = t + 1
		t++
	}
	r.next = t + 1
	return &r.buf[t&r.mask]
}

// Commit publishes the slots reserved since the last Commit. Producer only.
func (r *Ring) Commit() {
	t0 := r.tail.Load()
	if r.next == t0 {
		return
	}
	if r.lostAt != 0 {
		// The loss record takes its time and identity from the record
		// after it, as Push's does.
		lost, after := &r.buf[(r.lostAt-1)&r.mask], &r.buf[r.lostAt&r.mask]
		lost.TsNs, lost.Rank, lost.Comm = after.TsNs, after.Rank, after.Comm
		r.lostAt = 0
	}
	r.publish(t0, r.next)
}

// Drain moves up to len(dst) records into dst, oldest first, and returns how
// many it moved: an Exchange entry as the three records it stands for
// (across calls when dst has less room). Only the consumer goroutine may
// call Drain.
func (r *Ring) Drain(dst []Record) int {
	h := r.head.Load()
	avail := r.tail.Load() - h
	n, i := 0, uint64(0) // records out, entries consumed
	for n < len(dst) && i < avail {
		slot := &r.buf[(h+i)&r.mask]
		if slot.Kind == kindExchange {
			x := asExchange(slot)
			w := x.part.records()
			if r.part == 0 && len(dst)-n >= w {
				x.expand(dst[n : n+w])
				n += w
				i++
				continue
			}
			var recs [maxExchangeRecords]Record
			x.expand(recs[:])
			c := copy(dst[n:], recs[r.part:w])
			n += c
			if r.part += c; r.part == w {
				r.part = 0
				i++
			}
			continue
		}
		// A run of records, up to the next entry, the end of the buffer,
		// or what dst holds.
		start := (h + i) & r.mask
		seg := r.buf[start : start+min(avail-i, uint64(len(r.buf))-start, uint64(len(dst)-n))]
		k := 1
		for k < len(seg) && seg[k].Kind != kindExchange {
			k++
		}
		copy(dst[n:], seg[:k])
		n += k
		i += uint64(k)
	}
	if i > 0 {
		r.head.Store(h + i)
	}
	return n
}
