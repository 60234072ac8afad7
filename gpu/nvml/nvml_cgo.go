//go:build cgo && linux

package nvml

import (
	"errors"
	"fmt"
	"math"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

type nvmlSource struct {
	lib   gonvml.Interface
	devs  []gonvml.Device
	links [][]int // active NVLinks per GPU
	// fields per GPU: NVLink TX and RX data per active link, then PCIe TX
	// and RX bytes.
	fields [][]gonvml.FieldValue
	pcieOK []bool
}

func openNVML() (source, error) {
	lib := gonvml.New()
	if r := lib.Init(); r != gonvml.SUCCESS {
		return nil, fmt.Errorf("%w: nvmlInit: %s", ErrNoDriver, errorString(lib, r))
	}
	return &nvmlSource{lib: lib}, nil
}

func errorString(lib gonvml.Interface, r gonvml.Return) string {
	if r == gonvml.ERROR_LIBRARY_NOT_FOUND {
		return "libnvidia-ml.so.1 not found (no NVIDIA driver)"
	}
	return lib.ErrorString(r)
}

func (s *nvmlSource) err(call string, r gonvml.Return) error {
	return fmt.Errorf("nvml: %s: %s", call, errorString(s.lib, r))
}

func (s *nvmlSource) devices() ([]Device, error) {
	n, r := s.lib.DeviceGetCount()
	if r != gonvml.SUCCESS {
		return nil, s.err("nvmlDeviceGetCount", r)
	}
	var out []Device
	for i := 0; i < n; i++ {
		d, r := s.lib.DeviceGetHandleByIndex(i)
		if r != gonvml.SUCCESS {
			return nil, s.err("nvmlDeviceGetHandleByIndex", r)
		}
		info := Device{Index: i}
		info.Name, _ = d.GetName()
		info.UUID, _ = d.GetUUID()
		if pci, r := d.GetPciInfo(); r == gonvml.SUCCESS {
			info.PCIBusID = cstr(pci.BusId[:])
		}
		var links []int
		for l := 0; l < gonvml.NVLINK_MAX_LINKS; l++ {
			st, r := d.GetNvLinkState(l)
			if r != gonvml.SUCCESS {
				if r == gonvml.ERROR_INVALID_ARGUMENT || r == gonvml.ERROR_NOT_SUPPORTED {
					break
				}
				continue
			}
			if st == gonvml.FEATURE_ENABLED {
				links = append(links, l)
			}
		}
		info.NVLinks = len(links)
		var fv []gonvml.FieldValue
		for _, l := range links {
			fv = append(fv,
				gonvml.FieldValue{FieldId: gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: uint32(l)},
				gonvml.FieldValue{FieldId: gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: uint32(l)})
		}
		fv = append(fv,
			gonvml.FieldValue{FieldId: gonvml.FI_DEV_PCIE_COUNT_TX_BYTES, ScopeId: math.MaxUint32},
			gonvml.FieldValue{FieldId: gonvml.FI_DEV_PCIE_COUNT_RX_BYTES, ScopeId: math.MaxUint32})
		s.devs = append(s.devs, d)
		s.links = append(s.links, links)
		s.fields = append(s.fields, fv)
		s.pcieOK = append(s.pcieOK, true)
		out = append(out, info)
	}
	return out, nil
}

func cstr(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func fieldUint(f *gonvml.FieldValue) (uint64, bool) {
	if gonvml.Return(f.NvmlReturn) != gonvml.SUCCESS {
		return 0, false
	}
	v := f.Value
	switch gonvml.ValueType(f.ValueType) {
	case gonvml.VALUE_TYPE_UNSIGNED_INT:
		return uint64(uint32(v[0]) | uint32(v[1])<<8 | uint32(v[2])<<16 | uint32(v[3])<<24), true
	default: // unsigned long long, and what drivers report for these fields
		var x uint64
		for i := 7; i >= 0; i-- {
			x = x<<8 | uint64(v[i])
		}
		return x, true
	}
}

func (s *nvmlSource) read(i int, g *GPU) {
	d := s.devs[i]
	fv := s.fields[i]
	for k := range fv {
		fv[k].NvmlReturn, fv[k].ValueType = 0, 0
		fv[k].Value = [8]byte{}
	}
	var errs []error
	if r := d.GetFieldValues(fv); r != gonvml.SUCCESS {
		errs = append(errs, s.err("nvmlDeviceGetFieldValues", r))
	} else {
		nl := len(s.links[i])
		g.NVLinkOK = nl > 0
		for k := 0; k < nl; k++ {
			tx, ok1 := fieldUint(&fv[2*k])
			rx, ok2 := fieldUint(&fv[2*k+1])
			if !ok1 || !ok2 {
				g.NVLinkOK = false
				break
			}
			g.NVLinkTXBytes += tx * 1024
			g.NVLinkRXBytes += rx * 1024
		}
		if !g.NVLinkOK {
			g.NVLinkTXBytes, g.NVLinkRXBytes = 0, 0
		} else if ts := fv[0].Timestamp; ts > 0 {
			g.CounterTime = time.UnixMicro(ts)
		}
		tx, ok1 := fieldUint(&fv[2*nl])
		rx, ok2 := fieldUint(&fv[2*nl+1])
		if ok1 && ok2 {
			g.PCIeTXBytes, g.PCIeRXBytes, g.PCIeCounters = tx, rx, true
		}
	}
	if !g.PCIeCounters {
		// NVML's own estimate, in KB/s over its last 20 ms.
		tx, r1 := d.GetPcieThroughput(gonvml.PCIE_UTIL_TX_BYTES)
		rx, r2 := d.GetPcieThroughput(gonvml.PCIE_UTIL_RX_BYTES)
		if r1 == gonvml.SUCCESS && r2 == gonvml.SUCCESS {
			g.PCIeTXBps, g.PCIeRXBps = float64(tx)*1000, float64(rx)*1000
		}
	}
	if u, r := d.GetUtilizationRates(); r == gonvml.SUCCESS {
		g.UtilGPU, g.UtilMemory = u.Gpu, u.Memory
	} else {
		errs = append(errs, s.err("nvmlDeviceGetUtilizationRates", r))
	}
	g.Err = errors.Join(errs...)
}

func (s *nvmlSource) close() error {
	if r := s.lib.Shutdown(); r != gonvml.SUCCESS {
		return s.err("nvmlShutdown", r)
	}
	return nil
}
