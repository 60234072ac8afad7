package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/jobauth"
)

// Announce makes the endpoint findable. It sets it in the store under
// StoreKey (st may be nil: no store, as for local communicators) and merges
// it into endpoints.json in the configured directory (if any). On rank 0
// with a store it then gathers every rank's endpoint from the store in the
// background and merges them all into its endpoints.json, which then lists
// ranks of other hosts too; WaitAnnounced waits for that. The gathering
// ends with ctx or Close.
func (s *Server) Announce(ctx context.Context, st Store) error {
	ep := s.Endpoint()
	var errs []error
	if st != nil {
		if err := PublishStore(ctx, st, s.info.UID, ep); err != nil {
			errs = append(errs, err)
		}
	}
	if s.cfg.Dir != "" {
		if err := MergeEndpoints(s.cfg.Dir, s.info.UID, s.info.Size, ep); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil || st == nil || s.info.Rank != 0 {
		s.finishAnnounce(err)
		return err
	}
	gctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.bgCtx, cancel)
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		defer cancel()
		defer stop()
		eps, err := GatherStore(gctx, st, s.info.UID, s.info.Size)
		if err == nil && s.cfg.Dir != "" {
			err = MergeEndpoints(s.cfg.Dir, s.info.UID, s.info.Size, eps...)
		}
		if err != nil {
			s.cfg.Logger.Warn("live: gathering the ranks' endpoints", "err", err)
		}
		s.finishAnnounce(err)
	}()
	return nil
}

func (s *Server) finishAnnounce(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.pubDone:
	default:
		s.pubErr = err
		close(s.pubDone)
	}
}

// WaitAnnounced waits until Announce has finished (rank 0: gathered every
// rank's endpoint) and returns its error, or ctx's.
func (s *Server) WaitAnnounced(ctx context.Context) error {
	select {
	case <-s.pubDone:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.pubErr
	case <-ctx.Done():
		return fmt.Errorf("live: waiting for the endpoints: %w", ctx.Err())
	}
}

// Comm is what Start needs of a communicator; *collective.Comm has it.
type Comm interface {
	Rank() int
	Size() int
	UID() string
	ID() uint32
	Clock() *flowtel.Clock
	Collector() *flowtel.Collector
	Store() Store
}

// Start serves the live endpoint of communicator c and announces it: cfg's
// Info, Clock and Collector are taken from c, the server's window and
// record ring are attached to c's collector (when c has telemetry on and
// cfg has no Window), and the endpoint is published in c's rendezvous store and in
// endpoints.json (see Announce). ctx bounds the announcement.
func Start(ctx context.Context, c Comm, cfg Config) (*Server, error) {
	clk := c.Clock()
	host, _ := os.Hostname()
	cfg.Info = Info{Rank: c.Rank(), Size: c.Size(), UID: c.UID(), CommID: c.ID(), Host: host,
		ClockOffsetNs: clk.Offset(), ClockErrorNs: clk.ErrorNs()}
	cfg.Clock = clk
	cfg.Collector = c.Collector()
	if cfg.Bearer == "" {
		// Off loopback, a job with a token shows its telemetry only to
		// clients that hold the bearer derived from it.
		if cfg.Addr == "" {
			cfg.Addr = DefaultAddr
		}
		addr := cfg.Addr
		if b, ok := c.(interface{ EndpointBearer() string }); ok && !jobauth.IsLoopback(ctx, addr) {
			cfg.Bearer = b.EndpointBearer()
		}
	}
	own := cfg.Window == nil
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if own && cfg.Collector != nil {
		cfg.Collector.AddSink(s.Window())
		cfg.Collector.AddSink(s.RecordSink())
	}
	if err := s.Announce(ctx, c.Store()); err != nil {
		s.Close(ctx)
		return nil, err
	}
	return s, nil
}

// endpointsMu serialises the merges of this process; the file lock those
// of several processes.
var endpointsMu sync.Mutex

// MergeEndpoints adds eps (replacing the same ranks) to the endpoints.json
// in dir for the communicator uid of size ranks, creating dir and the file
// as needed. A file about another communicator is replaced. Concurrent
// merges, from this process or others on the host, are serialised by a lock
// file (endpoints.json.lock), and the file is replaced atomically, so a
// reader never sees half of it.
func MergeEndpoints(dir, uid string, size int, eps ...Endpoint) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("live: %w", err)
	}
	endpointsMu.Lock()
	defer endpointsMu.Unlock()
	path := filepath.Join(dir, EndpointsFile)
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return fmt.Errorf("live: locking %s: %w", path, err)
	}
	defer unlock()
	cur := Endpoints{UID: uid, Size: size}
	if old, err := ReadEndpoints(dir); err == nil && old.UID == uid {
		cur.Endpoints = old.Endpoints
	}
	for _, ep := range eps {
		i := slices.IndexFunc(cur.Endpoints, func(e Endpoint) bool { return e.Rank == ep.Rank })
		if i >= 0 {
			cur.Endpoints[i] = ep
		} else {
			cur.Endpoints = append(cur.Endpoints, ep)
		}
	}
	slices.SortFunc(cur.Endpoints, func(a, b Endpoint) int { return a.Rank - b.Rank })
	data, err := json.MarshalIndent(cur, "", "  ")
	if err != nil {
		return fmt.Errorf("live: %w", err)
	}
	tmp, err := os.CreateTemp(dir, EndpointsFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("live: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("live: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("live: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("live: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("live: %w", err)
	}
	return nil
}

// ReadEndpoints reads dir's endpoints.json.
func ReadEndpoints(dir string) (Endpoints, error) {
	var eps Endpoints
	data, err := os.ReadFile(filepath.Join(dir, EndpointsFile))
	if err != nil {
		return eps, fmt.Errorf("live: %w", err)
	}
	if err := json.Unmarshal(data, &eps); err != nil {
		return eps, fmt.Errorf("live: %s: %w", filepath.Join(dir, EndpointsFile), err)
	}
	return eps, nil
}
