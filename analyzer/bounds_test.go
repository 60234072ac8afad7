package analyzer

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/vccl-go/vccl/exporter/arrow/arrowtest"
	"github.com/vccl-go/vccl/internal/bounded"
)

// A trace whose metadata says world_size = 2^31-1 is analysed within 5 s
// and 200 MB, with a warning, not gigabytes for the ranks it names.
func TestHostileWorldSize(t *testing.T) {
	t.Parallel()
	bounded.Check(t, bounded.Issue31, func(t *testing.T) {
		dir := arrowtest.TwoRanks(t, math.MaxInt32)
		rep, err := AnalyzeFiles(context.Background(), []string{dir}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(rep.Warnings, "\n"), "out of range") {
			t.Errorf("no warning about the world size: %q", rep.Warnings)
		}
	})
}
