package demo

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/vccl-go/vccl/analyzer"
	"github.com/vccl-go/vccl/exporter/arrow"
)

// Analyze waits until every rank of the job whose communicator has unique
// id uid and size ranks has finished its Arrow trace in dir (each rank
// closes its files when its collector shuts down), at most until ctx ends,
// then runs vccl-analyze's diagnosis over those files and writes the
// findings and the collectives summary to w: how `make run` ends.
func Analyze(ctx context.Context, dir, uid string, size int, w io.Writer) error {
	prefix := "vccl-" + uid
	if len(uid) > 8 {
		prefix = "vccl-" + uid[:8]
	}
	var files []string
	for {
		var err error
		files, err = finished(dir, prefix, size)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for every rank's trace in %s: %v", dir, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	r, err := analyzer.AnalyzeFiles(ctx, files, analyzer.Options{})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n== the job, as vccl-analyze %s reads every rank's trace ==\n", dir)
	for _, warn := range r.Warnings {
		fmt.Fprintln(w, "warning:", warn)
	}
	if err := r.WriteText(w, false); err != nil {
		return err
	}
	_, err = fmt.Fprint(w, legend)
	return err
}

// legend says what the job's figures mean: the one bus bandwidth of each
// call size is there.
const legend = `
busbw is bus bandwidth as nccl-tests reports it: a call's payload over its
time (from the last rank's start to the last rank's end), times 2(n-1)/n for
all-reduce and 1 for send and recv, so that it compares with a link's
bandwidth whatever the number of ranks; p50 and p99 over the calls of each
size. skew is how long after the first rank the last one started a call.
The gather is the report's own: rank 0 collecting the ranks' sections.
`

// finished returns the job's trace files once every rank's last one is
// finished.
func finished(dir, prefix string, size int) ([]string, error) {
	var all []string
	for rank := range size {
		fs, err := filepath.Glob(filepath.Join(dir, fmt.Sprintf("%s-rank%d-*.arrow*", prefix, rank)))
		if err != nil {
			return nil, err
		}
		if len(fs) == 0 {
			return nil, fmt.Errorf("no trace of rank %d yet", rank)
		}
		last := fs[len(fs)-1] // segments sort by name
		r, err := arrow.OpenFiles(last)
		if err != nil {
			return nil, err
		}
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
		done := r.File().Finished
		r.Close()
		if !done {
			return nil, fmt.Errorf("rank %d is still writing %s", rank, last)
		}
		all = append(all, fs...)
	}
	return all, nil
}
