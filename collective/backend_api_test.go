package collective

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/loop"
)

// countingBackend is a user's backend as WithBackend takes it: it carries
// its links over transport/loop under a name of its own, hides loop's
// optional features (its QPs are plain transport.QPs, so schedules do
// without fused receives and tees), declares capabilities of its own (no
// spinning: its Poll does not progress), and counts the work requests
// posted through it, so a test can tell the traffic took it.
type countingBackend struct {
	posts *atomic.Int64
}

func (countingBackend) Name() string { return "counting" }

func (countingBackend) Capabilities() transport.Capabilities {
	return transport.Capabilities{Reach: transport.ReachProcess}
}

func (b countingBackend) Listen(ctx context.Context, lc transport.ListenConfig) (transport.Listener, error) {
	l, err := loop.Backend{}.Listen(ctx, lc)
	if err != nil {
		return nil, err
	}
	return postCountingListener{Listener: l, posts: b.posts}, nil
}

func (b countingBackend) Dial(ctx context.Context, addr, key string, cfg transport.Config) (transport.QP, error) {
	return countPosts(b.posts)(loop.Backend{}.Dial(ctx, addr, key, cfg))
}

type postCountingListener struct {
	transport.Listener
	posts *atomic.Int64
}

func (l postCountingListener) Accept(ctx context.Context, key string, cfg transport.Config) (transport.QP, error) {
	return countPosts(l.posts)(l.Listener.Accept(ctx, key, cfg))
}

// countPosts wraps a queue pair just made, if it was, to count its posts
// in posts.
func countPosts(posts *atomic.Int64) func(transport.QP, error) (transport.QP, error) {
	return func(qp transport.QP, err error) (transport.QP, error) {
		if err != nil {
			return nil, err
		}
		return postCountingQP{QP: qp, posts: posts}, nil
	}
}

type postCountingQP struct {
	transport.QP
	posts *atomic.Int64
}

func (q postCountingQP) PostSend(wr transport.WR) error {
	q.posts.Add(1)
	return q.QP.PostSend(wr)
}

func (q postCountingQP) PostRecv(wr transport.WR) error {
	q.posts.Add(1)
	return q.QP.PostRecv(wr)
}

// TestWithBackendMatrix runs the collective matrix over a backend defined
// here, plugged in through WithBackend, and checks that the traffic took it.
func TestWithBackendMatrix(t *testing.T) {
	posts := new(atomic.Int64)
	runMatrix(t, "counting", WithBackend(countingBackend{posts: posts}))
	if posts.Load() == 0 {
		t.Fatal("the matrix passed, but no work request went through the backend given to WithBackend")
	}
}

// TestWithBackendLinks checks what a communicator built on a user's
// backend says of its links.
func TestWithBackendLinks(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	posts := new(atomic.Int64)
	comms, err := NewLocal(ctx, 2, WithBackend(countingBackend{posts: posts}))
	if err != nil {
		t.Fatal(err)
	}
	defer runOnAll(comms, func(c *Comm) error { return c.Close() })
	if got := comms[0].Transport(1); got != "counting" {
		t.Errorf("Transport(1) = %q, want the backend's name", got)
	}
	if comms[0].engines[0].spin {
		t.Error("the engine spins over a backend whose Poll does not progress")
	}
	if comms[0].fuseRecv || comms[0].teeSend {
		t.Error("schedules use receive fusion or tees over QPs that offer neither")
	}
}

// TestEngineLinkKinds checks what the engines are told of their links,
// which decides how they wait (yieldsWaiting) and batch their sends.
func TestEngineLinkKinds(t *testing.T) {
	for _, tc := range []struct {
		transport             string
		spin, batch, streamed bool
	}{
		{"loop", true, false, false},
		{"tcp", true, true, true},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			ctx := testCtx(t, time.Minute)
			comms, err := NewLocal(ctx, 2, WithTransport(tc.transport))
			if err != nil {
				t.Fatal(err)
			}
			defer runOnAll(comms, func(c *Comm) error { return c.Close() })
			e := comms[0].engines[0]
			if e.spin != tc.spin || e.batch != tc.batch || e.streamed != tc.streamed {
				t.Errorf("engine over %s: spin %v, batch %v, streamed %v; want %v, %v, %v",
					tc.transport, e.spin, e.batch, e.streamed, tc.spin, tc.batch, tc.streamed)
			}
		})
	}
}

// capsOnly is a backend that exists only for its name and capabilities,
// for chooseBackend's table: it makes no links.
type capsOnly struct {
	name string
	caps transport.Capabilities
}

func (b capsOnly) Name() string                         { return b.name }
func (b capsOnly) Capabilities() transport.Capabilities { return b.caps }
func (capsOnly) Listen(context.Context, transport.ListenConfig) (transport.Listener, error) {
	return nil, errors.New("capsOnly: no links")
}
func (capsOnly) Dial(context.Context, string, string, transport.Config) (transport.QP, error) {
	return nil, errors.New("capsOnly: no links")
}

// TestChooseBackend: "auto" picks the nearest built-in backend that reaches
// a peer; a forced backend, built in or the user's, is used where its
// reach covers the pair and refused with a clear error where it does not.
func TestChooseBackend(t *testing.T) {
	me := peerInfo{Rank: 0, ProcID: "p0", HostID: "h0"}
	sameProc := peerInfo{Rank: 1, ProcID: "p0", HostID: "h0"}
	sameHost := peerInfo{Rank: 2, ProcID: "p1", HostID: "h0"}
	otherHost := peerInfo{Rank: 3, ProcID: "p2", HostID: "h1"}
	hostOnly := capsOnly{"host-only", transport.Capabilities{Reach: transport.ReachHost, SharedMemory: true}}
	for _, tc := range []struct {
		name       string
		opt        Option
		peer       peerInfo
		want       string // "" wants an error containing wantErr
		wantErr    string
		wantShared bool
	}{
		{"auto same process", WithTransport("auto"), sameProc, "loop", "", false},
		{"auto same host", WithTransport("auto"), sameHost, "shm", "", true},
		{"auto other host", WithTransport("auto"), otherHost, "tcp", "", false},
		{"forced tcp same process", WithTransport("tcp"), sameProc, "tcp", "", false},
		{"forced loop other process", WithTransport("loop"), sameHost, "", "reaches only ranks within one process", false},
		{"forced shm other host", WithTransport("shm"), otherHost, "", "reaches only ranks within one host", false},
		{"user backend within reach", WithBackend(hostOnly), sameHost, "host-only", "", true},
		{"user backend out of reach", WithBackend(hostOnly), otherHost, "", `transport "host-only" reaches only ranks within one host`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultOptions(func(string) string { return "" })
			tc.opt(&o)
			c := &Comm{opts: o}
			got, err := c.chooseBackend(me, tc.peer)
			switch {
			case tc.want == "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("chooseBackend = %q, %v; want an error containing %q", got, err, tc.wantErr)
			case tc.want != "" && (err != nil || got != tc.want):
				t.Fatalf("chooseBackend = %q, %v; want %q", got, err, tc.want)
			}
			if shared := c.sharedMemory(me, tc.peer); shared != tc.wantShared {
				t.Errorf("sharedMemory = %v, want %v", shared, tc.wantShared)
			}
		})
	}
}

// TestWithBackendOptions: the last of WithBackend and WithTransport wins,
// and a nil backend is refused by New rather than crashing it.
func TestWithBackendOptions(t *testing.T) {
	b := capsOnly{name: "mine"}
	for _, tc := range []struct {
		name    string
		opts    []Option
		want    string // o.transport after validation; "" wants an error containing wantErr
		wantErr string
	}{
		{"backend", []Option{WithBackend(b)}, "mine", ""},
		{"transport after backend", []Option{WithBackend(b), WithTransport("tcp")}, "tcp", ""},
		{"backend after transport", []Option{WithTransport("tcp"), WithBackend(b)}, "mine", ""},
		{"nil backend", []Option{WithBackend(nil)}, "", "WithBackend(nil)"},
		{"unknown name", []Option{WithTransport("carrier-pigeon")}, "", `unknown transport "carrier-pigeon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultOptions(func(string) string { return "" })
			o.rank, o.size, o.rankSet = 0, 1, true
			for _, opt := range tc.opts {
				opt(&o)
			}
			err := o.validate()
			switch {
			case tc.want == "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("validate: %v; want an error containing %q", err, tc.wantErr)
			case tc.want != "" && (err != nil || o.transport != tc.want):
				t.Fatalf("validate: %v, transport %q; want %q", err, o.transport, tc.want)
			}
		})
	}
}
