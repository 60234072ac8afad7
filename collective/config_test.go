package collective

import (
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/transport/ft"
	"github.com/vccl-go/vccl/transport/tcp"
)

// The environment gives the defaults and options override it; each layer's
// values reach its backend.
func TestConfigPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		opts  []Option
		check func(t *testing.T, o options, c *Comm)
	}{
		{"interface from env", map[string]string{EnvIfname: "lo"}, nil, func(t *testing.T, o options, c *Comm) {
			if b := c.opts.backendNamed(tcp.Name).(tcp.Backend); b.Interface != "lo" {
				t.Errorf("tcp backend interface %q, want lo", b.Interface)
			}
		}},
		{"interface option wins", map[string]string{EnvIfname: "eth9"}, []Option{WithSocketInterface("lo")}, func(t *testing.T, o options, c *Comm) {
			if b := c.opts.backendNamed(tcp.Name).(tcp.Backend); b.Interface != "lo" {
				t.Errorf("tcp backend interface %q, want the option's lo", b.Interface)
			}
		}},
		{"socket options reach tcp", map[string]string{tcp.EnvSockBuf: "100000", tcp.EnvCongestion: "cubic"}, nil, func(t *testing.T, o options, c *Comm) {
			if b := c.opts.backendNamed(tcp.Name).(tcp.Backend); b.SockBuf != 100000 || b.Congestion != "cubic" {
				t.Errorf("tcp backend %+v, want SockBuf 100000 and cubic", b)
			}
		}},
		{"socket options and params reach ft", map[string]string{tcp.EnvSockBuf: "-1", EnvFT: "1", ft.EnvDeadAfter: "90ms", EnvIfname: "lo,lo"}, nil,
			func(t *testing.T, o options, c *Comm) {
				b := c.opts.backendNamed(tcp.Name).(ft.Backend)
				if b.SockBuf != -1 || b.Params.DeadAfter != 90*time.Millisecond || b.Interfaces != "lo,lo" {
					t.Errorf("ft backend %+v, want SockBuf -1, dead-after 90ms, interfaces lo,lo", b)
				}
			}},
		{"fault tolerance option wins", map[string]string{EnvFT: "1"}, []Option{WithFaultTolerance(false)}, func(t *testing.T, o options, c *Comm) {
			if _, ok := c.opts.backendNamed(tcp.Name).(tcp.Backend); !ok {
				t.Errorf("backend %T, want tcp.Backend", c.opts.backendNamed(tcp.Name))
			}
		}},
		{"chunk option wins", map[string]string{EnvChunk: "1M"}, []Option{WithChunkSize(4096)}, func(t *testing.T, o options, c *Comm) {
			if o.chunk != 4096 {
				t.Errorf("chunk %d, want the option's 4096", o.chunk)
			}
		}},
		{"telemetry from env", map[string]string{flowtel.EnvTelemetry: "on"}, nil, func(t *testing.T, o options, c *Comm) {
			if !o.telemetry {
				t.Error("telemetry off, want VCCL_TELEMETRY=on's on")
			}
		}},
		{"telemetry option wins", map[string]string{flowtel.EnvTelemetry: "1"}, []Option{WithTelemetry(false)}, func(t *testing.T, o options, c *Comm) {
			if o.telemetry {
				t.Error("telemetry on, want the option's off")
			}
		}},
		{"timeout option wins", map[string]string{EnvTimeout: "7"}, []Option{WithTimeout(time.Second)}, func(t *testing.T, o options, c *Comm) {
			if o.timeout != time.Second {
				t.Errorf("timeout %v, want the option's 1s", o.timeout)
			}
		}},
		{"clock", map[string]string{flowtel.EnvClock: "monotonic"}, nil, func(t *testing.T, o options, c *Comm) {
			if o.clock != flowtel.ClockMonotonic {
				t.Errorf("clock source %v, want monotonic", o.clock)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := defaultOptions(func(k string) string { return tc.env[k] })
			for _, opt := range append([]Option{WithRank(0, 2)}, tc.opts...) {
				opt(&o)
			}
			if err := o.validate(); err != nil {
				t.Fatal(err)
			}
			tc.check(t, o, &Comm{opts: o})
		})
	}
}

// A bad value fails New with an error naming the variable, whichever layer
// parses it.
func TestConfigEnvErrors(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{flowtel.EnvTelemetry, "maybe"},
		{flowtel.EnvClock, "hpet"},
		{tcp.EnvSockBuf, "big"},
		{ft.EnvProbe, "soon"},
		{EnvChunk, "lots"},
		{EnvTimeout, "later"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := defaultOptions(func(k string) string {
				if k == tc.name {
					return tc.value
				}
				return ""
			})
			WithRank(0, 1)(&o)
			if err := o.validate(); err == nil || !strings.Contains(err.Error(), tc.name) {
				t.Fatalf("%s=%s: %v, want an error naming it", tc.name, tc.value, err)
			}
		})
	}
}

// New reads the process's environment (through envOptions).
func TestConfigEnvReachesNew(t *testing.T) {
	t.Setenv(tcp.EnvSockBuf, "big")
	if _, err := NewLocal(t.Context(), 2); err == nil || !strings.Contains(err.Error(), tcp.EnvSockBuf) {
		t.Fatalf("NewLocal with %s=big: %v, want an error naming it", tcp.EnvSockBuf, err)
	}
}
