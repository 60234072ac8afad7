// Package tcp is the TCP transport: one TCP connection per QP (TCP_NODELAY,
// IPv4 or IPv6), set up with the job-token handshake of transport.Acceptor
// and transport.DialHandshake. A connection within the host uses reno
// congestion control, whatever the kernel's default (Backend.Congestion
// says why and how to choose another).
//
// The bytes move on the goroutines that use the QP, where they can: PostSend
// writes its frame at once, header and payload in one non-blocking writev,
// with any credits still queued; and Poll reads what the socket holds,
// landing each payload straight in the receive buffer posted for it (only
// bytes that came in with a header's read, at most 4 KiB, are copied from a
// small read-ahead buffer). So a message costs no hand-off between
// goroutines. Each QP also runs two goroutines for what its users cannot do
// without blocking: the writer takes over a batch the socket did not take
// whole and waits for room (unless the owner spins: then its Polls go on
// writing it, see pump), and sends the credits of receives that no send
// took along; the reader reads, and wakes the owner through its Notifier,
// while nobody polls. An owner that polls without pause says so with
// SetSpinning (the collective engine does, while it spins): the reader
// goroutine then parks until spinning stops, so an arriving message wakes no
// thread; and PostRecv leaves its credit to the next PostSend or Poll
// instead of waking the writer.
//
// The socket is not on Go's network poller: the QP dups the connection's
// descriptor and closes the net.TCPConn, and its goroutines block in
// poll(2) on the socket and on a pipe that the QP's stop makes readable.
// Go's poller would wake its epoll_wait thread for every arriving message
// whether or not a goroutine waits for it, and with any other socket waited
// on in the process (collective's bootstrap connections) that thread is
// always there to wake: two thread wake-ups per message per process, each
// taking a core from a spinning rank on a 2-core host.
//
// Flow control is credit based. Posting a receive sends the peer a credit
// frame carrying the receive buffer's size; the k-th send is matched with the
// k-th credit. A send posted before its credit records credit_wait and
// credit_grant when the credit arrives. Small sends (up to 68 KiB, at most
// 16 ahead of their credits) do not wait for it: they go at once, flagged
// eager, and the receiver keeps such a message until its receive is posted
// (a bounded buffer: at most 16 of them); the send completes once written
// and credited. Larger sends wait for their credit, so the receive they
// land in is already posted. A send larger than the receive its credit
// announced fails with transport.TooLargeError at both ends: a credited one
// is not transmitted (a header flagged too-large stands for it), an eager one
// is dropped by the receiver; the QP stays usable.
//
// A lost connection (EOF, reset, read or write error, malformed frame)
// completes every outstanding WR, and every later one, with an error wrapping
// transport.ErrPeerDead that names the peer. Close flushes the QP's own WRs
// with StatusFlushed and transport.ErrClosed and stops both goroutines.
//
// Listen("") listens on port 0 of the address of the interface
// Backend.Interface names (the first of its comma list; collective passes
// VCCL_SOCKET_IFNAME's, parsed by ParseConfig, unless an option names
// another), or of 127.0.0.1 when none is named; Dial then binds the
// connection's local address to that interface. The backend reads no
// environment itself.
//
// Files follow the skeleton every backend repeats: backend.go (Backend,
// Listen, Dial), qp.go (the queue pair), frame.go (the wire format),
// conformance_test.go (transporttest).
package tcp
