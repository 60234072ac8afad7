package arrow

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// killChildEnv makes TestKillChild the writer TestSIGKILL kills: its value
// is "DIR FORMAT".
const killChildEnv = "VCCL_ARROW_KILL_CHILD"

// TestKillChild writes records without end (for a minute at most) and
// reports, after every Flush, how many records it flushed. It runs only as
// TestSIGKILL's child.
func TestKillChild(t *testing.T) {
	spec := os.Getenv(killChildEnv)
	if spec == "" {
		t.Skip("the writer process of TestSIGKILL")
	}
	dir, fs, _ := strings.Cut(spec, " ")
	format, err := ParseFormat(fs)
	if err != nil {
		t.Fatal(err)
	}
	// Batches of 30000 rows (1.9 MB) take the writer several write calls,
	// and Consume outpaces it, so the writer is always busy: the kill lands
	// inside a batch as often as not.
	s, err := New(testMeta(), WithDir(dir), WithFormat(format), WithBatchRows(30000), WithFlushInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lastFlush := -1
	for n := 0; ctx.Err() == nil; {
		// Uneven chunks: batches fill at every offset, and the 1ms flush
		// ticker cuts partial ones.
		k := 3001 + n%1000
		if err := s.Consume(ctx, genRecords(n+1, k)); err != nil {
			t.Fatal(err)
		}
		n += k
		if n/100000 != (n-k)/100000 {
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			fmt.Printf("flushed %d\n", n)
			lastFlush = n
		}
		if lastFlush >= 0 && n-lastFlush >= 60000 {
			// Two full batches handed to the writer since the flush: it
			// is writing now.
			fmt.Println("busy")
			lastFlush = -1
		}
	}
	t.Fatal("not killed within a minute")
}

// A writer killed with SIGKILL while it writes leaves a trace that reads up
// to at least the last batch it flushed, and that Repair finishes for any
// Arrow or Parquet reader. The stream format needs no repair: the Arrow
// library's strict stream reader and Arrow JS read the killed file as it
// is, to the same records.
func TestSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	for _, f := range []Format{FormatFile, FormatStream, FormatParquet} {
		t.Run(f.String(), func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), killChildEnv+"="+dir+" "+f.String())
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Kill it after a few flushes, while it writes the batches
			// that followed the last.
			flushed, reports := 0, 0
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if n, ok := strings.CutPrefix(sc.Text(), "flushed "); ok {
					flushed, _ = strconv.Atoi(n)
					reports++
				}
				if sc.Text() == "busy" && reports >= 3 {
					break
				}
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("the child was not killed by SIGKILL: %v", err)
			}
			if flushed == 0 {
				t.Fatal("the child reported no flush before it was killed")
			}

			files, err := ListFiles(dir)
			if err != nil || len(files) != 1 {
				t.Fatalf("files %v, %v", files, err)
			}
			got, err := ReadAll(dir)
			if err != nil {
				t.Fatalf("reading the killed writer's trace: %v", err)
			}
			if len(got) < flushed {
				t.Fatalf("read %d records, the writer had flushed %d", len(got), flushed)
			}
			if want := genRecords(1, len(got)); !slices.Equal(got, want) {
				t.Fatalf("records differ from what was written at %d", firstDiff(got, want))
			}
			r, _ := Open(files[0])
			for _, err := r.Next(); err == nil; _, err = r.Next() {
			}
			info := r.File()
			if info.Finished {
				t.Fatal("the killed writer's file reads as finished")
			}
			t.Logf("killed after %d records flushed: %d records readable in %d batches (a partial batch at the end: %v)", flushed, info.Records, info.Batches, info.Truncated)
			if f == FormatStream {
				if n := strictStreamRows(t, files[0]); n != int64(len(got)) {
					t.Fatalf("the Arrow stream reader reads %d rows from the killed writer's file, want %d", n, len(got))
				}
				if _, err := exec.LookPath("node"); err == nil {
					if js := readWithJS(t, files[0]); js[0].Rows != len(got) {
						t.Fatalf("Arrow JS reads %d rows from the killed writer's file, want %d", js[0].Rows, len(got))
					}
				}
			}

			rep, err := Repair(files[0])
			if err != nil {
				t.Fatal(err)
			}
			if rep.Records != int64(len(got)) {
				t.Fatalf("repaired file holds %d records, want %d", rep.Records, len(got))
			}
			// The Arrow library's own strict readers take the repaired file.
			fh, err := os.Open(files[0])
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			rows := int64(0)
			switch f {
			case FormatParquet:
				rows = strictParquetRows(t, files[0])
			case FormatFile:
				fr, err := ipc.NewFileReader(fh)
				if err != nil {
					t.Fatal(err)
				}
				defer fr.Close()
				for i := range fr.NumRecords() {
					rb, err := fr.RecordBatch(i)
					if err != nil {
						t.Fatal(err)
					}
					rows += rb.NumRows()
				}
			default:
				rows = strictStreamRows(t, files[0])
			}
			if rows != int64(len(got)) {
				t.Fatalf("the Arrow library reads %d rows from the repaired file, want %d", rows, len(got))
			}
		})
	}
}

// strictStreamRows reads an IPC stream with the Arrow library's own reader,
// which fails on anything but a well-formed stream.
func strictStreamRows(t *testing.T, path string) int64 {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sr, err := ipc.NewReader(fh)
	if err != nil {
		t.Fatalf("the Arrow stream reader refuses %s: %v", path, err)
	}
	defer sr.Release()
	rows := int64(0)
	for sr.Next() {
		rows += sr.RecordBatch().NumRows()
	}
	if sr.Err() != nil {
		t.Fatalf("the Arrow stream reader: %s: %v", path, sr.Err())
	}
	return rows
}

// strictParquetRows reads a Parquet file with arrow-go's Parquet reader,
// which reads the footer at the end of the file as every Parquet tool does.
func strictParquetRows(t *testing.T, path string) int64 {
	t.Helper()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatalf("the Parquet reader refuses %s: %v", path, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatalf("the Parquet reader: %s: %v", path, err)
	}
	defer tbl.Release()
	return tbl.NumRows()
}

// The stream writer's commit, cut where SIGKILL may cut it: after any
// number of the bytes that follow a batch's first 8, before those 8. Every
// Arrow reader then reads the batches before it, and no error.
func TestTornStreamCommit(t *testing.T) {
	dir := t.TempDir()
	s, err := New(testMeta(), WithDir(dir), WithFormat(FormatStream), WithBatchRows(100))
	if err != nil {
		t.Fatal(err)
	}
	recs := genRecords(1, 250)
	consumeAll(t, s, recs[:200], 200) // two full batches, written
	if err := s.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	path := s.Files()[0]
	committed, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	consumeAll(t, s, recs[200:], 50)
	if err := s.Shutdown(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The third batch's message starts where the committed bytes end.
	next := full[len(committed) : len(full)-len(eosMarker)]
	var torn []string
	for _, k := range []int{8, 9, 64, len(next) / 2, len(next)} {
		// What commitOrdered leaves when killed after writing next[8:k]
		// but not next[:8]: a hole of zeros, then those bytes.
		b := append(append(bytes.Clone(committed), make([]byte, 8)...), next[8:k]...)
		p := filepath.Join(dir, fmt.Sprintf("torn-%d.arrows", k))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if n := strictStreamRows(t, p); n != 200 {
			t.Errorf("%s: the Arrow stream reader reads %d rows, want 200", p, n)
		}
		if got, err := ReadAll(p); err != nil || !slices.Equal(got, recs[:200]) {
			t.Errorf("%s: this package's reader reads %d records (%v), want 200", p, len(got), err)
		}
		torn = append(torn, p)
	}
	// The control: a plain append cut at the same place is a message that
	// runs past the end, which the strict reader refuses.
	cut := append(bytes.Clone(committed), next[:len(next)/2]...)
	if sr, err := ipc.NewReader(bytes.NewReader(cut)); err == nil {
		for sr.Next() {
		}
		if sr.Err() == nil {
			t.Error("the Arrow stream reader takes a message cut in half: the test shows nothing")
		}
		sr.Release()
	}
	if _, err := exec.LookPath("node"); err == nil {
		for _, tr := range readWithJS(t, torn...) {
			if tr.Rows != 200 {
				t.Errorf("%s: Arrow JS reads %d rows, want 200", tr.Path, tr.Rows)
			}
		}
	}
}
