//go:build linux

package fault

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport/ft"
)

// A rank of a fault-test job is this test binary run again inside its
// namespace with envWorker set: TestMain runs workerMain instead of the
// tests. It loops all-reduces, checks every result, and reports on stdout,
// one JSON event a line.

const envWorker = "VCCL_FAULT_WORKER" // the worker's config, JSON

func TestMain(m *testing.M) {
	if cfg := os.Getenv(envWorker); cfg != "" {
		os.Exit(workerMain(cfg))
	}
	os.Exit(m.Run())
}

// workerConfig is what a job's ranks run.
type workerConfig struct {
	Iters int    `json:"iters"` // all-reduces at most; rank 0 may stop earlier
	Sizes string `json:"sizes"` // "mixed" or a fixed element count
	Count int    `json:"count"` // the fixed count
	Seed  uint64 `json:"seed"`
	Every int    `json:"every"` // rank 0 reports every Every-th iteration (1: all)
}

// event is one line a worker prints.
type event struct {
	Ev    string    `json:"ev"` // ready, iter, link, path, error, wrong, done
	Rank  int       `json:"rank"`
	Peer  int       `json:"peer,omitempty"`
	Kind  string    `json:"kind,omitempty"`
	Path  int       `json:"path,omitempty"`
	Iter  int       `json:"iter,omitempty"`
	Bytes int64     `json:"bytes,omitempty"`
	Ts    int64     `json:"ts,omitempty"` // host monotonic clock, ns
	Dur   int64     `json:"dur,omitempty"`
	Msg   string    `json:"msg,omitempty"`
	FT    *ft.Stats `json:"ft,omitempty"`
	Recs  *recStats `json:"recs,omitempty"`
}

// recStats counts the telemetry records a rank saw.
type recStats struct {
	SendPosts, SendWCs, RecvPosts, RecvWCs map[int]int64 // by peer
	Retransmitted                          int64
	Failovers, Failbacks, Downs, Ups       int64
	Lost                                   uint64
}

type emitter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (e *emitter) emit(ev event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.enc.Encode(ev)
}

// sink watches the records: it reports link events and the first completion
// on a new path, and counts posts and completions per peer.
type sink struct {
	out    *emitter
	rank   int
	offset atomic.Int64 // job clock - host monotonic clock

	mu   sync.Mutex
	path map[uint32]flowtel.Path // path of each QP's last completion
	st   recStats
}

func (s *sink) Consume(_ context.Context, recs []flowtel.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	off := s.offset.Load()
	for i := range recs {
		r := &recs[i]
		switch r.Kind {
		case flowtel.KindWRPost:
			if r.IsRecv() {
				s.st.RecvPosts[int(r.Peer)]++
			} else {
				s.st.SendPosts[int(r.Peer)]++
			}
		case flowtel.KindWC:
			if r.IsRecv() {
				s.st.RecvWCs[int(r.Peer)]++
			} else {
				s.st.SendWCs[int(r.Peer)]++
			}
			if r.Status == flowtel.StatusRetransmitted {
				s.st.Retransmitted++
			}
			if r.Status == flowtel.StatusOK || r.Status == flowtel.StatusRetransmitted {
				if last := s.path[r.QP]; last != r.Path {
					s.path[r.QP] = r.Path
					s.out.emit(event{Ev: "path", Rank: s.rank, Peer: int(r.Peer), Path: int(r.Path), Ts: r.TsNs - off})
				}
			}
		case flowtel.KindFailover, flowtel.KindFailback, flowtel.KindLinkDown, flowtel.KindLinkUp:
			switch r.Kind {
			case flowtel.KindFailover:
				s.st.Failovers++
			case flowtel.KindFailback:
				s.st.Failbacks++
			case flowtel.KindLinkDown:
				s.st.Downs++
			default:
				s.st.Ups++
			}
			s.out.emit(event{Ev: "link", Rank: s.rank, Peer: int(r.Peer), Kind: r.Kind.String(), Path: int(r.Path), Ts: r.TsNs - off, Bytes: int64(r.Bytes)})
		case flowtel.KindLost:
			s.st.Lost += r.Bytes
		}
	}
	return nil
}

func (s *sink) Shutdown(context.Context) error { return nil }

// count returns the element count of iteration i.
func (c *workerConfig) count(i int) int {
	if c.Sizes != "mixed" {
		return c.Count
	}
	// Log-uniform from 1 to 256 Ki elements (1 MiB of float32).
	r := rand.New(rand.NewPCG(c.Seed, uint64(i)))
	return max(1, int(math.Exp(r.Float64()*math.Log(256<<10))))
}

// value is what rank puts at index j in iteration i: small integers, so
// float32 sums are exact.
func value(i, rank, j int) float32 { return float32((i*7 + rank*13 + j) % 1024) }

func workerMain(cfgJSON string) int {
	out := &emitter{enc: json.NewEncoder(os.Stdout)}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	var cfg workerConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		out.emit(event{Ev: "error", Msg: "bad config: " + err.Error()})
		return 2
	}
	if cfg.Every < 1 {
		cfg.Every = 1
	}
	s := &sink{out: out, path: map[uint32]flowtel.Path{}}
	s.st.SendPosts, s.st.SendWCs, s.st.RecvPosts, s.st.RecvWCs = map[int]int64{}, map[int]int64{}, map[int]int64{}, map[int]int64{}
	coll := flowtel.NewCollector(flowtel.WithRingCapacity(1 << 18))
	coll.AddSink(s)
	coll.Start()
	ctx := context.Background()
	comm, err := collective.NewFromEnv(ctx, collective.WithCollector(coll))
	if err != nil {
		out.emit(event{Ev: "error", Msg: err.Error(), Ts: flowtel.Monotonic()})
		return 1
	}
	rank, size := comm.Rank(), comm.Size()
	s.rank = rank
	s.offset.Store(comm.Clock().Offset())
	var stop atomic.Bool
	exit := make(chan struct{})
	go func() {
		defer close(exit)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			switch sc.Text() {
			case "stop":
				stop.Store(true)
			case "exit":
				return
			}
		}
	}()
	out.emit(event{Ev: "ready", Rank: rank, Ts: flowtel.Monotonic()})
	maxCount := 256 << 10
	if cfg.Sizes != "mixed" {
		maxCount = cfg.Count
	}
	send := make([]float32, maxCount+1)
	recv := make([]float32, maxCount+1)
	code := 0
	iters := 0
	for i := 0; i < cfg.Iters; i++ {
		n := cfg.count(i)
		for j := range n {
			send[j] = value(i, rank, j)
		}
		send[n] = 0
		if rank == 0 && stop.Load() {
			send[n] = 1 // the last iteration
		}
		t0 := flowtel.Monotonic()
		err := collective.AllReduce(ctx, comm, send[:n+1], recv[:n+1], collective.Sum)
		t1 := flowtel.Monotonic()
		if err != nil {
			out.emit(event{Ev: "error", Rank: rank, Iter: i, Msg: err.Error(), Ts: t1})
			code = 1
			break
		}
		for j := range n {
			var want float32
			for r := range size {
				want += value(i, r, j)
			}
			if recv[j] != want {
				out.emit(event{Ev: "wrong", Rank: rank, Iter: i, Msg: fmt.Sprintf("element %d of %d: %v, want %v", j, n, recv[j], want), Ts: t1})
				code = 1
				break
			}
		}
		iters = i + 1
		if rank == 0 && i%cfg.Every == 0 {
			out.emit(event{Ev: "iter", Rank: rank, Iter: i, Bytes: int64(4 * n), Ts: t1, Dur: t1 - t0})
		}
		if code != 0 || recv[n] != 0 {
			break
		}
	}
	if code == 0 {
		err = comm.Close()
	} else {
		// Keep this rank's connections as they are until the harness has
		// seen every rank's error: closing them would tell the peers, and
		// their errors would name this rank instead of the failure.
		select {
		case <-exit:
		case <-time.After(time.Minute):
		}
		err = comm.Abort()
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	coll.Flush(fctx)
	cancel()
	st := ft.Totals()
	s.mu.Lock()
	rs := s.st
	s.mu.Unlock()
	out.emit(event{Ev: "done", Rank: rank, Iter: iters, FT: &st, Recs: &rs, Ts: flowtel.Monotonic(), Msg: fmt.Sprint(err)})
	coll.Shutdown(fctx)
	return code
}
