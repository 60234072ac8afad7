package ft

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Environment variables that tune failure detection, read by ParamsFromEnv
// for Backend.Params.
const (
	EnvHeartbeat   = "VCCL_FT_HEARTBEAT"        // interval between heartbeats on each path
	EnvDeadAfter   = "VCCL_FT_DEAD_AFTER"       // silence that takes a path down while another is up
	EnvLinkTimeout = "VCCL_FT_LINK_TIMEOUT"     // silence that takes the last path (and the link) down
	EnvProgress    = "VCCL_FT_PROGRESS_TIMEOUT" // time the peer may read nothing we sent on a path
	EnvProbe       = "VCCL_FT_PROBE_INTERVAL"   // interval between reconnection attempts of a down path
)

// Defaults. With them a path that goes silent is declared down 60 to 70 ms
// after its last byte arrived (heartbeats every 10 ms keep an idle path
// talking), so traffic is on the backup well within 100 ms; a healthy path
// under load is never silent, since every byte read counts.
const (
	DefaultHeartbeat   = 10 * time.Millisecond
	DefaultDeadAfter   = 60 * time.Millisecond
	DefaultLinkTimeout = time.Second
	DefaultProgress    = time.Second
	DefaultProbe       = 50 * time.Millisecond
	DefaultSegment     = 512 << 10
)

// Params are the thresholds of failure detection and recovery.
type Params struct {
	// Heartbeat is how often each path carries a heartbeat, busy or not.
	Heartbeat time.Duration
	// DeadAfter is how long a path may deliver nothing (not a byte, not a
	// heartbeat) before it is declared down, while another path is up.
	DeadAfter time.Duration
	// LinkTimeout is the same for the last path up: silence that long ends
	// the link, failing its WRs. Socket errors (a reset, the peer's close)
	// end a path at once, whatever the timeouts.
	LinkTimeout time.Duration
	// Progress is how long the peer may report reading nothing of what this
	// end wrote on a path (its heartbeats count the bytes it read) before
	// the path is declared down: it catches a path that fails one way only.
	Progress time.Duration
	// Probe is the interval between attempts to reconnect a down path (the
	// side that dialled the link probes); a success brings traffic back to
	// the primary.
	Probe time.Duration
	// Segment is the largest data frame: longer messages are sent in
	// segments, so heartbeats are never queued behind more than one.
	Segment int
}

// DefaultParams returns the defaults.
func DefaultParams() Params {
	return Params{Heartbeat: DefaultHeartbeat, DeadAfter: DefaultDeadAfter, LinkTimeout: DefaultLinkTimeout,
		Progress: DefaultProgress, Probe: DefaultProbe, Segment: DefaultSegment}
}

// ParamsFromEnv returns the defaults overridden by the VCCL_FT_* variables
// read through getenv. Durations are Go durations ("60ms") or milliseconds.
func ParamsFromEnv(getenv func(string) string) (Params, error) {
	p := DefaultParams()
	for _, v := range []struct {
		name string
		dst  *time.Duration
	}{{EnvHeartbeat, &p.Heartbeat}, {EnvDeadAfter, &p.DeadAfter}, {EnvLinkTimeout, &p.LinkTimeout},
		{EnvProgress, &p.Progress}, {EnvProbe, &p.Probe}} {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			ms, err2 := strconv.Atoi(s)
			if err2 != nil {
				return p, fmt.Errorf("ft: %s=%q: not a duration (want e.g. 60ms)", v.name, s)
			}
			d = time.Duration(ms) * time.Millisecond
		}
		*v.dst = d
	}
	return p, p.Validate()
}

// merge returns p with its unset fields taken from base.
func (p Params) merge(base Params) Params {
	p.Heartbeat = cmp.Or(p.Heartbeat, base.Heartbeat)
	p.DeadAfter = cmp.Or(p.DeadAfter, base.DeadAfter)
	p.LinkTimeout = cmp.Or(p.LinkTimeout, base.LinkTimeout)
	p.Progress = cmp.Or(p.Progress, base.Progress)
	p.Probe = cmp.Or(p.Probe, base.Probe)
	p.Segment = cmp.Or(p.Segment, base.Segment)
	return p
}

// Validate checks that the thresholds make sense together: a path must be
// able to miss a heartbeat without being declared down.
func (p Params) Validate() error {
	switch {
	case p.Heartbeat <= 0 || p.DeadAfter <= 0 || p.LinkTimeout <= 0 || p.Progress <= 0 || p.Probe <= 0:
		return fmt.Errorf("ft: every interval must be positive (%+v)", p)
	case p.DeadAfter < 3*p.Heartbeat:
		return fmt.Errorf("ft: dead-after %v must be at least three heartbeats (%v)", p.DeadAfter, p.Heartbeat)
	case p.LinkTimeout < p.DeadAfter:
		return fmt.Errorf("ft: link timeout %v is shorter than dead-after %v", p.LinkTimeout, p.DeadAfter)
	case p.Progress < p.DeadAfter:
		return fmt.Errorf("ft: progress timeout %v is shorter than dead-after %v", p.Progress, p.DeadAfter)
	case p.Segment < 4096:
		return fmt.Errorf("ft: segment of %d bytes, want at least 4096", p.Segment)
	}
	return nil
}
