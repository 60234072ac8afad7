package collective

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport"
)

// Failure propagation. A call that fails after its transfers went out
// leaves its channel's queue pairs out of step with the peers (engine.fail
// poisons the channel), so the communicator is done for. Its peers would
// not learn it by themselves: a rank whose next receive is from a rank that
// already gave up waits out its whole deadline, and its error then names
// whoever it waited on, not the cause. So a rank whose channel fails posts
// the cause on the communicator's abort board (a key in the rendezvous
// store, or a shared value for NewLocal's ranks), and every rank watches
// the board and fails its calls with the first poster's cause at once, as
// a *PeerFailedError. A cause crosses ranks as text and a set of kinds
// (errorKinds), so errors.Is finds on every rank what the first poster's
// error was. The board is off the data path: one blocked store
// request per communicator, and one atomic load per progress pass.
//
// The store is served by rank 0's process; when that process is gone no
// cause travels, and ranks fall back to noticing dead connections
// (deadPeerGrace) or their deadlines.
//
// One outcome per call: a post carries the sequence number of the call
// that failed, and a call this rank completes fails all the same when a
// failure is posted for it or an earlier call (a rank stopped by SIGSTOP
// or a long pause finds its peers' data waiting when it resumes, and would
// otherwise succeed in the call they failed by timeout). The watcher may
// not have read the post yet when a resumed rank completes the call, so a
// call that ends long after this rank's previous one looks at the board
// itself (verdictGap).
//
// A call that fails by the communicator's timeout while waiting on one
// peer blames that peer, not its own rank, and records whom it waited on:
// the others follow that chain to the rank that waited on no one (in a
// ring, every rank downstream of a stopped one times out at about the same
// moment, and the first to post need not be its neighbour).

// PeerFailedError is what calls fail with on every rank once another rank's
// call failed in a way that broke the communicator (a dead or unreachable
// peer, a deadline, a mismatch found mid-call). The communicator cannot be
// used again; close it. It unwraps to the reporter's error, so
// errors.Is(err, ErrTimeout) or errors.Is(err, transport.ErrPeerDead) tell
// what happened there.
type PeerFailedError struct {
	// Rank is the rank the failure is blamed on: the one that stopped
	// making progress when the first report was a timeout waiting on it
	// (it may be this rank, resumed), else the reporter.
	Rank     int
	Reporter int    // the rank whose call failed first
	Seq      uint64 // the collective sequence number of that call
	// Cause is the reporter's error: its text, and the kinds it was
	// (the sentinels of this package, of transport and of context) for
	// errors.Is.
	Cause error
}

func (e *PeerFailedError) Error() string {
	cause := "unknown cause"
	if e.Cause != nil {
		cause = strings.TrimPrefix(e.Cause.Error(), "collective: ")
	}
	if e.Rank == e.Reporter {
		return fmt.Sprintf("collective: communicator aborted because rank %d failed: %s", e.Rank, cause)
	}
	return fmt.Sprintf("collective: communicator aborted because rank %d stopped making progress: rank %d timed out: %s", e.Rank, e.Reporter, cause)
}

// Unwrap returns the reporter's error.
func (e *PeerFailedError) Unwrap() error { return e.Cause }

// covers reports whether the failure is of the call with sequence number
// seq or an earlier one: that call must fail on every rank. Point-to-point
// calls are numbered apart, so either kind fails after the other's.
func (e *PeerFailedError) covers(seq uint64) bool {
	const p2p = 1 << 63
	if e.Seq&p2p != 0 || seq&p2p != 0 {
		return true
	}
	return e.Seq <= seq
}

// stuckError is a call's failure by the communicator's own timeout
// (VCCL_TIMEOUT) while it waited on exactly one peer: the peer is the
// culprit. A caller's context ending blames no one but the caller.
type stuckError struct {
	err  error
	peer int
}

func (e *stuckError) Error() string { return e.err.Error() }
func (e *stuckError) Unwrap() error { return e.err }

// blame wraps a deadline error of a call that waits on peers: a
// communicator timeout while it waits on one peer names that peer.
func blame(err error, peers ...int) error {
	if len(peers) == 1 && errors.Is(err, ErrTimeout) {
		return &stuckError{err: err, peer: peers[0]}
	}
	return err
}

// abortPost is one failure on the board.
type abortPost struct {
	reporter, culprit int
	seq               uint64
	cause             string
	kinds             uint64 // kindsOf the cause
}

// abortBoard is where the ranks of one communicator post and learn the
// first failure.
type abortBoard interface {
	// post records this rank's failure unless one was posted already. It
	// does not wait on anything but the board itself, bounded.
	post(p abortPost)
	// watch waits until a failure is posted (ok) or ctx ends.
	watch(ctx context.Context) (p abortPost, ok bool)
	// peek reports the failure posted, if any, without waiting for one.
	peek(ctx context.Context) (p abortPost, ok bool)
	// stuckOn returns the rank that rank's call timed out waiting on, as
	// far as it has said so (post records it before the race for first).
	stuckOn(ctx context.Context, rank int) (peer int, ok bool)
	// seen tells the board that this rank has learned the failure posted
	// (by another rank); waitSeen waits until n ranks have, or ctx ends.
	seen()
	waitSeen(ctx context.Context, n int) bool
}

// postTimeout bounds posting a failure to the store; peekTimeout bounds a
// look at the board from a call's end.
const (
	postTimeout = 5 * time.Second
	peekTimeout = time.Second
)

// storeBoard is the abort board of a communicator whose ranks rendezvoused
// through the store: the first rank to bump the counter writes its cause
// under a key bound to its store connection (only that connection may write
// it), then its rank, and its store rank, under the board's key. Keys are
// written once, so the first cause stands, and no client that is not a rank
// of the job can post one. (A Split child's ranks are not the store's: the
// board's key says both.) Whom a timed-out rank waited on is a counter per
// rank (peer+1), so that it can be read without waiting: a rank of the job
// could forge one, and only misname the culprit.
type storeBoard struct {
	store *bootstrap.Client
	key   string
}

func (b storeBoard) causeKey(storeRank int) string {
	return bootstrap.RankKey(b.key+"/cause", storeRank)
}

func (b storeBoard) stuckKey(rank int) string { return b.key + "/stuck/" + strconv.Itoa(rank) }

func (b storeBoard) post(p abortPost) {
	ctx, cancel := context.WithTimeout(context.Background(), postTimeout)
	defer cancel()
	if p.culprit != p.reporter {
		if _, err := b.store.Add(ctx, b.stuckKey(p.reporter), int64(p.culprit)+1); err != nil {
			return
		}
	}
	if n, err := b.store.Add(ctx, b.key+"/n", 1); err != nil || n != 1 {
		return // the store is gone (rank 0 died or closed) or a cause is there
	}
	cause := p.cause
	if len(cause) > maxCause {
		cause = cause[:maxCause] + "…"
	}
	me := b.store.Rank()
	if b.store.Set(ctx, b.causeKey(me), []byte(cause)) == nil {
		b.store.Set(ctx, b.key, fmt.Appendf(nil, "%d %d %d %d %d", p.reporter, me, p.culprit, p.seq, p.kinds))
	}
}

// maxCause bounds the cause a rank posts, in bytes.
const maxCause = 4 << 10

func (b storeBoard) watch(ctx context.Context) (abortPost, bool) {
	v, err := b.store.Get(ctx, b.key)
	if err != nil {
		return abortPost{}, false
	}
	var p abortPost
	var storeRank int
	if n, err := fmt.Sscanf(string(v), "%d %d %d %d %d", &p.reporter, &storeRank, &p.culprit, &p.seq, &p.kinds); n != 5 || err != nil || p.reporter < 0 || storeRank < 0 || p.culprit < 0 {
		return abortPost{}, false
	}
	cause, err := b.store.Get(ctx, b.causeKey(storeRank))
	if err != nil {
		return abortPost{}, false
	}
	p.cause = string(cause)
	return p, true
}

func (b storeBoard) peek(ctx context.Context) (abortPost, bool) {
	ctx, cancel := context.WithTimeout(ctx, peekTimeout)
	defer cancel()
	if n, err := b.store.Add(ctx, b.key+"/n", 0); err != nil || n == 0 {
		return abortPost{}, false
	}
	return b.watch(ctx) // posted: the poster writes the key next
}

func (b storeBoard) seen() {
	ctx, cancel := context.WithTimeout(context.Background(), postTimeout)
	defer cancel()
	b.store.Add(ctx, b.key+"/seen", 1)
}

func (b storeBoard) waitSeen(ctx context.Context, n int) bool {
	return pollSeen(ctx, n, func() (int64, error) { return b.store.Add(ctx, b.key+"/seen", 0) })
}

// seenPoll is how often a rank that failed its set-up looks whether its
// peers have learned why.
const seenPoll = 2 * time.Millisecond

// pollSeen polls count every seenPoll until it reaches n (true), fails or
// ctx ends.
func pollSeen(ctx context.Context, n int, count func() (int64, error)) bool {
	for {
		if got, err := count(); err != nil || got >= int64(n) {
			return err == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(seenPoll):
		}
	}
}

func (b storeBoard) stuckOn(ctx context.Context, rank int) (int, bool) {
	n, err := b.store.Add(ctx, b.stuckKey(rank), 0)
	return int(n) - 1, err == nil && n > 0
}

// localBoards are the abort boards of NewLocal's ranks, one per
// communicator (by uid: the ranks of a Split child share its uid).
type localBoards struct {
	mu sync.Mutex
	m  map[string]*localBoard
}

func (l *localBoards) get(uid string) abortBoard {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*localBoard{}
	}
	b := l.m[uid]
	if b == nil {
		b = &localBoard{done: make(chan struct{}), stuck: map[int]int{}}
		l.m[uid] = b
	}
	return b
}

// localBoard is the abort board of one communicator's ranks in one process.
type localBoard struct {
	once  sync.Once
	done  chan struct{}
	first abortPost
	mu    sync.Mutex
	stuck map[int]int
	nseen int
}

func (b *localBoard) seen() {
	b.mu.Lock()
	b.nseen++
	b.mu.Unlock()
}

func (b *localBoard) waitSeen(ctx context.Context, n int) bool {
	return pollSeen(ctx, n, func() (int64, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return int64(b.nseen), nil
	})
}

func (b *localBoard) post(p abortPost) {
	if p.culprit != p.reporter {
		b.mu.Lock()
		b.stuck[p.reporter] = p.culprit
		b.mu.Unlock()
	}
	b.once.Do(func() {
		b.first = p
		close(b.done)
	})
}

func (b *localBoard) watch(ctx context.Context) (abortPost, bool) {
	select {
	case <-b.done:
		return b.first, true
	case <-ctx.Done():
		return abortPost{}, false
	}
}

func (b *localBoard) peek(context.Context) (abortPost, bool) {
	select {
	case <-b.done:
		return b.first, true
	default:
		return abortPost{}, false
	}
}

func (b *localBoard) stuckOn(_ context.Context, rank int) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	peer, ok := b.stuck[rank]
	return peer, ok
}

// watchAborts starts the goroutine that fails this rank's calls when
// another rank posts a failure, and lets the engines post this rank's.
// boards gives the board of a communicator by uid; Split children use it
// too.
func (c *Comm) watchAborts(boards func(uid string) abortBoard) {
	c.boards = boards
	b := boards(c.uid)
	c.board = b
	c.lastEnd.Store(flowtel.Monotonic())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	c.stopWatch = func() { cancel(); <-done }
	for _, e := range c.engines {
		e.onFail = func(seq uint64, err error) {
			if errors.As(err, new(*PeerFailedError)) {
				return // not ours to report
			}
			p := abortPost{reporter: c.rank, culprit: c.rank, seq: seq, cause: err.Error(), kinds: kindsOf(err)}
			if se := (*stuckError)(nil); errors.As(err, &se) {
				p.culprit = se.peer
			}
			go b.post(p)
		}
	}
	go func() {
		defer close(done)
		p, ok := b.watch(ctx)
		if !ok {
			return
		}
		c.learn(ctx, p)
	}()
}

// causeWait bounds how long a rank whose set-up failed after its peers'
// (an attacher's error) waits for them to learn why before it tears the
// connections down: closed first, they would only see a dead peer.
const causeWait = 2 * time.Second

// failSetup fails this rank's set-up with err once the communicator is
// joined: it posts err on the board, waits (bounded) until every other
// rank has read it, and aborts. It returns err joined with the abort's.
func (c *Comm) failSetup(ctx context.Context, err error) error {
	if c.board != nil {
		c.board.post(abortPost{reporter: c.rank, culprit: c.rank, cause: err.Error(), kinds: kindsOf(err)})
		wctx, cancel := context.WithTimeout(ctx, causeWait)
		c.board.waitSeen(wctx, c.size-1)
		cancel()
	}
	return errors.Join(err, c.Abort())
}

// learn records the failure p posted on the board and fails this rank's
// calls with it (unless this rank posted it: its calls fail already). It
// returns the failure.
func (c *Comm) learn(ctx context.Context, p abortPost) *PeerFailedError {
	if pf := c.peerFailure.Load(); pf != nil {
		return pf
	}
	culprit := p.culprit
	seen := map[int]bool{p.reporter: true}
	for !seen[culprit] && len(seen) <= c.size {
		seen[culprit] = true
		next, ok := c.board.stuckOn(ctx, culprit)
		if !ok || next < 0 || next >= c.size {
			break
		}
		culprit = next
	}
	pf := &PeerFailedError{Rank: culprit, Reporter: p.reporter, Seq: p.seq, Cause: &remoteError{msg: p.cause, kinds: p.kinds}}
	if !c.peerFailure.CompareAndSwap(nil, pf) {
		return c.peerFailure.Load()
	}
	if p.reporter != c.rank {
		for _, e := range c.engines {
			e.abort(pf)
		}
		c.board.seen()
	}
	return pf
}

// verdictGap is how long after this rank's previous call ended a call may
// end before it looks at the board itself. A rank whose peers timed out
// on a call was away from it for longer than this (timeouts are seconds);
// a healthy job's calls end far closer together, and one that pauses
// between calls pays one store round trip per pause.
const verdictGap = time.Second

// verdict is the outcome of the call with sequence number seq on this
// rank, which the engine or the mailboxes ended with err: when another rank
// failed it, or an earlier call, it fails with that rank's cause, whether
// it completed here or failed of what followed (a peer that closed).
func (c *Comm) verdict(seq uint64, err error) error {
	if c.board == nil {
		return err
	}
	now := flowtel.Monotonic()
	last := c.lastEnd.Swap(now)
	pf := c.peerFailure.Load()
	// A peer that vanished may have posted why first (failSetup waits
	// for its peers to read it before it closes): look whatever the gap.
	lost := errors.Is(err, transport.ErrPeerDead)
	if pf == nil && (now-last > int64(verdictGap) || lost) && !errors.As(err, new(*PeerFailedError)) {
		if p, ok := c.board.peek(context.Background()); ok {
			ctx, cancel := context.WithTimeout(context.Background(), peekTimeout)
			pf = c.learn(ctx, p)
			cancel()
		}
	}
	// A call that reached its own deadline reports that, as failAborted
	// does: it says more about this rank's call than a peer's timeout a
	// moment earlier.
	if pf != nil && pf.Reporter != c.rank && pf.covers(seq) && !errors.Is(err, context.DeadlineExceeded) {
		return pf
	}
	return err
}
