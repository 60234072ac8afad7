package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/flowtel"
	_ "github.com/vccl-go/vccl/telemetry"
)

// rankChildEnv makes TestRankChild a rank of TestKilledRankTrace's job.
const rankChildEnv = "VCCL_ANALYZE_RANK_CHILD"

// TestRankChild is a rank that all-reduces until it is killed (a minute at
// most), with telemetry from the environment. It runs only as
// TestKilledRankTrace's child.
func TestRankChild(t *testing.T) {
	if os.Getenv(rankChildEnv) == "" {
		t.Skip("a rank of TestKilledRankTrace's job")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comm, err := collective.NewFromEnv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]float32, 16<<10)
	for i := 0; ctx.Err() == nil; i++ {
		if err := collective.AllReduce(ctx, comm, buf, buf, collective.Sum); err != nil {
			t.Fatal(err) // the peer was killed
		}
		if i == 0 {
			fmt.Println("running")
		}
	}
}

// A rank of a real job killed with SIGKILL leaves a trace that Arrow JS
// (the default stream format) and DuckDB (Parquet) open as it is, up to
// its last flush, with the records this package reads.
func TestKilledRankTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a job")
	}
	for _, format := range []string{"stream", "parquet"} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
			l.Close()
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "VCCL_") && !strings.HasPrefix(kv, "OTEL_") {
					env = append(env, kv)
				}
			}
			env = append(env, rankChildEnv+"=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port,
				"VCCL_TELEMETRY=1", "VCCL_TELEMETRY_DIR="+dir, "VCCL_TELEMETRY_FORMAT="+format, "VCCL_TELEMETRY_ADDR=off")
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var ranks [2]*exec.Cmd
			running := make(chan struct{}, 2)
			for r := range ranks {
				cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRankChild$", "-test.count=1")
				cmd.Env = append(env, "RANK="+strconv.Itoa(r))
				cmd.Stderr = os.Stderr
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				go func() {
					sc := bufio.NewScanner(out)
					for sc.Scan() {
						if sc.Text() == "running" {
							running <- struct{}{}
						}
					}
				}()
				ranks[r] = cmd
				defer cmd.Process.Kill()
			}
			for range ranks {
				select {
				case <-running:
				case <-ctx.Done():
					t.Fatal("the job did not start")
				}
			}
			// Past a few flushes (one a second), kill rank 1.
			time.Sleep(2500 * time.Millisecond)
			if err := ranks[1].Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			ranks[1].Wait()
			ranks[0].Process.Kill()
			ranks[0].Wait()

			files, _ := filepath.Glob(filepath.Join(dir, "vccl-*-rank1-*"))
			if len(files) != 1 {
				t.Fatalf("rank 1's trace: %v", files)
			}
			rd, err := arrow.OpenFiles(files[0])
			if err != nil {
				t.Fatal(err)
			}
			var recs []flowtel.Record
			for {
				batch, err := rd.Next()
				if err != nil {
					break
				}
				recs = append(recs, batch...)
			}
			info := rd.File()
			rd.Close()
			if info.Finished || len(recs) == 0 {
				t.Fatalf("%s: %d records, finished %v: want the unfinished trace of a killed rank", files[0], len(recs), info.Finished)
			}
			switch format {
			case "stream":
				rows, ok := arrowJSRows(t, files[0])
				if ok && rows != len(recs) {
					t.Errorf("Arrow JS reads %d rows of the killed rank's trace, this package %d", rows, len(recs))
				}
				t.Logf("Arrow JS reads %d rows of the killed rank's trace", rows)
			case "parquet":
				rows, ok := duckCount(t, files[0])
				if !ok {
					// The kill cut a flush's write: what repair is for.
					if _, err := arrow.Repair(files[0]); err != nil {
						t.Fatal(err)
					}
					t.Log("the kill cut a flush: repaired")
					rows, ok = duckCount(t, files[0])
				}
				if ok && rows != len(recs) {
					t.Errorf("DuckDB counts %d rows of the killed rank's trace, this package %d", rows, len(recs))
				}
				t.Logf("DuckDB counts %d rows of the killed rank's trace", rows)
			}
		})
	}
}

// arrowJSRows reads a trace with Arrow JS (exporter/arrow's reader script);
// ok is false, with the test skipped, when it is not installed.
func arrowJSRows(t *testing.T, path string) (int, bool) {
	t.Helper()
	nodeDir := filepath.Join("..", "..", "exporter", "arrow", "testdata", "node")
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not on PATH: install it and Arrow JS with bash .ci/setup.d/30-arrow-node.sh")
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "apache-arrow")); err != nil {
		t.Skipf("Arrow JS is not installed in %s: install it with bash .ci/setup.d/30-arrow-node.sh", nodeDir)
	}
	abs, _ := filepath.Abs(path)
	cmd := exec.Command("node", "read.mjs", abs)
	cmd.Dir = nodeDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("Arrow JS cannot open the killed rank's trace: %v\n%s", err, stderr.String())
	}
	var tr struct {
		Rows int `json:"rows"`
	}
	if err := json.Unmarshal(out, &tr); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	return tr.Rows, true
}

// duckCount counts a Parquet file's rows with DuckDB; ok is false when
// DuckDB refuses the file.
func duckCount(t *testing.T, path string) (int, bool) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not on PATH: install it and DuckDB with bash .ci/setup.d/31-duckdb-node.sh")
	}
	if _, err := os.Stat(filepath.Join(duckDir, "node_modules", "@duckdb", "node-api")); err != nil {
		t.Skipf("DuckDB's Node.js API is not installed in %s: install it with bash .ci/setup.d/31-duckdb-node.sh", duckDir)
	}
	cmd := exec.Command("node", "query.mjs", fmt.Sprintf("SELECT count(*) AS n FROM read_parquet('%s')", path))
	cmd.Dir = duckDir
	out, err := cmd.Output()
	if err != nil {
		return 0, false
	}
	var rows []map[string]any
	if err := json.Unmarshal(out, &rows); err != nil || len(rows) != 1 {
		t.Fatalf("DuckDB printed %q: %v", out, err)
	}
	n, _ := strconv.Atoi(fmt.Sprint(rows[0]["n"]))
	return n, true
}
