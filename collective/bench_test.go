package collective

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Two-process all-reduce benchmarks: this process is rank 0 and a re-run of
// the test binary is rank 1, so shared memory and TCP are measured across
// processes as jobs use them. Rank 0 broadcasts each iteration count; rank 1
// follows until it gets -1. For two ranks busbw equals algbw, which
// b.SetBytes reports as MB/s.

const (
	envBenchPeer  = "VCCL_BENCH_PEER"
	envBenchBytes = "VCCL_BENCH_BYTES"
)

type benchJob struct {
	comm *Comm
	peer *exec.Cmd
	buf  []float32
}

func freeAddr(tb testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startBenchJob(b *testing.B, transport string, bytes int, telemetry bool) *benchJob {
	addr := freeAddr(b)
	peer := exec.Command(os.Args[0], "-test.run=^TestBenchPeer$", "-test.count=1")
	peer.Env = append(os.Environ(), envBenchPeer+"=1", envBenchBytes+"="+strconv.Itoa(bytes),
		"VCCL_MASTER_ADDR=127.0.0.1", "VCCL_MASTER_PORT="+addr[len("127.0.0.1:"):],
		"VCCL_RANK=1", "VCCL_WORLD_SIZE=2", EnvTransport+"="+transport, "VCCL_TELEMETRY="+strconv.FormatBool(telemetry))
	peer.Stderr = os.Stderr
	if err := peer.Start(); err != nil {
		b.Fatal(err)
	}
	ctx := testCtx(b, time.Minute)
	comm, err := New(ctx, WithRank(0, 2), WithMaster(addr), WithTransport(transport), WithTelemetry(telemetry))
	if err != nil {
		peer.Process.Kill()
		b.Fatal(err)
	}
	return &benchJob{comm: comm, peer: peer, buf: make([]float32, bytes/4)}
}

func (j *benchJob) stop(b *testing.B) {
	ctx := testCtx(b, time.Minute)
	Broadcast(ctx, j.comm, []int64{-1}, []int64{-1}, 0)
	j.comm.Close()
	if err := j.peer.Wait(); err != nil {
		b.Errorf("benchmark peer: %v", err)
	}
}

func BenchmarkAllReduce2Proc(b *testing.B) {
	for _, tr := range []string{"shm", "tcp"} {
		for _, tel := range []bool{false, true} {
			for _, size := range []int{1 << 10, 64 << 10, 1 << 20, 16 << 20} {
				name := fmt.Sprintf("%s/telemetry=%v/%s", tr, tel, sizeName(size))
				var job *benchJob
				b.Run(name, func(b *testing.B) {
					if job == nil {
						job = startBenchJob(b, tr, size, tel)
					}
					ctx := context.Background()
					if err := Broadcast(ctx, job.comm, []int64{int64(b.N)}, []int64{int64(b.N)}, 0); err != nil {
						b.Fatal(err)
					}
					b.SetBytes(int64(size))
					b.ResetTimer()
					for range b.N {
						if err := AllReduce(ctx, job.comm, job.buf, job.buf, Sum); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					b.ReportMetric(float64(size)/(float64(b.Elapsed().Nanoseconds())/float64(b.N)), "busbw-GB/s")
				})
				if job != nil {
					job.stop(b)
				}
			}
		}
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// TestBenchPeer is rank 1 of BenchmarkAllReduce2Proc.
func TestBenchPeer(t *testing.T) {
	if os.Getenv(envBenchPeer) == "" {
		t.Skip("runs as rank 1 of BenchmarkAllReduce2Proc")
	}
	bytes, _ := strconv.Atoi(os.Getenv(envBenchBytes))
	ctx := context.Background()
	c, err := NewFromEnv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]float32, bytes/4)
	for {
		n := []int64{0}
		if err := Broadcast(ctx, c, n, n, 0); err != nil {
			t.Fatal(err)
		}
		if n[0] < 0 {
			return
		}
		for range n[0] {
			if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// benchLocal makes an n-rank job of goroutines for a benchmark and closes
// every rank at once when the benchmark ends.
func benchLocal(b *testing.B, n int, opts ...Option) []*Comm {
	comms, err := NewLocal(context.Background(), n, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { runOnAll(comms, func(c *Comm) error { return c.Close() }) })
	return comms
}

// BenchmarkAllReduceLocal measures the library's own per-call cost: two ranks
// as goroutines over the in-process transport, where no IPC hides it.
func BenchmarkAllReduceLocal(b *testing.B) {
	for _, check := range []bool{true, false} {
		b.Run(fmt.Sprintf("8B/check=%v", check), func(b *testing.B) {
			ctx := context.Background()
			comms := benchLocal(b, 2, WithSignatureCheck(check))
			done := make(chan error, 1)
			go func() {
				buf := []float64{1}
				for range b.N {
					if err := AllReduce(ctx, comms[1], buf, buf, Sum); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			buf := []float64{1}
			b.ReportAllocs()
			for range b.N {
				if err := AllReduce(ctx, comms[0], buf, buf, Sum); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkAllReduceSelf is the per-call cost of the library alone: one rank,
// so no transfer and no peer to wait for, only the call's own path (task,
// schedule lookup, engine, telemetry).
func BenchmarkAllReduceSelf(b *testing.B) {
	for _, tel := range []bool{false, true} {
		b.Run(fmt.Sprintf("8B/telemetry=%v", tel), func(b *testing.B) {
			ctx := context.Background()
			comms := benchLocal(b, 1, WithTelemetry(tel))
			send, recv := []float64{1}, []float64{0}
			b.ReportAllocs()
			for range b.N {
				if err := AllReduce(ctx, comms[0], send, recv, Sum); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
