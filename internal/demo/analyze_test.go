package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestAnalyze(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := Analyze(ctx, "../../testdata/scenarios/straggler-4r", "77312917", 4, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "straggler") || !strings.Contains(out.String(), "rank 3") {
		t.Errorf("report:\n%s", out.String())
	}
	// A rank whose trace never comes: an error once the deadline passes.
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if err := Analyze(short, "../../testdata/scenarios/straggler-4r", "77312917", 5, &out); err == nil || !strings.Contains(err.Error(), "rank 4") {
		t.Errorf("missing rank: %v", err)
	}
}
