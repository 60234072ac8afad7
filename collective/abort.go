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
// a *PeerFailedError. The board is off the data path: one blocked store
// request per communicator, and one atomic load per progress pass.
//
// The store is served by rank 0's process; when that process is gone no
// cause travels, and ranks fall back to noticing dead connections
// (deadPeerGrace) or their deadlines.

// PeerFailedError is what calls fail with on every rank once another rank's
// call failed in a way that broke the communicator (a dead or unreachable
// peer, a deadline, a mismatch found mid-call). The communicator cannot be
// used again; close it.
type PeerFailedError struct {
	Rank  int    // the rank whose call failed first
	Cause string // that rank's error
}

func (e *PeerFailedError) Error() string {
	return fmt.Sprintf("collective: communicator aborted because rank %d failed: %s", e.Rank, strings.TrimPrefix(e.Cause, "collective: "))
}

// abortBoard is where the ranks of one communicator post and learn the
// first failure.
type abortBoard interface {
	// post records this rank's failure unless one was posted already. It
	// does not wait on anything but the board itself, bounded.
	post(rank int, cause string)
	// watch waits until a failure is posted (ok) or ctx ends.
	watch(ctx context.Context) (rank int, cause string, ok bool)
}

// postTimeout bounds posting a failure to the store.
const postTimeout = 5 * time.Second

// storeBoard is the abort board of a communicator whose ranks rendezvoused
// through the store: the first rank to bump the counter writes its cause
// under a key bound to its store connection (only that connection may write
// it), then its rank, and its store rank, under the board's key. Keys are
// written once, so the first cause stands, and no client that is not a rank
// of the job can post one. (A Split child's ranks are not the store's: the
// board's key says both.)
type storeBoard struct {
	store *bootstrap.Client
	key   string
}

func (b storeBoard) causeKey(storeRank int) string {
	return bootstrap.RankKey(b.key+"/cause", storeRank)
}

func (b storeBoard) post(rank int, cause string) {
	ctx, cancel := context.WithTimeout(context.Background(), postTimeout)
	defer cancel()
	if n, err := b.store.Add(ctx, b.key+"/n", 1); err != nil || n != 1 {
		return // the store is gone (rank 0 died or closed) or a cause is there
	}
	if len(cause) > maxCause {
		cause = cause[:maxCause] + "…"
	}
	me := b.store.Rank()
	if b.store.Set(ctx, b.causeKey(me), []byte(cause)) == nil {
		b.store.Set(ctx, b.key, []byte(strconv.Itoa(rank)+" "+strconv.Itoa(me)))
	}
}

// maxCause bounds the cause a rank posts, in bytes.
const maxCause = 4 << 10

func (b storeBoard) watch(ctx context.Context) (int, string, bool) {
	v, err := b.store.Get(ctx, b.key)
	if err != nil {
		return 0, "", false
	}
	r, sr, _ := strings.Cut(string(v), " ")
	rank, err1 := strconv.Atoi(r)
	storeRank, err2 := strconv.Atoi(sr)
	if err1 != nil || err2 != nil || rank < 0 || storeRank < 0 {
		return 0, "", false
	}
	cause, err := b.store.Get(ctx, b.causeKey(storeRank))
	if err != nil {
		return 0, "", false
	}
	return rank, string(cause), true
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
		b = &localBoard{done: make(chan struct{})}
		l.m[uid] = b
	}
	return b
}

// localBoard is the abort board of one communicator's ranks in one process.
type localBoard struct {
	once  sync.Once
	done  chan struct{}
	rank  int
	cause string
}

func (b *localBoard) post(rank int, cause string) {
	b.once.Do(func() {
		b.rank, b.cause = rank, cause
		close(b.done)
	})
}

func (b *localBoard) watch(ctx context.Context) (int, string, bool) {
	select {
	case <-b.done:
		return b.rank, b.cause, true
	case <-ctx.Done():
		return 0, "", false
	}
}

// watchAborts starts the goroutine that fails this rank's calls when
// another rank posts a failure, and lets the engines post this rank's.
// boards gives the board of a communicator by uid; Split children use it
// too.
func (c *Comm) watchAborts(boards func(uid string) abortBoard) {
	c.boards = boards
	b := boards(c.uid)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	c.stopWatch = func() { cancel(); <-done }
	for _, e := range c.engines {
		e.onFail = func(err error) {
			if errors.As(err, new(*PeerFailedError)) {
				return // not ours to report
			}
			go b.post(c.rank, err.Error())
		}
	}
	go func() {
		defer close(done)
		rank, cause, ok := b.watch(ctx)
		if !ok || rank == c.rank {
			return
		}
		err := &PeerFailedError{Rank: rank, Cause: cause}
		for _, e := range c.engines {
			e.abort(err)
		}
	}()
}
