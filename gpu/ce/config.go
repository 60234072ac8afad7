package ce

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// The GPU engine's environment is read here and nowhere else (the layering
// test checks it): once per process, when the first engine is made, parsed
// by ParseEnv into an Env that NewProc and New pass down, and that
// ProcConfig's fields override.

// Env is what the environment says to the GPU engine.
type Env struct {
	Flags        bool   // the flag paths (VCCL_GPU_FLAGS, default on; 0 turns them off)
	Fused        bool   // 2 ranks: the fused peer-read kernel (VCCL_GPU_FUSED, default on)
	ForceFused   bool   // VCCL_GPU_FUSED=1: fused even where two ranks share a bus, to measure it
	Stage        bool   // VCCL_GPU_STAGE=1: stage through host memory
	Chunk        int    // VCCL_GPU_CHUNK bytes (0: unset)
	DirectMax    int    // VCCL_GPU_DIRECT_MAX bytes (0: unset; negative: never)
	OneKernelMax int    // VCCL_GPU_ONEKERNEL_MAX bytes (0: unset; negative: never)
	CUDALib      string // VCCL_CUDA_LIB: the driver library ("" libcuda.so.1)
	LocalRank    int    // the launcher's local rank; -1 where it gave none
}

// DefaultEnv is the Env of an empty environment.
func DefaultEnv() Env { return Env{Flags: true, Fused: true, LocalRank: -1} }

// ParseEnv reads the VCCL_GPU_* and VCCL_CUDA_LIB variables, and the
// launcher's local rank, through getenv. Its errors name the variable.
func ParseEnv(getenv func(string) string) (Env, error) {
	e := DefaultEnv()
	e.Flags = getenv("VCCL_GPU_FLAGS") != "0"
	fused := getenv("VCCL_GPU_FUSED")
	e.Fused, e.ForceFused = fused != "0", fused == "1"
	e.Stage = getenv("VCCL_GPU_STAGE") == "1"
	e.CUDALib = getenv(cuda.EnvLib)
	for _, v := range []struct {
		name string
		dst  *int
	}{{"VCCL_GPU_CHUNK", &e.Chunk}, {"VCCL_GPU_DIRECT_MAX", &e.DirectMax}, {"VCCL_GPU_ONEKERNEL_MAX", &e.OneKernelMax}} {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return e, fmt.Errorf("ce: %s=%q: want a number of bytes", v.name, s)
		}
		if n == 0 && v.dst != &e.Chunk {
			n = -1 // no all-reduce is at most 0 bytes long: the path never runs
		}
		*v.dst = n
	}
	if l, err := bootstrap.FromEnv(getenv); err == nil {
		e.LocalRank = l.LocalRank
	}
	return e, nil
}

// processEnv is the process's Env, read once.
var processEnv = sync.OnceValues(func() (Env, error) { return ParseEnv(os.Getenv) })

// envOf returns cfg's Env, else the process's, and points the driver at its
// library.
func envOf(cfg *Env) (Env, error) {
	if cfg != nil {
		cuda.SetLibrary(cfg.CUDALib)
		return *cfg, nil
	}
	e, err := processEnv()
	if err != nil {
		return e, err
	}
	cuda.SetLibrary(e.CUDALib)
	return e, nil
}

// orEnv returns v when it is set, else the environment's e, else def.
func orEnv(v, e, def int) int {
	switch {
	case v != 0:
		return v
	case e != 0:
		return e
	}
	return def
}
