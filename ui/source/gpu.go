package source

import (
	"sync"
	"time"

	"github.com/vccl-go/vccl/gpu/nvml"
	"github.com/vccl-go/vccl/ui"
)

// GPUReader reads the GPUs of this host: NVML (NVML) or a fake.
type GPUReader interface {
	GPUs() ([]ui.GPU, error)
}

// Sampler is what NVML needs of an NVML collector; *nvml.Collector has it.
type Sampler interface {
	Devices() []nvml.Device
	Sample() (nvml.Sample, error)
}

// NVML reads GPUs through gpu/nvml.
func NVML(s Sampler) GPUReader { return nvmlReader{s} }

type nvmlReader struct{ s Sampler }

func (n nvmlReader) GPUs() ([]ui.GPU, error) {
	devs := n.s.Devices()
	smp, err := n.s.Sample()
	if err != nil && len(smp.GPUs) == 0 {
		return nil, err
	}
	out := make([]ui.GPU, 0, len(smp.GPUs))
	for i, g := range smp.GPUs {
		u := ui.GPU{Index: g.Index, UtilPct: float64(g.UtilGPU), MemUtilPct: float64(g.UtilMemory),
			NVLinkTxBps: g.NVLinkTXBps, NVLinkRxBps: g.NVLinkRXBps, PCIeTxBps: g.PCIeTXBps, PCIeRxBps: g.PCIeRXBps}
		if i < len(devs) {
			u.Name = devs[i].Name
		}
		if g.Err != nil {
			u.Err = g.Err.Error()
		}
		out = append(out, u)
	}
	return out, nil
}

// WithGPUs returns src with the GPUs r reads, every interval in the
// background, added to its frames: the GPU panel. A Player stays one.
func WithGPUs(src ui.Source, r GPUReader, every time.Duration) ui.Source {
	if every <= 0 {
		every = time.Second
	}
	g := &gpuSource{Source: src, r: r, stop: make(chan struct{}), done: make(chan struct{})}
	g.read()
	go g.loop(every)
	if p, ok := src.(ui.Player); ok {
		return &gpuPlayer{gpuSource: g, p: p}
	}
	return g
}

type gpuSource struct {
	ui.Source
	r    GPUReader
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu   sync.Mutex
	gpus []ui.GPU
	err  string
}

func (g *gpuSource) read() {
	gs, err := g.r.GPUs()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.err = "GPUs: " + err.Error()
		return
	}
	g.gpus, g.err = gs, ""
}

func (g *gpuSource) loop(every time.Duration) {
	defer close(g.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.read()
		}
	}
}

func (g *gpuSource) Frame() ui.Frame {
	f := g.Source.Frame()
	g.mu.Lock()
	defer g.mu.Unlock()
	f.GPUs = append([]ui.GPU(nil), g.gpus...)
	if g.err != "" {
		f.Notes = append(f.Notes, g.err)
	}
	return f
}

func (g *gpuSource) Close() error {
	g.once.Do(func() { close(g.stop) })
	<-g.done
	return g.Source.Close()
}

type gpuPlayer struct {
	*gpuSource
	p ui.Player
}

func (g *gpuPlayer) SetPaused(p bool)           { g.p.SetPaused(p) }
func (g *gpuPlayer) SetSpeed(s float64) float64 { return g.p.SetSpeed(s) }
