// Package live serves each rank's telemetry over HTTP while the job runs:
// what vccl-top, scripts and a browser read.
//
// Each rank serves, at Config.Addr (default 127.0.0.1 and a free port; the
// telemetry package passes VCCL_TELEMETRY_ADDR's, where with a fixed port P
// rank r takes P+r and "off" disables it):
//
//	/metrics     metrics in the Prometheus text format: the Prometheus
//	             exporter's handler once installed (Config.Metrics or
//	             Server.SetMetrics), a short summary of the windows until then
//	/v1/info     the rank, world size, communicator ids, host, pid, clock
//	             offset to rank 0 and its error, window size, and the
//	             collector's counters (records drained, dropped per ring and
//	             per sink), as JSON (Info)
//	/v1/windows  every link direction's sliding window now
//	             (flowtel.Window: bandwidth, WR latency percentiles,
//	             backlog, credit waits) as JSON (Snapshot)
//	/v1/stream   server-sent events: a "windows" event (a Snapshot) every
//	             100ms (10 Hz; ?interval= asks for another, at least 10ms),
//	             and whatever Server.Publish sends (vccl-top shows
//	             "finding" and "findings" events); a "missed" event counts
//	             published events a slow client lost
//	/v1/records  the rank's latest records (the last 65536), in flowtel's
//	             wire form, after the cursor ?after= (X-Vccl-Next of the
//	             previous answer; X-Vccl-Missed counts records overwritten
//	             before they were asked for): what vccl-top runs the
//	             analyzer over, the same analysis vccl-analyze makes
//
// The window the server reads is its own, attached to the collector as a
// sink, sized by Config.WindowConfig (VCCL_TELEMETRY_WINDOW) and timed by the communicator's clock
// (so it drains when a link goes quiet); serving never touches the data
// path.
//
// # Finding the endpoints
//
// Start (or Server.Announce) publishes the endpoint in the rendezvous store
// under vccl/UID/live/RANK (StoreKey) and merges it into
// Config.Dir/endpoints.json (VCCL_TELEMETRY_DIR; Endpoints: the communicator's uid and
// size, and an url per rank). Ranks of one host merge into the file under a
// lock and replace it atomically; rank 0 also gathers every rank's endpoint
// from the store and writes them all, so its file lists other hosts' ranks
// too. A file about another communicator is replaced.
package live
