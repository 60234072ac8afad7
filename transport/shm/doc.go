// Package shm is the shared-memory transport for processes on one host.
//
// Connection set-up runs over a Unix domain socket, by default in the
// abstract namespace ("@vccl-shm-<pid>-<n>-<random>"), with the job-token
// handshake of the stream backends (transport.Acceptor,
// transport.DialHandshake); with no token, only processes of the
// listener's user are admitted (SO_PEERCRED). The
// dialler then creates the shared segment with memfd_create (sealed against
// resizing), maps it and passes its descriptor over the socket
// (SCM_RIGHTS); the acceptor maps it. Nothing is ever named in /dev/shm, so
// nothing is left behind, whether the processes close or crash. The socket
// stays open for the QP's life: its end of file is how either side learns,
// within microseconds, that the other has gone.
//
// Each direction has a ring of records in the segment (2 MiB by default,
// Backend.RingSize; a message moves in records of at most 64 KiB, so the
// sender's copy-in and the receiver's copy-out of a large message overlap,
// on two cores, and the ring stays in cache), written by the sender
// (tail) and consumed by the receiver (head), and an array of credit slots
// in which the receiver announces its posted receives and their sizes. A
// send of more than 16 KiB moves only once the peer's receive is announced
// (credit_wait until then, credit_grant when it comes); a send larger than
// that receive moves no payload and fails both sides with
// transport.TooLargeError. A smaller send goes into the ring at once, as
// one record flagged eager, without looking at the credits, and waits
// there for its receive (receives match sends in order); it completes
// when its credit comes, recording no credit_wait, and if the receive is
// smaller, each side fails its end with the same TooLargeError, knowing
// both sizes. A credit's slot is reused only once the sender says, in a
// word of its own, that it has read it, since an eager message can be
// consumed before its sender looks at its credit. Every word the peer
// wrote since this side last read it is a cache miss, as long as the
// whole rest of a small post, so a post looks at none before its data
// leaves: PostSend publishes its records and PostRecv announces its
// receive, and what arrived is taken, and eager sends completed, by the
// next Poll. The
// receiver copies straight from the ring into the posted buffer, or, for a
// receive posted with WR.Reduce (the QP is a transport.Reducer), reduces
// each record's payload out of the ring into it, so a collective's receive
// and reduction are one pass. Where the two cores are close, two copies,
// pipelined, beat one: a single-copy path through process_vm_readv (Open
// MPI's CMA) is slower there at every size, since the kernel pins and
// copies page by page on the receiver's core alone, and slower still when
// both ends read at once (BENCHMARKS.md has the figures). Where they are
// far, each store into the ring waits for a line
// the peer's core read, and the sender, while its timed copies into the
// ring run slow, takes single copy for an exchange and, for a one-way
// send, either single copy or a ring it streams into past the caches,
// whichever delivered more when last measured (cma_linux.go). A process that
// cannot read its peer's memory (another user or PID namespace, Yama's
// ptrace_scope 2 or 3, a seccomp filter) keeps to the ring, and logs a
// warning saying why, once.
//
// Single copy goes faster between huge pages, which heap memory mostly
// lacks: AdviseSingleCopy, told of the buffers a call reads or lends that
// way, collapses a buffer of 4 MiB or more into huge pages the second
// time it sees it (decision 0064).
//
// Whoever holds the QP's progress lock moves data: the owner in Poll (and
// a bounded amount of sends and announcements in PostSend/PostRecv, which
// never wait), or the QP's
// background goroutine while the owner is not polling. Beside a polling
// owner the background goroutine only naps on a Go timer and looks again:
// it takes no lock and no thread blocks in a system call. An owner whose
// polls find nothing with WRs outstanding (while no other QP of the
// process moves data either) yields its core between polls after 50 us
// (a peer descheduled on a loaded machine may be waiting for it; on an
// idle one the yield returns at once), and after 200 us (when collective's
// engine stops spinning), or as soon as the engine says it will sleep
// (SetSpinning(false)), hands the wait to the background goroutine. That goroutine, once the owner is away, polls the peer's words
// for 20 us, then raises its side's "sleeping" flag in the segment and
// sleeps on a futex; the peer's next publication wakes it (FUTEX_WAKE), and
// it moves the data and signals the Notifier. The flag is down while the
// owner polls, so the hot path makes no system call. The socket's end of
// file, closure and peer death wake it wherever it waits.
//
// Files follow the skeleton every backend repeats: backend.go (Backend,
// Listen, Dial), qp.go (the queue pair), conformance_test.go
// (transporttest), with ring.go (the segment layout and records) and
// futex_linux.go; proc_test.go and bench_test.go run the peer as a second
// process (this test binary, re-executed). The backend is Linux only;
// elsewhere Listen and Dial return an error.
package shm
