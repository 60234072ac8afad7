package ce

import (
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

var (
	localMem sync.Map // cuda.IpcMemHandle → cuda.DevicePtr (the allocation's base)
	localEv  sync.Map // cuda.IpcEventHandle → cuda.Event
)

// localMem returns the base address of memory of this process that h
// names (ok false: another process's), with this rank's context able to
// reach it.
func (p *Proc) localMem(h cuda.IpcMemHandle) (cuda.DevicePtr, bool, error) {
	v, ok := localMem.Load(h)
	if !ok {
		return 0, false, nil
	}
	base := v.(cuda.DevicePtr)
	return base, true, p.reach(base)
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
