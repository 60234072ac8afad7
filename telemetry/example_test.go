package telemetry_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/telemetry"
)

// A program that chooses its exporters itself: its communicators skip the
// attacher the import registers, and Attach connects a Config (here: Arrow
// traces only, in a directory of its choosing). A program that takes them
// from the environment needs only the blank import:
//
//	import _ "github.com/vccl-go/vccl/telemetry"
func ExampleAttach() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "vccl-example")
	defer os.RemoveAll(dir)
	comms, err := collective.NewLocal(ctx, 2, collective.WithTelemetry(true), collective.WithTelemetryAttachers(false))
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	exs := make([]*telemetry.Exporters, len(comms))
	for r, c := range comms {
		if exs[r], err = telemetry.Attach(ctx, c, telemetry.Config{Dir: filepath.Join(dir, "trace")}); err != nil {
			log.Fatal(err)
		}
		wg.Add(1)
		go func() { // each rank, as each process of a job would
			defer wg.Done()
			buf := make([]float32, 1024)
			if err := collective.AllReduce(ctx, c, buf, buf, collective.Sum); err != nil {
				log.Fatal(err)
			}
		}()
	}
	wg.Wait()
	// The communicator's Close shuts its collector down, which finishes the
	// traces (exs[r].Outputs says where they are); then the exporters close.
	for r, c := range comms {
		c.Close()
		exs[r].Close(ctx)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "trace", "*.arrows"))
	fmt.Println(len(files), "trace files")
	// Output: 2 trace files
}
