package ui

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/vccl-go/vccl/analyzer"
)

// Source is where vccl-top's data comes from: live rank endpoints, a
// Prometheus server or an Arrow replay (package ui/source), or a fake in
// tests.
type Source interface {
	// Frame returns the latest state. It must return at once: sources do
	// their I/O in the background, so a dead rank never holds the screen.
	Frame() Frame
	// Close stops the source's background work.
	Close() error
}

// Player is a Source that replays a recording: it can pause and change
// speed. The model drives it with p, + and -.
type Player interface {
	Source
	SetPaused(paused bool)
	// SetSpeed sets the replay speed (1: real time) and returns the speed
	// in force, which the player may have clamped.
	SetSpeed(speed float64) float64
}

// Frame is the state of a job at one moment: what every screen shows, and
// what `vccl-top --once --output json` prints.
type Frame struct {
	Source string    `json:"source"`           // "live", "prometheus" or "replay"
	Target string    `json:"target"`           // what the source reads: endpoints, a URL, a directory
	UID    string    `json:"uid,omitempty"`    // the communicator's unique id, when known
	JobID  string    `json:"job_id,omitempty"` // the job id as flowtel.JobID prints it (trace file names, metrics, the analyzer), when known
	Time   time.Time `json:"time"`             // wall time of the state (replay: of the trace at the cursor)
	Seq    uint64    `json:"seq"`              // grows when the data changes
	Size   int       `json:"size"`             // ranks in the job

	Ranks    []Rank    `json:"ranks"`
	Links    []Link    `json:"links"`
	Colls    []Coll    `json:"collectives"`
	Findings []Finding `json:"findings"`
	// GPUs is nil without a GPU source; the GPU panel shows only then.
	GPUs   []GPU   `json:"gpus,omitempty"`
	Replay *Replay `json:"replay,omitempty"`
	// Notes are short remarks about the source, shown in the overview
	// (for instance that the arrival skew is an estimate).
	Notes []string `json:"notes,omitempty"`
}

// Rank is one rank's state.
type Rank struct {
	Rank  int       `json:"rank"`
	Up    bool      `json:"up"`
	Since time.Time `json:"since"` // when it came up, or went down
	Host  string    `json:"host,omitempty"`
	PID   int       `json:"pid,omitempty"`
	URL   string    `json:"url,omitempty"`
	Lost  uint64    `json:"lost"`            // telemetry records lost before the window
	Err   string    `json:"error,omitempty"` // why it is down
}

// Link is one direction of one link over its window: flowtel.LinkStats.
type Link struct {
	Rank    int32  `json:"rank"`
	Peer    int32  `json:"peer"`
	Channel uint16 `json:"channel"`
	Path    uint8  `json:"path"`
	Dir     string `json:"dir"` // "send" (rank → peer) or "recv" (peer → rank, as rank received it)

	BandwidthBps  float64 `json:"bandwidth_bps"`
	LatP50Ns      int64   `json:"lat_p50_ns"`
	LatP99Ns      int64   `json:"lat_p99_ns"`
	Backlog       uint32  `json:"backlog"`
	PendingWRs    int     `json:"pending_wrs"`
	CreditWaitNs  int64   `json:"credit_wait_ns"` // within the window
	CreditWaiting bool    `json:"credit_waiting"`
	Completions   int     `json:"completions"`
	Failed        int     `json:"failed"`
	Bytes         uint64  `json:"bytes"`
	WindowNs      int64   `json:"window_ns"` // the window's time span T (0: unknown)
}

// Name is the link's short name, the way its bytes flow: "0->1 ch0"
// (path 1 is the backup). Both ends report a link: the sender as "send",
// the receiver as "recv".
func (l *Link) Name() string {
	s := fmt.Sprintf("%d->%d ch%d", l.From(), l.To(), l.Channel)
	if l.Path != 0 {
		s += " backup"
	}
	return s
}

// From and To are the ends the bytes flow from and to.
func (l *Link) From() int32 {
	if l.Dir == "recv" {
		return l.Peer
	}
	return l.Rank
}

// To is the end the link's bytes flow to.
func (l *Link) To() int32 {
	if l.Dir == "recv" {
		return l.Rank
	}
	return l.Peer
}

// Coll is one operation's collectives over the recent past.
type Coll struct {
	Op        string  `json:"op"`
	Calls     uint64  `json:"calls"`      // ended so far (per rank)
	PerSec    float64 `json:"per_second"` // recently
	BusBWBps  float64 `json:"busbw_bps"`  // mean bus bandwidth, bytes/s (nccl-tests' busbw)
	AlgBWBps  float64 `json:"algbw_bps"`  // mean payload / time, bytes/s
	AvgTimeNs int64   `json:"avg_time_ns"`
	// SkewNs is the arrival skew: how much later the last rank starts a
	// collective than the first, on average. SkewEstimated: derived from
	// the spread of the ranks' execution times (live sources see no
	// per-call records).
	SkewNs        int64 `json:"skew_ns"`
	SkewEstimated bool  `json:"skew_estimated,omitempty"`
}

// Finding is one of the analyzer's findings, with when the source learned
// of it: the findings screen lists them newest first by it.
type Finding struct {
	analyzer.Finding
	Seen time.Time
}

// MarshalJSON writes the analyzer's JSON of the finding with "seen" added.
func (f Finding) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(f.Finding)
	if err != nil || len(b) < 2 {
		return b, err
	}
	seen, _ := json.Marshal(f.Seen)
	return append(append(append(b[:len(b)-1:len(b)-1], `,"seen":`...), seen...), '}'), nil
}

// UnmarshalJSON reads the analyzer's JSON of a finding, and "seen" if
// present.
func (f *Finding) UnmarshalJSON(b []byte) error {
	var seen struct {
		Seen time.Time `json:"seen"`
	}
	if err := json.Unmarshal(b, &f.Finding); err != nil {
		return err
	}
	json.Unmarshal(b, &seen)
	f.Seen = seen.Seen
	return nil
}

// GPU is one GPU's state (NVML), for the GPU panel.
type GPU struct {
	Index       int     `json:"index"`
	Name        string  `json:"name"`
	Host        string  `json:"host,omitempty"`
	UtilPct     float64 `json:"util_pct"`     // share of time a kernel ran
	MemUtilPct  float64 `json:"mem_util_pct"` // share of time device memory was read or written
	NVLinkTxBps float64 `json:"nvlink_tx_bps"`
	NVLinkRxBps float64 `json:"nvlink_rx_bps"`
	PCIeTxBps   float64 `json:"pcie_tx_bps"`
	PCIeRxBps   float64 `json:"pcie_rx_bps"`
	Err         string  `json:"error,omitempty"`
}

// Replay is where a replay stands.
type Replay struct {
	StartNs int64   `json:"start_ns"` // trace time of the first record
	EndNs   int64   `json:"end_ns"`   // of the last
	PosNs   int64   `json:"pos_ns"`   // the cursor
	Speed   float64 `json:"speed"`
	Paused  bool    `json:"paused"`
	Done    bool    `json:"done"` // the cursor reached the end
}

// Up counts the ranks up.
func (f *Frame) Up() int {
	n := 0
	for i := range f.Ranks {
		if f.Ranks[i].Up {
			n++
		}
	}
	return n
}

// RankState returns rank r's state, and false if the frame does not know it.
func (f *Frame) RankState(r int) (Rank, bool) {
	i, ok := slices.BinarySearchFunc(f.Ranks, r, func(a Rank, r int) int { return cmp.Compare(a.Rank, r) })
	if !ok {
		return Rank{Rank: r}, false
	}
	return f.Ranks[i], true
}

// Normalize sorts the frame's lists into the order the screens expect:
// ranks by number, links by rank, peer, channel, path and direction,
// collectives by name, findings newest first.
func (f *Frame) Normalize() {
	slices.SortFunc(f.Ranks, func(a, b Rank) int { return cmp.Compare(a.Rank, b.Rank) })
	slices.SortFunc(f.Links, func(a, b Link) int {
		return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Peer, b.Peer), cmp.Compare(a.Channel, b.Channel),
			cmp.Compare(a.Path, b.Path), cmp.Compare(a.Dir, b.Dir) /* recv < send */)
	})
	slices.SortFunc(f.Colls, func(a, b Coll) int { return cmp.Compare(a.Op, b.Op) })
	slices.SortStableFunc(f.Findings, func(a, b Finding) int {
		return cmp.Or(b.Seen.Compare(a.Seen), cmp.Compare(b.EndNs, a.EndNs), cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Peer, b.Peer))
	})
}

// pairKey names the traffic from one rank to another, over every channel
// and path.
type pairKey struct{ from, to int32 }

// pairStats is a pair's traffic: the sender's send links summed, or, when
// the sender reports none (it is down), the receiver's recv links.
type pairStats struct {
	bw           float64
	p50, p99     int64
	backlog      uint32
	pending      int
	creditWaitNs int64
	windowNs     int64
	completions  int
	failed       int
	links        int
}

func (p *pairStats) add(l *Link) {
	p.bw += l.BandwidthBps
	p.p50 = max(p.p50, l.LatP50Ns)
	p.p99 = max(p.p99, l.LatP99Ns)
	p.backlog += l.Backlog
	p.pending += l.PendingWRs
	p.creditWaitNs = max(p.creditWaitNs, l.CreditWaitNs)
	p.windowNs = max(p.windowNs, l.WindowNs)
	p.completions += l.Completions
	p.failed += l.Failed
	p.links++
}

// pairs sums the frame's links by the pair of ranks the bytes flow between.
func pairs(f *Frame) map[pairKey]*pairStats {
	send := map[pairKey]*pairStats{}
	recv := map[pairKey]*pairStats{}
	for i := range f.Links {
		l := &f.Links[i]
		k := pairKey{l.From(), l.To()}
		m := send
		if l.Dir == "recv" {
			m = recv
		}
		p := m[k]
		if p == nil {
			p = &pairStats{}
			m[k] = p
		}
		p.add(l)
	}
	for k, p := range recv {
		if _, ok := send[k]; !ok {
			send[k] = p
		}
	}
	return send
}

// rankTotals is one rank's traffic summed over its links.
type rankTotals struct {
	send, recv float64
	p99        int64
	backlog    uint32
}

func totals(f *Frame) map[int32]*rankTotals {
	t := map[int32]*rankTotals{}
	get := func(r int32) *rankTotals {
		x := t[r]
		if x == nil {
			x = &rankTotals{}
			t[r] = x
		}
		return x
	}
	for i := range f.Links {
		l := &f.Links[i]
		x := get(l.Rank)
		if l.Dir == "recv" {
			x.recv += l.BandwidthBps
		} else {
			x.send += l.BandwidthBps
			x.backlog += l.Backlog
		}
		x.p99 = max(x.p99, l.LatP99Ns)
	}
	return t
}
