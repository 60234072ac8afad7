package arrow

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// nodeDir holds the Arrow JS reader (read.mjs) and its package.json;
// .ci/setup.d/30-arrow-node.sh installs its node_modules.
const nodeDir = "testdata/node"

type jsTrace struct {
	Path    string `json:"path"`
	Rows    int    `json:"rows"`
	Batches int    `json:"batches"`
	Fields  []struct{ Name, Type string }
	Meta    map[string]string `json:"metadata"`
	Sums    map[string]string `json:"sums"`
	First   map[string]any    `json:"first"`
}

// readWithJS reads trace files with the apache-arrow npm package.
func readWithJS(t *testing.T, paths ...string) []jsTrace {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH: this test reads traces with the Arrow JS library under Node.js (CI installs both: .ci/setup.d/30-arrow-node.sh)")
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "apache-arrow", "package.json")); err != nil {
		t.Skipf("the apache-arrow npm package is not installed in %s: install it with bash .ci/setup.d/30-arrow-node.sh (%v)", nodeDir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	abs := make([]string, len(paths))
	for i, p := range paths {
		abs[i], _ = filepath.Abs(p)
	}
	cmd := exec.CommandContext(ctx, node, append([]string{"read.mjs"}, abs...)...)
	cmd.Dir = nodeDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node read.mjs: %v\n%s", err, stderr.String())
	}
	var traces []jsTrace
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var tr jsTrace
		if err := json.Unmarshal(sc.Bytes(), &tr); err != nil {
			t.Fatalf("node printed %q: %v", sc.Text(), err)
		}
		traces = append(traces, tr)
	}
	if len(traces) != len(paths) {
		t.Fatalf("node read %d traces of %d:\n%s", len(traces), len(paths), out)
	}
	return traces
}

// goSums adds every column up the way read.mjs does.
func goSums(recs []flowtel.Record) map[string]string {
	sums := map[string]*big.Int{}
	for _, n := range ColumnNames {
		sums[n] = new(big.Int)
	}
	add := func(name string, v int64) { sums[name].Add(sums[name], big.NewInt(v)) }
	addU := func(name string, v uint64) { sums[name].Add(sums[name], new(big.Int).SetUint64(v)) }
	for _, r := range recs {
		add("ts_ns", r.TsNs)
		addU("kind", uint64(r.Kind))
		addU("status", uint64(r.Status))
		addU("op", uint64(r.Op))
		addU("algo", uint64(r.Algo))
		addU("dtype", uint64(r.Dtype))
		addU("path", uint64(r.Path))
		addU("channel", uint64(r.Channel))
		add("rank", int64(r.Rank))
		add("peer", int64(r.Peer))
		addU("qp", uint64(r.QP))
		addU("comm", uint64(r.Comm))
		addU("coll_seq", r.CollSeq)
		addU("wr_id", r.WrID)
		addU("bytes", r.Bytes)
		addU("depth", uint64(r.Depth))
		addU("step", uint64(r.Step))
	}
	out := map[string]string{}
	for k, v := range sums {
		out[k] = v.String()
	}
	return out
}

// An independent Arrow implementation reads what the sink writes, finished
// or repaired after a cut, in both formats, to the same rows, types,
// metadata and column sums.
func TestArrowJSReadsTraces(t *testing.T) {
	dir := t.TempDir()
	recs := genRecords(1, 25000)
	// Large values, to check 64-bit columns and negative numbers.
	recs[0].TsNs, recs[1].Bytes, recs[2].WrID, recs[3].Peer, recs[4].Comm = -1<<62, 1<<63+12345, 1<<64-1, -1, 1<<32-1
	var paths []string
	var want [][]flowtel.Record
	for _, f := range []Format{FormatFile, FormatStream} {
		s, err := New(testMeta(), WithDir(dir), WithFormat(f), WithBatchRows(4096))
		if err != nil {
			t.Fatal(err)
		}
		consumeAll(t, s, recs, 1000)
		if err := s.Shutdown(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, s.Files()...)
		want = append(want, recs)
	}
	// An unfinished file, cut inside its last batch, then repaired.
	full, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	cutPath := filepath.Join(dir, "cut.arrow")
	if err := os.WriteFile(cutPath, full[:len(full)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := Repair(cutPath)
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, cutPath)
	want = append(want, recs[:info.Records])

	traces := readWithJS(t, paths...)
	wantTypes := []string{"Int64", "Uint8", "Uint8", "Uint8", "Uint8", "Uint8", "Uint8", "Uint16", "Int32", "Int32", "Uint32", "Uint32", "Uint64", "Uint64", "Uint64", "Uint32", "Uint32"}
	for i, tr := range traces {
		if tr.Rows != len(want[i]) {
			t.Errorf("%s: Arrow JS reads %d rows, want %d", tr.Path, tr.Rows, len(want[i]))
		}
		if len(tr.Fields) != nCols+nDerived {
			t.Fatalf("%s: Arrow JS sees %d fields", tr.Path, len(tr.Fields))
		}
		for c, f := range tr.Fields[:nCols] {
			if f.Name != ColumnNames[c] || f.Type != wantTypes[c] {
				t.Errorf("%s: field %d is %s %s, want %s %s", tr.Path, c, f.Name, f.Type, ColumnNames[c], wantTypes[c])
			}
		}
		wantDerived := []string{"Timestamp<NANOSECOND, UTC>", "Utf8", "Dictionary<Uint8, Utf8>", "Dictionary<Uint8, Utf8>",
			"Dictionary<Uint8, Utf8>", "Dictionary<Uint8, Utf8>", "Dictionary<Uint8, Utf8>", "Dictionary<Uint8, Utf8>"}
		for c, f := range tr.Fields[nCols:] {
			if f.Name != DerivedColumnNames[c] || f.Type != wantDerived[c] {
				t.Errorf("%s: field %d is %s %s, want %s %s", tr.Path, nCols+c, f.Name, f.Type, DerivedColumnNames[c], wantDerived[c])
			}
		}
		// The first row's names, as Arrow JS decodes them.
		r0 := want[i][0]
		for name, v := range map[string]string{
			"job_id": flowtel.JobID(r0.Comm), "kind_name": r0.Kind.String(), "status_name": r0.Status.String(),
			"algo_name": r0.Algo.String(), "path_name": r0.Path.String(),
		} {
			if tr.First[name] != v {
				t.Errorf("%s: %s of row 0 is %v in Arrow JS, want %q", tr.Path, name, tr.First[name], v)
			}
		}
		if tr.Meta[KeySchemaVersion] != strconv.Itoa(flowtel.SchemaVersion) || tr.Meta[KeyCommUID] != testMeta().CommUID || tr.Meta[KeyRank] != "1" {
			t.Errorf("%s: metadata %v", tr.Path, tr.Meta)
		}
		ws := goSums(want[i])
		for name, sum := range ws {
			if tr.Sums[name] != sum {
				t.Errorf("%s: column %s sums to %s in Arrow JS, %s in Go", tr.Path, name, tr.Sums[name], sum)
			}
		}
	}
	if info.Records == 0 || info.Records == int64(len(recs)) {
		t.Errorf("the cut kept %d of %d records: cut elsewhere", info.Records, len(recs))
	}
}
