package ce

import (
	"strings"
	"testing"
)

// ParseEnv keeps every variable's meaning, and its errors name the variable.
func TestParseEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    func(*Env)
		wantErr string
	}{
		{"unset", nil, func(*Env) {}, ""},
		{"off", map[string]string{"VCCL_GPU_FLAGS": "0", "VCCL_GPU_FUSED": "0", "VCCL_GPU_STAGE": "1"},
			func(e *Env) { e.Flags, e.Fused, e.Stage = false, false, true }, ""},
		{"forced", map[string]string{"VCCL_GPU_FUSED": "1"}, func(e *Env) { e.ForceFused = true }, ""},
		{"sizes", map[string]string{"VCCL_GPU_CHUNK": "1048576", "VCCL_GPU_DIRECT_MAX": "0", "VCCL_GPU_ONEKERNEL_MAX": "65536"},
			func(e *Env) { e.Chunk, e.DirectMax, e.OneKernelMax = 1<<20, -1, 1<<16 }, ""},
		{"library and local rank", map[string]string{"VCCL_CUDA_LIB": "/opt/libcuda.so", "LOCAL_RANK": "3", "RANK": "3", "WORLD_SIZE": "4",
			"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
			func(e *Env) { e.CUDALib, e.LocalRank = "/opt/libcuda.so", 3 }, ""},
		{"bad size", map[string]string{"VCCL_GPU_CHUNK": "16M"}, nil, "VCCL_GPU_CHUNK"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseEnv: %v, want an error naming %s", err, tc.wantErr)
				}
				return
			}
			want := DefaultEnv()
			want.LocalRank = 0 // no launcher: the only process of the host
			tc.want(&want)
			if err != nil || got != want {
				t.Fatalf("ParseEnv = %+v, %v; want %+v", got, err, want)
			}
		})
	}
}

// Set ProcConfig sizes win over the environment's, which win over the
// defaults.
func TestOrEnv(t *testing.T) {
	for _, tc := range []struct{ v, e, def, want int }{{0, 0, 7, 7}, {0, 5, 7, 5}, {3, 5, 7, 3}, {-1, 5, 7, -1}} {
		if got := orEnv(tc.v, tc.e, tc.def); got != tc.want {
			t.Errorf("orEnv(%d, %d, %d) = %d, want %d", tc.v, tc.e, tc.def, got, tc.want)
		}
	}
}
