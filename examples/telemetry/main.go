// Command telemetry is a program with VCCL-Go's telemetry and nothing else:
// the blank import of github.com/vccl-go/vccl/telemetry attaches the
// exporters the environment asks for (Arrow traces in VCCL_TELEMETRY_DIR,
// the live endpoint at VCCL_TELEMETRY_ADDR, OpenTelemetry spans where the
// OTEL_* variables ask for them) to every communicator made with
// VCCL_TELEMETRY=1.
//
//	go build -o bin/ ./cmd/vcclrun ./cmd/vccl-analyze ./examples/telemetry
//	VCCL_TELEMETRY=1 VCCL_TELEMETRY_DIR=trace bin/vcclrun -n 2 -- bin/telemetry
//	bin/vccl-analyze trace
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/vccl-go/vccl/collective"
	_ "github.com/vccl-go/vccl/telemetry"
)

func main() {
	ctx := context.Background()
	comm, err := collective.NewFromEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	buf := make([]float32, 64<<10)
	for range 10 {
		if err := collective.AllReduce(ctx, comm, buf, buf, collective.Sum); err != nil {
			log.Fatal(err)
		}
	}
	if err := comm.Close(); err != nil { // finishes the traces and sends the last spans
		log.Fatal(err)
	}
	if comm.Rank() == 0 {
		fmt.Printf("10 all-reduces of %d KiB on %d ranks\n", len(buf)*4>>10, comm.Size())
	}
}
