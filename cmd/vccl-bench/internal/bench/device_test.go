package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

func TestDeviceFlags(t *testing.T) {
	cfg, err := ParseArgs(strings.Fields("allreduce --device gpu --vs-nccl --sms 8"))
	if err != nil || cfg.Device != "gpu" || !cfg.VsNCCL || cfg.SMs != 8 {
		t.Fatalf("got %+v, %v", cfg, err)
	}
	if cfg, err := ParseArgs(strings.Fields("allreduce --device shared --telemetry alternate")); err != nil || cfg.Device != "shared" {
		t.Fatalf("--device shared --telemetry alternate: got %+v, %v", cfg, err)
	}
	for args, want := range map[string]string{
		"allreduce --device tpu":                       `--device "tpu": want host, shared or gpu`,
		"allreduce --vs-nccl":                          "--vs-nccl needs --device gpu",
		"allreduce --device gpu --sms -1":              "--sms -1",
		"allreduce --device gpu --telemetry alternate": "--telemetry alternate times host buffers only",
	} {
		if _, err := ParseArgs(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", args, err, want)
		}
	}
}

// Without a GPU, --device gpu fails on every rank with an error that says
// so, before any exchange (so no rank waits for another).
func TestDeviceGPUWithoutGPU(t *testing.T) {
	if cuda.Available() {
		t.Skip("a GPU is present: the no-GPU error cannot be seen here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms, err := collective.NewLocal(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	cfg, err := ParseArgs(strings.Fields("allreduce --device gpu"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range comms {
		_, err := openDevice(ctx, c, cfg, true)
		if !errors.Is(err, cuda.ErrNoDriver) || !strings.Contains(err.Error(), "--device gpu: no usable GPU") {
			t.Errorf("rank %d: %v", c.Rank(), err)
		}
	}
}
