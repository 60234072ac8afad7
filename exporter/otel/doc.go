// Package otel turns flow telemetry records into OpenTelemetry spans.
//
// An Exporter is a flowtel.Sink. It builds spans after the fact, from the
// records a flowtel.Collector hands it, with the records' own timestamps: the
// data path never calls the OpenTelemetry API, and a collective costs the
// data path nothing more than its records. Spans go through the OpenTelemetry
// Go SDK (a batch span processor, which drops rather than blocks when its
// queue is full) to OTLP over gRPC or HTTP, or to stdout.
//
// # Spans
//
// For every collective (or point-to-point call) of every rank:
//
//   - one span from coll_begin to coll_end, named after the operation
//     ("allreduce", "send", …), with attributes
//     vccl.comm (the communicator id as flowtel.JobID prints it: the job id
//     for the world communicator), vccl.coll_seq,
//     vccl.op, vccl.algo, vccl.dtype, vccl.bytes (the payload as nccl-tests
//     counts it), vccl.world_size (when known, see below), vccl.rank,
//     vccl.channels (the parts the call was split into), and, when it took
//     time, vccl.algbw_gbps and vccl.busbw_gbps (GB/s, 1e9 bytes, with
//     nccl-tests' bus bandwidth factors: 2(n-1)/n for all-reduce, (n-1)/n
//     for all-gather, reduce-scatter, all-to-all(v), gather and scatter, 1
//     for broadcast, reduce and point-to-point). Point-to-point calls, whose
//     coll_seq has the top bit set, carry vccl.p2p=true and their own
//     sequence number without that bit. A failed call has span status Error,
//     vccl.status and the semantic conventions' error.type (the status); one whose begin or end was never seen (lost records,
//     an exporter attached mid-call, Shutdown) has vccl.incomplete=true;
//     vccl.records_lost=true says records were lost while it ran.
//   - a child span per peer and channel step, named "<op>.step", from the
//     wr_post / wc / credit records of that (coll_seq, peer, channel, step):
//     from the first of them to the last, with vccl.peer, vccl.channel,
//     vccl.step, vccl.path, vccl.send_bytes and vccl.recv_bytes (completed),
//     vccl.wrs (posted), vccl.completions, vccl.wr_errors, vccl.max_depth
//     and vccl.credit_wait_ns (time with a send of the step waiting for
//     credit). vccl.failed_over=true says the step's WRs used both paths.
//   - optionally, one span event per WR record on its step span (wr_post,
//     wc, credit_wait, credit_grant, with vccl.wr_id, vccl.qp, vccl.dir,
//     vccl.bytes, vccl.depth, vccl.path and vccl.status). Events are many,
//     so they are sampled by collective: WithWREvents or VCCL_OTEL_WR_EVENTS
//     give the fraction of collectives that get them (default 0). The choice
//     hashes (comm, coll_seq), so every rank samples the same collectives.
//     Failover, failback, link_down and link_up records always become events
//     on the collective span they happened in.
//
// # Parents
//
// A collective called with a span in its context.Context (the program's
// own, from any OpenTelemetry tracer) is that span's child, in its trace:
// the program's trace shows its collectives under the step that made them.
// The comm library imports no tracing API; it tells CallStarted, which
// Comm.ObserveCalls registers (the telemetry package does), of every call
// as it is numbered, and CallStarted keeps the caller's span context until
// the call's span is built from its records. The calls of Split children
// are parented alike. Each rank's span of a collective is then in its own
// caller's trace; vccl.comm and vccl.coll_seq say which spans are one
// collective on several ranks.
//
// A collective called without one is, with the exporter's own tracer
// provider (the default), a root in a trace that every rank's span of that
// collective shares, whose id is derived from the communicator and the
// sequence number (salted by the communicator's full unique id when AddComm
// registered it), so a trace shows the collective on every rank that
// exports to the same backend. The OTEL_TRACES_SAMPLER variables apply as usual; a
// trace-id-ratio sampler then keeps or drops a collective on every rank
// alike.
//
// The spans are a view over flowtel's fold, which pairs each wc with its
// wr_post, each credit wait with its grant and a call's coll_begin records
// with its coll_end records. A collective split over several channels
// records one coll_begin and one coll_end per channel, in different rings,
// and its coll_begin says how many; its span covers them all and is ended
// once every part has ended.
//
// # Timestamps and world size
//
// Record times are on the job's common time base (the monotonic clock plus
// the offset to rank 0). The exporter maps them to wall-clock time through
// the host's clocks when it starts, undoing the offset of the communicator's
// Clock when AddComm registered it, so spans carry this host's wall-clock
// time. Records carry no world size: AddComm (or WithWorldSize for every
// communicator) supplies it; without it spans have no vccl.world_size and
// no vccl.busbw_gbps.
//
// # Resource
//
// The resource of the exporter's own provider carries the semantic
// conventions' service.name ("vccl" by default), host.name, process.pid,
// process.executable.name, process.runtime.name and .version and the SDK's
// telemetry.sdk.*; with WithRank (the telemetry package passes it) also
// service.instance.id ("vccl-JOBID-rankR", as the rank's trace files are
// named), vccl.job.id, vccl.rank and vccl.world_size. OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES override any of them.
//
// # Configuration
//
// The standard variables configure the export: OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES (service.name defaults to "vccl"),
// OTEL_TRACES_EXPORTER ("otlp", the default; "console" for stdout; "none";
// OTEL_SDK_DISABLED=true means "none" too),
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL ("grpc"
// or "http/protobuf", the default), and every OTEL_EXPORTER_OTLP_* and
// OTEL_EXPORTER_OTLP_TRACES_* endpoint, header, timeout, compression and TLS
// variable, read by the OTLP exporters themselves; OTEL_BSP_* size the batch
// span processor and OTEL_SPAN_*_LIMIT its limits. The endpoint variables
// are read as the specification says, where the Go exporters differ: an
// endpoint without a scheme (localhost:4318) is plain HTTP, as in the other
// SDKs, and a malformed one is an error of New naming the variable. New
// reads the variables through WithEnv (the telemetry package passes the
// process's), and options given after it win over them.
// VCCL_OTEL_WR_EVENTS is the WR event sampling rate.
//
// Consume never blocks: it only updates in-memory state and ends spans,
// which the batch span processor queues (or drops, when its queue is full).
// The state is bounded: at most WithMaxOpen collectives are kept open (the
// oldest is exported as incomplete beyond that) and at most
// WithMaxEventsPerStep events per step span.
package otel
