// Package ft is the fault-tolerant TCP transport: every queue pair runs over
// two TCP connections to its peer, a primary on one interface and a
// connected hot-standby backup on another (VCCL_SOCKET_IFNAME=nic0,nic1),
// and keeps its WRs flowing, each delivered once and in order, when one of
// them fails.
//
// # Protocol
//
// Frames carry a 32-byte header (frame.go). Messages are numbered per
// direction; a message longer than Params.Segment goes out in segments, so a
// heartbeat never waits behind more than one. The receiver lands each
// segment straight in the receive posted for it (no copy) and acknowledges
// delivered messages cumulatively. A send must stay replayable until it is
// acknowledged: one of up to 64 KiB is copied when posted and completes once
// written, as with transport/tcp; a larger one completes when acknowledged
// (its own buffer is replayed) and asks for the acknowledgement at once.
// Credits (one per posted receive, as in transport/tcp) are numbered too.
//
// Data, credits and acknowledgements of one end leave on one path, its tx
// path. Moving them to another path (failover, fail-back) starts a new
// epoch: the new path first carries a resync frame, then every message the
// peer has not acknowledged again from its first byte (flagged replay), then
// new ones; credits for every receive not yet delivered are sent again. The
// receiver takes data only from the path of the peer's latest resync (a
// segment in progress on the old one finishes first) and drops messages it
// already delivered, so replays are exactly-once and in order whatever the
// old path still delivers.
//
// # Failure detection
//
//   - Socket errors (reset, EOF, a failed write) take a path down at once.
//   - Every path carries a heartbeat every Params.Heartbeat (10 ms), sent by
//     one monitor goroutine per link. A path that delivers nothing (not a
//     byte, by our reader's or the kernel's count) for Params.DeadAfter
//     (60 ms) while the peer's heartbeats still arrive on another path is
//     down once our interface is down or the peer's kernel no longer
//     acknowledges its packets; after Params.LinkTimeout (1 s) in any case.
//   - Silence on every path at once is the peer's process (or ours) not
//     running, or the network gone: it takes paths down only with no TCP
//     acknowledgement for LinkTimeout. A stopped or starved peer whose
//     kernel still answers is left to the calls' own deadline.
//   - Heartbeats report the bytes read from the path: a peer whose
//     heartbeats keep saying it reads nothing we write, for Params.Progress
//     (1 s), takes the path down too (a path that fails one way only).
//   - A path declared down is closed and the peer is told on the others.
//
// When the last path goes down by an error the link waits up to
// LinkTimeout for a path to come back; it ends at once when every path
// failed within 50 ms by socket errors or the peer refuses every
// reconnection (its process is gone), and after LinkTimeout of silence on
// its last path. Then every WR completes with an error wrapping
// transport.ErrPeerDead that names the link and why each path went down,
// and Err returns it, so the collective fails on every rank.
//
// # Recovery
//
// The side that dialled the link reconnects down paths every Params.Probe
// (50 ms) through the peer's listener, which stays open for that while the
// links it accepted live; when the primary is back, traffic returns to it.
//
// Close acknowledges what it delivered and says goodbye on every path with
// the count of messages it sent; the peer ends the link, quietly, once it has
// them all.
//
// # Telemetry
//
// Through transport.Core: link_down and link_up records for a path, failover
// (Path 1 afterwards, Bytes replayed) and failback (Path 0); wr_post records
// carry the path data leaves on, wc records the path a WR completed on and
// status retransmitted for a replayed WR (the WC itself is OK). Stats and
// Totals count failovers, fail-backs, replayed WRs and bytes, and time on
// the backup.
//
// Files follow the backend skeleton: backend.go (Backend, Listen, Dial),
// qp.go (the queue pair and its state machine), path.go (one connection:
// reader, writer), frame.go (the wire format), params.go (thresholds),
// conformance_test.go (transporttest), ft_test.go and toxiproxy_test.go
// (failover). test/fault runs it across network namespaces.
package ft
