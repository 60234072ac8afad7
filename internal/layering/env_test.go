package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// envReaders are the only library files that read the environment: each
// entry point parses it once into typed values that it passes down (options
// override them), so no package below reads it again and precedence stays in
// one place.
var envReaders = map[string]string{
	"collective/config.go": "the comm library: New, NewFromEnv and NewLocal",
	"telemetry/env.go":     "the exporters: ConfigFromEnv and the registered attacher",
	"gpu/ce/config.go":     "the GPU engine: NewProc and New",
	"capi/env.go":          "libnccl.so.2's entry, which is a program's",
}

// envFree reports whether a non-test file at rel, of package pkg, may read
// the environment without being in envReaders: commands (cmd/, any package
// main) and the test harnesses (test/, internal/testproc, internal/bounded,
// and the helper packages named *test that only tests import).
func envFree(rel, pkg string) bool {
	for _, dir := range []string{"cmd/", "test/", "internal/testproc/", "internal/bounded/"} {
		if strings.HasPrefix(rel, dir) {
			return true
		}
	}
	return pkg == "main" || strings.HasSuffix(pkg, "test")
}

// envCalls returns the positions where f refers to os.Getenv, os.LookupEnv,
// os.Environ or syscall's, under whatever name f imports them.
func envCalls(fset *token.FileSet, f *ast.File) []string {
	names := map[string]bool{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if path != "os" && path != "syscall" {
			continue
		}
		name := path
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = true
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && names[id.Name] {
			switch sel.Sel.Name {
			case "Getenv", "LookupEnv", "Environ":
				out = append(out, fset.Position(sel.Pos()).String()+": "+id.Name+"."+sel.Sel.Name)
			}
		}
		return true
	})
	return out
}

func TestEnvironmentReadInOnePlace(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	fset := token.NewFileSet()
	seen := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		calls := envCalls(fset, f)
		if len(calls) == 0 {
			return nil
		}
		if _, ok := envReaders[rel]; ok {
			seen[rel] = true
			return nil
		}
		if envFree(rel, f.Name.Name) {
			return nil
		}
		for _, c := range calls {
			t.Errorf("%s reads the environment; only the configuration step of each entry point does (%s): parse the variable there and pass its value down", c, strings.Join(keys(envReaders), ", "))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel, what := range envReaders {
		if !seen[rel] {
			t.Errorf("%s (%s) reads no environment any more: take it off envReaders", rel, what)
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The check finds reads under any import name, and not other functions of os.
func TestEnvCalls(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      int
	}{
		{"getenv", `package p; import "os"; var _ = os.Getenv("X")`, 1},
		{"value", `package p; import "os"; var f = os.Getenv`, 1},
		{"renamed", `package p; import sys "os"; func f() { sys.LookupEnv("X"); _ = sys.Environ() }`, 2},
		{"syscall", `package p; import "syscall"; var _, _ = syscall.Getenv("X")`, 1},
		{"other", `package p; import "os"; var _, _ = os.Hostname()`, 0},
		{"not os", `package p; type t struct{}; func (t) Getenv(string) string { return "" }; var os t; var _ = os.Getenv("X")`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "p.go", tc.src, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := envCalls(fset, f); len(got) != tc.want {
				t.Fatalf("envCalls = %v, want %d", got, tc.want)
			}
		})
	}
}
