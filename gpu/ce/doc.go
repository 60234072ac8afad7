// Package ce runs collectives between the GPUs of one host with the data
// moved by copy engines: point-to-point transfers and all-gather use no SM
// at all, all-reduce uses a PTX reduction kernel (gpu/kernels) with a
// configurable grid, Config.SMs, for the arithmetic only.
//
// A Group drives the GPUs of one process (one rank per GPU) from a single
// CPU proxy goroutine locked to its OS thread, which switches the current
// context as it goes. Operations are stream-ordered, as in NCCL: a call
// queues the work behind what is already on each rank's stream
// (Group.Stream) and returns; Synchronize waits for it. Inside an operation
// the order between GPUs is kept by CUDA events recorded on one GPU's
// stream and waited on by the other's, so the host never waits on the data
// path; copies go from one GPU's memory straight into the other's over
// NVLink (cuMemcpyPeerAsync with peer access enabled).
//
// All-reduce of two ranks: each rank's copy engine sends the half the other
// rank owns into that rank's scratch buffer, the owner reduces its half with
// the kernel (operands in rank order, so both ranks get bit-identical
// results), and the copy engine sends the reduced half back, pipelined in
// chunks so copies and reductions overlap. Small out-of-place all-reduces
// take one kernel per GPU that reads the peer's input over NVLink: there
// the driver calls, a launch above all, cost more than the copies, so
// fewer calls win.
//
// Proc is the same for a job of one process per GPU on one host (ranks
// started by vcclrun or any launcher): buffers registered through CUDA IPC
// handles exchanged over the host communicator, transfers pushed by the
// sender's copy engine into the mapped peer buffer and ordered with
// interprocess events, the per-transfer handshake in a shared-memory
// mailbox. Send/recv and all-gather, 0 SMs. Its collectives on device
// buffers (Attach) are one table entry each (plan.go): a pure plan of
// transfer and fold phases, as the host engine's schedules are, which one
// executor runs.
//
// Telemetry: with a flowtel.Collector in the Config, every copy-engine
// transfer is a work request on both ranks (a send on the source, a receive
// on the destination, on a queue pair per peer and stream) and every
// reduction kernel one on the rank's local queue pair 0, each a wr_post
// record when queued and a wc record when the proxy sees its completion
// event fire; every call is bracketed by coll_begin (its request's start)
// and coll_end (when the GPU has run it on the rank). The records are
// written through the primitives the host paths use (flowtel.CallFields,
// WRFields), so the analyzer and the per-link windows work on GPU flows
// unchanged. Without a collector no completion events are recorded or
// polled.
package ce
