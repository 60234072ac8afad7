package analyzer

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDebugSlices prints per-slice link values of a trace (VCCL_ANALYZER_DEBUG=dir:src:dst).
func TestDebugSlices(t *testing.T) {
	spec := os.Getenv("VCCL_ANALYZER_DEBUG")
	if spec == "" {
		t.Skip("VCCL_ANALYZER_DEBUG not set")
	}
	parts := strings.Split(spec, ":")
	src, _ := strconv.Atoi(parts[1])
	dst, _ := strconv.Atoi(parts[2])
	debugSlice = func(a *Analyzer, l *link, i int64, acc *sliceAcc) {
		if l.key.src != int32(src) || l.key.dst != int32(dst) || acc.empty() {
			return
		}
		d := &l.det
		fmt.Printf("%6d busy=%4.0f%% done=%7d rate=%6.0fMB/s backlog=%7.0f starved=%3.0f%% base=%6.0fMB/s bmean=%7.0f exc=%d fl=%v seq=%d-%d\n",
			i-a.firstTs/a.w, 100*float64(acc.busy)/float64(a.w), acc.landed, float64(acc.landed)/float64(max(acc.busy, 1))*1e3,
			acc.backlog/float64(a.w), 100*float64(acc.busy-acc.wire)/float64(max(acc.busy, 1)), d.bl.rate()*1e3, d.bl.meanBacklog(),
			l.comm.excNow, d.fl, acc.minSeq, acc.maxSeq)
	}
	defer func() { debugSlice = nil }()
	if _, err := AnalyzeFiles(context.Background(), []string{parts[0]}, Options{}); err != nil {
		t.Fatal(err)
	}
}
