package ce

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"

	"github.com/vccl-go/vccl/gpu/cuda"
)

// Ranks in one process. A program may run several ranks of a job in one
// process (NCCL's ncclCommInitAll, or one thread per GPU), and CUDA IPC
// handles cannot be opened in the process that made them. So every handle
// this process makes is remembered with what it names, and a rank that
// receives one from a rank of the same process uses the memory or event
// itself: memory through unified addressing, with peer access enabled
// when it lies on another GPU; events as they are (a stream may wait on
// an event of another device's context).

// chunkRound rounds the size of memory the peers map up to whole 2 MiB
// pages: the driver packs smaller allocations together, a chunk is
// mapped once per process, and an allocation that shares one cannot be
// opened on its own (see mapPeer).
func chunkRound(n int) int { return (n + chunkPage - 1) / chunkPage * chunkPage }

// chunkPage is the driver's page for device memory.
const chunkPage = 2 << 20

// localEv maps the interprocess events this process made by handle.
var localEv sync.Map // cuda.IpcEventHandle → cuda.Event

// mapPeer returns where an allocation of another rank lies in this
// process: the allocation at ebase (size bytes) in process pid, shared
// through handle h. In this process it is ebase itself (reached through
// peer access when it is on another GPU). Elsewhere the handle is opened
// once and counted. The driver packs small allocations into one chunk and
// maps a chunk once per process, so opening the handle of a second
// allocation of a chunk already mapped here fails (already mapped): that
// allocation then lies at the same distance from an earlier one of the
// same process and chunk as it does there, if the driver reports the
// candidate address inside the same mapping; otherwise the error stands
// (this rank's own memory is allocated in whole pages so that it never
// shares a chunk: chunkRound). On the proxy thread.
func (p *Proc) mapPeer(h cuda.IpcMemHandle, pid int, ebase cuda.DevicePtr, size int) (cuda.DevicePtr, error) {
	if pid == os.Getpid() {
		return ebase, p.reach(ebase)
	}
	if o := p.opened[h]; o != nil {
		o.refs++
		return o.base, nil
	}
	b, err := cuda.OpenIpcMemHandle(h)
	if err == nil {
		p.opened[h] = &openMem{base: b, refs: 1, pid: pid, ebase: ebase}
		return b, nil
	}
	if !cuda.IsResult(err, cuda.ErrorAlreadyMapped) {
		return 0, err
	}
	for _, o := range p.opened {
		if o.pid != pid {
			continue
		}
		cand := o.base + (ebase - o.ebase)
		cb, csize, cerr := cuda.MemAddressRange(cand)
		ob, _, oerr := cuda.MemAddressRange(o.base)
		if cerr == nil && oerr == nil && cb == ob && cand >= cb && int(cand-cb)+size <= csize {
			return cand, nil
		}
	}
	return 0, fmt.Errorf("%w (an allocation smaller than 2 MiB whose driver chunk this process has mapped for another: allocate buffers of 2 MiB or more)", err)
}

// openEvent opens a peer's interprocess event, or borrows it when the peer
// is in this process. On the proxy thread.
func (p *Proc) openEvent(h cuda.IpcEventHandle) (cuda.Event, error) {
	if v, ok := localEv.Load(h); ok {
		e := v.(cuda.Event)
		p.borrowed[e] = true
		return e, nil
	}
	return cuda.OpenIpcEventHandle(h)
}

// reach lets this rank's context access memory of this process at ptr
// (peer access to its GPU, once). On the proxy thread.
func (p *Proc) reach(ptr cuda.DevicePtr) error {
	a, err := cuda.PointerAllocation(ptr)
	if err != nil {
		return err
	}
	if a.Ordinal == int(p.r.dev) || p.reached[a.Ordinal] {
		return nil
	}
	d, err := cuda.GetDevice(a.Ordinal)
	if err != nil {
		return err
	}
	ctx, err := d.PrimaryContext()
	if err != nil {
		return err
	}
	// The rank that owns the memory holds its context: only the peer
	// access outlives this retain.
	defer d.ReleasePrimaryContext()
	if err := cuda.EnablePeerAccess(ctx); err != nil {
		return err
	}
	p.reached[a.Ordinal] = true
	return nil
}

// destroyPeerEvents destroys the peers' events this rank opened (not
// those it borrowed). On the proxy thread.
func (p *Proc) destroyPeerEvents() {
	for _, set := range [][][mailSlots]cuda.Event{p.peerRdy, p.peerDone} {
		for q := range set {
			for s, e := range set[q] {
				if p.borrowed[e] {
					set[q][s] = 0
				}
			}
		}
	}
	destroyEvents(p.peerRdy, p.peerDone)
	p.peerRdy, p.peerDone = nil, nil
}

// destroyOwnEvents destroys this rank's interprocess events and forgets
// their handles. On the proxy thread.
func (p *Proc) destroyOwnEvents() {
	own := map[cuda.Event]bool{}
	for _, set := range [][][mailSlots]cuda.Event{p.rdy, p.done} {
		for q := range set {
			for _, e := range set[q] {
				own[e] = true
			}
		}
	}
	localEv.Range(func(k, v any) bool {
		if own[v.(cuda.Event)] {
			localEv.Delete(k)
		}
		return true
	})
	destroyEvents(p.rdy, p.done)
	p.rdy, p.done = nil, nil
}

// sharing adapts the all-reduce paths to ranks that share a GPU, from
// every rank's blob (so every rank decides alike). Two ranks of one
// process on one GPU must not wait for each other on the GPU: their
// streams may share one of the device's hardware queues, in which a
// rank's wait (a spinning kernel, a stream memory wait) would sit in
// front of the work that ends it. So such a job runs all-reduce on the
// mailbox path, whose host handshake queues every signal before its wait.
// Ranks of different processes on one GPU are time-sliced: a kernel that
// spins for its peer holds the GPU until the slice ends, so they wait with
// stream operations instead (VCCL_GPU_FUSED=0's path).
func (p *Proc) sharing(all [][]byte) {
	type where struct {
		bus string
		pid uint64
	}
	ws := make([]where, len(all))
	for q, b := range all {
		w := b[len(b)-blobWhere:]
		ws[q] = where{getString(w[:24]), binary.LittleEndian.Uint64(w[24:])}
	}
	for q := range ws {
		for k := q + 1; k < len(ws); k++ {
			if ws[q].bus == "" || ws[q].bus != ws[k].bus {
				continue
			}
			if !p.env.ForceFused {
				p.fused = false
			}
			if ws[q].pid == ws[k].pid {
				p.useFlags = false
			}
		}
	}
}
