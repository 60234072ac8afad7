// Command vccl-bench measures VCCL-Go's collectives in the mould of
// nccl-tests: a sweep of sizes, time, algbw and busbw per size out of place
// and in place, and a check of every result against its own reference.
//
//	vcclrun -n 2 -- vccl-bench allreduce -b 8 -e 64M -f 4 -c 1
//	vccl-bench COLLECTIVE [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-o sum|prod|min|max|avg]
//	           [-d float32|...] [-n ITERS] [-w WARMUP] [-c 0|1] [-r ROOT] [--json] [--telemetry off|on|alternate]
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/vccl-go/vccl/cmd/vccl-bench/internal/bench"
	_ "github.com/vccl-go/vccl/telemetry" // the exporters VCCL_TELEMETRY_DIR, VCCL_TELEMETRY_ADDR and OTEL_* ask for
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
