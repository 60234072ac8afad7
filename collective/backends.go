package collective

import (
	"errors"
	"fmt"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/ft"
	"github.com/vccl-go/vccl/transport/loop"
	"github.com/vccl-go/vccl/transport/shm"
	"github.com/vccl-go/vccl/transport/tcp"
)

// builtinBackends are the transports WithTransport and VCCL_TRANSPORT
// name, each made with the communicator's settings. "tcp" makes the
// fault-tolerant backend (transport/ft) when fault tolerance is on: the
// ranks agree on that apart (peerInfo.FT), so the name that keys their
// addresses stays "tcp" either way.
var builtinBackends = map[string]func(o *options) transport.Backend{
	loop.Name: func(*options) transport.Backend { return loop.Backend{} },
	shm.Name:  func(*options) transport.Backend { return shm.Backend{} },
	tcp.Name: func(o *options) transport.Backend {
		if o.ft {
			return ft.Backend{Interfaces: o.ifname, Params: o.ftParams, SockBuf: o.sock.SockBuf,
				Congestion: o.sock.Congestion, Logger: o.logger}
		}
		return tcp.Backend{Interface: o.ifname, SockBuf: o.sock.SockBuf, Congestion: o.sock.Congestion}
	},
}

// autoBackends are what "auto" chooses from for each peer: the first whose
// reach covers the peer, so the nearest kind of link that works.
var autoBackends = []string{loop.Name, shm.Name, tcp.Name}

// WithBackend makes every link of the communicator use b, a transport of
// the caller's (for example one over a network this module does not
// know). Every rank must pass a backend of the same name. b's
// Capabilities decide which ranks it can join: a backend that reaches
// only its own process serves NewLocal, one that reaches the host serves
// ranks on one machine. It replaces WithTransport and VCCL_TRANSPORT; the
// last of WithBackend and WithTransport given wins.
func WithBackend(b transport.Backend) Option {
	return func(o *options) {
		if b == nil {
			o.errs = append(o.errs, errors.New("collective: WithBackend(nil)"))
			return
		}
		o.backend, o.transport = b, b.Name()
	}
}

// backendNamed returns the backend called name: the one WithBackend gave,
// else a built-in one. name is valid (options.validate).
func (o *options) backendNamed(name string) transport.Backend {
	if o.backend != nil && o.backend.Name() == name {
		return o.backend
	}
	return builtinBackends[name](o)
}

// knowsBackend reports whether name names a backend of o's.
func (o *options) knowsBackend(name string) bool {
	_, ok := builtinBackends[name]
	return ok || o.backend != nil && o.backend.Name() == name
}

// distance is how far apart two ranks are, in the terms of a backend's
// reach.
func distance(a, b peerInfo) transport.Reach {
	switch {
	case a.ProcID == b.ProcID:
		return transport.ReachProcess
	case a.HostID == b.HostID:
		return transport.ReachHost
	}
	return transport.ReachNetwork
}

// chooseBackend names the transport between two ranks: the forced one, or
// the first of autoBackends that reaches from one to the other. It is a
// function of both ranks' records alone, so every rank chooses alike for
// every pair.
func (c *Comm) chooseBackend(a, b peerInfo) (string, error) {
	d := distance(a, b)
	if c.opts.transport != "auto" {
		if r := c.opts.backendNamed(c.opts.transport).Capabilities().Reach; r < d {
			return "", fmt.Errorf("collective: transport %q reaches only ranks within one %v, and ranks %d and %d are not",
				c.opts.transport, r, a.Rank, b.Rank)
		}
		return c.opts.transport, nil
	}
	for _, name := range autoBackends {
		if c.opts.backendNamed(name).Capabilities().Reach >= d {
			return name, nil
		}
	}
	return autoBackends[len(autoBackends)-1], nil // it reaches the network
}

// sharedMemory reports whether the link between ranks a and b shares
// memory (transport.Capabilities.SharedMemory).
func (c *Comm) sharedMemory(a, b peerInfo) bool {
	name, err := c.chooseBackend(a, b)
	return err == nil && c.opts.backendNamed(name).Capabilities().SharedMemory
}
