package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/transport/shm"
)

// Collective is an operation vccl-bench measures.
type Collective uint8

const (
	AllReduce Collective = iota + 1
	AllGather
	ReduceScatter
	Broadcast
	Reduce
	AllToAll
	SendRecv
	collEnd
)

var collNames = [...]string{"", "allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv"}

// Collectives lists every collective vccl-bench runs.
func Collectives() []Collective {
	out := make([]Collective, 0, collEnd-1)
	for c := AllReduce; c < collEnd; c++ {
		out = append(out, c)
	}
	return out
}

func (c Collective) String() string {
	if c == 0 || c >= collEnd {
		return fmt.Sprintf("collective(%d)", uint8(c))
	}
	return collNames[c]
}

// ParseCollective accepts vccl-bench's names and nccl-tests' (all_reduce,
// all_reduce_perf, …), in any case, with or without separators.
func ParseCollective(s string) (Collective, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "_perf")
	t = strings.NewReplacer("_", "", "-", "").Replace(t)
	switch t {
	case "bcast":
		t = "broadcast"
	case "reducescatterblock":
		t = "reducescatter"
	}
	for c := AllReduce; c < collEnd; c++ {
		if collNames[c] == t {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown collective %q (want allreduce, allgather, reducescatter, broadcast, reduce, alltoall or sendrecv)", s)
}

// Reduces reports whether the collective takes a reduction (-o).
func (c Collective) Reduces() bool { return c == AllReduce || c == ReduceScatter || c == Reduce }

// Rooted reports whether the collective takes a root (-r).
func (c Collective) Rooted() bool { return c == Broadcast || c == Reduce }

// HasInPlace reports whether the collective has an in-place form. A
// send/recv from and into one buffer overlaps what it sends with what it
// receives, which MPI forbids and the library does not order: vccl-bench
// measures send/recv out of place only.
func (c Collective) HasInPlace() bool { return c != SendRecv }

// BusFactor is nccl-tests' busbw/algbw ratio for n ranks: the fraction of
// the data each rank's link must carry, so that busbw compares with the
// hardware's bandwidth whatever the collective and the rank count.
func (c Collective) BusFactor(n int) float64 {
	if n < 1 {
		return 0
	}
	f := float64(n)
	switch c {
	case AllReduce:
		return 2 * (f - 1) / f
	case AllGather, ReduceScatter, AllToAll:
		return (f - 1) / f
	}
	return 1 // broadcast, reduce, sendrecv
}

// Layout is what one size means for a collective on n ranks, in elements.
type Layout struct {
	Count int   // the count argument of the call (nccl-tests' count column)
	SendN int   // elements of the send buffer
	RecvN int   // elements of the receive buffer
	Bytes int64 // the size column: the larger buffer in bytes
}

// Layout rounds bytes down to whole elements (and whole blocks of n for the
// collectives that split their buffer by rank), as nccl-tests does.
func (c Collective) Layout(bytes int64, esize, n int) Layout {
	total := int(bytes / int64(esize))
	var l Layout
	switch c {
	case AllGather:
		l.Count = total / n
		l.SendN, l.RecvN = l.Count, l.Count*n
	case ReduceScatter:
		l.Count = total / n
		l.SendN, l.RecvN = l.Count*n, l.Count
	case AllToAll:
		l.Count = total / n
		l.SendN, l.RecvN = l.Count*n, l.Count*n
	default:
		l.Count = total
		l.SendN, l.RecvN = total, total
	}
	l.Bytes = int64(max(l.SendN, l.RecvN) * esize)
	return l
}

// call is one invocation's buffers: send and recv as passed to the
// library, out the memory to check afterwards (nil: nothing on this rank).
type call struct {
	send, recv collective.Buffer
	out        []byte
}

// setup holds a rank's buffers, allocated once for the largest size.
type setup struct {
	cfg     Config
	rank, n int
	dt      collective.Datatype
	es      int
	sendBuf []byte
	recvBuf []byte
	dev     *deviceRun // --device gpu
}

// newSetup allocates the buffers and writes this rank's inputs into every
// element of both before anything is timed. Fresh memory from the OS is not
// zeroed by make (the kernel's pages are zero already) and stays unmapped
// until written: a timed call reading it reads the kernel's zero page,
// always cached, and a single-copy read of it pins none of the sender's
// memory, so such a benchmark times a copy no user's call makes (Open
// MPI's did, until its buffers were filled too: BENCHMARKS.md, Method);
// users' buffers hold data.
func newSetup(cfg Config, rank, n int, maxBytes int64) (*setup, error) {
	es := cfg.Type.Size()
	l := cfg.Coll.Layout(maxBytes, es, n)
	s := &setup{cfg: cfg, rank: rank, n: n, dt: cfg.Type, es: es}
	var err error
	if s.sendBuf, err = hostBuffer(cfg, l.SendN*es); err != nil {
		return nil, err
	}
	if s.recvBuf, err = hostBuffer(cfg, l.RecvN*es); err != nil {
		return nil, err
	}
	for _, b := range [][]byte{s.sendBuf, s.recvBuf} {
		for j := range len(b) / es {
			put(s.dt, b, j, float64(s.value(rank, j)))
		}
	}
	return s, nil
}

// hostBuffer returns n bytes for the host's side of a buffer: from
// shm.AllocShared with --device shared (peers on the host read it without a
// system call), else from the Go heap. The process never frees them.
func hostBuffer(cfg Config, n int) ([]byte, error) {
	if cfg.Device != "shared" || n == 0 {
		return make([]byte, n), nil
	}
	return shm.AllocShared(n)
}

// buffers returns the call's buffers for layout l, out of place or in place.
func (s *setup) buffers(l Layout, inPlace bool) call {
	b := func(p []byte) collective.Buffer { return collective.Bytes(p, s.dt) }
	send := s.sendBuf[:l.SendN*s.es]
	recv := s.recvBuf[:l.RecvN*s.es]
	blk := l.Count * s.es
	switch c := s.cfg.Coll; {
	case !inPlace:
		cl := call{send: b(send), recv: b(recv), out: recv}
		if c == Reduce && s.rank != s.cfg.Root {
			cl.recv, cl.out = collective.Buffer{Type: s.dt}, nil
		}
		return cl
	case c == AllGather:
		return call{send: b(recv[s.rank*blk : (s.rank+1)*blk]), recv: b(recv), out: recv}
	case c == ReduceScatter:
		// The receive buffer is this rank's block of the send buffer.
		return call{send: b(send), recv: b(send[s.rank*blk : (s.rank+1)*blk]), out: send[s.rank*blk : (s.rank+1)*blk]}
	case c == Reduce && s.rank != s.cfg.Root:
		return call{send: b(recv), recv: collective.Buffer{Type: s.dt}}
	default:
		return call{send: b(recv), recv: b(recv), out: recv}
	}
}

// start issues the collective once.
func (s *setup) start(ctx context.Context, comm *collective.Comm, cl call) error {
	switch s.cfg.Coll {
	case AllReduce:
		return comm.AllReduce(ctx, cl.send, cl.recv, s.cfg.Op)
	case AllGather:
		return comm.AllGather(ctx, cl.send, cl.recv)
	case ReduceScatter:
		return comm.ReduceScatter(ctx, cl.send, cl.recv, s.cfg.Op)
	case Broadcast:
		return comm.Broadcast(ctx, cl.send, cl.recv, s.cfg.Root)
	case Reduce:
		return comm.Reduce(ctx, cl.send, cl.recv, s.cfg.Op, s.cfg.Root)
	case AllToAll:
		return comm.AllToAll(ctx, cl.send, cl.recv)
	case SendRecv:
		if s.n == 1 {
			// Nobody to talk to: a copy, as NCCL does for a self send/recv.
			copy(cl.recv.Data, cl.send.Data)
			return nil
		}
		next, prev := (s.rank+1)%s.n, (s.rank+s.n-1)%s.n
		return comm.SendRecv(ctx, collective.SendTo(next, cl.send), collective.RecvFrom(prev, cl.recv))
	}
	return fmt.Errorf("unknown collective %v", s.cfg.Coll)
}
