// Package nvml reads per-GPU counters from NVIDIA's management library
// (NVML, libnvidia-ml.so.1) through github.com/NVIDIA/go-nvml: NVLink TX/RX
// data bytes, PCIe TX/RX bytes or throughput, and GPU and memory
// utilisation. A Collector is polled: each Sample returns the cumulative
// counters and the rates since the previous one, so an exporter (Prometheus,
// OpenTelemetry) or vccl-top can poll it at its own pace.
//
// go-nvml needs cgo, so this package is the only one of VCCL-Go that does;
// built without cgo, or on a machine without the NVIDIA driver, Open
// returns an error wrapping ErrNoDriver and nothing else changes.
package nvml

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNoDriver is wrapped by Open's error when NVML cannot be used: no
// libnvidia-ml.so.1 (no NVIDIA driver), its initialisation failed, or the
// program was built without cgo.
var ErrNoDriver = errors.New("nvml: no usable NVIDIA management library")

// Device describes one GPU.
type Device struct {
	Index    int
	Name     string
	UUID     string
	PCIBusID string
	// NVLinks is the number of active NVLinks.
	NVLinks int
}

// GPU is one GPU's reading in a Sample.
type GPU struct {
	Index int
	// NVLinkTXBytes and NVLinkRXBytes are the data bytes sent and received
	// over all of the GPU's NVLinks since the driver loaded (NVML counts
	// KiB). NVLinkOK is false when the driver does not count them.
	NVLinkTXBytes, NVLinkRXBytes uint64
	NVLinkOK                     bool
	// NVLinkTXBps and NVLinkRXBps are bytes per second since the previous
	// Sample (0 on the first).
	NVLinkTXBps, NVLinkRXBps float64
	// PCIeTXBytes and PCIeRXBytes are cumulative PCIe bytes where the
	// driver counts them (PCIeCounters true); PCIeTXBps and PCIeRXBps are
	// the rates since the previous Sample, or, without counters, NVML's own
	// throughput estimate over its last 20 ms.
	PCIeTXBytes, PCIeRXBytes uint64
	PCIeCounters             bool
	PCIeTXBps, PCIeRXBps     float64
	// UtilGPU is the percentage of the last sample period in which a kernel
	// ran; UtilMemory that in which device memory was read or written.
	UtilGPU, UtilMemory uint32
	// CounterTime is when the driver read the NVLink counters (zero if
	// it does not say); rates are computed over it when both Samples have
	// it, since a Sample of many GPUs takes milliseconds.
	CounterTime time.Time
	// Err says what could not be read (the fields stay zero).
	Err error
}

// Sample is one reading of every GPU.
type Sample struct {
	Time time.Time
	// Interval is the time since the previous Sample (0 on the first).
	Interval time.Duration
	GPUs     []GPU
}

// source is what the Collector reads: NVML, or a fake in tests.
type source interface {
	devices() ([]Device, error)
	// read fills the cumulative counters and utilisation of GPU i.
	read(i int, g *GPU)
	close() error
}

// Collector polls the GPUs of this machine. Its methods are safe for
// concurrent use.
type Collector struct {
	mu   sync.Mutex
	src  source
	devs []Device
	prev *Sample
	now  func() time.Time
}

// Open initialises NVML and lists the GPUs. Close releases it.
func Open() (*Collector, error) {
	src, err := openNVML()
	if err != nil {
		return nil, err
	}
	return newCollector(src)
}

func newCollector(src source) (*Collector, error) {
	devs, err := src.devices()
	if err != nil {
		src.close()
		return nil, err
	}
	return &Collector{src: src, devs: devs, now: time.Now}, nil
}

// Devices returns the GPUs, in NVML's index order.
func (c *Collector) Devices() []Device { return append([]Device(nil), c.devs...) }

// Sample reads every GPU and returns the counters and the rates since the
// previous Sample.
func (c *Collector) Sample() (Sample, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.src == nil {
		return Sample{}, errors.New("nvml: collector closed")
	}
	s := Sample{Time: c.now(), GPUs: make([]GPU, len(c.devs))}
	for i, d := range c.devs {
		g := &s.GPUs[i]
		g.Index = d.Index
		c.src.read(i, g)
	}
	if p := c.prev; p != nil {
		s.Interval = s.Time.Sub(p.Time)
		sec := s.Interval.Seconds()
		if sec > 0 {
			for i := range s.GPUs {
				g, o := &s.GPUs[i], &p.GPUs[i]
				if g.NVLinkOK && o.NVLinkOK {
					sec := sec
					if !g.CounterTime.IsZero() && !o.CounterTime.IsZero() && g.CounterTime.After(o.CounterTime) {
						sec = g.CounterTime.Sub(o.CounterTime).Seconds()
					}
					g.NVLinkTXBps = rate(g.NVLinkTXBytes, o.NVLinkTXBytes, sec)
					g.NVLinkRXBps = rate(g.NVLinkRXBytes, o.NVLinkRXBytes, sec)
				}
				if g.PCIeCounters && o.PCIeCounters {
					g.PCIeTXBps = rate(g.PCIeTXBytes, o.PCIeTXBytes, sec)
					g.PCIeRXBps = rate(g.PCIeRXBytes, o.PCIeRXBytes, sec)
				}
			}
		}
	}
	c.prev = &s
	var errs []error
	for _, g := range s.GPUs {
		if g.Err != nil {
			errs = append(errs, fmt.Errorf("GPU %d: %w", g.Index, g.Err))
		}
	}
	if len(errs) == len(s.GPUs) && len(errs) > 0 {
		return s, errors.Join(errs...)
	}
	return s, nil
}

// rate is (cur-prev)/sec, 0 when the counter went back (a driver reload).
func rate(cur, prev uint64, sec float64) float64 {
	if cur < prev {
		return 0
	}
	return float64(cur-prev) / sec
}

// Close shuts NVML down.
func (c *Collector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.src == nil {
		return nil
	}
	err := c.src.close()
	c.src = nil
	return err
}
