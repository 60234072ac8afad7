package kernels

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
)

func TestAllCoversEveryDatatypeAndReduction(t *testing.T) {
	specs := All()
	want := len(collective.Datatypes()) * (2*len(collective.ReduceOps()) + 1)
	if len(specs) != want {
		t.Fatalf("All() has %d kernels, want %d", len(specs), want)
	}
	names := map[string]bool{}
	for _, s := range specs {
		if names[s.Name()] {
			t.Fatalf("duplicate kernel name %s", s.Name())
		}
		names[s.Name()] = true
	}
	for _, dt := range collective.Datatypes() {
		for _, op := range collective.ReduceOps() {
			for _, k := range []Kind{KindReduce, KindReducePeer} {
				if n := (Spec{Kind: k, Dtype: dt, Op: op}).Name(); !names[n] {
					t.Errorf("no kernel %s", n)
				}
			}
		}
		if n := (Spec{Kind: KindScale, Dtype: dt}).Name(); !names[n] {
			t.Errorf("no kernel %s", n)
		}
	}
}

func TestSourceRejectsInvalid(t *testing.T) {
	if _, err := Source(Spec{Kind: KindReduce, Dtype: 0, Op: collective.Sum}); err == nil {
		t.Error("invalid datatype accepted")
	}
	if _, err := Source(Spec{Kind: KindReduce, Dtype: collective.Float32}); err == nil {
		t.Error("missing reduction accepted")
	}
}

var (
	entryRE = regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`)
	declRE  = regexp.MustCompile(`\.reg \.\w+ %(\w+?)<(\d+)>;`)
	useRE   = regexp.MustCompile(`%([a-z]+)(\d+)\b`)
	labelRE = regexp.MustCompile(`(?m)^(L_\w+):$`)
	braRE   = regexp.MustCompile(`bra(?:\.uni)? (L_\w+);`)
)

// TestSourceWellFormed checks the generated text without an assembler:
// header, one entry per kernel with balanced braces, every register used
// declared, every branch target defined, every instruction terminated, and
// no formatting accidents.
func TestSourceWellFormed(t *testing.T) {
	src, err := Source(All()...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(src, ".version "+PTXVersion+"\n.target "+Target+"\n.address_size 64\n") {
		t.Fatal("header missing")
	}
	if strings.Contains(src, "%!") {
		t.Fatal("formatting error in generated PTX")
	}
	entries := entryRE.FindAllStringSubmatchIndex(src, -1)
	if len(entries) != len(All()) {
		t.Fatalf("%d entries, want %d", len(entries), len(All()))
	}
	for i, e := range entries {
		end := len(src)
		if i+1 < len(entries) {
			end = entries[i+1][0]
		}
		body := src[e[0]:end]
		name := src[e[2]:e[3]]
		if strings.Count(body, "{")-strings.Count(body, "}") != 0 {
			// vector operands use braces too, always balanced on one line
			t.Errorf("%s: unbalanced braces", name)
		}
		decl := map[string]int{}
		for _, m := range declRE.FindAllStringSubmatch(body, -1) {
			n, _ := strconv.Atoi(m[2])
			decl[m[1]] = n
		}
		for _, line := range strings.Split(body, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, ".reg") || strings.HasPrefix(line, ".param") ||
				strings.HasPrefix(line, ".visible") || line == "{" || line == "}" || line == ")" || strings.HasSuffix(line, ":") {
				continue
			}
			if !strings.HasSuffix(line, ";") {
				t.Errorf("%s: unterminated line %q", name, line)
			}
			for _, m := range useRE.FindAllStringSubmatch(line, -1) {
				switch m[1] {
				case "ctaid", "ntid", "tid", "nctaid":
					continue
				}
				n, _ := strconv.Atoi(m[2])
				if max, ok := decl[m[1]]; !ok || n >= max {
					t.Errorf("%s: register %%%s%s not declared (have %d)", name, m[1], m[2], max)
				}
			}
		}
		labels := map[string]bool{}
		for _, m := range labelRE.FindAllStringSubmatch(body, -1) {
			labels[m[1]] = true
		}
		for _, m := range braRE.FindAllStringSubmatch(body, -1) {
			if !labels[m[1]] {
				t.Errorf("%s: branch to undefined label %s", name, m[1])
			}
		}
		if !strings.Contains(body, "\tret;\n") {
			t.Errorf("%s: no ret", name)
		}
	}
}

// TestPTXAssembles runs NVIDIA's assembler over the module when one is
// installed (VCCL_PTXAS or ptxas on PATH); CI has none and skips.
func TestPTXAssembles(t *testing.T) {
	ptxas := os.Getenv("VCCL_PTXAS")
	if ptxas == "" {
		p, err := exec.LookPath("ptxas")
		if err != nil {
			t.Skip("no ptxas (set VCCL_PTXAS to check the PTX with NVIDIA's assembler)")
		}
		ptxas = p
	}
	src, err := Source(All()...)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "all.ptx")
	if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ptxas, "-arch="+Target, "-v", in, "-o", filepath.Join(dir, "all.cubin")).CombinedOutput()
	if err != nil {
		t.Fatalf("ptxas: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "spill stores") && regexp.MustCompile(`[1-9]\d* bytes spill stores`).Match(out) {
		t.Errorf("register spills:\n%s", out)
	}
}

func TestParams(t *testing.T) {
	n, nv := Params(collective.Float32, 1001, 0x1000, 0x2000, 0x3000)
	if n != 1001 || nv != 1001*4/16 {
		t.Fatalf("aligned: n=%d nvec=%d", n, nv)
	}
	if _, nv := Params(collective.Float32, 1001, 0x1000, 0x2004, 0x3000); nv != 0 {
		t.Fatalf("misaligned: nvec=%d", nv)
	}
}

// TestReferenceMatchesHostLibrary checks Reference against the host
// collective library's own all-reduce for every datatype and reduction.
func TestReferenceMatchesHostLibrary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms, err := collective.NewLocal(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	const count = 1013
	for _, dt := range collective.Datatypes() {
		for _, op := range collective.ReduceOps() {
			in := [][]byte{make([]byte, count*dt.Size()), make([]byte, count*dt.Size())}
			Fill(dt, in[0], 1)
			Fill(dt, in[1], 2)
			want := Reference(dt, op, in)
			got := [][]byte{make([]byte, len(want)), make([]byte, len(want))}
			errs := make(chan error, 2)
			for r := range comms {
				go func(r int) {
					errs <- comms[r].AllReduce(ctx, collective.Bytes(in[r], dt), collective.Bytes(got[r], dt), op)
				}(r)
			}
			for range comms {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			for r := range got {
				if i := Equal(dt, got[r], want); i >= 0 {
					t.Errorf("%v %v rank %d: element %d: library %x, Reference %x", dt, op, r, i,
						got[r][i*dt.Size():(i+1)*dt.Size()], want[i*dt.Size():(i+1)*dt.Size()])
				}
			}
		}
	}
}

func ExampleSource() {
	src, _ := Source(Spec{Kind: KindReduce, Dtype: collective.Float32, Op: collective.Sum})
	fmt.Println(strings.Contains(src, ".visible .entry vccl_reduce_f32_sum("))
	// Output: true
}
