//go:build !linux

package shm

import (
	"context"
	"errors"

	"github.com/vccl-go/vccl/transport"
)

// Name is the backend's name.
const Name = "shm"

// Backend is the shared-memory backend; it needs Linux (memfd, abstract
// Unix sockets, futexes).
type Backend struct {
	RingSize int // see the Linux documentation
}

var errUnsupported = errors.New("shm: the shared-memory transport needs Linux")

// Name returns "shm".
func (Backend) Name() string { return Name }

// Listen fails: the backend needs Linux.
func (Backend) Listen(context.Context, transport.ListenConfig) (transport.Listener, error) {
	return nil, errUnsupported
}

// Dial fails: the backend needs Linux.
func (Backend) Dial(context.Context, string, string, transport.Config) (transport.QP, error) {
	return nil, errUnsupported
}

// Capabilities: off Linux shm reaches no other process, so "auto" passes it
// over for ranks on one host (they take tcp) and a forced shm is refused
// before any Dial.
func (Backend) Capabilities() transport.Capabilities {
	return transport.Capabilities{Reach: transport.ReachProcess, SharedMemory: true}
}
