package flowtel_test

import (
	"context"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/flowtel/flowteltest"
)

// exchange fills a reserved entry a field at a time (assigning a whole
// Exchange would clear the slot's mark); a whole entry ends 1 ns after ts.
func exchange(x *flowtel.Exchange, ts int64, st flowtel.Status) {
	x.TsNs, x.CollSeq, x.WRSeq, x.CollBytes, x.EndAfter = ts, 9, 4, 2048, 1
	x.Rank, x.Peer, x.QP, x.Comm, x.SendBytes, x.RecvBytes = 1, 0, 7, 5, 1024, 512
	x.Channel, x.Status, x.Op, x.Algo, x.Dtype = 3, st, 2, 6, 8
}

// exchangeRecords is what exchange's begin (at ts) and end (at ts+1)
// entries stand for, and a whole entry at ts.
func exchangeRecords(ts int64, st flowtel.Status) []flowtel.Record {
	coll := func(ts int64, kind flowtel.Kind, st flowtel.Status) flowtel.Record {
		return flowtel.Record{TsNs: ts, CollSeq: 9, Bytes: 2048, Rank: 1, Peer: -1, Comm: 5, Step: 1, Channel: 3,
			Kind: kind, Status: st, Op: 2, Algo: 6, Dtype: 8}
	}
	wr := func(ts int64, kind flowtel.Kind, st flowtel.Status, recv bool, depth uint32, bytes uint64) flowtel.Record {
		return flowtel.Record{TsNs: ts, CollSeq: 9, WrID: flowtel.WRID(4, recv), Bytes: bytes, Rank: 1, Peer: 0, QP: 7, Comm: 5,
			Depth: depth, Channel: 3, Kind: kind, Status: st, Op: 2, Algo: 6, Dtype: 8}
	}
	return []flowtel.Record{
		coll(ts, flowtel.KindCollBegin, flowtel.StatusOK),
		wr(ts, flowtel.KindWRPost, flowtel.StatusOK, false, 1, 1024),
		wr(ts, flowtel.KindWRPost, flowtel.StatusOK, true, 2, 512),
		wr(ts+1, flowtel.KindWC, st, false, 1, 1024),
		wr(ts+1, flowtel.KindWC, st, true, 0, 512),
		coll(ts+1, flowtel.KindCollEnd, st),
	}
}

// Exchange entries drain as their records, in order with plain records
// around them, whatever room each Drain has.
func TestExchangeDrain(t *testing.T) {
	for room := 1; room <= 16; room++ {
		ring, err := flowtel.NewRing(8)
		if err != nil {
			t.Fatal(err)
		}
		plain := flowtel.Record{TsNs: 1, Kind: flowtel.KindCreditWait, Rank: 1, Peer: 0}
		ring.Push(&plain)
		exchange(ring.ReserveExchange(flowtel.ExchangeBegin), 10, flowtel.StatusOK)
		*ring.Reserve() = flowtel.Record{TsNs: 10, Kind: flowtel.KindCreditGrant, Rank: 1, Peer: 0}
		exchange(ring.ReserveExchange(flowtel.ExchangeEnd), 11, flowtel.StatusError)
		exchange(ring.ReserveExchange(flowtel.ExchangeWhole), 20, flowtel.StatusFlushed)
		ring.Commit()
		if ring.Len() != 5 {
			t.Fatalf("ring holds %d entries, want 5", ring.Len())
		}
		x := exchangeRecords(10, flowtel.StatusError)
		want := append([]flowtel.Record{plain}, x[:3]...)
		want = append(want, flowtel.Record{TsNs: 10, Kind: flowtel.KindCreditGrant, Rank: 1, Peer: 0})
		want = append(want, x[3:]...)
		want = append(want, exchangeRecords(20, flowtel.StatusFlushed)...)

		var got []flowtel.Record
		dst := make([]flowtel.Record, room)
		for n := ring.Drain(dst); n > 0; n = ring.Drain(dst) {
			got = append(got, dst[:n]...)
		}
		if len(got) != len(want) || ring.Len() != 0 {
			t.Fatalf("room %d: drained %d records, %d entries left; want %d, none", room, len(got), ring.Len(), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("room %d, record %d\n got %v\nwant %v", room, i, got[i], want[i])
			}
		}
	}
}

// A dropped entry counts as its records (three, a whole one six): in the
// ring's Dropped, in the collector's stats and in the KindLost record its
// sinks get.
func TestExchangeDropped(t *testing.T) {
	c := flowtel.NewCollector(flowtel.WithRingCapacity(2), flowtel.WithMaxIdle(time.Millisecond))
	sink := flowteltest.NewMemorySink()
	c.AddSink(sink)
	r := c.NewRecorder()
	for i, part := range []flowtel.ExchangePart{flowtel.ExchangeBegin, flowtel.ExchangeEnd} {
		exchange(r.ReserveExchange(part), int64(10+i), flowtel.StatusOK)
		r.Commit()
	}
	// The collector is not started: these are dropped.
	if r.ReserveExchange(flowtel.ExchangeBegin) != nil || r.ReserveExchange(flowtel.ExchangeWhole) != nil {
		t.Fatal("a full ring reserved an entry")
	}
	if d := r.Dropped(); d != 9 {
		t.Fatalf("Dropped = %d after a lost begin and a lost whole entry, want 9", d)
	}
	c.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	exchange(r.ReserveExchange(flowtel.ExchangeEnd), 20, flowtel.StatusOK)
	r.Commit()
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	recs := sink.Records()
	if len(recs) != 10 || recs[6].Kind != flowtel.KindLost || recs[6].Bytes != 9 || recs[6].TsNs != 20 {
		t.Fatalf("the sink got %d records %v; want 6, lost(9) at 20, 3", len(recs), recs)
	}
	if st := c.Stats(); st.Drained != 10 || st.RingDropped != 9 {
		t.Fatalf("stats: drained %d, dropped %d; want 10, 9", st.Drained, st.RingDropped)
	}
}
