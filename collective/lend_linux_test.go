package collective

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/vccl-go/vccl/internal/hugepages"
	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/shm"
	"github.com/vccl-go/vccl/transport/tcp"
)

// shm's QPs move their traffic in Poll and TCP's do not (its writer
// goroutine finishes sends): the drivers of the one keep their processor,
// of the other lend it.
func TestTransportsLendAsTheyMove(t *testing.T) {
	if lendsProcessor([]transport.QP{nil, (*shm.QP)(nil)}) {
		t.Error("a driver of shm QPs lends its processor")
	}
	if !lendsProcessor([]transport.QP{nil, (*tcp.QP)(nil)}) {
		t.Error("a driver of TCP QPs keeps its processor")
	}
}

// Buffers that calls by loans read by single copy go into huge pages from
// their second call (decision 0064), and the results stay whole.
func TestLoanedBuffersGoHuge(t *testing.T) {
	if ok, why := hugepages.Collapses(); !ok {
		t.Skip(why)
	}
	byLoans(t)
	ctx, comms := loanComms(t, 2)
	const n = 8 << 20
	send, recv := goHugeBuffers(t, n)
	before := mailboxCalls(comms[0])
	for call := range 3 {
		for r := range comms {
			clear(recv[r])
			f := unsafe.Slice((*float32)(unsafe.Pointer(&send[r][0])), n/4)
			for i := range f {
				f[i] = float32(r + 1 + call)
			}
		}
		err := runOnAll(comms, func(c *Comm) error {
			return c.AllReduce(ctx, Bytes(send[c.Rank()], Float32), Bytes(recv[c.Rank()], Float32), Sum)
		})
		if err != nil {
			t.Fatal(err)
		}
		want := float32(3 + 2*call)
		for r := range comms {
			for i, v := range unsafe.Slice((*float32)(unsafe.Pointer(&recv[r][0])), n/4) {
				if v != want {
					t.Fatalf("call %d, rank %d, element %d: %v, want %v", call, r, i, v, want)
				}
			}
		}
	}
	if k := mailboxCalls(comms[0]); k != before+3 || !wentByLoans(comms[0], k, &request{call: call{op: OpAllReduce, redop: Sum}, dt: Float32}) {
		t.Fatalf("the calls did not go by loans (mailbox calls %d -> %d)", before, k)
	}
	// 3 whole huge pages lie in 8 MiB wherever it starts.
	for r := range comms {
		for name, b := range map[string][]byte{"input": send[r], "output": recv[r]} {
			kb, err := hugepages.KB(b)
			if err != nil {
				t.Fatal(err)
			}
			if kb < 3*hugepages.Page>>10 {
				t.Errorf("rank %d's %s: %d kB in huge pages, want whole pages collapsed", r, name, kb)
			}
		}
	}
}

// goHugeBuffers returns each of 2 ranks' input and output of n bytes, in
// mappings of their own, the same ones every time: a mapping unmapped
// and made again at the same addresses would be taken for one collapsed
// already, which shm collapses again only after some calls.
var goHugeBuffers = func() func(t *testing.T, n int) (send, recv [][]byte) {
	var once sync.Once
	var send, recv [][]byte
	var err error
	return func(t *testing.T, n int) ([][]byte, [][]byte) {
		once.Do(func() {
			for range 2 {
				var s, r []byte
				if s, _, err = hugepages.Map(n); err != nil {
					return
				}
				if r, _, err = hugepages.Map(n); err != nil {
					return
				}
				send, recv = append(send, s), append(recv, r)
			}
		})
		if err != nil || len(send[0]) != n {
			t.Fatalf("mapping the buffers: %v", err)
		}
		return send, recv
	}
}()
