package ce

import (
	"encoding/binary"
	"fmt"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// PreMultiply queues src × scalar over count elements of dt on this
// rank's stream and returns where the products lie: memory of this Proc,
// valid until the next PreMultiply, to use as the input of the reduction
// that follows (NCCL's pre-multiplied sum: a sum of inputs each multiplied
// by a scalar first). The scalar is one element of dt, either in device
// memory of this GPU at dev (read when the stream gets there) or, when
// dev is 0, the bytes of host (written into device memory in stream
// order). The scalar is spread over count elements by doubling copies,
// then the product kernel multiplies.
func (p *Proc) PreMultiply(src *DeviceMem, count int, dt collective.Datatype, dev cuda.DevicePtr, host []byte) (*DeviceMem, error) {
	es := dt.Size()
	if count < 0 || src == nil || count*es > src.n {
		return nil, fmt.Errorf("ce: pre-multiply of %d %v elements", count, dt)
	}
	if dev == 0 && len(host) != es {
		return nil, fmt.Errorf("ce: pre-multiply scalar of %d bytes for %v", len(host), dt)
	}
	var out *DeviceMem
	err := p.g.do(func() error {
		g, r := p.g, p.r
		if err := g.use(r); err != nil {
			return err
		}
		bytes := count * es
		if err := p.premulScratch(max(bytes, 16)); err != nil {
			return err
		}
		con := p.premulCon
		if dev == 0 {
			var w [8]byte
			copy(w[:], host)
			for i := 0; i < 8; i += 4 {
				if err := r.user.WriteValue32(con.Add(i), binary.LittleEndian.Uint32(w[i:])); err != nil {
					return err
				}
			}
		} else if err := cuda.MemcpyDtoDAsync(con, dev, es, r.user); err != nil {
			return err
		}
		for filled := es; filled < bytes; {
			n := min(filled, bytes-filled)
			if err := cuda.MemcpyDtoDAsync(con.Add(filled), con, n, r.user); err != nil {
				return err
			}
			filled += n
		}
		if count > 0 {
			if err := g.launchReduce(r, r.user, dt, collective.Prod, p.premulOut, src.Ptr(), con, count, g.cfg.SMs, 1); err != nil {
				return err
			}
		}
		m, err := p.wrapLocked(Extent{Ptr: p.premulOut, Bytes: bytes})
		out = m
		return err
	})
	return out, err
}

// premulScratch makes the pre-multiply buffers at least n bytes (growing
// them waits for the queued work). On the proxy thread.
func (p *Proc) premulScratch(n int) error {
	if p.premulLen >= n {
		return nil
	}
	if p.premulLen > 0 {
		if err := p.r.user.Synchronize(); err != nil {
			return err
		}
		cuda.MemFree(p.premulOut)
		cuda.MemFree(p.premulCon)
		p.premulOut, p.premulCon, p.premulLen = 0, 0, 0
	}
	size := chunkRound(n) // peers map the products: whole pages (chunkRound)
	out, err := cuda.MemAlloc(size)
	if err != nil {
		return err
	}
	con, err := cuda.MemAlloc(size)
	if err != nil {
		cuda.MemFree(out)
		return err
	}
	p.premulOut, p.premulCon, p.premulLen = out, con, size
	return nil
}
