package flowtel_test

import (
	"bytes"
	"testing"

	"github.com/vccl-go/vccl/flowtel"
)

func TestRecordWireRoundTrip(t *testing.T) {
	recs := []flowtel.Record{
		{TsNs: -5, CollSeq: flowtel.SeqP2P | 7, WrID: 1<<64 - 1, Bytes: 1 << 40, Rank: -1, Peer: 1 << 30, QP: 9, Comm: 0xdeadbeef,
			Depth: 3, Step: 4, Channel: 65535, Kind: flowtel.KindCreditGrant, Status: flowtel.StatusRetransmitted,
			Op: flowtel.OpAllToAll, Algo: flowtel.AlgoDirect, Dtype: flowtel.BFloat16, Path: flowtel.PathBackup},
		{},
	}
	b := flowtel.AppendRecords(nil, recs)
	if len(b) != 2*flowtel.RecordSize {
		t.Fatalf("%d bytes for 2 records", len(b))
	}
	got, err := flowtel.DecodeRecords(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != recs[0] || got[1] != recs[1] {
		t.Errorf("round trip:\n got %v\nwant %v", got, recs)
	}
	if _, err := flowtel.DecodeRecords(nil, b[:65]); err == nil {
		t.Error("a torn record decoded")
	}
}

// FuzzDecodeRecords: any bytes decode to records or a clear error, and
// whole records encode back to the same bytes.
func FuzzDecodeRecords(f *testing.F) {
	f.Add(flowtel.AppendRecords(nil, []flowtel.Record{{TsNs: 1, Kind: flowtel.KindWC}}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := flowtel.DecodeRecords(nil, b)
		if err != nil {
			if len(b)%flowtel.RecordSize == 0 {
				t.Fatalf("whole records refused: %v", err)
			}
			return
		}
		if again := flowtel.AppendRecords(nil, recs); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded differently")
		}
	})
}
