// Package prom serves flow telemetry as Prometheus metrics.
//
// A Collector is both a flowtel.Sink, fed the records a flowtel.Collector
// drains, and a prometheus.Collector, read when Prometheus scrapes: pull,
// with no push gateway and no glue. Consume only updates counters and
// histograms in memory and never blocks; Handler serves them (with the Go
// runtime and process metrics) through promhttp, standalone or mounted on
// another server's /metrics (exporter/live's, say).
//
// # Metrics
//
// Per collective, one observation per call and rank once every channel part
// of the call has ended. The metrics are NCCL Inspector's (bus bandwidth,
// algorithm bandwidth, execution time), as histograms rather than the last
// value, in Prometheus' base units (bytes per second, seconds), so that
// promtool check metrics passes them. Labels: comm, rank, collective,
// algorithm, message_size.
//
//	vccl_bus_bandwidth_bytes_per_second        histogram  bus bandwidth, bytes/s (nccl-tests' busbw, which it prints in GB/s),
//	                                                      nccl-tests' factors: 2(n-1)/n all-reduce; (n-1)/n all-gather,
//	                                                      reduce-scatter, all-to-all(v), gather, scatter; 1 broadcast,
//	                                                      reduce, p2p. Needs the world size (AddComm or WithWorldSize).
//	vccl_algorithm_bandwidth_bytes_per_second  histogram  payload / execution time, bytes/s
//	vccl_collective_exec_time_seconds          histogram  coll_begin to coll_end, seconds
//	vccl_collective_bytes_total                counter    payload bytes, as nccl-tests counts them
//	vccl_collectives_total                     counter    calls, with an extra label status (ok, error, flushed)
//
// Bandwidths and execution times count calls that ended ok; the two
// counters count every call (bytes only for ok ones). Point-to-point calls
// (send, recv, group) are collectives here, with their operation's name.
//
// Per link (comm, rank, peer, channel, path), from the WR records:
//
//	vccl_link_bytes_total                 counter    bytes of WRs completed ok; label direction (send, recv)
//	vccl_link_wrs_total                   counter    WRs completed; labels direction, status
//	vccl_link_wr_latency_seconds          histogram  wr_post to its wc; label direction
//	vccl_link_backlog_wrs                 gauge      WRs outstanding on the link's QP after its latest record
//	vccl_link_credit_wait_seconds_total   counter    time during which a send waited for credit
//	                                                 (overlapping waits count once; counted when the credit comes)
//	vccl_link_failovers_total             counter    moves from the primary path to the backup (path: the one moved to)
//	vccl_link_failbacks_total             counter    returns to the primary path
//	vccl_link_down_total                  counter    a path declared dead
//	vccl_link_up_total                    counter    a dead path answering again
//
// And vccl_telemetry_lost_records_total (no labels): records the rings or the
// collector dropped before they reached this collector.
//
// # Cardinality
//
// Every label has a bounded set of values:
//
//   - comm: the communicator id as flowtel.JobID prints it (8 hex digits);
//     the world communicator's is the job id that vcclrun prints and trace
//     file names, spans and reports carry. At most WithMaxComms (default
//     16) distinct, further ones are reported as "other".
//   - rank, peer: ranks of the communicator; channel: its channels; path: 0
//     (primary) or 1 (backup). At most WithMaxLinks (default 1024) links
//     (comm, rank, peer, channel, path) are kept apart; the traffic of further
//     links is reported with peer="other". A rank of a ring or tree sees a
//     few peers; all-to-all sees world size - 1.
//   - collective: the 13 operations of collective.Op; algorithm: auto, ring,
//     tree, rd, direct; status: ok, error, flushed, retransmitted;
//     direction: send, recv.
//   - message_size: the payload's power-of-4 bucket, named by its lower bound
//     in IEC units: 0B, 1B, 4B, 16B, 64B, 256B, 1KiB, 4KiB, … 1GiB, 4GiB;
//     a bucket holds sizes from its bound up to 4× (so 2 MiB is in 1MiB), and
//     4GiB holds everything above. 18 values.
//
// Series exist only for the label values seen. Per communicator and rank,
// the collective metrics are bounded by 13 operations × 5 algorithms × 18
// sizes, and in practice follow the few operations, algorithms and sizes a
// job uses. Per link: the backlog and credit-wait series, and per direction
// used the bytes, the WRs by status, and a latency histogram.
//
// Failure counters are never missing where their successes are: a
// collective series brings vccl_collectives_total at 0 for every status, a
// link its failover, failback, down and up counters at 0, and a direction
// its WR counters at 0 for every status, so that a dashboard shows a rate
// of 0 failures rather than no data. vccl_telemetry_lost_records_total is
// there, at 0, from the start.
//
// Histogram buckets: bandwidths at powers of 2 from 1/64 to 1024 GB/s
// (1.5625e7 to 1.024e12 bytes/s); execution time and WR latency at powers
// of 4 from 1µs to 16.8 s.
//
// The metrics are a view over flowtel's fold, which pairs each wc with its
// wr_post (latency), each credit wait with its grant, and a call's
// coll_begin and coll_end records. A collective split over several channels
// records a coll_begin and a coll_end per channel, and its coll_begin says
// how many; it is observed once, as a whole (payload summed, time from the
// first begin to the last end), when every part has ended.
package prom
