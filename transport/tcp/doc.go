// Package tcp is the TCP transport: one TCP connection per QP (TCP_NODELAY,
// IPv4 or IPv6), set up with the job-token handshake of transport.Acceptor
// and transport.DialHandshake.
//
// Each QP runs two goroutines. The writer sends frames, batching whatever is
// ready (credits, and sends that have credit) into one writev, header and
// payload side by side; the reader reads frames and lands each payload
// straight in the receive buffer posted for it (only the bytes that came in
// with the header's read, at most 4 KiB, are copied from the reader's small
// header buffer, which lets a burst of small frames cost one read). PostSend
// and PostRecv only queue work and wake the writer, so they never block.
//
// Flow control is credit based. Posting a receive sends the peer a credit
// frame carrying the receive buffer's size; the k-th send is matched with the
// k-th credit. A send posted before its credit waits (credit_wait) and is
// released when the credit arrives (credit_grant). A send larger than the
// receive its credit announced is not transmitted: the sender completes it
// with transport.TooLargeError and sends a header flagged too-large, so the
// receive completes with the same error; the QP stays usable.
//
// A lost connection (EOF, reset, read or write error, malformed frame)
// completes every outstanding WR, and every later one, with an error wrapping
// transport.ErrPeerDead that names the peer. Close flushes the QP's own WRs
// with StatusFlushed and transport.ErrClosed and stops both goroutines.
//
// Listen("") listens on port 0 of the address of the interface named by
// VCCL_SOCKET_IFNAME (the first of its comma list; Backend.Interface
// overrides it), or of 127.0.0.1 when none is named; Dial then binds the
// connection's local address to that interface.
//
// Files follow the skeleton every backend repeats: backend.go (Backend,
// Listen, Dial), qp.go (the queue pair), frame.go (the wire format),
// conformance_test.go (transporttest).
package tcp
