package demo

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAnalyze(t *testing.T) {
	const dir = "../../testdata/scenarios/straggler-4r"
	files, _ := filepath.Glob(filepath.Join(dir, "vccl-*-rank0-000.arrow"))
	if len(files) != 1 {
		t.Fatalf("rank 0's trace in %s: %v", dir, files)
	}
	uid := strings.Split(filepath.Base(files[0]), "-")[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := Analyze(ctx, dir, uid, 4, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "straggler") || !strings.Contains(out.String(), "rank 3") {
		t.Errorf("report:\n%s", out.String())
	}
	// A rank whose trace never comes: an error once the deadline passes.
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if err := Analyze(short, dir, uid, 5, &out); err == nil || !strings.Contains(err.Error(), "rank 4") {
		t.Errorf("missing rank: %v", err)
	}
}
