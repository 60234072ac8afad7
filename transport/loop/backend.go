package loop

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/vccl-go/vccl/transport"
)

// Name is the backend's name.
const Name = "loop"

// Backend is the in-process backend. Its zero value is ready to use; all
// Backends of a process share one address space of listeners.
type Backend struct{}

var _ transport.Backend = Backend{}

// Name returns "loop".
func (Backend) Name() string { return Name }

// Capabilities: a loop QP reaches its own process, and its Poll lands
// what the peer's posts left for it.
func (Backend) Capabilities() transport.Capabilities {
	return transport.Capabilities{Reach: transport.ReachProcess, PollProgresses: true}
}

var (
	registryMu sync.Mutex
	registry   = map[string]*listener{}
	nextAddr   atomic.Uint64
)

// Listen registers a listener at lc.Addr, or at a fresh "loop:N" address.
func (Backend) Listen(_ context.Context, lc transport.ListenConfig) (transport.Listener, error) {
	addr := lc.Addr
	if addr == "" {
		addr = fmt.Sprintf("loop:%d", nextAddr.Add(1))
	}
	l := &listener{addr: addr, token: lc.Token}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[addr]; dup {
		return nil, fmt.Errorf("loop: address %q already in use", addr)
	}
	registry[addr] = l
	return l, nil
}

// Dial connects to the listener at addr under key. The QP is usable at once;
// its sends wait for credit until the other end accepts and posts receives.
func (Backend) Dial(ctx context.Context, addr, key string, cfg transport.Config) (transport.QP, error) {
	registryMu.Lock()
	l := registry[addr]
	registryMu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("loop: no listener at %q", addr)
	}
	if cfg.Token != l.token {
		return nil, fmt.Errorf("%w: %s refused key %q", transport.ErrBadToken, addr, key)
	}
	lk := &link{}
	qp := newQP(lk, 0, cfg, addr)
	if err := l.links.Offer(key, lk, nil); err != nil {
		return nil, err
	}
	return qp, ctx.Err()
}

type listener struct {
	addr  string
	token string
	links transport.Rendezvous[*link]
}

func (l *listener) Addr() string { return l.addr }

func (l *listener) Accept(ctx context.Context, key string, cfg transport.Config) (transport.QP, error) {
	lk, err := l.links.Take(ctx, key, l.addr)
	if err != nil {
		return nil, err
	}
	return newQP(lk, 1, cfg, l.addr), nil
}

func (l *listener) Close() error {
	registryMu.Lock()
	if registry[l.addr] == l {
		delete(registry, l.addr)
	}
	registryMu.Unlock()
	l.links.Stop(fmt.Errorf("%w: loop listener %s", transport.ErrClosed, l.addr))
	for _, lk := range l.links.Drain() {
		lk.hangUp(1)
	}
	return nil
}
