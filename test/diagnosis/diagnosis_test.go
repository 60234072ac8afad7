package diagnosis

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/analyzer"
	"github.com/vccl-go/vccl/internal/corpus"
)

// scenarios are gen.sh's seeded scenarios, with how many runs of each the
// full score takes.
var scenarios = []struct {
	name string
	full int
}{
	{"clean-hog", 10}, {"clean-osub", 10},
	{"freeze-once", 5}, {"freeze-periodic", 5}, {"kill", 5},
	{"tbf", 5}, {"htb-pair", 5}, {"ingress", 5}, {"two-faults", 5},
}

// tally is the score of one scenario, or of one kind of culprit.
type tally struct {
	runs, ok          int
	culprits, named   int // expected culprits, and those named with a right kind
	reported, correct int // findings, and those naming an expected culprit with a right kind
	problems          []string
}

func (t *tally) precision() string { return ratio(t.correct, t.reported) }
func (t *tally) recall() string    { return ratio(t.named, t.culprits) }

func ratio(a, b int) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%d/%d (%.0f%%)", a, b, 100*float64(a)/float64(b))
}

func TestFreshRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("generates real jobs with injected faults")
	}
	if dir := os.Getenv("VCCL_CORPUS_SCORE"); dir != "" {
		score(t, dir, false) // runs generated before: score them again
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the ranks run in network namespaces of their own")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: apt-get install iproute2", tool)
		}
	}
	full := os.Getenv("VCCL_CORPUS_FULL") != ""
	out := os.Getenv("VCCL_CORPUS_KEEP") // keep the traces there
	if out == "" {
		out = t.TempDir()
	}
	gen, err := filepath.Abs(filepath.Join("..", "..", "testdata", "scenarios", "gen.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scenarios {
		runs := 1
		if full {
			runs = sc.full
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(runs)*2*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", gen, sc.name)
		cmd.Env = append(os.Environ(), "VCCL_SCENARIOS_OUT="+out, fmt.Sprintf("VCCL_CORPUS_RUNS=%d", runs))
		b, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("gen.sh %s: %v\n%s", sc.name, err, b)
		}
	}
	score(t, out, full)
}

// score analyses every run under out and scores it against its label.
func score(t *testing.T, out string, full bool) {
	dirs, err := filepath.Glob(filepath.Join(out, "*", "label.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no runs in %s: %v", out, err)
	}
	byScenario := map[string]*tally{}
	byKind := map[string]*tally{}
	for _, lp := range dirs {
		dir := filepath.Dir(lp)
		name := filepath.Base(dir)
		scenario := name
		if i := strings.LastIndexByte(name, '-'); i > 0 && strings.Trim(name[i+1:], "0123456789") == "" {
			scenario = name[:i]
		}
		lb, err := corpus.ReadLabel(dir)
		if err != nil {
			t.Fatal(err)
		}
		r, err := analyzer.AnalyzeFiles(context.Background(), []string{dir}, analyzer.Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var found []corpus.Found
		for _, f := range r.Findings {
			found = append(found, corpus.Found{Kind: f.Kind.String(), Rank: f.Rank, Peer: f.Peer})
		}
		s := corpus.Judge(lb, found)
		ts := byScenario[scenario]
		if ts == nil {
			ts = &tally{}
			byScenario[scenario] = ts
		}
		ts.runs++
		if s.OK() {
			ts.ok++
		}
		for i, e := range lb.Expect {
			k := culpritKind(e)
			tk := byKind[k]
			if tk == nil {
				tk = &tally{}
				byKind[k] = tk
			}
			ts.culprits++
			tk.culprits++
			if s.Hit[i] {
				ts.named++
				tk.named++
			} else {
				ts.problems = append(ts.problems, fmt.Sprintf("%s: missed %v of rank %d peer %d", name, e.AnyOf(), e.Rank, e.Peer))
			}
		}
		for _, f := range r.Findings {
			ts.reported++
			tk := byKind[f.Kind.String()]
			if tk == nil {
				tk = &tally{}
				byKind[f.Kind.String()] = tk
			}
			tk.reported++
			right := slices.ContainsFunc(lb.Expect, func(e corpus.Expect) bool {
				_, ok := e.Names(f.Kind.String(), f.Rank, f.Peer)
				return ok
			})
			if right {
				ts.correct++
				tk.correct++
			} else {
				ts.problems = append(ts.problems, fmt.Sprintf("%s: %s %s %s: %s", name, f.Severity, f.Kind, f.Culprit(), f.Summary))
			}
		}
	}
	report := table(byScenario, byKind, full)
	t.Logf("\n%s", report)
	if p := os.Getenv("VCCL_CORPUS_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
	for _, name := range sortedKeys(byScenario) {
		for _, p := range byScenario[name].problems {
			t.Error(p)
		}
	}
}

// culpritKind names what kind of culprit an expectation is, for the
// per-kind score: its first accepted kind.
func culpritKind(e corpus.Expect) string { return e.AnyOf()[0] }

func sortedKeys(m map[string]*tally) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	return keys
}

// table writes the score: per scenario, then per kind of finding.
func table(byScenario, byKind map[string]*tally, full bool) string {
	var sb strings.Builder
	what := "one run of each scenario"
	if full {
		what = "VCCL_CORPUS_FULL=1: ten runs of each clean setup, five of each fault"
	}
	fmt.Fprintf(&sb, "Fresh runs (%s), %s:\n\n", what, time.Now().UTC().Format("2006-01-02"))
	sb.WriteString("| scenario | runs | runs right | culprits named (recall) | findings right (precision) |\n| --- | ---: | ---: | ---: | ---: |\n")
	for _, k := range sortedKeys(byScenario) {
		s := byScenario[k]
		fmt.Fprintf(&sb, "| %s | %d | %d | %s | %s |\n", k, s.runs, s.ok, s.recall(), s.precision())
	}
	sb.WriteString("\n| kind | culprits named (recall) | findings right (precision) |\n| --- | ---: | ---: |\n")
	for _, k := range sortedKeys(byKind) {
		s := byKind[k]
		fmt.Fprintf(&sb, "| %s | %s | %s |\n", k, s.recall(), s.precision())
	}
	return sb.String()
}
