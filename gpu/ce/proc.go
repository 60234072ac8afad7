package ce

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// ProcConfig sets up a Proc.
type ProcConfig struct {
	// Comm is the host communicator of the job; nil: NewProc creates one
	// with collective.NewFromEnv (vcclrun, torchrun, Open MPI, Slurm) and
	// Close closes it.
	Comm *collective.Comm
	// Devices are CUDA ordinals indexed by local rank; nil: the local rank
	// (the rank when the launcher gives none) modulo the device count.
	Devices []int
	// Device, when UseDevice is set, is the CUDA ordinal of this rank
	// whatever its local rank (a C API passes the caller's current device).
	Device    int
	UseDevice bool
	// SMs, PollEvery: as in Config.
	SMs       int
	PollEvery time.Duration
	// Collector receives the telemetry records (nil: off); CommID is the
	// communicator id written into them.
	Collector *flowtel.Collector
	CommID    uint32
	// Timeout bounds how long an operation waits for a peer process to
	// take part (default DefaultProcTimeout).
	Timeout time.Duration
	// ShmDir is where the mailbox file is made (default /dev/shm).
	ShmDir string
	// OneKernelMax is the largest out-of-place all-reduce (bytes) on the
	// peer-read path (flagops.go; 0: DefaultOneKernelMax, negative:
	// never); DirectMax the largest of the others that sends whole inputs
	// (the direct path; 0: DefaultDirectMax, negative: never); Chunk the
	// chunk in bytes of the pipelined path (0: 16 MiB; the direct path's
	// are half). Set, they override VCCL_GPU_ONEKERNEL_MAX,
	// VCCL_GPU_DIRECT_MAX and VCCL_GPU_CHUNK.
	OneKernelMax int
	DirectMax    int
	Chunk        int
	// Env is what the environment says (ParseEnv); nil: this process's,
	// read once. Env.Flags false (VCCL_GPU_FLAGS=0) turns the flag paths
	// off: the mailbox path then runs every all-reduce.
	Env *Env
}

// errStagedIPC is what the IPC operations return in a staged job.
var errStagedIPC = errors.New("ce: this job stages through host memory (ranks on several hosts or VCCL_GPU_STAGE=1): no CUDA IPC; use device buffers through the collective API")

// DefaultProcTimeout is how long a Proc operation waits for its peers.
const DefaultProcTimeout = 2 * time.Minute

// Proc is this process's rank of a job that runs one process per GPU on
// one host. At NewProc the ranks exchange, through the host communicator,
// the CUDA IPC handles of their interprocess events and the name of a
// shared-memory mailbox; Register exchanges the IPC handles of device
// buffers, which every rank then maps. Transfers are pushed by the
// sender's copy engine (cuMemcpyDtoDAsync into the peer's mapped buffer,
// no SM used) and ordered across processes with IPC events: the receiver
// records a ready event on its stream and posts the receive in the
// mailbox; the sender's copy stream waits on that event, copies, records a
// done event and says so; the receiver's stream waits on the done event.
// Each operation is stream-ordered as in Group; a call returns once its
// work and cross-process waits are queued, which needs the peers to have
// reached the same operation (the host waits for them, never for the GPU).
//
// Operations between a pair of ranks match in the order they are called,
// as with MPI and NCCL: the k-th send from a to b fills b's k-th receive
// from a. Collectives must be called in the same order on every rank.
type Proc struct {
	g       *Group
	r       *rank
	comm    *collective.Comm
	ownComm bool
	me, n   int
	timeout time.Duration
	box     *mailbox
	// Interprocess events, [peer][slot]: rdy are this rank's "ready to
	// receive from peer", done its "copy to peer done"; peerRdy and
	// peerDone the peer's, opened here.
	rdy, done, peerRdy, peerDone [][mailSlots]cuda.Event
	sendSeq, recvSeq             []uint64 // per peer: transfers matched so far
	regs                         []*Mem
	opened                       map[cuda.IpcMemHandle]*openMem
	// Device buffers in the collective API (engine.go).
	attached bool             // the Comm's device engine
	staged   bool             // through host memory: ranks on several hosts, or VCCL_GPU_STAGE=1
	pinned   *cuda.HostBuffer // staging memory
	scratch  *DeviceMem       // where peers push reduction operands
	// The flag path (flagops.go).
	env            Env // what the environment said (config.go)
	useFlags       bool
	directMax      int
	oneKernelMax   int
	fused          bool // 2 ranks: the peer-read path in one kernel that waits on flags itself
	chunk          int
	flags          *DeviceMem // flagKinds × n flags, zeroed
	fdirect, fpipe *DeviceMem // scratch of the direct and pipelined all-reduce
	evChunk        [maxChunks]cuda.Event
	words          cuda.DevicePtr // the values signal copies into peers' flags
	stage          cuda.DevicePtr // in-place peer-read results, before they go to the output
	stageLen       int
	fseq           uint32 // flag values used so far (every rank alike)
	dops           uint64 // direct all-reduces so far (their scratch slot alternates)
	oseq           uint64 // pipelined operations so far (the mailbox outs)
	// Memory and streams a caller brings (extern.go).
	foreign     map[cuda.DevicePtr]*allocation // wrapped allocations by base
	exportSeq   uint64                         // export ids used so far
	imports     []map[int]imported             // per peer: export id → where it is mapped here
	evIn, evOut cuda.Event                     // order this rank's stream after / before a caller's
	releaseMu   sync.Mutex                     // one Abort releases the flags
	released    bool
	// Ranks in this process (local.go).
	borrowed map[cuda.Event]bool // peers' events used as they are, not opened
	reached  map[int]bool        // devices whose memory this rank's context may access
	// Pre-multiplied sums (premul.go): products and the spread scalar.
	premulOut, premulCon cuda.DevicePtr
	premulLen            int
	// Bounce buffers of small allocations (extern.go).
	bounceFor  map[*allocation]*allocation // this call's: the caller's allocation → its bounce buffer
	bounceFree []*allocation
	bounceAll  []cuda.DevicePtr
	bounceOut  [][2]*DeviceMem // copies back at Leave: to, from
}

type openMem struct {
	base  cuda.DevicePtr
	refs  int
	pid   int            // the exporting process
	ebase cuda.DevicePtr // the allocation's base there
}

// Mem is a device buffer registered with every rank of a Proc job: each
// rank can write into every other rank's buffer of the same registration.
type Mem struct {
	owner *Proc
	id    int
	Ptr   cuda.DevicePtr // this rank's buffer
	Bytes int            // its size
	peer  []cuda.DevicePtr
	size  []int
	keys  []cuda.IpcMemHandle
}

// PeerBytes returns the size rank registered.
func (m *Mem) PeerBytes(rank int) int { return m.size[rank] }

// NewProc joins the job: one rank per process, one GPU per rank, every rank
// on this host. It returns an error wrapping cuda.ErrNoDriver when there is
// no GPU.
func NewProc(ctx context.Context, cfg ProcConfig) (*Proc, error) {
	env, err := envOf(cfg.Env)
	if err != nil {
		return nil, err
	}
	if err := cuda.Load(); err != nil {
		return nil, err
	}
	ndev, err := cuda.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ndev == 0 {
		return nil, fmt.Errorf("ce: no GPU: %w", cuda.ErrNoDriver)
	}
	p := &Proc{comm: cfg.Comm, timeout: cfg.Timeout, opened: map[cuda.IpcMemHandle]*openMem{}, foreign: map[cuda.DevicePtr]*allocation{},
		borrowed: map[cuda.Event]bool{}, reached: map[int]bool{},
		useFlags: env.Flags, fused: env.Fused, env: env, chunk: orEnv(cfg.Chunk, env.Chunk, 0),
		directMax: orEnv(cfg.DirectMax, env.DirectMax, DefaultDirectMax), oneKernelMax: orEnv(cfg.OneKernelMax, env.OneKernelMax, DefaultOneKernelMax)}
	if p.timeout <= 0 {
		p.timeout = DefaultProcTimeout
	}
	local := env.LocalRank
	if p.comm == nil {
		if p.comm, err = collective.NewFromEnv(ctx); err != nil {
			return nil, err
		}
		p.ownComm = true
	}
	p.me, p.n = p.comm.Rank(), p.comm.Size()
	if local < 0 {
		local = p.me
	}
	dev := local % ndev
	if cfg.UseDevice {
		if cfg.Device < 0 || cfg.Device >= ndev {
			p.closeComm()
			return nil, fmt.Errorf("ce: device %d of %d", cfg.Device, ndev)
		}
		dev = cfg.Device
	} else if cfg.Devices != nil {
		if local >= len(cfg.Devices) {
			p.closeComm()
			return nil, fmt.Errorf("ce: local rank %d but %d devices configured", local, len(cfg.Devices))
		}
		dev = cfg.Devices[local]
	}
	p.g, err = New(Config{Devices: []int{dev}, SMs: cfg.SMs, Collector: cfg.Collector, Comm: cfg.CommID, PollEvery: cfg.PollEvery, SmallMax: -1})
	if err != nil {
		p.closeComm()
		return nil, err
	}
	p.r = p.g.ranks[0]
	p.r.global = p.me
	if p.staged, err = p.decideStaging(ctx); err != nil {
		p.g.Close()
		p.closeComm()
		return nil, fmt.Errorf("ce: rank %d: %w", p.me, err)
	}
	if p.staged {
		return p, nil
	}
	if err := p.setup(ctx); err != nil {
		p.g.Close()
		p.closeComm()
		return nil, fmt.Errorf("ce: rank %d: %w", p.me, err)
	}
	return p, nil
}

// decideStaging all-gathers the host names and VCCL_GPU_STAGE: the job
// stages through host memory when its ranks are not all on one host or any
// rank asks for it.
func (p *Proc) decideStaging(ctx context.Context) (bool, error) {
	mine := make([]byte, 1+blobHost)
	if p.env.Stage {
		mine[0] = 1
	}
	host, _ := os.Hostname()
	if err := putString(mine[1:], host); err != nil {
		return false, err
	}
	all, err := p.exchange(ctx, mine)
	if err != nil {
		return false, err
	}
	for _, b := range all {
		if b[0] == 1 || getString(b[1:]) != host {
			return true, nil
		}
	}
	return false, nil
}

func (p *Proc) closeComm() {
	if p.ownComm {
		p.comm.Close()
	}
}

// handshake blob of one rank: a status, the host name, the mailbox path
// (rank 0's), then 2*mailSlots event handles for every rank (zero for
// itself).
const (
	blobHost = 64
	blobPath = 256
)

func (p *Proc) blobSize() int { return 8 + blobHost + blobPath + p.n*2*mailSlots*64 + blobWhere }

// blobWhere ends the blob: the rank's GPU (PCI bus id) and process.
const blobWhere = 32

// exchange all-gathers one fixed-size blob per rank over the host
// communicator.
func (p *Proc) exchange(ctx context.Context, mine []byte) ([][]byte, error) {
	all := make([]byte, len(mine)*p.n)
	if err := p.comm.AllGather(ctx, collective.Bytes(mine, collective.Uint8), collective.Bytes(all, collective.Uint8)); err != nil {
		return nil, err
	}
	out := make([][]byte, p.n)
	for i := range out {
		out[i] = all[i*len(mine) : (i+1)*len(mine)]
	}
	return out, nil
}

func putString(dst []byte, s string) error {
	if len(s) >= len(dst) {
		return fmt.Errorf("%q too long (%d bytes at most)", s, len(dst)-1)
	}
	copy(dst, s)
	return nil
}

func getString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func (p *Proc) setup(ctx context.Context) error {
	n := p.n
	p.rdy = make([][mailSlots]cuda.Event, n)
	p.done = make([][mailSlots]cuda.Event, n)
	p.peerRdy = make([][mailSlots]cuda.Event, n)
	p.peerDone = make([][mailSlots]cuda.Event, n)
	p.sendSeq = make([]uint64, n)
	p.recvSeq = make([]uint64, n)
	p.imports = make([]map[int]imported, n)
	for q := range p.imports {
		p.imports[q] = map[int]imported{}
	}
	blob := make([]byte, p.blobSize())
	var setupErr error
	host, _ := os.Hostname()
	if err := putString(blob[8:8+blobHost], host); err != nil {
		setupErr = err
	}
	where := blob[len(blob)-blobWhere:]
	bus, _ := p.r.dev.PCIBusID()
	putString(where[:24], bus)
	binary.LittleEndian.PutUint64(where[24:], uint64(os.Getpid()))
	if p.me == 0 && setupErr == nil {
		box, err := createMailbox("", n)
		if err == nil {
			p.box = box
			err = putString(blob[8+blobHost:8+blobHost+blobPath], box.path)
		}
		setupErr = err
	}
	if setupErr == nil {
		setupErr = p.g.do(func() error {
			if err := p.g.use(p.r); err != nil {
				return err
			}
			for q := 0; q < n; q++ {
				if q == p.me {
					continue
				}
				for s := 0; s < mailSlots; s++ {
					for k, ev := range []*cuda.Event{&p.rdy[q][s], &p.done[q][s]} {
						e, err := cuda.NewEvent(cuda.EventInterprocess | cuda.EventDisableTiming)
						if err != nil {
							return err
						}
						*ev = e
						h, err := cuda.IpcGetEventHandle(e)
						if err != nil {
							return err
						}
						localEv.Store(h, e)
						off := 8 + blobHost + blobPath + ((q*2+k)*mailSlots+s)*64
						copy(blob[off:off+64], h[:])
					}
				}
			}
			return nil
		})
	}
	if setupErr != nil {
		blob[0] = 1
	}
	all, err := p.exchange(ctx, blob)
	if err != nil {
		return err
	}
	if setupErr != nil {
		return setupErr
	}
	for q, b := range all {
		if b[0] != 0 {
			return fmt.Errorf("rank %d failed to set up", q)
		}
		if h := getString(b[8 : 8+blobHost]); h != host {
			return fmt.Errorf("rank %d runs on host %q, this one on %q: a Proc job runs on one host (CUDA IPC)", q, h, host)
		}
	}
	p.sharing(all)
	// Map the mailbox and open the peers' events, then tell rank 0 it may
	// unlink the file.
	openErr := func() error {
		if p.me != 0 {
			box, err := openMailbox(getString(all[0][8+blobHost:8+blobHost+blobPath]), n)
			if err != nil {
				return err
			}
			p.box = box
		}
		return p.g.do(func() error {
			if err := p.g.use(p.r); err != nil {
				return err
			}
			for q := 0; q < n; q++ {
				if q == p.me {
					continue
				}
				for s := 0; s < mailSlots; s++ {
					for k, ev := range []*cuda.Event{&p.peerRdy[q][s], &p.peerDone[q][s]} {
						off := 8 + blobHost + blobPath + ((p.me*2+k)*mailSlots+s)*64
						var h cuda.IpcEventHandle
						copy(h[:], all[q][off:off+64])
						e, err := p.openEvent(h)
						if err != nil {
							return fmt.Errorf("opening rank %d's event: %w", q, err)
						}
						*ev = e
					}
				}
			}
			return nil
		})
	}()
	status := []byte{0}
	if openErr != nil {
		status[0] = 1
	}
	sts, err := p.exchange(ctx, status)
	if p.me == 0 && p.box != nil {
		os.Remove(p.box.path)
	}
	if err != nil {
		return err
	}
	if openErr != nil {
		return openErr
	}
	for q, s := range sts {
		if s[0] != 0 {
			return fmt.Errorf("rank %d could not open the mailbox or the events", q)
		}
	}
	return nil
}

// Rank returns this process's rank; Size the number of ranks.
func (p *Proc) Rank() int { return p.me }

// Size returns the number of ranks of the job.
func (p *Proc) Size() int { return p.n }

// Comm returns the host communicator.
func (p *Proc) Comm() *collective.Comm { return p.comm }

// Group returns the single-GPU group that drives this rank's GPU (its
// proxy thread, streams, kernels and telemetry): use it for Alloc, Upload,
// Download, Memset, Do and Stream(0).
func (p *Proc) Group() *Group { return p.g }

// Device returns this rank's CUDA device.
func (p *Proc) Device() cuda.Device { return p.r.dev }

// Stream returns the stream this rank's operations are ordered on.
func (p *Proc) Stream() cuda.Stream { return p.r.user }

// Synchronize waits for this rank's queued work (and its telemetry).
func (p *Proc) Synchronize(ctx context.Context) error { return p.g.Synchronize(ctx) }

// SetTelemetry turns the records on or off (needs a Collector).
func (p *Proc) SetTelemetry(on bool) { p.g.SetTelemetry(on) }

// Close waits for the queued work, unmaps the peers' buffers and events,
// and releases the GPU (and the host communicator if NewProc made it).
// Every rank closes together: each first releases what it imported from
// the others, and destroys its own interprocess events only once every
// rank has (a host barrier), since using an imported event after its
// owner destroyed it is undefined. Free the buffers from Group().Alloc
// after Deregister and before Close.
func (p *Proc) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	if p.attached {
		p.comm.SetDeviceEngine(nil)
	}
	var err error
	for _, m := range []**DeviceMem{&p.scratch, &p.flags, &p.fdirect, &p.fpipe} {
		if *m != nil {
			err = errors.Join(err, p.Free(ctx, *m))
			*m = nil
		}
	}
	p.g.do(func() error {
		if p.g.use(p.r) == nil {
			if p.words != 0 {
				cuda.MemFree(p.words)
			}
			if p.stage != 0 {
				cuda.MemFree(p.stage)
			}
			if p.premulLen > 0 {
				cuda.MemFree(p.premulOut)
				cuda.MemFree(p.premulCon)
			}
			for _, e := range p.evChunk {
				if e != 0 {
					e.Destroy()
				}
			}
		}
		return nil
	})
	if p.pinned != nil {
		err = errors.Join(err, p.g.Do(0, p.pinned.Free))
	}
	err = errors.Join(err, p.g.Synchronize(ctx))
	p.g.do(func() error {
		if p.g.use(p.r) != nil {
			return nil
		}
		for _, o := range p.opened {
			cuda.CloseIpcMemHandle(o.base)
		}
		p.opened = nil
		p.destroyPeerEvents()
		return nil
	})
	if berr := p.comm.Barrier(ctx); berr != nil {
		// A peer may still hold our events: leave them to the process's end.
		err = errors.Join(err, fmt.Errorf("ce: closing: %w", berr))
	} else {
		p.g.do(func() error {
			if p.g.use(p.r) != nil {
				return nil
			}
			p.destroyOwnEvents()
			return nil
		})
	}
	err = errors.Join(err, p.g.Close(), p.box.close())
	p.closeComm()
	return err
}

// Register makes the n bytes at ptr (device memory of this rank's GPU, any
// address inside an allocation) writable by every rank: all ranks call it
// together, each with its own buffer, and each maps the others' through
// CUDA IPC. The registration lasts until Deregister.
func (p *Proc) Register(ctx context.Context, ptr cuda.DevicePtr, n int) (*Mem, error) {
	if p.staged {
		return nil, errStagedIPC
	}
	// status, handle, offset, size, then the process and the allocation's
	// base there (a rank of the same process uses it as it is; see also
	// mapPeer).
	const blob = 8 + 64 + 16 + 16
	mine := make([]byte, blob)
	var h cuda.IpcMemHandle
	regErr := p.g.do(func() error {
		if err := p.g.use(p.r); err != nil {
			return err
		}
		base, size, err := cuda.MemAddressRange(ptr)
		if err != nil {
			return err
		}
		if int(ptr-base)+n > size {
			return fmt.Errorf("ce: Register of %d bytes at %#x overruns its allocation (%d bytes at %#x)", n, ptr, size, base)
		}
		h, err = cuda.IpcGetMemHandle(base)
		binary.LittleEndian.PutUint64(mine[72:], uint64(ptr-base))
		binary.LittleEndian.PutUint64(mine[88:], uint64(os.Getpid()))
		binary.LittleEndian.PutUint64(mine[96:], uint64(base))
		return err
	})
	if regErr != nil {
		mine[0] = 1
	}
	copy(mine[8:72], h[:])
	binary.LittleEndian.PutUint64(mine[80:], uint64(n))
	all, err := p.exchange(ctx, mine)
	if err != nil {
		return nil, err
	}
	if regErr != nil {
		return nil, regErr
	}
	for q, b := range all {
		if b[0] != 0 {
			return nil, fmt.Errorf("ce: rank %d failed to register its buffer", q)
		}
	}
	m := &Mem{owner: p, id: len(p.regs), Ptr: ptr, Bytes: n, peer: make([]cuda.DevicePtr, p.n), size: make([]int, p.n), keys: make([]cuda.IpcMemHandle, p.n)}
	err = p.g.do(func() error {
		if err := p.g.use(p.r); err != nil {
			return err
		}
		for q, b := range all {
			m.size[q] = int(binary.LittleEndian.Uint64(b[80:]))
			if q == p.me {
				m.peer[q] = ptr
				continue
			}
			var k cuda.IpcMemHandle
			copy(k[:], b[8:72])
			m.keys[q] = k
			pid, ebase := int(binary.LittleEndian.Uint64(b[88:])), cuda.DevicePtr(binary.LittleEndian.Uint64(b[96:]))
			base, err := p.mapPeer(k, pid, ebase, int(binary.LittleEndian.Uint64(b[72:]))+m.size[q])
			if err != nil {
				return fmt.Errorf("ce: mapping rank %d's buffer: %w", q, err)
			}
			m.peer[q] = base.Add(int(binary.LittleEndian.Uint64(b[72:])))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	p.regs = append(p.regs, m)
	return m, nil
}

// Deregister ends a registration: every rank calls it together, after the
// operations that use it (it synchronizes). When it returns, no rank maps
// this rank's buffer any more, so it may be freed.
func (p *Proc) Deregister(ctx context.Context, m *Mem) error {
	if err := p.g.Synchronize(ctx); err != nil {
		return err
	}
	if err := p.comm.Barrier(ctx); err != nil { // no peer writes into m any more
		return err
	}
	err := p.g.do(func() error {
		if err := p.g.use(p.r); err != nil {
			return err
		}
		for q, k := range m.keys {
			if q == p.me {
				continue
			}
			if o := p.opened[k]; o != nil {
				if o.refs--; o.refs == 0 {
					delete(p.opened, k)
					if err := cuda.CloseIpcMemHandle(o.base); err != nil {
						return err
					}
				}
			}
		}
		p.regs[m.id] = nil
		return nil
	})
	if err != nil {
		return err
	}
	return p.comm.Barrier(ctx) // every rank has unmapped
}

// P2P is one half of a transfer between two ranks of a Proc job.
type P2P struct {
	Peer  int
	Recv  bool
	Src   cuda.DevicePtr // a send's source, on this rank's GPU
	Dst   *Mem           // a receive's destination, registered
	Off   int            // offset into Dst
	Bytes int
}

// SendTo is a send of bytes at src to peer.
func SendTo(peer int, src cuda.DevicePtr, bytes int) P2P {
	return P2P{Peer: peer, Src: src, Bytes: bytes}
}

// RecvInto is a receive from peer of bytes into dst at off.
func RecvInto(peer int, dst *Mem, off, bytes int) P2P {
	return P2P{Peer: peer, Recv: true, Dst: dst, Off: off, Bytes: bytes}
}

// SendRecv queues the sends and receives, in stream order on this rank:
// each starts after the work already queued on both ends' streams, and the
// streams' later work waits for it. Sends run on this rank's copy engine
// (0 SMs), one after another. The peer must call SendRecv (or SendRecvs in
// several calls) with the matching halves; a receive's size must equal the
// send's. At most 16 transfers per peer and direction in one call.
func (p *Proc) SendRecv(ctx context.Context, ops ...P2P) error {
	if p.staged {
		return errStagedIPC
	}
	if err := p.checkOps(ops); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return p.g.do(func() error {
		p.g.p2p++
		bytes := 0
		for _, o := range ops {
			bytes += o.Bytes
		}
		return p.runPlan(ctx, tag{seq: 1<<63 | p.g.p2p, op: collective.OpSend}, []phase{{ops: ops}}, 0, bytes)
	})
}

func (p *Proc) checkOps(ops []P2P) error {
	per := make([]int, 2*p.n)
	for _, o := range ops {
		if o.Peer < 0 || o.Peer >= p.n || o.Peer == p.me {
			return fmt.Errorf("ce: rank %d: transfer with rank %d of %d", p.me, o.Peer, p.n)
		}
		if o.Bytes < 0 {
			return fmt.Errorf("ce: transfer of %d bytes", o.Bytes)
		}
		k := 2 * o.Peer
		if o.Recv {
			k++
			if !p.owns(o.Dst) {
				return errors.New("ce: a receive needs a buffer registered with this Proc (Register, Alloc) or wrapped by it (Wrap)")
			}
			if o.Off < 0 || o.Off+o.Bytes > o.Dst.Bytes {
				return fmt.Errorf("ce: receive of %d bytes at offset %d of a %d-byte buffer", o.Bytes, o.Off, o.Dst.Bytes)
			}
		}
		if per[k]++; per[k] > mailSlots {
			return fmt.Errorf("ce: more than %d transfers with rank %d in one direction in one call", mailSlots, o.Peer)
		}
	}
	return nil
}

// local is a copy within this rank's GPU queued alongside a transfer
// (all-gather's own piece).
type local struct {
	dst, src cuda.DevicePtr
	bytes    int
}

// transfer runs on the proxy thread: post the receives, do the sends, then
// order the receives' completions into this rank's stream.
func (p *Proc) transfer(ctx context.Context, t tag, ops []P2P, loc *local) error {
	r, g := p.r, p.g
	if err := g.use(r); err != nil {
		return err
	}
	w := waiter{ctx: ctx, timeout: p.timeout, idle: func() {
		if g.inflight.Load() > 0 {
			g.pollWhileBusy(flowtel.Monotonic())
			g.use(r)
		}
	}}
	seqs := make([]uint64, len(ops))
	// 1. Receives: record the ready event (this rank's earlier work on the
	// buffer is done) and post where the data goes.
	for i, o := range ops {
		if !o.Recv {
			continue
		}
		q := o.Peer
		s := p.recvSeq[q] + 1
		b := p.box.pair(q, p.me)
		if s > mailSlots {
			if err := w.until(func() string {
				return fmt.Sprintf("rank %d to take receive %d's ready event", q, s-mailSlots)
			}, func() bool { return atomicLoad(&b.ackRdy) >= s-mailSlots }); err != nil {
				return err
			}
		}
		if err := p.rdy[q][s%mailSlots].Record(r.user); err != nil {
			return err
		}
		b.postRecv(s, o.Dst.id, o.Off, o.Bytes)
		p.recvSeq[q] = s
		seqs[i] = s
	}
	// 2. Sends: after this rank's queued work and the receiver's ready
	// event, the copy engine pushes into the receiver's buffer.
	nsend := 0
	for _, o := range ops {
		if !o.Recv {
			nsend++
		}
	}
	if nsend > 0 || loc != nil {
		if err := r.evStart.Record(r.user); err != nil {
			return err
		}
	}
	if loc != nil && loc.bytes > 0 {
		if err := r.red.WaitEvent(r.evStart); err != nil {
			return err
		}
		if err := cuda.MemcpyDtoDAsync(loc.dst, loc.src, loc.bytes, r.red); err != nil {
			return err
		}
		if err := r.evEndR.Record(r.red); err != nil {
			return err
		}
		if err := r.user.WaitEvent(r.evEndR); err != nil {
			return err
		}
	}
	var firstErr error
	if nsend > 0 {
		if err := r.ce.WaitEvent(r.evStart); err != nil {
			return err
		}
		step := uint32(0)
		for _, o := range ops {
			if o.Recv {
				continue
			}
			q := o.Peer
			s := p.sendSeq[q] + 1
			b := p.box.pair(p.me, q)
			var reg, off, n int
			if err := w.until(func() string { return fmt.Sprintf("rank %d to post receive %d", q, s) }, func() bool {
				var ok bool
				reg, off, n, ok = b.posted(s)
				return ok
			}); err != nil {
				return err
			}
			if err := r.ce.WaitEvent(p.peerRdy[q][s%mailSlots]); err != nil {
				return err
			}
			atomicStore(&b.ackRdy, s)
			if s > mailSlots {
				if err := w.until(func() string {
					return fmt.Sprintf("rank %d to take send %d's done event", q, s-mailSlots)
				}, func() bool { return atomicLoad(&b.ackDone) >= s-mailSlots }); err != nil {
					return err
				}
			}
			var bad error
			var dst cuda.DevicePtr
			if n != o.Bytes {
				bad = fmt.Errorf("ce: rank %d sends %d bytes to rank %d, which receives %d", p.me, o.Bytes, q, n)
			} else if dst, bad = p.peerBuf(q, reg, off, n); bad != nil {
				bad = fmt.Errorf("ce: rank %d posts a receive this rank cannot reach: %w", q, bad)
			}
			if bad == nil && n > 0 {
				if err := cuda.MemcpyDtoDAsync(dst, o.Src, n, r.ce); err != nil {
					bad = err
				}
			}
			if err := p.done[q][s%mailSlots].Record(r.ce); err != nil && bad == nil {
				bad = err
			}
			if bad != nil {
				atomicStore(&b.bad, s)
				firstErr = errors.Join(firstErr, bad)
			} else if n > 0 {
				t.step = step
				if err := g.post(r, r.ce, t, wr{r: r, peer: q, qp: qpCE(q), bytes: n}); err != nil {
					return err
				}
			}
			atomicStore(&b.done, s)
			p.sendSeq[q] = s
			step++
		}
		if err := r.evEndCE.Record(r.ce); err != nil {
			return err
		}
		if err := r.user.WaitEvent(r.evEndCE); err != nil {
			return err
		}
	}
	// 3. Receives: this rank's stream waits for each sender's done event.
	for i, o := range ops {
		if !o.Recv {
			continue
		}
		q, s := o.Peer, seqs[i]
		b := p.box.pair(q, p.me)
		if err := w.until(func() string { return fmt.Sprintf("rank %d to send transfer %d", q, s) },
			func() bool { return atomicLoad(&b.done) >= s }); err != nil {
			return err
		}
		ev := p.peerDone[q][s%mailSlots]
		if err := r.user.WaitEvent(ev); err != nil {
			return err
		}
		if g.tel && o.Bytes > 0 {
			// The receive completes when the sender's copy does: a
			// stream of its own waits on the done event, then a pooled
			// event marks it.
			if err := r.gat.WaitEvent(ev); err != nil {
				return err
			}
			t.step = uint32(i)
			if err := g.post(r, r.gat, t, wr{r: r, peer: q, qp: qpCE(q), recv: true, bytes: o.Bytes}); err != nil {
				return err
			}
		}
		atomicStore(&b.ackDone, s)
		if atomicLoad(&b.bad) == s {
			firstErr = errors.Join(firstErr, fmt.Errorf("ce: rank %d refused transfer %d to rank %d (sizes or buffers do not match)", q, s, p.me))
		}
	}
	return firstErr
}

// AllGather queues an all-gather of bytes per rank: rank r's send lands at
// offset r*bytes of every rank's recv (registered, at least Size()*bytes).
// Each rank's copy engine pushes its piece into every peer's buffer; its own
// piece is a local device-to-device copy. No SM is used.
func (p *Proc) AllGather(ctx context.Context, send cuda.DevicePtr, recv *Mem, bytes int) error {
	if p.staged {
		return errStagedIPC
	}
	if recv == nil {
		return errors.New("ce: all-gather needs a registered receive buffer")
	}
	if bytes < 0 || p.n*bytes > recv.Bytes {
		return fmt.Errorf("ce: all-gather of %d bytes per rank into a buffer of %d", bytes, recv.Bytes)
	}
	ph := allGather(p.n, p.me, span{ptr: send, n: bytes}, regSpan(recv))
	if err := p.checkOps(ph.ops); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return p.g.do(func() error {
		p.g.seq++
		return p.runPlan(ctx, tag{seq: p.g.seq, op: collective.OpAllGather, dtype: collective.Uint8}, []phase{ph}, 0, p.n*bytes)
	})
}

// destroyEvents destroys the events of every peer's mailbox slots that were
// created or opened. The proxy's context is this rank's.
func destroyEvents(sets ...[][mailSlots]cuda.Event) {
	for _, set := range sets {
		for q := range set {
			for _, e := range set[q] {
				if e != 0 {
					e.Destroy()
				}
			}
		}
	}
}
