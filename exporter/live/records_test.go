package live

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

func recs(from, n int) []flowtel.Record {
	out := make([]flowtel.Record, n)
	for i := range out {
		out[i] = flowtel.Record{TsNs: int64(from + i), Kind: flowtel.KindWRPost, WrID: uint64(from + i)}
	}
	return out
}

func TestRecordRing(t *testing.T) {
	r := newRecordRing(4)
	r.Consume(context.Background(), recs(1, 3))
	tests := []struct {
		name                       string
		add                        []flowtel.Record
		after                      uint64
		max                        int
		wantTs                     []int64
		wantNext, wantMiss, wantPd uint64
	}{
		{name: "from the start", after: 0, max: 10, wantTs: []int64{1, 2, 3}, wantNext: 3},
		{name: "nothing new", after: 3, max: 10, wantNext: 3},
		{name: "at most max", after: 0, max: 2, wantTs: []int64{1, 2}, wantNext: 2, wantPd: 1},
		{name: "overwritten ones are missed", add: recs(4, 3), after: 1, max: 10, wantTs: []int64{3, 4, 5, 6}, wantNext: 6, wantMiss: 1},
		{name: "a batch larger than the ring keeps its newest", add: recs(7, 9), after: 6, max: 10, wantTs: []int64{12, 13, 14, 15}, wantNext: 15, wantMiss: 5},
		{name: "a cursor from before a restart starts over", after: 99, max: 10, wantTs: []int64{12, 13, 14, 15}, wantNext: 15},
	}
	for _, tc := range tests {
		r.Consume(context.Background(), tc.add)
		got, next, missed, pending := r.read(tc.after, tc.max)
		var ts []int64
		for _, x := range got {
			ts = append(ts, x.TsNs)
		}
		if len(ts) != len(tc.wantTs) || next != tc.wantNext || missed != tc.wantMiss || pending != tc.wantPd {
			t.Errorf("%s: %v next %d missed %d pending %d, want %v %d %d %d", tc.name, ts, next, missed, pending, tc.wantTs, tc.wantNext, tc.wantMiss, tc.wantPd)
			continue
		}
		for i := range ts {
			if ts[i] != tc.wantTs[i] {
				t.Errorf("%s: %v, want %v", tc.name, ts, tc.wantTs)
				break
			}
		}
	}
}

func TestRecordsEndpoint(t *testing.T) {
	s, err := New(Config{Addr: "127.0.0.1:0", StreamInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	s.RecordSink().Consume(context.Background(), recs(1, 5))
	get := func(query string) (*http.Response, []byte) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL()+"/v1/records"+query, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	resp, b := get("?after=2")
	got, err := flowtel.DecodeRecords(nil, b)
	if err != nil || len(got) != 3 || got[0].TsNs != 3 || got[2].TsNs != 5 {
		t.Fatalf("after=2: %v %v", got, err)
	}
	if next, _ := strconv.Atoi(resp.Header.Get(HeaderNext)); next != 5 {
		t.Errorf("%s %q, want 5", HeaderNext, resp.Header.Get(HeaderNext))
	}
	for _, bad := range []string{"?after=x", "?max=0", "?max=99999999"} {
		if resp, b := get(bad); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %s %s", bad, resp.Status, b)
		}
	}
}
