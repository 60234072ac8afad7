package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// duckDir holds DuckDB's Node.js API (query.mjs, package.json);
// .ci/setup.d/31-duckdb-node.sh installs its node_modules.
const duckDir = "testdata/duckdb"

// duckQuery runs SQL with DuckDB and returns its rows.
func duckQuery(t *testing.T, sql string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "query.mjs", sql)
	cmd.Dir = duckDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("DuckDB: %s: %v\n%s", sql, err, stderr.String())
	}
	var rows []map[string]any
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("DuckDB printed %q: %v", out, err)
	}
	return rows
}

// A user's own SQL over the Parquet traces of a fresh 4-rank job, in DuckDB
// with no extension, gets the per-link bytes vccl-analyze --json reports,
// names for every code and wall-clock times of today.
func TestDuckDBReadsParquetTraces(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs and starts a job")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not on PATH: this test runs DuckDB through its Node.js API (install both: bash .ci/setup.d/31-duckdb-node.sh)")
	}
	if _, err := os.Stat(filepath.Join(duckDir, "node_modules", "@duckdb", "node-api", "package.json")); err != nil {
		t.Skipf("DuckDB's Node.js API is not installed in %s: install it with bash .ci/setup.d/31-duckdb-node.sh (%v)", duckDir, err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/vccl-go/vccl/cmd/vcclrun", "github.com/vccl-go/vccl/cmd/vccl-analyze", "github.com/vccl-go/vccl/examples/telemetry")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "trace")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VCCL_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	env = append(env, "VCCL_TELEMETRY=1", "VCCL_TELEMETRY_DIR="+dir, "VCCL_TELEMETRY_FORMAT=parquet", "VCCL_TELEMETRY_ADDR=off")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	job := exec.CommandContext(ctx, filepath.Join(bin, "vcclrun"), "-n", "4", "--", filepath.Join(bin, "telemetry"))
	job.Env = env
	if out, err := job.CombinedOutput(); err != nil {
		t.Fatalf("the job: %v\n%s", err, out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "vccl-*-rank*-000.parquet"))
	if len(files) != 4 {
		t.Fatalf("Parquet traces %v, want one per rank", files)
	}

	an := exec.CommandContext(ctx, filepath.Join(bin, "vccl-analyze"), "--json", "-q", dir)
	out, err := an.Output()
	if err != nil {
		t.Fatalf("vccl-analyze --json: %v", err)
	}
	var rep struct {
		Job struct {
			Comms []struct {
				JobID string `json:"job_id"`
			} `json:"comms"`
		} `json:"job"`
		Links []struct {
			JobID string `json:"job_id"`
			Link  struct {
				Rank, Peer, Channel int
			} `json:"link"`
			SentBytes uint64 `json:"sent_bytes"`
		} `json:"links"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("vccl-analyze --json printed %s: %v", out, err)
	}
	want := map[string]uint64{}
	for _, l := range rep.Links {
		if l.SentBytes > 0 {
			want[fmt.Sprintf("%s %d->%d ch%d", l.JobID, l.Link.Rank, l.Link.Peer, l.Link.Channel)] = l.SentBytes
		}
	}
	if len(want) < 4 {
		t.Fatalf("vccl-analyze reports %d links with bytes sent: %s", len(want), out)
	}

	// The sender's completed sends: wc records with an even wr_id.
	rows := duckQuery(t, fmt.Sprintf(`SELECT job_id, rank, peer, channel, sum(bytes) AS bytes
		FROM read_parquet('%s/*.parquet') WHERE kind_name = 'wc' AND wr_id %% 2 = 0
		GROUP BY ALL ORDER BY ALL`, dir))
	got := map[string]uint64{}
	for _, r := range rows {
		n, err := strconv.ParseUint(fmt.Sprint(r["bytes"]), 10, 64)
		if err != nil {
			t.Fatalf("DuckDB row %v: %v", r, err)
		}
		got[fmt.Sprintf("%s %v->%v ch%v", r["job_id"], r["rank"], r["peer"], r["channel"])] = n
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("per-link bytes\nDuckDB:       %v\nvccl-analyze: %v", got, want)
	}
	if len(rep.Job.Comms) != 1 || !strings.Contains(files[0], "vccl-"+rep.Job.Comms[0].JobID+"-rank") {
		t.Errorf("the job id of the analyzer (%+v) is not the one of the file names (%s)", rep.Job.Comms, files[0])
	}

	// Names, not codes; the wall clock, not the monotonic one.
	rows = duckQuery(t, fmt.Sprintf(`SELECT typeof(any_value(time)) AS type, count(DISTINCT kind_name) AS kinds,
		bool_and(op_name = 'allreduce') FILTER (WHERE kind_name = 'coll_begin') AS allreduce,
		epoch(max(time)) AS latest FROM read_parquet('%s/*.parquet')`, dir))
	if len(rows) != 1 {
		t.Fatalf("DuckDB: %v", rows)
	}
	r := rows[0]
	latest, _ := strconv.ParseFloat(fmt.Sprint(r["latest"]), 64)
	kinds, _ := strconv.Atoi(fmt.Sprint(r["kinds"]))
	if r["type"] != "TIMESTAMP WITH TIME ZONE" || r["allreduce"] != true || kinds < 3 ||
		time.Since(time.Unix(int64(latest), 0)).Abs() > time.Hour {
		t.Errorf("DuckDB reads %v: want a TIMESTAMP WITH TIME ZONE of the last hour, kind names, op all-reduce", r)
	}
	t.Logf("DuckDB: %d links, bytes %v; %v", len(got), got, r)
}
