package cuda_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
	"github.com/vccl-go/vccl/gpu/kernels"
)

// TestNoDriver: without a driver every entry point fails with ErrNoDriver
// and nothing panics.
func TestNoDriver(t *testing.T) {
	if cuda.Available() {
		t.Skip("a GPU is present")
	}
	if _, err := cuda.DeviceCount(); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("DeviceCount: %v", err)
	}
	if _, err := cuda.MemAlloc(1 << 20); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("MemAlloc: %v", err)
	}
	if _, err := cuda.LoadPTX(".version 7.8\n"); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("LoadPTX: %v", err)
	}
	if _, err := cuda.NewStream(0); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("NewStream: %v", err)
	}
	if _, err := cuda.NewWorker(0); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("NewWorker: %v", err)
	}
	if err := cuda.MemcpyDtoDAsync(0, 0, 1, 0); err == nil {
		t.Error("MemcpyDtoDAsync without a driver succeeded")
	}
	t.Logf("no GPU: %v", cuda.Load())
}

func needGPU(t *testing.T) cuda.Context {
	t.Helper()
	if !cuda.Available() {
		t.Skipf("no CUDA GPU here (%v); this test runs on a GPU machine", cuda.Load())
	}
	d, err := cuda.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.PrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.ReleasePrimaryContext() })
	return c
}

// TestDeviceBasics: memory, copies (sync, async through pinned memory),
// streams, events and their elapsed time, a PTX kernel, IPC handles.
func TestDeviceBasics(t *testing.T) {
	ctx := needGPU(t)
	w, err := cuda.NewWorker(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Do(func() error {
		const n = 1 << 20
		p, err := cuda.MemAlloc(n)
		if err != nil {
			return err
		}
		defer cuda.MemFree(p)
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i * 7)
		}
		if err := cuda.MemcpyHtoD(p, src); err != nil {
			return err
		}
		got := make([]byte, n)
		if err := cuda.MemcpyDtoH(got, p); err != nil {
			return err
		}
		if !bytes.Equal(got, src) {
			t.Error("HtoD/DtoH round trip differs")
		}
		s, err := cuda.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer s.Destroy()
		h, err := cuda.MemHostAlloc(n, cuda.HostAllocPortable)
		if err != nil {
			return err
		}
		defer h.Free()
		e0, _ := cuda.NewEvent(cuda.EventDefault)
		e1, _ := cuda.NewEvent(cuda.EventDefault)
		defer e0.Destroy()
		defer e1.Destroy()
		q, err := cuda.MemAlloc(n)
		if err != nil {
			return err
		}
		defer cuda.MemFree(q)
		if err := e0.Record(s); err != nil {
			return err
		}
		if err := cuda.MemcpyDtoDAsync(q, p, n, s); err != nil {
			return err
		}
		if err := cuda.MemcpyDtoHAsync(h, 0, q, n, s); err != nil {
			return err
		}
		if err := e1.Record(s); err != nil {
			return err
		}
		if err := e1.Synchronize(); err != nil {
			return err
		}
		if done, err := e1.Query(); !done || err != nil {
			t.Errorf("event after sync: done=%v err=%v", done, err)
		}
		if !bytes.Equal(h.Bytes(), src) {
			t.Error("async copies through pinned memory differ")
		}
		el, err := cuda.Elapsed(e0, e1)
		if err != nil || el <= 0 || el > time.Second {
			t.Errorf("elapsed %v, %v", el, err)
		}
		// A kernel: float32 sum of p and p into q.
		spec := kernels.Spec{Kind: kernels.KindReduce, Dtype: collective.Float32, Op: collective.Sum}
		ptx, _ := kernels.Source(spec)
		m, err := cuda.LoadPTX(ptx)
		if err != nil {
			return err
		}
		defer m.Unload()
		f, err := m.Function(spec.Name())
		if err != nil {
			return err
		}
		in := make([]byte, n)
		kernels.Fill(collective.Float32, in, 3)
		if err := cuda.MemcpyHtoD(p, in); err != nil {
			return err
		}
		var a cuda.Args
		cnt, nvec := kernels.Params(collective.Float32, n/4, uint64(q), uint64(p), uint64(p))
		if err := a.Launch(f, cuda.D1(4), cuda.D1(256), 0, s, uint64(q), uint64(p), uint64(p), cnt, nvec, 0); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		if err := cuda.MemcpyDtoH(got, q); err != nil {
			return err
		}
		want := kernels.Reference(collective.Float32, collective.Sum, [][]byte{in, in})
		if i := kernels.Equal(collective.Float32, got, want); i >= 0 {
			t.Errorf("kernel: element %d differs", i)
		}
		// Bad PTX reports the JIT log.
		if _, err := cuda.LoadPTX(".version 7.8\n.target sm_90\n.address_size 64\nbogus;\n"); err == nil {
			t.Error("bad PTX loaded")
		} else {
			t.Logf("bad PTX: %v", err)
		}
		ih, err := cuda.IpcGetMemHandle(p)
		if err != nil {
			return err
		}
		if ih == (cuda.IpcMemHandle{}) {
			t.Error("zero IPC handle")
		}
		if _, err := cuda.OpenIpcMemHandle(ih); err == nil {
			t.Log("opening an own IPC handle succeeded (drivers usually refuse)")
		} else {
			t.Logf("own IPC handle refused as expected: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
