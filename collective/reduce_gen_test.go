package collective

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestReduceKernelsGenerated runs reduce_asmgen.go (what go generate runs)
// in a scratch directory and checks that the committed kernels are what it
// writes now: an edit to the generator must come with its output.
func TestReduceKernelsGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the generator; the full suite checks it")
	}
	t.Parallel()
	goCmd, err := exec.LookPath("go") // go test puts its own GOROOT/bin first in PATH
	if err != nil {
		t.Skipf("the go command is needed to run the generator: %v", err)
	}
	dir := t.TempDir()
	src, err := os.ReadFile("reduce_asmgen.go")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "reduce_asmgen.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 5*time.Minute)
	// Outside the module, with none of the caller's module flags: the
	// generator needs only the standard library.
	cmd := exec.CommandContext(ctx, goCmd, "run", "reduce_asmgen.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run reduce_asmgen.go: %v\n%s", err, out)
	}
	for _, name := range []string{"reduce_amd64.s", "reduce_kernels_amd64.go"} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what reduce_asmgen.go generates now: run go generate ./collective/ and commit the result", name)
		}
	}
}
