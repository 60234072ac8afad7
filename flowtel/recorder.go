package flowtel

import (
	"os"
	"strconv"
	"strings"
)

// EnvTelemetry is the environment variable that switches telemetry on ("1",
// "true", "on") or off.
const EnvTelemetry = "VCCL_TELEMETRY"

// EnabledFromEnv reports whether VCCL_TELEMETRY asks for telemetry.
func EnabledFromEnv() bool {
	v := strings.ToLower(strings.TrimSpace(os.Getenv(EnvTelemetry)))
	if b, err := strconv.ParseBool(v); err == nil {
		return b
	}
	return v == "on" || v == "yes"
}

// Recorder is what the data path calls to emit records. It belongs to one
// producer goroutine, which owns its ring. A nil *Recorder is the disabled
// recorder: every method is safe on it, and callers that build a record first
// guard with Enabled (one branch) so a disabled recorder costs nothing more.
type Recorder struct {
	ring  *Ring
	clock *Clock
}

// NewRecorder returns a recorder writing into ring with timestamps from clock
// (nil: the host's monotonic clock).
func NewRecorder(ring *Ring, clock *Clock) *Recorder {
	return &Recorder{ring: ring, clock: clock}
}

// Enabled reports whether records are kept.
func (r *Recorder) Enabled() bool { return r != nil }

// Now returns the current time on the recorder's time base.
func (r *Recorder) Now() int64 {
	if r == nil {
		return nanotime()
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

// Record writes rec, dropping and counting it if the ring is full. Records
// with a zero TsNs are stamped now.
func (r *Recorder) Record(rec *Record) {
	if r == nil {
		return
	}
	if rec.TsNs == 0 {
		rec.TsNs = r.clock.Now()
	}
	r.ring.Push(rec)
}

// Dropped returns how many records this recorder has dropped.
func (r *Recorder) Dropped() uint64 {
	if r == nil {
		return 0
	}
	return r.ring.Dropped()
}
