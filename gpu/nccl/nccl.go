// Package nccl opens NVIDIA's libnccl.so.2 at run time through purego (no
// cgo) and exposes the few calls VCCL measures itself against: one
// communicator per GPU of this process (ncclCommInitAll) or one rank per
// process (GetUniqueID, InitRank), all-reduce,
// all-gather, send and receive, and groups. It exists for side-by-side
// benchmarks on the same buffers and streams; VCCL does not use NCCL.
package nccl

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

// EnvLib names the library to open; otherwise Open searches the usual
// places, the torch pip package's nvidia/nccl/lib among them. A command
// passes its value to SetLibrary.
const EnvLib = "VCCL_NCCL_LIB"

// ErrNoNCCL is returned when no libnccl.so.2 can be opened.
var ErrNoNCCL = errors.New("nccl: libnccl.so.2 not found")

var (
	once sync.Once
	err0 error
	lib  struct {
		getVersion, commInitAll, commDestroy, allReduce, allGather uintptr
		send, recv, groupStart, groupEnd, getErrorString           uintptr
		reduceScatter, reduce, broadcast                           uintptr
		getUniqueID, commInitRankScalable                          uintptr // optional
	}
	path    string
	libMu   sync.Mutex
	libPath string // SetLibrary's
)

// SetLibrary names the library Open loads ("": search Candidates). The
// library is opened once per process, so it has no effect after the first
// Open.
func SetLibrary(p string) {
	libMu.Lock()
	defer libMu.Unlock()
	libPath = p
}

// Candidates lists the paths Open tries when SetLibrary named none.
func Candidates() []string {
	var out []string
	for _, pat := range []string{
		"/opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
		"/opt/*/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
		"/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
		"/usr/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
		"/opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib/libnccl.so.2",
		"/usr/local/lib/python3*/dist-packages/nvidia/cu13/lib/libnccl.so.2",
	} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return append(out, "libnccl.so.2")
}

// Open loads the library once.
func Open() (string, error) {
	once.Do(func() {
		if err := cuda.Load(); err != nil {
			err0 = err
			return
		}
		cands := Candidates()
		libMu.Lock()
		if libPath != "" {
			cands = []string{libPath}
		}
		libMu.Unlock()
		var h uintptr
		var errs []error
		for _, p := range cands {
			var err error
			if h, err = purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
				path = p
				break
			}
			errs = append(errs, err)
		}
		if h == 0 {
			err0 = fmt.Errorf("%w: %v", ErrNoNCCL, errors.Join(errs...))
			return
		}
		for _, s := range []struct {
			dst  *uintptr
			name string
		}{
			{&lib.getVersion, "ncclGetVersion"}, {&lib.commInitAll, "ncclCommInitAll"},
			{&lib.commDestroy, "ncclCommDestroy"}, {&lib.allReduce, "ncclAllReduce"},
			{&lib.allGather, "ncclAllGather"}, {&lib.send, "ncclSend"}, {&lib.recv, "ncclRecv"},
			{&lib.groupStart, "ncclGroupStart"}, {&lib.groupEnd, "ncclGroupEnd"},
			{&lib.getErrorString, "ncclGetErrorString"},
			{&lib.reduceScatter, "ncclReduceScatter"}, {&lib.reduce, "ncclReduce"}, {&lib.broadcast, "ncclBroadcast"},
		} {
			p, err := purego.Dlsym(h, s.name)
			if err != nil {
				err0 = fmt.Errorf("nccl: %s: %v", path, err)
				return
			}
			*s.dst = p
		}
		// ncclCommInitRank takes the 128-byte id by value, past what
		// purego.SyscallN can lay out (15 arguments); ncclCommInitRankScalable
		// (NCCL 2.23 and later) takes a pointer to it and does the same.
		lib.getUniqueID, _ = purego.Dlsym(h, "ncclGetUniqueId")
		lib.commInitRankScalable, _ = purego.Dlsym(h, "ncclCommInitRankScalable")
	})
	return path, err0
}

//go:uintptrescapes
func call(fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if int32(r) == 0 {
		return nil
	}
	msg := ""
	if lib.getErrorString != 0 {
		p, _, _ := purego.SyscallN(lib.getErrorString, r)
		msg = goString(p)
	}
	return fmt.Errorf("nccl: error %d: %s", int32(r), msg)
}

func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	var b []byte
	for i := 0; i < 1024; i++ {
		c := *(*byte)(unsafe.Add(*(*unsafe.Pointer)(unsafe.Pointer(&p)), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// Version returns NCCL's version code (e.g. 22809 for 2.28.9).
func Version() (int, error) {
	if _, err := Open(); err != nil {
		return 0, err
	}
	var v int32
	err := call(lib.getVersion, uintptr(unsafe.Pointer(&v)))
	return int(v), err
}

// Comm is an ncclComm_t.
type Comm uintptr

// InitAll creates one communicator per device, in one process.
func InitAll(devices []int) ([]Comm, error) {
	if _, err := Open(); err != nil {
		return nil, err
	}
	comms := make([]Comm, len(devices))
	devs := make([]int32, len(devices))
	for i, d := range devices {
		devs[i] = int32(d)
	}
	err := call(lib.commInitAll, uintptr(unsafe.Pointer(&comms[0])), uintptr(len(devices)), uintptr(unsafe.Pointer(&devs[0])))
	return comms, err
}

// UniqueID is an ncclUniqueId: rank 0 makes it, every rank of the job
// gets a copy (through the host communicator) and passes it to InitRank.
type UniqueID [128]byte

// GetUniqueID makes the id of a new communicator.
func GetUniqueID() (UniqueID, error) {
	var id UniqueID
	if _, err := Open(); err != nil {
		return id, err
	}
	if lib.getUniqueID == 0 {
		return id, fmt.Errorf("nccl: %s has no ncclGetUniqueId", path)
	}
	err := call(lib.getUniqueID, uintptr(unsafe.Pointer(&id)))
	return id, err
}

// InitRank joins rank of an nranks communicator on the device current on
// the calling thread (one process per GPU). Every rank calls it with the
// same id; it returns once all have.
func InitRank(nranks, rank int, id UniqueID) (Comm, error) {
	if _, err := Open(); err != nil {
		return 0, err
	}
	if lib.commInitRankScalable == 0 {
		return 0, fmt.Errorf("nccl: %s has no ncclCommInitRankScalable (NCCL 2.23 or later)", path)
	}
	var c Comm
	err := call(lib.commInitRankScalable, uintptr(unsafe.Pointer(&c)), uintptr(nranks), uintptr(rank), 1, uintptr(unsafe.Pointer(&id)), 0)
	return c, err
}

// Destroy frees the communicator.
func (c Comm) Destroy() error { return call(lib.commDestroy, uintptr(c)) }

// DataType maps a collective datatype to ncclDataType_t.
func DataType(dt collective.Datatype) uintptr {
	switch dt {
	case collective.Int8:
		return 0
	case collective.Uint8:
		return 1
	case collective.Int32:
		return 2
	case collective.Uint32:
		return 3
	case collective.Int64:
		return 4
	case collective.Uint64:
		return 5
	case collective.Float16:
		return 6
	case collective.Float32:
		return 7
	case collective.Float64:
		return 8
	case collective.BFloat16:
		return 9
	}
	panic("nccl: datatype " + dt.String())
}

// RedOp maps a reduction to ncclRedOp_t.
func RedOp(op collective.ReduceOp) uintptr {
	switch op {
	case collective.Sum:
		return 0
	case collective.Prod:
		return 1
	case collective.Max:
		return 2
	case collective.Min:
		return 3
	case collective.Avg:
		return 4
	}
	panic("nccl: reduction " + op.String())
}

// AllReduce queues ncclAllReduce on s.
func (c Comm) AllReduce(send, recv cuda.DevicePtr, count int, dt collective.Datatype, op collective.ReduceOp, s cuda.Stream) error {
	return call(lib.allReduce, uintptr(send), uintptr(recv), uintptr(count), DataType(dt), RedOp(op), uintptr(c), uintptr(s))
}

// AllGather queues ncclAllGather of sendcount elements per rank.
func (c Comm) AllGather(send, recv cuda.DevicePtr, sendcount int, dt collective.Datatype, s cuda.Stream) error {
	return call(lib.allGather, uintptr(send), uintptr(recv), uintptr(sendcount), DataType(dt), uintptr(c), uintptr(s))
}

// ReduceScatter queues ncclReduceScatter of recvcount elements per rank.
func (c Comm) ReduceScatter(send, recv cuda.DevicePtr, recvcount int, dt collective.Datatype, op collective.ReduceOp, s cuda.Stream) error {
	return call(lib.reduceScatter, uintptr(send), uintptr(recv), uintptr(recvcount), DataType(dt), RedOp(op), uintptr(c), uintptr(s))
}

// Reduce queues ncclReduce to root.
func (c Comm) Reduce(send, recv cuda.DevicePtr, count int, dt collective.Datatype, op collective.ReduceOp, root int, s cuda.Stream) error {
	return call(lib.reduce, uintptr(send), uintptr(recv), uintptr(count), DataType(dt), RedOp(op), uintptr(root), uintptr(c), uintptr(s))
}

// Broadcast queues ncclBroadcast from root.
func (c Comm) Broadcast(send, recv cuda.DevicePtr, count int, dt collective.Datatype, root int, s cuda.Stream) error {
	return call(lib.broadcast, uintptr(send), uintptr(recv), uintptr(count), DataType(dt), uintptr(root), uintptr(c), uintptr(s))
}

// Send queues ncclSend to peer.
func (c Comm) Send(buf cuda.DevicePtr, count int, dt collective.Datatype, peer int, s cuda.Stream) error {
	return call(lib.send, uintptr(buf), uintptr(count), DataType(dt), uintptr(peer), uintptr(c), uintptr(s))
}

// Recv queues ncclRecv from peer.
func (c Comm) Recv(buf cuda.DevicePtr, count int, dt collective.Datatype, peer int, s cuda.Stream) error {
	return call(lib.recv, uintptr(buf), uintptr(count), DataType(dt), uintptr(peer), uintptr(c), uintptr(s))
}

// GroupStart opens a group of calls (needed to drive several GPUs from one thread).
func GroupStart() error { return call(lib.groupStart) }

// GroupEnd closes it and launches the calls.
func GroupEnd() error { return call(lib.groupEnd) }
