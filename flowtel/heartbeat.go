package flowtel

// HeartbeatInterval is how often, at most, a rank that waits with work in
// flight writes a KindHeartbeat record (ns). A rank that waits writes no
// other record, so without them its silence could mean it waits for a peer
// or it does not run at all (stopped, descheduled, frozen by a long pause);
// with them, a rank that wrote nothing for several intervals while work was
// in flight did not run. At this interval a heartbeat costs a record per 10
// ms of waiting.
const HeartbeatInterval = 10_000_000

// Heartbeat paces one producer's heartbeats. The zero value is ready to use.
type Heartbeat struct{ last int64 }

// Beat writes a heartbeat of rank (of communicator comm, on channel ch,
// with calls in flight) if HeartbeatInterval has passed since the last one;
// mono is a reading of the monotonic clock the caller has taken. Owner
// only, as the recorder is.
func (h *Heartbeat) Beat(r *Recorder, mono int64, comm uint32, rank int32, ch uint16, calls int) {
	if mono-h.last < HeartbeatInterval || !r.Enabled() {
		return
	}
	h.last = mono
	rec := Record{TsNs: r.At(mono), Kind: KindHeartbeat, Rank: rank, Peer: -1, Comm: comm, Channel: ch, Depth: uint32(max(calls, 0))}
	r.Record(&rec)
}

// Started reports whether a heartbeat was written: a producer writes its
// first as it starts waiting, or sooner, so that every silence of its rank
// after it means what heartbeats make it mean.
func (h *Heartbeat) Started() bool { return h.last != 0 }
