package collective

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/internal/affinity"
	"github.com/vccl-go/vccl/internal/benchhook"
	"github.com/vccl-go/vccl/internal/jobauth"
	"github.com/vccl-go/vccl/transport"
)

// Comm is a communicator: a fixed group of ranks that run collectives
// together. Every rank must call the same collectives in the same order; the
// signature check turns a disagreement into an error on every rank instead
// of garbage or a hang. A Comm's methods are safe for concurrent use, but
// calls are ordered by when they are made, so ranks that issue calls from
// several goroutines must agree on that order themselves.
type Comm struct {
	rank, size int
	uid        string
	id         uint32
	opts       options
	clock      *flowtel.Clock

	collector    *flowtel.Collector
	ownCollector bool          // made by setup: started after the attachers, shut down by Close
	detach       []namedDetach // the telemetry attachers' (attach.go), under mu
	store        *bootstrap.Client
	server       *bootstrap.Server
	peers        []peerInfo
	backends     []string         // backend per peer ("self" for this rank)
	overStream   bool             // some link is a stream socket, so on every rank (chunkFor)
	crowded      bool             // some host has more ranks than CPUs, so on every rank (chunkFor)
	qps          [][]transport.QP // [channel][peer]
	engines      []*engine
	fuseRecv     bool       // every QP reduces receives on arrival: schedules fuse receive and reduce
	hostDirect   bool       // the direct algorithms may run: see pickAlgo
	teeSend      bool       // every QP copies a send into its tee: all-gather's own block rides its sends
	small        *smallPath // small all-reduces over shared memory (small.go); nil: none

	mu         sync.Mutex
	schedCache map[schedKey]*schedule
	lastKey    schedKey  // the last call's shape
	lastSched  *schedule // and its schedule
	parts      []request // splitChannels' result, reused under mu
	seq        uint64
	p2pSeq     uint64
	splits     int
	closed     bool
	devEngine  DeviceEngine // runs operations on device buffers (SetDeviceEngine)
	pending    sync.WaitGroup
	spare      atomic.Pointer[Handle]      // a finished blocking call's, to reuse
	stopWatch  func()                      // stops watchAborts' goroutine
	boards     func(uid string) abortBoard // abort boards of this communicator and its Split children
	// observers are told of every call (observe.go); a Split child
	// tells its parent's too, through splitFrom.
	observers atomic.Pointer[[]CallObserver]
	splitFrom *Comm
	board     abortBoard // this communicator's
	// peerFailure is the failure learnt from the board; lastEnd when this
	// rank's latest call ended (monotonic ns): see verdict.
	peerFailure atomic.Pointer[PeerFailedError]
	lastEnd     atomic.Int64
}

// peerInfo is what ranks exchange at bootstrap to find and reach each other.
type peerInfo struct {
	Rank   int               `json:"rank"`
	Host   string            `json:"host"`
	HostID string            `json:"host_id"` // same value ⇔ shared memory works
	ProcID string            `json:"proc_id"` // same value ⇔ same process
	Addrs  map[string]string `json:"addrs"`   // backend name → listen address
	FT     bool              `json:"ft"`      // fault-tolerant TCP links
	CPUs   int               `json:"cpus"`    // CPUs the process may run on (runtime.NumCPU)
	Bound  bool              `json:"bound"`   // a launcher bound it to CPUs of its own (affinity.LauncherBound)
	// Secret is this rank's random part of its links' connection keys
	// (linkKey): only the ranks of the job read it, so nobody else can
	// present a link's key, even with the job token.
	Secret string `json:"secret"`
}

// linkKey is the connection key of the link between ranks lo < hi on
// channel ch: the communicator, the pair, and a digest of both ranks'
// secrets.
func linkKey(uid string, ch, lo, hi int, secretLo, secretHi string) string {
	sum := sha256.Sum256([]byte(secretLo + "/" + secretHi))
	return fmt.Sprintf("%s/%d/%d-%d/%x", uid, ch, lo, hi, sum[:16])
}

// nextQPID numbers queue pairs: unique within the process, so within the
// rank, across all its communicators, as telemetry records need.
var nextQPID atomic.Uint32

// procID tells this process apart from every other.
var procID = func() string {
	var b [8]byte
	rand.Read(b[:])
	return fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
}()

// hostID identifies what shared memory can span: one kernel boot and one
// network namespace (the shm backend rendezvous over abstract Unix sockets,
// which are per namespace).
func hostID() string {
	ns, _ := os.Readlink("/proc/self/ns/net")
	host, _ := os.Hostname()
	return bootID() + "/" + ns + "/" + host
}

// bootID is the kernel boot's id; "" where unknown.
func bootID() string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(boot))
}

// clockID identifies a monotonic clock: one kernel boot and one time
// namespace (which may offset CLOCK_MONOTONIC); "" where unknown.
func clockID() string {
	boot := bootID()
	if boot == "" {
		return ""
	}
	ns, _ := os.Readlink("/proc/self/ns/time")
	return boot + "/" + ns
}

// New creates this rank's communicator. Rank and world size come from
// WithRank; rank 0 serves the rendezvous store at WithMaster's address and
// every rank dials it. Use NewFromEnv to take them from a launcher.
func New(ctx context.Context, opts ...Option) (*Comm, error) {
	o := envOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if !o.rankSet {
		return nil, errors.New("collective: New needs WithRank (or use NewFromEnv to read the launcher's environment)")
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c := &Comm{rank: o.rank, size: o.size, opts: o}
	if o.size == 1 {
		c.uid = newUID()
		c.clock = flowtel.NewClock(0, 0)
		if err := c.setup(ctx, func(_ context.Context, me peerInfo) ([]peerInfo, error) { return []peerInfo{me}, nil }); err != nil {
			return nil, err
		}
		if err := c.startTelemetry(ctx); err != nil {
			return nil, err
		}
		return c, nil
	}
	if o.master == "" {
		return nil, fmt.Errorf("collective: rank %d of %d needs a rendezvous address (WithMaster, or MASTER_ADDR and MASTER_PORT)", o.rank, o.size)
	}
	if err := o.needToken(ctx, "the rendezvous store", o.master); err != nil {
		return nil, err
	}
	if err := o.needTokenForInterfaces(ctx); err != nil {
		return nil, err
	}
	var err error
	if o.rank == 0 && !o.served {
		// The store outlives New (cancelling Serve's context closes it): the
		// last ranks may still be leaving the ready barrier when rank 0
		// returns, and exporters publish endpoints in it later.
		if c.server, err = bootstrap.Serve(context.WithoutCancel(ctx), o.master, o.token,
			bootstrap.WithLogger(o.logger), bootstrap.WithWorldSize(o.size)); err != nil {
			return nil, fmt.Errorf("collective: rank 0 cannot serve the rendezvous store: %w", err)
		}
	}
	if c.store, err = bootstrap.Dial(ctx, o.master, o.token, o.rank); err != nil {
		c.closeBootstrap()
		return nil, fmt.Errorf("collective: rank %d cannot reach the rendezvous store at %s: %w", o.rank, o.master, err)
	}
	// Ranks on rank 0's kernel (and time namespace) read the same monotonic
	// clock: their offset is 0, exactly. Measured over the store's round
	// trips it would carry that measurement's error (half the best round
	// trip), larger than a short transfer, which would put receives'
	// landings before their sends' posts and show the analyzer impossible
	// link speeds.
	var offset, errNs int64
	clock := clockID()
	if o.rank == 0 {
		err = c.store.Set(ctx, "vccl/clock", []byte(clock))
	} else {
		var id []byte
		if id, err = c.store.Get(ctx, "vccl/clock"); err == nil && (clock == "" || string(id) != clock) {
			offset, errNs, err = c.store.ClockOffset(ctx, 16)
		}
	}
	if err != nil {
		c.closeBootstrap()
		return nil, fmt.Errorf("collective: measuring the clock offset to rank 0: %w", err)
	}
	c.clock = flowtel.NewClock(offset, errNs)
	if o.rank == 0 {
		c.uid = newUID()
		err = c.store.Set(ctx, bootstrap.UIDKey, []byte(c.uid))
	} else {
		var b []byte
		b, err = c.store.Get(ctx, bootstrap.UIDKey)
		c.uid = string(b)
	}
	if err != nil {
		c.closeBootstrap()
		return nil, fmt.Errorf("collective: agreeing on the communicator id: %w", err)
	}
	exchange := func(ctx context.Context, me peerInfo) ([]peerInfo, error) {
		b, _ := json.Marshal(me)
		// Each rank's record is bound to it: only the connection
		// authenticated as that rank may write it, once.
		if err := c.store.Set(ctx, bootstrap.RankKey("vccl/"+c.uid+"/info", c.rank), b); err != nil {
			return nil, err
		}
		all := make([]peerInfo, c.size)
		for r := range c.size {
			b, err := c.store.Get(ctx, bootstrap.RankKey("vccl/"+c.uid+"/info", r))
			if err != nil {
				return nil, fmt.Errorf("waiting for rank %d to join: %w", r, err)
			}
			if err := json.Unmarshal(b, &all[r]); err != nil {
				return nil, fmt.Errorf("rank %d's bootstrap record: %w", r, err)
			}
			if all[r].Rank != r {
				return nil, fmt.Errorf("rank %d's bootstrap record says rank %d", r, all[r].Rank)
			}
		}
		return all, nil
	}
	if err := c.setup(ctx, exchange); err != nil {
		c.closeBootstrap()
		return nil, err
	}
	// Hold rank 0's store up until every rank has connected.
	if err := c.store.Barrier(ctx, "vccl/"+c.uid+"/ready", c.size); err != nil {
		c.Abort()
		return nil, fmt.Errorf("collective: waiting for every rank to connect: %w", err)
	}
	store := c.store
	c.watchAborts(func(uid string) abortBoard { return storeBoard{store: store, key: "vccl/" + uid + "/abort"} })
	if err := c.startTelemetry(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// NewFromEnv creates the communicator of a process started by a launcher:
// torchrun, Open MPI, Slurm or vcclrun (see bootstrap.FromEnv), with VCCL_*
// overrides; under Open MPI and Slurm, which name no rendezvous address, the
// ranks derive it where the launcher's variables allow. Options override the
// environment.
func NewFromEnv(ctx context.Context, opts ...Option) (*Comm, error) {
	env, err := launcherEnv()
	if err != nil {
		return nil, err
	}
	base := []Option{WithRank(env.Rank, env.Size), WithToken(env.Token)}
	if env.Size > 1 {
		base = append(base, WithMaster(env.Addr()))
	}
	c, err := New(ctx, append(base, opts...)...)
	if err != nil && env.Derived != "" {
		// A port derived from the job id may be taken on this host.
		return nil, fmt.Errorf("%w (the rendezvous address %s is the launcher's: %s; MASTER_ADDR and MASTER_PORT set another)", err, env.Addr(), env.Derived)
	}
	return c, err
}

// NewLocal creates n communicators in this process, one per rank, joined by
// the in-process transport: ranks as goroutines, for tests and embedding.
func NewLocal(ctx context.Context, n int, opts ...Option) ([]*Comm, error) {
	if n < 1 {
		return nil, fmt.Errorf("collective: NewLocal of %d ranks, want at least 1", n)
	}
	uid := newUID()
	ex := newLocalExchange(n)
	boards := new(localBoards)
	env := envOptions()
	comms, errs := eachRank(n, func(r int) (*Comm, error) {
		o := env
		o.transport = "loop"
		for _, opt := range opts {
			opt(&o)
		}
		o.rank, o.size, o.rankSet = r, n, true
		if err := o.validate(); err != nil {
			ex.abort(err)
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		c := &Comm{rank: r, size: n, opts: o, uid: uid, clock: flowtel.NewClock(0, 0)}
		if err := c.setup(cctx, ex.exchange); err != nil {
			ex.abort(err)
			return nil, err
		}
		c.watchAborts(boards.get)
		if err := c.startTelemetry(cctx); err != nil {
			ex.abort(err)
			return nil, err
		}
		return c, nil
	})
	if err := errors.Join(errs...); err != nil {
		for _, c := range comms {
			if c != nil {
				c.Abort()
			}
		}
		return nil, err
	}
	return comms, nil
}

// eachRank runs start for ranks 0..n-1 at once, as their processes would,
// and returns once all have returned.
func eachRank(n int, start func(r int) (*Comm, error)) ([]*Comm, []error) {
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = start(r)
		}()
	}
	wg.Wait()
	return comms, errs
}

// localExchange is the rendezvous of ranks in one process.
type localExchange struct {
	mu    sync.Mutex
	infos []peerInfo
	left  int
	err   error
	done  chan struct{}
}

func newLocalExchange(n int) *localExchange {
	return &localExchange{infos: make([]peerInfo, n), left: n, done: make(chan struct{})}
}

func (x *localExchange) abort(err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err == nil {
		x.err = err
		if x.left > 0 {
			close(x.done)
			x.left = -1
		}
	}
}

func (x *localExchange) exchange(ctx context.Context, me peerInfo) ([]peerInfo, error) {
	x.mu.Lock()
	x.infos[me.Rank] = me
	if x.left > 0 {
		x.left--
		if x.left == 0 {
			close(x.done)
		}
	}
	x.mu.Unlock()
	select {
	case <-x.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("collective: waiting for local ranks: %w", ctx.Err())
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return nil, fmt.Errorf("collective: another local rank failed: %w", x.err)
	}
	return append([]peerInfo(nil), x.infos...), nil
}

func newUID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func hash32(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// setup listens, exchanges addresses, connects every pair of ranks on every
// channel and starts the progress engines.
func (c *Comm) setup(ctx context.Context, exchange func(context.Context, peerInfo) ([]peerInfo, error)) error {
	c.id = hash32(c.uid)
	me := peerInfo{Rank: c.rank, HostID: c.opts.hostID, ProcID: procID, Addrs: map[string]string{}, FT: c.opts.ft, Secret: newUID(),
		CPUs: runtime.NumCPU(), Bound: affinity.LauncherBound()}
	me.Host, _ = os.Hostname()
	if me.HostID == "" {
		me.HostID = hostID()
	}
	names := autoBackends
	if c.opts.transport != "auto" {
		names = []string{c.opts.transport}
	}
	listeners := map[string]transport.Listener{}
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	if c.size > 1 {
		for _, name := range names {
			b := c.opts.backendNamed(name)
			l, err := b.Listen(ctx, transport.ListenConfig{Token: c.opts.token})
			if err != nil {
				return fmt.Errorf("collective: rank %d cannot listen on %s: %w", c.rank, name, err)
			}
			listeners[name] = l
			me.Addrs[name] = l.Addr()
			if b.Capabilities().Reach > transport.ReachProcess {
				if err := c.opts.needToken(ctx, "the "+name+" transport", l.Addr()); err != nil {
					return err
				}
			}
		}
	}
	peers, err := exchange(ctx, me)
	if err != nil {
		return fmt.Errorf("collective: rank %d bootstrap: %w", c.rank, err)
	}
	c.peers = peers
	c.crowded = cpusEach(peers) == 0
	for p := range peers {
		if peers[p].FT != me.FT && p != c.rank {
			return fmt.Errorf("collective: rank %d has fault tolerance %s but rank %d has it %s (set VCCL_FAULT_TOLERANCE the same on every rank)",
				c.rank, onOff(me.FT), p, onOff(peers[p].FT))
		}
	}
	if c.opts.transport != "auto" {
		// Every rank checks every pair, so that all fail at once where
		// the forced backend cannot join two of them, rather than wait
		// for links that will not come.
		for i := range peers {
			for j := range i {
				if _, err := c.chooseBackend(peers[i], peers[j]); err != nil {
					return err
				}
			}
		}
	}
	c.backends = make([]string, c.size)
	spin := true     // every link's Poll progresses (engine.spin)
	streamed := true // every link is a stream socket (engine.streamed)
	for p := range c.size {
		c.backends[p] = "self"
		if p != c.rank {
			if c.backends[p], err = c.chooseBackend(me, peers[p]); err != nil {
				return err
			}
			caps := c.opts.backendNamed(c.backends[p]).Capabilities()
			c.overStream = c.overStream || caps.StreamSocket
			streamed = streamed && caps.StreamSocket
			spin = spin && caps.PollProgresses
			if _, ok := peers[p].Addrs[c.backends[p]]; !ok {
				return fmt.Errorf("collective: rank %d offers no %s address (is VCCL_TRANSPORT the same on every rank?)", p, c.backends[p])
			}
		}
	}
	// Telemetry: one recorder per channel, owned by that channel's engine.
	// A collector of the communicator's own starts once the registered
	// attachers have added their sinks (startTelemetry): what is recorded
	// until then waits in the rings.
	recs := make([]*flowtel.Recorder, c.opts.channels)
	if c.opts.telemetry {
		c.collector = c.opts.collector
		if c.collector == nil {
			c.collector = flowtel.NewCollector(flowtel.WithClock(c.clock))
			c.ownCollector = true
		}
		for ch := range recs {
			recs[ch] = c.collector.NewRecorderClock(c.clock)
		}
	}
	notifiers := make([]*transport.Notifier, c.opts.channels)
	c.qps = make([][]transport.QP, c.opts.channels)
	for ch := range c.qps {
		notifiers[ch] = transport.NewNotifier()
		c.qps[ch] = make([]transport.QP, c.size)
	}
	var wg sync.WaitGroup
	var emu sync.Mutex
	var errs []error
	for ch := range c.opts.channels {
		for p := range c.size {
			if p == c.rank {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				lo, hi := min(c.rank, p), max(c.rank, p)
				key := linkKey(c.uid, ch, lo, hi, peers[lo].Secret, peers[hi].Secret)
				cfg := transport.Config{Rank: int32(c.rank), Peer: int32(p), QPID: nextQPID.Add(1),
					Comm: c.id, Channel: uint16(ch), Recorder: recs[ch], Notifier: notifiers[ch], Token: c.opts.token}
				name := c.backends[p]
				var qp transport.QP
				var err error
				if c.rank < p {
					qp, err = c.opts.backendNamed(name).Dial(ctx, peers[p].Addrs[name], key, cfg)
				} else {
					qp, err = listeners[name].Accept(ctx, key, cfg)
				}
				if err != nil {
					emu.Lock()
					errs = append(errs, fmt.Errorf("collective: rank %d connecting to rank %d over %s (channel %d): %w", c.rank, p, name, ch, err))
					emu.Unlock()
					return
				}
				c.qps[ch][p] = qp
			}()
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		c.closeQPs()
		if c.ownCollector {
			c.collector.Shutdown(context.Background())
		}
		return errors.Join(errs...)
	}
	procs := map[string]bool{} // processes of this communicator on this host
	for _, p := range peers {
		if p.HostID == me.HostID {
			procs[p.ProcID] = true
		}
	}
	c.fuseRecv = everyQP(c.qps, reducesOnReceive)
	c.teeSend = everyQP(c.qps, teesOnSend)
	c.hostDirect = c.size >= 3 && cpusEach(peers) >= directCPUs && c.everyPairShares(peers)
	c.engines = make([]*engine, c.opts.channels)
	for ch := range c.engines {
		c.engines[ch] = newEngine(ch, c.rank, c.size, len(procs), c.id, c.qps[ch], recs[ch], notifiers[ch], spin, c.overStream, streamed)
	}
	var smallRec *flowtel.Recorder
	if c.collector != nil {
		smallRec = c.collector.NewRecorderClock(c.clock)
	}
	c.small = c.newSmallPath(smallRec)
	return nil
}

// everyQP reports whether has holds for every QP of qps: schedules may use
// an optional transport feature only where every link offers it.
func everyQP(qps [][]transport.QP, has func(transport.QP) bool) bool {
	for _, row := range qps {
		for _, qp := range row {
			if qp != nil && !has(qp) {
				return false
			}
		}
	}
	return true
}

// reducesOnReceive reports whether qp reduces receives on arrival
// (transport.Reducer), so schedules may fuse a receive with its reduction.
func reducesOnReceive(qp transport.QP) bool {
	r, ok := qp.(transport.Reducer)
	return ok && r.ReducesOnReceive()
}

// teesOnSend reports whether qp honours transport.WR.Tee.
func teesOnSend(qp transport.QP) bool {
	t, ok := qp.(transport.Teer)
	return ok && t.TeesOnSend()
}

func (c *Comm) closeQPs() {
	for _, row := range c.qps {
		for _, qp := range row {
			if qp != nil {
				qp.Close()
			}
		}
	}
}

func (c *Comm) closeBootstrap() {
	if c.store != nil {
		c.store.Close()
		c.store = nil
	}
	if c.server != nil {
		c.server.Close()
		c.server = nil
	}
}

// Rank returns this rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.size }

// ID returns the communicator's 32-bit id, as telemetry records carry it.
func (c *Comm) ID() uint32 { return c.id }

// UID returns the communicator's full unique id.
func (c *Comm) UID() string { return c.uid }

// Clock returns the clock that puts this rank's records on rank 0's time base.
func (c *Comm) Clock() *flowtel.Clock { return c.clock }

// Collector returns the telemetry collector, or nil with telemetry off.
// Exporters attach to it as sinks.
func (c *Comm) Collector() *flowtel.Collector { return c.collector }

func init() {
	benchhook.SetTelemetry = func(comm any, on bool) error {
		c, ok := comm.(*Comm)
		if !ok {
			return fmt.Errorf("collective: SetTelemetry of a %T, want a *Comm", comm)
		}
		return c.setTelemetry(on)
	}
}

// setTelemetry pauses (false) or resumes (true) the records of a
// communicator made with telemetry on (benchhook.SetTelemetry says why and
// when).
func (c *Comm) setTelemetry(on bool) error {
	if c.collector == nil {
		return errors.New("collective: SetTelemetry: the communicator was made with telemetry off")
	}
	for _, e := range c.engines {
		e.rec.SetPaused(!on)
	}
	if c.small != nil {
		c.small.rec.SetPaused(!on)
	}
	return nil
}

// Transport returns the name of the transport this rank uses to reach peer
// ("ft" for TCP with fault tolerance on, "self" for this rank).
func (c *Comm) Transport(peer int) string {
	if peer == c.rank {
		return c.backends[peer]
	}
	return c.opts.backendNamed(c.backends[peer]).Name()
}

// Store is the job's rendezvous store as a program uses it: keys every
// rank of the job reaches, for job-wide information (exporter/live
// announces its endpoints there). A key is written once; Get waits until
// some rank sets the key or ctx ends. It is an alias of an unnamed
// interface so that packages that must not import this one (exporters)
// can name the same type.
type Store = interface {
	Set(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
}

// Store returns the job's rendezvous store, or nil for communicators that
// have none (NewLocal's, a single rank's).
func (c *Comm) Store() Store {
	if c.store == nil {
		return nil
	}
	return c.store
}

// EndpointBearer returns the credential HTTP clients of this rank's live
// telemetry endpoint present when it asks for one (exporter/live), derived
// from the job token (never the token itself); "" without a token.
func (c *Comm) EndpointBearer() string { return jobauth.Bearer(c.opts.token) }

// Close waits for the calls in flight, then releases the communicator.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.pending.Wait()
	return c.teardown(ErrClosed)
}

// Abort tears the communicator down at once, from any goroutine: pending
// calls fail with an error and the connections close, so peers see this
// rank gone. Calls pending fail with ErrAborted.
func (c *Comm) Abort() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return c.teardown(ErrAborted)
}

func (c *Comm) teardown(reason error) error {
	if c.stopWatch != nil {
		c.stopWatch()
	}
	if c.small != nil {
		c.small.stop()
	}
	for _, e := range c.engines {
		e.shutdown(reason)
	}
	c.closeQPs()
	// Telemetry winds down with the store still up: a collector of the
	// communicator's own delivers the last records and shuts its sinks
	// down (the Arrow files are finished, the last spans sent), then the
	// attachers detach (the live endpoint, which rank 0 may still be
	// announcing through the store, stops last, so a viewer sees the end).
	var err error
	if c.collector != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.timeout)
		defer cancel()
		if c.ownCollector {
			err = c.collector.Shutdown(ctx)
		}
		err = errors.Join(err, c.detachTelemetry(ctx))
	}
	c.closeBootstrap()
	return err
}
