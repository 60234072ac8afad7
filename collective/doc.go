// Package collective runs collective operations (all-reduce, broadcast,
// all-gather and the rest) among the ranks of a job, as NCCL and MPI do,
// in pure Go, with a telemetry record of every transfer.
//
// # Communicators
//
// A [Comm] is one rank's handle on a fixed group of ranks. Every rank makes
// its own and every rank calls the same collectives in the same order; a
// call returns when this rank's part is done. Make one per process of a
// job with [NewFromEnv], which reads the rank, the world size and the
// rendezvous address that torchrun, Open MPI, Slurm or vcclrun set, or
// with [New] and [WithRank] and [WithMaster]: rank 0 serves a small
// rendezvous store at that address and the ranks exchange their addresses
// through it. [NewLocal] makes every rank of a job inside one process, as
// goroutines, for tests and for programs that embed a job. [Comm.Split]
// divides a communicator into smaller ones. Close a communicator when done;
// [Comm.Abort] tears it down at once, from any goroutine.
//
// # Collectives
//
// Each collective comes in two forms that take the same arguments: a
// generic function over Go slices ([AllReduce], [Broadcast], …) and a
// method over [Buffer] values, which also carry raw bytes or device
// memory ([Comm.AllReduce], [Comm.Broadcast], …). Both take a send and a
// receive buffer; pass one buffer twice to run in place. Each has an
// asynchronous form ([AllReduceAsync], [Comm.AllReduceAsync], …) that
// returns a [Handle] once the call is queued; its Wait returns the call's
// error. The buffers belong to the call until then. Calls of one
// communicator run in the order they were made.
//
// # Errors
//
// A call that fails returns an error that errors.Is matches against its
// kind: [ErrClosed], [ErrAborted], [ErrTimeout] (the communicator's own
// deadline, [WithTimeout]), [ErrMismatch] (the ranks called different
// collectives; errors.As gives the [MismatchError] with every rank's
// call), the caller's context.Canceled or context.DeadlineExceeded, and
// transport.ErrPeerDead for a lost peer. A failure that breaks the
// communicator on one rank fails the calls of every other rank with a
// [PeerFailedError] naming the rank to blame; it unwraps to that rank's
// error, whose kinds errors.Is still finds although it crossed processes
// as text. A communicator whose call failed that way cannot be used again.
//
// # Transports
//
// Ranks in one process talk through memory (transport/loop), ranks on one
// host through shared memory (transport/shm), and ranks on different hosts
// over TCP (transport/tcp, or transport/ft with [WithFaultTolerance]): each
// pair of ranks gets the nearest one that reaches, unless [WithTransport]
// names one. [WithBackend] plugs in a [transport.Backend] of the caller's;
// its [transport.Capabilities] tell the communicator which ranks it
// reaches and how to drive it.
//
// # Telemetry
//
// With [WithTelemetry] (or VCCL_TELEMETRY=1) every work request's post and
// completion and every call's start and end is recorded ([flowtel.Record])
// into per-channel rings that a [flowtel.Collector] drains to its sinks,
// off the caller's path. [Comm.Collector] is where exporters attach;
// importing github.com/vccl-go/vccl/telemetry attaches the ones the
// environment asks for (Arrow traces, OpenTelemetry, Prometheus, a live
// endpoint) to every communicator ([RegisterTelemetry]).
//
// # Configuration
//
// Options passed to [New], [NewFromEnv] or [NewLocal] override the VCCL_*
// environment variables ([EnvTransport], [EnvTimeout], …), which override
// the defaults.
package collective
