package arrow

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// pyRead reads every trace with pyarrow: the IPC stream and file readers
// and the Parquet reader, strict as they are, no VCCL code involved.
const pyRead = `
import json, sys
import pyarrow.ipc as ipc, pyarrow.parquet as pq
out = []
for p in sys.argv[1:]:
    if p.endswith('.parquet'):
        t = pq.read_table(p)
    elif p.endswith('.arrows'):
        with open(p, 'rb') as f:
            t = ipc.open_stream(f).read_all()
    else:
        with open(p, 'rb') as f:
            t = ipc.open_file(f).read_all()
    out.append({'path': p, 'rows': t.num_rows, 'bytes': str(sum(t.column('bytes').to_pylist())),
                'time': str(t.schema.field('time').type),
                'kind': t.column('kind_name')[0].as_py() if t.num_rows else None})
print(json.dumps(out))
`

// pyarrow reads the three formats, and the stream of a writer killed
// inside a write, to the records written.
func TestPyArrowReadsTraces(t *testing.T) {
	dir := t.TempDir()
	recs := genRecords(1, 5000)
	var paths []string
	for _, f := range []Format{FormatStream, FormatFile, FormatParquet} {
		s, err := New(testMeta(), WithDir(filepath.Join(dir, f.String())), WithFormat(f), WithBatchRows(1000))
		if err != nil {
			t.Fatal(err)
		}
		consumeAll(t, s, recs, 700)
		if err := s.Shutdown(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, s.Files()...)
	}
	// A stream whose last commit was cut after the bytes past its first 8,
	// as SIGKILL may leave it: the first 4000 records and a hole.
	full, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReaderAt("x", bytes.NewReader(full), int64(len(full)))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	end := r.cur.boundary // where the fifth batch's message starts
	r.Close()
	torn := append(bytes.Clone(full[:end]), make([]byte, 8)...)
	torn = append(torn, full[end+8:end+108]...)
	tornPath := filepath.Join(dir, "torn.arrows")
	if err := os.WriteFile(tornPath, torn, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := strictStreamRows(t, tornPath); n != 4000 {
		t.Fatalf("the torn stream holds %d rows, want 4000", n)
	}
	paths = append(paths, tornPath)

	py, err := exec.LookPath("python3")
	if err != nil || exec.Command(py, "-c", "import pyarrow.parquet").Run() != nil {
		t.Skip("pyarrow is not installed: pip install pyarrow (this test reads the traces with it)")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, append([]string{"-c", pyRead}, paths...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("pyarrow: %v\n%s", err, out)
	}
	var got []struct {
		Path, Bytes, Time, Kind string
		Rows                    int
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("python printed %s: %v", out, err)
	}
	sum := func(rs []flowtel.Record) string {
		var n uint64
		for _, r := range rs {
			n += r.Bytes
		}
		return strconv.FormatUint(n, 10)
	}
	for i, g := range got {
		want := recs
		if paths[i] == tornPath {
			want = recs[:4000]
		}
		if g.Rows != len(want) || g.Bytes != sum(want) || g.Time != "timestamp[ns, tz=UTC]" || g.Kind != want[0].Kind.String() {
			t.Errorf("%s: pyarrow reads %+v, want %d rows, %s bytes, kind %s", g.Path, g, len(want), sum(want), want[0].Kind)
		}
	}
}
