// Package capi is NCCL's C API in Go terms, over VCCL's GPU engine
// (gpu/ce): communicators made from a unique id that carries the
// rendezvous store's address and a job token, collectives and
// point-to-point calls on device memory the caller allocated, each
// stream-ordered on the caller's CUDA stream, groups of calls, and NCCL's
// result codes with a last-error string. cmd/libnccl exports it as
// libnccl.so.2 (docs/nccl-abi.md); this package holds everything that can
// be tested without cgo.
//
// A call returns once its work is queued on the GPU behind what is already
// on the caller's stream; work queued on that stream afterwards runs after
// it. Queuing needs the peers to have reached the same call (the host
// waits for them, microseconds when ranks are in step, never for the
// GPU). A communicator watches its peers: a peer process that exits, or a
// host link that fails, makes AsyncError report RemoteError and ends every
// call waiting for that peer; Abort returns within seconds whatever the
// peers and the GPU do.
package capi
