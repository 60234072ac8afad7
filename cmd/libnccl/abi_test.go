package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The C ABI without a GPU, as CI sees it: the library builds as a C
// shared object, a C program compiled against include/nccl.h links it, and
// every call answers (communicators refused with ncclInvalidUsage and a
// last error that says why). The library is built without the telemetry
// exporters (-tags vccl_notelemetry: a fifth of the packages), unless
// VCCL_TEST_FULL is set.
func TestCProgramWithoutGPU(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is needed to build the C test program: apt-get install gcc")
	}
	goCmd, err := exec.LookPath("go") // go test puts its own GOROOT/bin first in PATH
	if err != nil {
		t.Skipf("the go command is needed to build the library: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	lib := filepath.Join(dir, "libnccl.so.2")
	args := []string{"build", "-buildmode=c-shared", "-o", lib}
	if os.Getenv("VCCL_TEST_FULL") == "" {
		args = append(args, "-tags", "vccl_notelemetry")
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(goCmd, append(args, ".")...)
	prog := filepath.Join(dir, "abi_nogpu")
	run(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-Iinclude", "testdata/abi_nogpu.c", "-o", prog,
		"-L"+dir, "-l:libnccl.so.2", "-Wl,-rpath,"+dir)
	// The C++ view of the header compiles too (nccl-tests and PyTorch
	// include it from C++).
	if cxx, err := exec.LookPath("g++"); err == nil {
		run(cxx, "-std=c++17", "-Wall", "-Werror", "-Iinclude", "-x", "c++", "-fsyntax-only", "testdata/abi_nogpu.c")
	}
	cmd := exec.CommandContext(ctx, prog)
	// No GPU even where there is one: the driver cannot be found.
	cmd.Env = append(os.Environ(), "VCCL_CUDA_LIB=/nonexistent/libcuda.so.1", "VCCL_DEBUG=WARN")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("%s", out.String())
	if err != nil || !strings.Contains(out.String(), "PASS") {
		t.Fatalf("the C program: %v", err)
	}
	if !strings.Contains(out.String(), "VCCL WARN ncclCommInitRank") {
		t.Error("VCCL_DEBUG=WARN logged no failure")
	}
}
