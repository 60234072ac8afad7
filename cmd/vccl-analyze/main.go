// Command vccl-analyze diagnoses a VCCL job from its traces (Arrow file,
// Arrow stream or Parquet): which link or rank hurt it, since when, and the
// numbers that show it.
//
//	vccl-analyze [flags] TRACE…
//	vccl-analyze convert [-format parquet|stream|file] -o DIR TRACE…
//	vccl-analyze repair TRACE…
//
// TRACE is a trace file or a directory of them (every rank's files of one
// job; files of another job are skipped with a warning). The default output
// is a findings table, worst first, and a per-collective summary; --json
// writes one JSON object instead, --html FILE a self-contained report with
// charts. convert (or export) rewrites traces in another format, repair
// finishes the files killed writers left for other tools. See
// vccl-analyze -h and docs/analyzer.md.
package main

import (
	"os"

	"github.com/vccl-go/vccl/cmd/vccl-analyze/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
