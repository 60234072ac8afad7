package ft

import (
	"testing"
	"time"

	"github.com/vccl-go/vccl/transport/transporttest"
)

// ParamsFromEnv takes the defaults, overridden by each variable set (a Go
// duration or milliseconds); errors name the variable.
func TestParamsFromEnv(t *testing.T) {
	defaultsWith := func(set func(*Params)) Params {
		p := DefaultParams()
		set(&p)
		return p
	}
	transporttest.RunEnvCases(t, "ParamsFromEnv", ParamsFromEnv, []transporttest.EnvCase[Params]{
		{Name: "unset", Want: DefaultParams()},
		{Name: "duration", Env: map[string]string{EnvDeadAfter: "90ms", EnvHeartbeat: "20ms"},
			Want: defaultsWith(func(p *Params) { p.DeadAfter, p.Heartbeat = 90*time.Millisecond, 20*time.Millisecond })},
		{Name: "milliseconds", Env: map[string]string{EnvLinkTimeout: "2000"},
			Want: defaultsWith(func(p *Params) { p.LinkTimeout = 2 * time.Second })},
		{Name: "not a duration", Env: map[string]string{EnvProbe: "soon"}, WantErr: EnvProbe},
		{Name: "inconsistent", Env: map[string]string{EnvDeadAfter: "5ms"}, WantErr: "dead-after"},
	})
}

// The backend reads no environment: its zero Params are the defaults.
func TestBackendParamsIgnoreEnv(t *testing.T) {
	t.Setenv(EnvDeadAfter, "1ms")
	p, err := Backend{Params: Params{Probe: time.Second}}.params()
	want := DefaultParams()
	want.Probe = time.Second
	if err != nil || p != want {
		t.Fatalf("params = %+v, %v; want %+v", p, err, want)
	}
}
