package ft

import (
	"strings"
	"testing"
	"time"
)

// ParamsFromEnv takes the defaults, overridden by each variable set (a Go
// duration or milliseconds); errors name the variable.
func TestParamsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    func(*Params)
		wantErr string
	}{
		{"unset", nil, func(*Params) {}, ""},
		{"duration", map[string]string{EnvDeadAfter: "90ms", EnvHeartbeat: "20ms"},
			func(p *Params) { p.DeadAfter, p.Heartbeat = 90*time.Millisecond, 20*time.Millisecond }, ""},
		{"milliseconds", map[string]string{EnvLinkTimeout: "2000"}, func(p *Params) { p.LinkTimeout = 2 * time.Second }, ""},
		{"not a duration", map[string]string{EnvProbe: "soon"}, nil, EnvProbe},
		{"inconsistent", map[string]string{EnvDeadAfter: "5ms"}, nil, "dead-after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParamsFromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParamsFromEnv: %v, want an error naming %s", err, tc.wantErr)
				}
				return
			}
			want := DefaultParams()
			tc.want(&want)
			if err != nil || got != want {
				t.Fatalf("ParamsFromEnv = %+v, %v; want %+v", got, err, want)
			}
		})
	}
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
