package analyzer

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/flowtel"
)

// rankRecords keeps one rank's records: what that rank's own window sees.
func rankRecords(recs []flowtel.Record, rank int32) []flowtel.Record {
	var out []flowtel.Record
	for _, r := range recs {
		if r.Rank == rank {
			out = append(out, r)
		}
	}
	return out
}

// Rank 2's own window in the tbf run (its link to 3 throttled): the
// publisher names 2->3 while the limit is on, and publishes nothing before.
func TestPublisherCorpusTBF(t *testing.T) {
	recs := rankRecords(corpusRecords(t, "tbf-mid-4r"), 2)
	inj := tbfInjection(t)
	win := flowtel.NewWindow(flowtel.WindowConfig{N: 4096, T: 20 * time.Millisecond})
	type published struct {
		at int64
		fs []Finding
	}
	var got []published
	var now int64
	pub, err := NewPublisher(win, func(name string, v any) error {
		if name != FindingsEvent {
			t.Errorf("published event %q", name)
		}
		got = append(got, published{now, v.([]Finding)})
		return nil
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	next := recs[0].TsNs + 10e6
	for i := range recs {
		for recs[i].TsNs >= next {
			now = next
			pub.Step()
			next += 10e6
		}
		win.Add(&recs[i])
	}
	named := false
	for _, p := range got {
		if p.at < inj.InjectNs {
			t.Errorf("published before the limit went on: %v", p.fs)
		}
		for _, f := range p.fs {
			if f.Rank == 2 && f.Peer == 3 && p.at < inj.HealNs {
				named = true
			}
		}
	}
	if !named {
		t.Errorf("rank 2's publisher never named its link to 3 while it was throttled (%d events)", len(got))
	}
}

// The findings reach a client of the rank's live endpoint as server-sent
// events, which is how vccl-top's live source reads them.
func TestPublisherOverLiveEndpoint(t *testing.T) {
	recs := rankRecords(corpusRecords(t, "tbf-mid-4r"), 2)
	win := flowtel.NewWindow(flowtel.WindowConfig{N: 4096, T: 20 * time.Millisecond})
	srv, err := live.New(live.Config{Addr: "127.0.0.1:0", Window: win, StreamInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL()+"/v1/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event:"); ok {
				name = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "data:"); ok && name == FindingsEvent {
				events <- strings.TrimSpace(v)
				return
			}
		}
		close(events)
	}()
	pub, err := NewPublisher(win, srv.Publish, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Replay until the first findings go out, then read what the client got.
	next := recs[0].TsNs + 10e6
	var sent []Finding
	for i := 0; i < len(recs) && sent == nil; i++ {
		for recs[i].TsNs >= next && sent == nil {
			if sent, err = pub.Step(); err != nil {
				t.Fatal(err)
			}
			next += 10e6
		}
		win.Add(&recs[i])
	}
	if sent == nil {
		t.Fatal("no findings to publish in the tbf run")
	}
	select {
	case data, ok := <-events:
		if !ok {
			t.Fatal("the stream ended without a findings event")
		}
		var fs []Finding
		if err := json.Unmarshal([]byte(data), &fs); err != nil {
			t.Fatalf("findings event: %v: %s", err, data)
		}
		if len(fs) != len(sent) || fs[0].Kind != sent[0].Kind || fs[0].Rank != sent[0].Rank || fs[0].Peer != sent[0].Peer {
			t.Errorf("client got %+v, publisher sent %+v", fs, sent)
		}
	case <-ctx.Done():
		t.Fatal("no findings event reached the stream client")
	}
}
