// Package loop is the in-process transport: both ends of a QP live in one
// process (ranks as goroutines), and a send copies straight into the receive
// buffer its peer posted. It is the reference backend of the transport
// contract and the one single-process multi-rank jobs and tests run on.
//
// Files follow the skeleton every backend repeats: backend.go (Backend,
// Listen, Dial), qp.go (the queue pair), conformance_test.go (transporttest).
package loop
