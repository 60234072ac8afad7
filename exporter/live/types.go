package live

import (
	"github.com/vccl-go/vccl/flowtel"
)

// Info is the body of /v1/info: who this rank is, and how its telemetry
// fares.
type Info struct {
	Rank          int    `json:"rank"`
	Size          int    `json:"size"`
	UID           string `json:"uid"`     // the communicator's unique id
	CommID        uint32 `json:"comm_id"` // its 32-bit id, as records carry it
	Host          string `json:"host"`
	PID           int    `json:"pid"`
	URL           string `json:"url"` // where this endpoint is reached
	SchemaVersion int    `json:"schema_version"`
	ClockOffsetNs int64  `json:"clock_offset_ns"` // offset of this rank's clock to rank 0's
	ClockErrorNs  int64  `json:"clock_error_ns"`  // its uncertainty
	StartedUnixNs int64  `json:"started_unix_ns"`
	Auth          bool   `json:"auth,omitempty"` // requests must present the job's bearer

	Window    WindowInfo     `json:"window"`
	Telemetry *Telemetry     `json:"telemetry,omitempty"` // nil without a collector
	Extra     map[string]any `json:"extra,omitempty"`     // from Server.AddInfo
}

// WindowInfo sizes the per-link windows (see flowtel.WindowConfig).
type WindowInfo struct {
	N   int   `json:"n"`
	TNs int64 `json:"t_ns"`
}

// Telemetry are the collector's counters (flowtel.CollectorStats).
type Telemetry struct {
	Rings       int         `json:"rings"`
	Drained     uint64      `json:"drained"`
	Batches     uint64      `json:"batches"`
	RingDropped uint64      `json:"ring_dropped"`
	SinkErrors  uint64      `json:"sink_errors"`
	LastError   string      `json:"last_error,omitempty"`
	Sinks       []SinkStats `json:"sinks"`
	WindowLost  uint64      `json:"window_lost"` // records the window was told were lost (KindLost)
}

// SinkStats are one sink's counters (flowtel.SinkStats).
type SinkStats struct {
	Sink           string `json:"sink"`
	Records        uint64 `json:"records"`
	Batches        uint64 `json:"batches"`
	DroppedRecords uint64 `json:"dropped_records"`
	DroppedBatches uint64 `json:"dropped_batches"`
	Errors         uint64 `json:"errors"`
}

func telemetryOf(st flowtel.CollectorStats) *Telemetry {
	t := &Telemetry{
		Rings: st.Rings, Drained: st.Drained, Batches: st.Batches,
		RingDropped: st.RingDropped, SinkErrors: st.SinkErrors,
		Sinks: make([]SinkStats, len(st.Sinks)),
	}
	if st.LastError != nil {
		t.LastError = st.LastError.Error()
	}
	for i, s := range st.Sinks {
		t.Sinks[i] = SinkStats{Sink: s.Sink, Records: s.Records, Batches: s.Batches,
			DroppedRecords: s.DroppedRecords, DroppedBatches: s.DroppedBatches, Errors: s.Errors}
	}
	return t
}

// Snapshot is the body of /v1/windows and of each "windows" event of
// /v1/stream: every link direction's window as of NowNs.
type Snapshot struct {
	Rank   int        `json:"rank"`
	Seq    uint64     `json:"seq"`    // counts the snapshots this server has taken
	NowNs  int64      `json:"now_ns"` // on the job's time base (rank 0's clock)
	Window WindowInfo `json:"window"`
	Lost   uint64     `json:"lost"` // records lost before reaching the window, as reported in band
	Links  []Link     `json:"links"`
}

// Link is one link direction's window: flowtel.LinkStats in JSON.
type Link struct {
	Rank    int32  `json:"rank"`
	Peer    int32  `json:"peer"`
	Channel uint16 `json:"channel"`
	Path    uint8  `json:"path"`
	Dir     string `json:"dir"` // "send" (rank → peer) or "recv" (peer → rank)

	Completions    int     `json:"completions"`
	Failed         int     `json:"failed"`
	Bytes          uint64  `json:"bytes"`
	BandwidthBps   float64 `json:"bandwidth_bps"` // bytes per second
	SpanNs         int64   `json:"span_ns"`
	LatencySamples int     `json:"latency_samples"`
	LatP50Ns       int64   `json:"lat_p50_ns"`
	LatP99Ns       int64   `json:"lat_p99_ns"`
	LatMaxNs       int64   `json:"lat_max_ns"`

	Backlog          uint32 `json:"backlog"`
	OutstandingBytes uint64 `json:"outstanding_bytes"`
	PendingWRs       int    `json:"pending_wrs"`
	CreditWaitNs     int64  `json:"credit_wait_ns"`
	CreditWaiting    bool   `json:"credit_waiting"`
	LastNs           int64  `json:"last_ns"`
	Unmatched        uint64 `json:"unmatched"`
	Orphaned         uint64 `json:"orphaned"`
}

func linkOf(l *flowtel.LinkStats) Link {
	return Link{
		Rank: l.Key.Rank, Peer: l.Key.Peer, Channel: l.Key.Channel, Path: uint8(l.Key.Path), Dir: l.Key.Dir.String(),
		Completions: l.Completions, Failed: l.Failed, Bytes: l.Bytes, BandwidthBps: l.BandwidthBps, SpanNs: l.SpanNs,
		LatencySamples: l.LatencySamples, LatP50Ns: l.LatP50Ns, LatP99Ns: l.LatP99Ns, LatMaxNs: l.LatMaxNs,
		Backlog: l.Backlog, OutstandingBytes: l.OutstandingBytes, PendingWRs: l.PendingWRs,
		CreditWaitNs: l.CreditWaitNs, CreditWaiting: l.CreditWaiting, LastNs: l.LastNs,
		Unmatched: l.Unmatched, Orphaned: l.Orphaned,
	}
}

// Endpoint is where one rank's live endpoint is reached.
type Endpoint struct {
	Rank int    `json:"rank"`
	URL  string `json:"url"`
	Host string `json:"host"`
	PID  int    `json:"pid"`
}

// Endpoints is the content of endpoints.json: the live endpoints of the
// ranks of one communicator.
type Endpoints struct {
	UID       string     `json:"uid"`
	Size      int        `json:"size"`
	Endpoints []Endpoint `json:"endpoints"` // by rank
}
