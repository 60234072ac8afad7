package gpubench

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/ce"
	"github.com/vccl-go/vccl/gpu/kernels"
)

// arPaths are the all-reduce paths CommCheck runs.
var arPaths = []struct {
	name                           string
	flags, fused                   bool
	oneKernelMax, directMax, chunk int
}{{"peer read fused", true, true, 1 << 30, 0, 0}, {"peer read", true, false, 1 << 30, 0, 0},
	{"direct", true, true, -1, 1 << 30, 0}, {"direct chunked", true, true, -1, 1 << 30, 512},
	{"pipelined", true, true, -1, -1, 1024}, {"mailbox", false, true, 0, 0, 0}}

// CommCounts are the element counts of CommCheck.
var CommCounts = []int{1, 7, 1000, 65537}

// commInput is rank's input of a case: every rank can compute every rank's.
func commInput(dt collective.Datatype, elems, rank, salt int) []byte {
	b := make([]byte, elems*dt.Size())
	kernels.Fill(dt, b, uint64(elems)*1009+uint64(rank)*131+uint64(salt)*7919+uint64(dt)*17)
	return b
}

// CommCheck checks every collective of the collective API on device
// buffers (from p, attached to c) against the host reference: all-reduce
// (out of place and in place), reduce-scatter, reduce to every root for
// every datatype × reduction; all-gather (out of place and in place),
// broadcast from every root, all-to-all (out of place and in place),
// gather, scatter and a ring of send/recv for every datatype; counts
// CommCounts. Every rank calls it; it returns this rank's failures and
// the number of cases.
func CommCheck(ctx context.Context, c *collective.Comm, p *ce.Proc, w io.Writer) (failed, total int, err error) {
	me, n := c.Rank(), c.Size()
	maxElems := 0
	for _, k := range CommCounts {
		maxElems = max(maxElems, k)
	}
	maxBytes := n * maxElems * 8
	sendM, err := p.Alloc(ctx, maxBytes)
	if err != nil {
		return 0, 0, err
	}
	defer p.Free(ctx, sendM)
	recvM, err := p.Alloc(ctx, maxBytes)
	if err != nil {
		return 0, 0, err
	}
	defer p.Free(ctx, recvM)
	poison := bytes.Repeat([]byte{0x5a}, maxBytes)

	type kase struct {
		name string
		dt   collective.Datatype
		send *ce.DeviceMem // nil: none on this rank
		in   []byte
		recv *ce.DeviceMem
		want []byte // nil: recv not checked on this rank
		run  func(s, r collective.Buffer) error
	}
	do := func(k kase) error {
		total++
		if err := p.Upload(recvM, poison); err != nil {
			return err
		}
		if k.in != nil {
			dst := k.send
			if err := p.Upload(dst, k.in); err != nil {
				return err
			}
		}
		var s, r collective.Buffer
		if k.send != nil {
			s = collective.DeviceBuf(k.send, k.dt)
		}
		if k.recv != nil {
			r = collective.DeviceBuf(k.recv, k.dt)
		}
		if err := k.run(s, r); err != nil {
			return fmt.Errorf("%s: %w", k.name, err)
		}
		if k.want == nil {
			return nil
		}
		got := make([]byte, len(k.want))
		if err := p.Download(got, k.recv); err != nil {
			return err
		}
		if i := kernels.Equal(k.dt, got, k.want); i >= 0 {
			failed++
			es := k.dt.Size()
			fmt.Fprintf(w, "FAIL rank %d %s: element %d of %d got % x want % x\n", me, k.name, i, len(k.want)/es, got[i*es:(i+1)*es], k.want[i*es:(i+1)*es])
		}
		return nil
	}
	ins := func(dt collective.Datatype, elems, salt int) [][]byte {
		out := make([][]byte, n)
		for q := range out {
			out[q] = commInput(dt, elems, q, salt)
		}
		return out
	}
	block := func(b []byte, q, size int) []byte { return b[q*size : (q+1)*size] }
	for _, dt := range collective.Datatypes() {
		es := dt.Size()
		for _, cnt := range CommCounts {
			b := cnt * es
			for _, op := range collective.ReduceOps() {
				tag := fmt.Sprintf("%v %v count %d", dt, op, cnt)
				in := ins(dt, cnt, 1)
				want := kernels.Reference(dt, op, in)
				// Every all-reduce path: direct, pipelined in many
				// chunks, mailbox.
				for _, path := range arPaths {
					p.SetAllReducePaths(path.flags, path.oneKernelMax, path.directMax, path.chunk)
					p.SetFusedPeerRead(path.fused)
					if err := do(kase{name: "allreduce " + path.name + " " + tag, dt: dt, send: sendM.Slice(0, b), in: in[me], recv: recvM.Slice(0, b), want: want,
						run: func(s, r collective.Buffer) error { return c.AllReduce(ctx, s, r, op) }}); err != nil {
						return failed, total, err
					}
					if err := do(kase{name: "allreduce in place " + path.name + " " + tag, dt: dt, send: recvM.Slice(0, b), in: in[me], recv: recvM.Slice(0, b), want: want,
						run: func(s, r collective.Buffer) error { return c.AllReduce(ctx, r, r, op) }}); err != nil {
						return failed, total, err
					}
				}
				p.SetAllReducePaths(true, ce.DefaultOneKernelMax, ce.DefaultDirectMax, 0)
				p.SetFusedPeerRead(true)
				rin := ins(dt, n*cnt, 2)
				blocks := make([][]byte, n)
				for q := range blocks {
					blocks[q] = block(rin[q], me, b)
				}
				if err := do(kase{name: "reducescatter " + tag, dt: dt, send: sendM.Slice(0, n*b), in: rin[me], recv: recvM.Slice(0, b), want: kernels.Reference(dt, op, blocks),
					run: func(s, r collective.Buffer) error { return c.ReduceScatter(ctx, s, r, op) }}); err != nil {
					return failed, total, err
				}
				for root := 0; root < n; root++ {
					k := kase{name: fmt.Sprintf("reduce root %d %s", root, tag), dt: dt, send: sendM.Slice(0, b), in: in[me],
						run: func(s, r collective.Buffer) error { return c.Reduce(ctx, s, r, op, root) }}
					if me == root {
						k.recv, k.want = recvM.Slice(0, b), want
					}
					if err := do(k); err != nil {
						return failed, total, err
					}
				}
			}
			tag := fmt.Sprintf("%v count %d", dt, cnt)
			in := ins(dt, cnt, 3)
			all := bytes.Join(in, nil)
			if err := do(kase{name: "allgather " + tag, dt: dt, send: sendM.Slice(0, b), in: in[me], recv: recvM.Slice(0, n*b), want: all,
				run: func(s, r collective.Buffer) error { return c.AllGather(ctx, s, r) }}); err != nil {
				return failed, total, err
			}
			if err := do(kase{name: "allgather in place " + tag, dt: dt, send: recvM.Slice(me*b, b), in: in[me], recv: recvM.Slice(0, n*b), want: all,
				run: func(s, r collective.Buffer) error { return c.AllGather(ctx, s, r) }}); err != nil {
				return failed, total, err
			}
			for root := 0; root < n; root++ {
				k := kase{name: fmt.Sprintf("broadcast root %d %s", root, tag), dt: dt, recv: recvM.Slice(0, b), want: in[root],
					run: func(s, r collective.Buffer) error { return c.Broadcast(ctx, s, r, root) }}
				if me == root {
					k.send, k.in = sendM.Slice(0, b), in[me]
				}
				if err := do(k); err != nil {
					return failed, total, err
				}
			}
			ain := ins(dt, n*cnt, 4)
			awant := make([]byte, 0, n*b)
			for q := 0; q < n; q++ {
				awant = append(awant, block(ain[q], me, b)...)
			}
			if err := do(kase{name: "alltoall " + tag, dt: dt, send: sendM.Slice(0, n*b), in: ain[me], recv: recvM.Slice(0, n*b), want: awant,
				run: func(s, r collective.Buffer) error { return c.AllToAll(ctx, s, r) }}); err != nil {
				return failed, total, err
			}
			if err := do(kase{name: "alltoall in place " + tag, dt: dt, send: recvM.Slice(0, n*b), in: ain[me], recv: recvM.Slice(0, n*b), want: awant,
				run: func(s, r collective.Buffer) error { return c.AllToAll(ctx, r, r) }}); err != nil {
				return failed, total, err
			}
			g := kase{name: "gather root 0 " + tag, dt: dt, send: sendM.Slice(0, b), in: in[me],
				run: func(s, r collective.Buffer) error { return c.Gather(ctx, s, r, 0) }}
			if me == 0 {
				g.recv, g.want = recvM.Slice(0, n*b), all
			}
			if err := do(g); err != nil {
				return failed, total, err
			}
			sc := kase{name: "scatter root 0 " + tag, dt: dt, recv: recvM.Slice(0, b), want: block(ain[0], me, b),
				run: func(s, r collective.Buffer) error { return c.Scatter(ctx, s, r, 0) }}
			if me == 0 {
				sc.send, sc.in = sendM.Slice(0, n*b), ain[0]
			}
			if err := do(sc); err != nil {
				return failed, total, err
			}
			next, prev := (me+1)%n, (me+n-1)%n
			if err := do(kase{name: "sendrecv ring " + tag, dt: dt, send: sendM.Slice(0, b), in: in[me], recv: recvM.Slice(0, b), want: in[prev],
				run: func(s, r collective.Buffer) error {
					return c.SendRecv(ctx, collective.SendTo(next, s), collective.RecvFrom(prev, r))
				}}); err != nil {
				return failed, total, err
			}
		}
	}
	// A buffer on the wrong side is refused before anything moves.
	host := collective.Bytes(make([]byte, 64), collective.Uint8)
	if err := c.AllReduce(ctx, collective.DeviceBuf(sendM.Slice(0, 64), collective.Uint8), host, collective.Sum); err == nil {
		failed++
		fmt.Fprintf(w, "FAIL rank %d: host and device buffers mixed were accepted\n", me)
	}
	total++
	return failed, total, nil
}
