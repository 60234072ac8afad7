// Package transport is VCCL-Go's verbs-like layer: every byte that moves is a
// work request (WR) posted on a queue pair (QP) and finished by a work
// completion (WC), as in RDMA verbs.
//
// The contract every backend (loop, tcp, shm, later cuda) keeps:
//
//   - PostSend and PostRecv never block. Poll returns completions in the order
//     the QP completes them: sends in posting order, receives in posting order.
//   - Flow control is credit based: a send's bytes move only once the peer has
//     posted a receive for them. A send that finds no credit is queued and
//     recorded as credit_wait, the raw signal of backpressure; credit_grant
//     marks the end of the wait.
//   - Errors are completions with a status, never panics or hangs: a dead peer
//     completes every outstanding WR with an error within the deadline, a
//     closed QP refuses new WRs with ErrClosed, and a receive buffer smaller
//     than the message fails both sides with an error naming both sizes.
//   - A QP has one owner goroutine (a progress engine) that posts and polls;
//     Close may be called from any goroutine. The owner stamps the wr_post,
//     wc, credit_wait and credit_grant records through the QP's Recorder, so
//     each Recorder keeps a single producer.
//
// Core holds the bookkeeping every backend shares: the check and
// accounting that open every PostSend and PostRecv (Check, Admit, Fail,
// MaxMessage), the completion queue, depth and telemetry. Acceptor,
// Rendezvous and the handshake are the connection set-up shared by the
// backends that listen; internal/sock the dialling and frame-header codec
// shared by the stream-socket backends (tcp, ft). The conformance suite in
// transporttest is the executable form of this contract.
package transport
