package flowtel

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
)

// EnvTelemetry is the environment variable that switches telemetry on ("1",
// "true", "on") or off. flowtel reads no environment: the program's
// configuration step passes its value to ParseEnabled.
const EnvTelemetry = "VCCL_TELEMETRY"

// ParseEnabled reports whether a VCCL_TELEMETRY value asks for telemetry:
// "" is off; anything but a boolean, on, off, yes or no is an error naming
// the variable.
func ParseEnabled(v string) (bool, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	switch v {
	case "":
		return false, nil
	case "on", "yes":
		return true, nil
	case "off", "no":
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("flowtel: %s=%q: want 1 or 0 (true, on, yes; false, off, no)", EnvTelemetry, v)
	}
	return b, nil
}

// Recorder is what the data path calls to emit records. It belongs to one
// producer goroutine, which owns its ring. A nil *Recorder is the disabled
// recorder: every method is safe on it, and callers that build a record first
// guard with Enabled (one branch) so a disabled recorder costs nothing more.
type Recorder struct {
	ring   *Ring
	clock  *Clock
	paused atomic.Bool // SetPaused: records are not kept
	settle func()      // the collector's (Settle); nil: none

	// Owner only: the open pass (BeginPass), its time once read, and
	// whether it holds records committed but not yet published.
	inPass bool
	passTs int64
	held   bool
}

// NewRecorder returns a recorder writing into ring with timestamps from clock
// (nil: the host's monotonic clock).
func NewRecorder(ring *Ring, clock *Clock) *Recorder {
	return &Recorder{ring: ring, clock: clock}
}

// Enabled reports whether records are kept.
func (r *Recorder) Enabled() bool { return r != nil && !r.paused.Load() }

// SetPaused stops (true) or resumes (false) keeping records, so that one
// program can time the same work with telemetry off and on (vccl-bench
// --telemetry alternate) without a second launch. Paused, the recorder
// costs what a nil one does plus one atomic load per check. Any goroutine;
// switch between the operations being recorded, or an operation's records
// may be cut in half (a post without its completion).
func (r *Recorder) SetPaused(paused bool) {
	if r != nil {
		r.paused.Store(paused)
	}
}

// Settle lends the consumers of the recorder's records (its collector and
// the collector's sinks) the caller's processor now, where the runtime has
// only one (a process bound to one CPU) and they have work waiting; else it
// returns at once. A producer that spins through short operations calls it
// at points of its choosing: the collective layer at the same call on every
// rank, so that the ranks' telemetry pauses overlap rather than each
// rank's stalling the others at its own moments. A recorder not made by a
// Collector has nothing to settle.
func (r *Recorder) Settle() {
	if r != nil && r.settle != nil {
		r.settle()
	}
}

// Now returns the current time on the recorder's time base.
func (r *Recorder) Now() int64 {
	if r == nil {
		return monotonic()
	}
	return r.clock.Now()
}

// Clock returns the recorder's clock (nil for the host monotonic clock).
func (r *Recorder) Clock() *Clock {
	if r == nil {
		return nil
	}
	return r.clock
}

// At returns the time on the recorder's time base of mono, a reading of the
// host's monotonic clock (Monotonic) the caller took for its own use, so
// that a record of the same moment costs no second clock read. A recorder
// whose clock reads its own TimeSource (a test's fake clock) reads that
// instead: mono is not on its time base.
func (r *Recorder) At(mono int64) int64 {
	if r == nil {
		return mono
	}
	return r.clock.At(mono)
}

// BeginPass opens a progress pass: until EndPass, the records written with
// a zero TsNs share one clock reading, taken when the first of them is
// written, or ts when the caller already read the clock for the pass
// (ts 0: not yet). A clock read costs several times a record here (24-40
// ns on a VM against 7-8), and a pass that posts writes several.
//
// A shared stamp is never later than the event it stamps but may be
// earlier by up to the pass's length, so a pass is only for records of
// events that start something (posts, credit waits, coll_begin): a record
// of an event seen during the pass (a completion) would be stamped before
// it was seen.
//
// Inside a pass Commit holds what was reserved for EndPass, which
// publishes the pass's records at once: one store of the ring's tail (a
// full barrier on amd64) instead of one a record, and the collector sees
// a pass's records together. Owner only; a nil recorder ignores it.
func (r *Recorder) BeginPass(ts int64) {
	if r == nil {
		return
	}
	r.inPass, r.passTs = true, ts
}

// EndPass closes the pass BeginPass opened: it publishes the records the
// pass committed, and records with a zero TsNs are stamped when written
// again. Owner only.
func (r *Recorder) EndPass() {
	if r == nil {
		return
	}
	if r.held {
		r.ring.Commit()
		r.held = false
	}
	r.inPass, r.passTs = false, 0
}

// Record writes rec, dropping and counting it if the ring is full. Records
// with a zero TsNs are stamped now, or inside a pass (BeginPass) with the
// pass's time.
func (r *Recorder) Record(rec *Record) {
	if r == nil || r.paused.Load() {
		return
	}
	if rec.TsNs == 0 {
		rec.TsNs = r.stamp()
	}
	r.ring.Push(rec)
}

// Stamp returns the time Record would give a record with a zero TsNs:
// now, or inside a pass (BeginPass) the pass's time. For a record written
// in place (Reserve). Owner only; not on a nil recorder.
func (r *Recorder) Stamp() int64 { return r.stamp() }

func (r *Recorder) stamp() int64 {
	if !r.inPass {
		return r.clock.Now()
	}
	if r.passTs == 0 {
		r.passTs = r.clock.Now()
	}
	return r.passTs
}

// Reserve returns a ring slot for a record the caller writes in place,
// every field, TsNs included (Ring.Reserve); nil when the recorder is nil or
// paused, or the ring is full (the record is dropped and counted). Commit
// publishes what was reserved. Owner only.
func (r *Recorder) Reserve() *Record {
	if r == nil || r.paused.Load() {
		return nil
	}
	return r.ring.Reserve()
}

// ReserveExchange is Reserve for an Exchange entry standing for part's
// records, written in place (every exported field, one at a time:
// Ring.ReserveExchange) and published by Commit; sinks get the records it
// stands for. nil when the recorder is nil or paused, or the ring is full
// (the entry is dropped and counted as its records). Owner only.
func (r *Recorder) ReserveExchange(part ExchangePart) *Exchange {
	if r == nil || r.paused.Load() {
		return nil
	}
	return r.ring.ReserveExchange(part)
}

// Commit publishes the records reserved since the last Commit, or inside
// a pass has EndPass publish them. Owner only.
func (r *Recorder) Commit() {
	if r == nil {
		return
	}
	if r.inPass {
		r.held = true
		return
	}
	r.ring.Commit()
}

// Dropped returns how many records this recorder has dropped.
func (r *Recorder) Dropped() uint64 {
	if r == nil {
		return 0
	}
	return r.ring.Dropped()
}
