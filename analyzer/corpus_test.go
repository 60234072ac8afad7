package analyzer

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vccl-go/vccl/internal/corpus"
)

var update = flag.Bool("update", false, "rewrite the corpus's golden findings (testdata/scenarios/*/golden.json)")

const corpusDir = "../testdata/scenarios"

// golden is what the corpus test compares: the findings and the
// collectives summary.
type golden struct {
	Findings    []Finding           `json:"findings"`
	Collectives []CollectiveSummary `json:"collectives"`
}

// TestCorpus analyses every scenario of the labelled corpus, real runs with
// one fault each (see testdata/scenarios/gen.sh): each expected finding is
// there with its culprit, every finding names an expected culprit, clean
// runs have none, and the whole output matches the golden file (-update
// rewrites it).
func TestCorpus(t *testing.T) {
	t.Parallel()
	dir := corpusDir
	fresh := os.Getenv("VCCL_CORPUS_DIR") // a fresh gen.sh run: labels only
	if fresh != "" {
		dir = fresh
	}
	dirs, err := filepath.Glob(filepath.Join(dir, "*", "label.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no scenarios in %s (%v)", dir, err)
	}
	for _, lp := range dirs {
		dir := filepath.Dir(lp)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			lb, err := corpus.ReadLabel(dir)
			if err != nil {
				t.Fatal(err)
			}
			r, err := AnalyzeFiles(context.Background(), []string{dir}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Warnings) > 0 {
				t.Errorf("warnings: %q", r.Warnings)
			}
			var report strings.Builder
			var found []corpus.Found
			for _, f := range r.Findings {
				fmt.Fprintf(&report, "\n  %s %s %s", f.Severity, f.Kind, f.Culprit())
				found = append(found, corpus.Found{Kind: f.Kind.String(), Rank: f.Rank, Peer: f.Peer})
			}
			t.Logf("injected: %s\nreported:%s", lb.Injected, report.String())
			sc := corpus.Judge(lb, found)
			for _, e := range sc.Missed(lb) {
				t.Errorf("no %v finding naming rank %d peer %d; reported:%s", e.AnyOf(), e.Rank, e.Peer, report.String())
			}
			for _, f := range sc.Extra {
				t.Errorf("a %s finding names rank %d peer %d, not an injected culprit", f.Kind, f.Rank, f.Peer)
			}
			got, err := json.MarshalIndent(golden{Findings: r.Findings, Collectives: r.Collectives}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			if fresh != "" {
				return
			}
			gp := filepath.Join(dir, "golden.json")
			if *update {
				if err := os.WriteFile(gp, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(gp)
			if err != nil {
				t.Fatalf("%v (run go test ./analyzer -run TestCorpus -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("findings differ from %s (go test ./analyzer -run TestCorpus -update rewrites it):\n%s", gp, diffLines(string(want), string(got)))
			}
		})
	}
}

// diffLines shows the first lines that differ.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var sb strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			fmt.Fprintf(&sb, "line %d:\n  want %s\n  got  %s\n", i+1, a, b)
			shown++
		}
	}
	return sb.String()
}
