package capi

import (
	"testing"
	"time"
)

// The VCCL_* names win over their NCCL_* counterparts, and a timeout that is
// not a positive duration leaves the default.
func TestParseEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want envConfig
	}{
		{"unset", nil, envConfig{timeout: defaultOpTimeout}},
		{"nccl names", map[string]string{"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0"},
			envConfig{debug: "INFO", ifname: "eth0", timeout: defaultOpTimeout}},
		{"vccl names win", map[string]string{"NCCL_DEBUG": "INFO", "VCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "eth0", "VCCL_SOCKET_IFNAME": "ib0",
			"VCCL_DEBUG_FILE": "/tmp/log.%p"}, envConfig{debug: "WARN", ifname: "ib0", debugFile: "/tmp/log.%p", timeout: defaultOpTimeout}},
		{"timeout duration", map[string]string{"VCCL_TIMEOUT": "90s"}, envConfig{timeout: 90 * time.Second}},
		{"timeout seconds", map[string]string{"VCCL_TIMEOUT": "45"}, envConfig{timeout: 45 * time.Second}},
		{"timeout bad", map[string]string{"VCCL_TIMEOUT": "-3"}, envConfig{timeout: defaultOpTimeout}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := parseEnv(func(k string) string { return tc.env[k] }); got != tc.want {
				t.Fatalf("parseEnv = %+v, want %+v", got, tc.want)
			}
		})
	}
}
