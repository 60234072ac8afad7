package collective

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"
)

// The matrix, in the manner of Gloo's tests: every collective × datatype ×
// reduction × world size × element count × in/out of place, over each
// transport, each result checked against a reference computed here in
// float64 or the integer type's own wrapping arithmetic. `make test` runs a
// deterministic sample of the cells; VCCL_TEST_FULL=1 (make test-full) runs
// every one.

var fullMatrix = os.Getenv("VCCL_TEST_FULL") == "1"

// matrixCase is one cell of the matrix.
type matrixCase struct {
	op      Op
	dt      Datatype
	redop   ReduceOp
	count   int
	inPlace bool
	root    int
}

func (mc matrixCase) String() string {
	return fmt.Sprintf("%v/%v/%v/count=%d/inplace=%v/root=%d", mc.op, mc.dt, mc.redop, mc.count, mc.inPlace, mc.root)
}

var matrixOps = []Op{OpAllReduce, OpAllGather, OpReduceScatter, OpBroadcast, OpReduce, OpAllToAll, OpAllToAllv, OpGather, OpScatter, OpGroup, OpBarrier}

func matrixCases(n int, large int) []matrixCase {
	var out []matrixCase
	for _, op := range matrixOps {
		for _, dt := range Datatypes() {
			redops := []ReduceOp{0}
			if op.Reduces() {
				redops = ReduceOps()
			}
			for _, redop := range redops {
				for _, count := range []int{0, 1, 13, large} {
					for _, inPlace := range []bool{false, true} {
						if inPlace && (op == OpAllToAllv || op == OpGroup || op == OpBarrier) {
							continue
						}
						out = append(out, matrixCase{op: op, dt: dt, redop: redop, count: count, inPlace: inPlace, root: (count + 1) % n})
					}
				}
			}
		}
	}
	return out
}

// sampled picks about one cell in every k, always including every operation.
func sampled(cases []matrixCase, k int, seed uint64) []matrixCase {
	rng := rand.New(rand.NewPCG(seed, 7))
	seen := map[Op]bool{}
	var out []matrixCase
	for _, c := range cases {
		if !seen[c.op] || rng.IntN(k) == 0 {
			seen[c.op] = true
			out = append(out, c)
		}
	}
	return out
}

// value is the deterministic input element i of rank r for a case: small
// integers, exact in every datatype, so the reference is exact too.
func value(mc matrixCase, r, i int) float64 {
	h := uint64(r)*0x9E3779B97F4A7C15 + uint64(i)*0xBF58476D1CE4E5B9 + uint64(mc.count)
	h ^= h >> 31
	if mc.redop == Prod { // products stay exact
		if !isSignedType(mc.dt) {
			return [...]float64{1, 2, 1, 3}[h%4]
		}
		return [...]float64{-2, -1, 1, 2}[h%4]
	}
	v := float64(h%17) - 8
	if !isSignedType(mc.dt) {
		v += 8
	}
	return v
}

func isSignedType(dt Datatype) bool {
	return dt != Uint8 && dt != Uint32 && dt != Uint64
}

func encode(dt Datatype, dst []byte, v float64) {
	switch dt {
	case Int8, Uint8:
		dst[0] = byte(int64(v))
	case Int32, Uint32:
		binary.LittleEndian.PutUint32(dst, uint32(int64(v)))
	case Int64, Uint64:
		binary.LittleEndian.PutUint64(dst, uint64(int64(v)))
	case Float16:
		binary.LittleEndian.PutUint16(dst, uint16(HalfFrom(float32(v))))
	case BFloat16:
		binary.LittleEndian.PutUint16(dst, uint16(BFloatFrom(float32(v))))
	case Float32:
		binary.LittleEndian.PutUint32(dst, math.Float32bits(float32(v)))
	case Float64:
		binary.LittleEndian.PutUint64(dst, math.Float64bits(v))
	}
}

func decode(dt Datatype, b []byte) float64 {
	switch dt {
	case Int8:
		return float64(int8(b[0]))
	case Uint8:
		return float64(b[0])
	case Int32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case Uint32:
		return float64(binary.LittleEndian.Uint32(b))
	case Int64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case Uint64:
		return float64(binary.LittleEndian.Uint64(b))
	case Float16:
		return float64(Half(binary.LittleEndian.Uint16(b)).Float32())
	case BFloat16:
		return float64(BFloat(binary.LittleEndian.Uint16(b)).Float32())
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}

// wrap maps an exact integer result to what the datatype holds.
func wrap(dt Datatype, v float64) float64 {
	switch dt {
	case Int8:
		return float64(int8(int64(v)))
	case Uint8:
		return float64(uint8(int64(v)))
	case Int32:
		return float64(int32(int64(v)))
	case Uint32:
		return float64(uint32(int64(v)))
	}
	return v
}

// reference is the reduction of element i of block blk across n ranks.
func reference(mc matrixCase, n, blk, i int) float64 {
	acc := value(mc, 0, blk*mc.count+i)
	for r := 1; r < n; r++ {
		v := value(mc, r, blk*mc.count+i)
		switch mc.redop {
		case Prod:
			acc *= v
		case Min:
			acc = math.Min(acc, v)
		case Max:
			acc = math.Max(acc, v)
		default:
			acc += v
		}
	}
	if mc.redop == Avg {
		if mc.dt.IsFloat() {
			return acc / float64(n)
		}
		return math.Trunc(wrap(mc.dt, acc) / float64(n))
	}
	return wrap(mc.dt, acc)
}

func fillCase(mc matrixCase, b []byte, r, firstElem int) {
	es := mc.dt.Size()
	for i := 0; i < len(b)/es; i++ {
		encode(mc.dt, b[i*es:], value(mc, r, firstElem+i))
	}
}

func near(dt Datatype, got, want float64) bool {
	if got == want {
		return true
	}
	switch dt {
	case Float16, BFloat16:
		return math.Abs(got-want) <= 1e-2*math.Max(1, math.Abs(want))
	case Float32:
		return math.Abs(got-want) <= 1e-6*math.Max(1, math.Abs(want))
	}
	return false
}

// checkElems compares the elements of got with want(i).
func checkElems(mc matrixCase, got []byte, what string, want func(i int) float64) error {
	es := mc.dt.Size()
	for i := 0; i < len(got)/es; i++ {
		g := decode(mc.dt, got[i*es:])
		if w := want(i); !near(mc.dt, g, w) {
			return fmt.Errorf("%s element %d = %v, want %v", what, i, g, w)
		}
	}
	return nil
}

// runCase runs one matrix cell on rank r and checks its result.
func runCase(ctx context.Context, c *Comm, mc matrixCase) error {
	r, n, es := c.Rank(), c.Size(), mc.dt.Size()
	bl := mc.count * es
	buf := func(elems int) []byte { return make([]byte, elems*es) }
	B := func(b []byte) Buffer { return Bytes(b, mc.dt) }
	// orOwn is the in-place case's shared buffer, else one of its own.
	orOwn := func(shared []byte, elems int) []byte {
		if mc.inPlace {
			return shared
		}
		return buf(elems)
	}
	switch mc.op {
	case OpAllReduce, OpReduce:
		send := buf(mc.count)
		fillCase(mc, send, r, 0)
		recv := orOwn(send, mc.count)
		if mc.op == OpAllReduce {
			if err := c.AllReduce(ctx, B(send), B(recv), mc.redop); err != nil {
				return err
			}
		} else if err := c.Reduce(ctx, B(send), B(recv), mc.redop, mc.root); err != nil || r != mc.root {
			return err
		}
		return checkElems(mc, recv, "result", func(i int) float64 { return reference(mc, n, 0, i) })
	case OpReduceScatter:
		send := buf(n * mc.count)
		fillCase(mc, send, r, 0)
		// Reference blocks: element i of block b is input element b*count+i.
		recv := orOwn(send[r*bl:(r+1)*bl], mc.count)
		if err := c.ReduceScatter(ctx, B(send), B(recv), mc.redop); err != nil {
			return err
		}
		return checkElems(mc, recv, "result", func(i int) float64 { return reference(mc, n, r, i) })
	case OpAllGather:
		recv := buf(n * mc.count)
		send := orOwn(recv[r*bl:(r+1)*bl], mc.count)
		fillCase(mc, send, r, 0)
		if err := c.AllGather(ctx, B(send), B(recv)); err != nil {
			return err
		}
		return checkElems(mc, recv, "result", func(i int) float64 { return value(mc, i/max(mc.count, 1), i%max(mc.count, 1)) })
	case OpBroadcast:
		recv := buf(mc.count)
		send := orOwn(recv, mc.count)
		fillCase(mc, send, r, 0)
		if err := c.Broadcast(ctx, B(send), B(recv), mc.root); err != nil {
			return err
		}
		return checkElems(mc, recv, "result", func(i int) float64 { return value(mc, mc.root, i) })
	case OpAllToAll:
		send := buf(n * mc.count)
		fillCase(mc, send, r, 0)
		recv := orOwn(send, n*mc.count)
		if err := c.AllToAll(ctx, B(send), B(recv)); err != nil {
			return err
		}
		// Block p of the result is block r of rank p's input.
		return checkElems(mc, recv, "result", func(i int) float64 {
			p := i / max(mc.count, 1)
			return value(mc, p, r*mc.count+i%max(mc.count, 1))
		})
	case OpAllToAllv:
		// Rank r sends (r+p)%3 + count elements to rank p.
		sz := func(from, to int) int { return (from+to)%3 + mc.count }
		sc, sd, rc, rd := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
		st, rt := 0, 0
		for p := range n {
			sc[p], sd[p], st = sz(r, p), st, st+sz(r, p)
			rc[p], rd[p], rt = sz(p, r), rt, rt+sz(p, r)
		}
		send, recv := buf(st), buf(rt)
		fillCase(mc, send, r, 0)
		if err := c.AllToAllv(ctx, B(send), sc, sd, B(recv), rc, rd); err != nil {
			return err
		}
		for p := range n {
			// Rank p's block for r starts at its displacement for r.
			disp := 0
			for q := range r {
				disp += sz(p, q)
			}
			if err := checkElems(mc, recv[rd[p]*es:(rd[p]+rc[p])*es], fmt.Sprintf("block from rank %d", p), func(i int) float64 { return value(mc, p, disp+i) }); err != nil {
				return err
			}
		}
		return nil
	case OpGather:
		recv := buf(n * mc.count)
		send := recv[r*bl : (r+1)*bl]
		if !mc.inPlace || r != mc.root {
			send = buf(mc.count)
		}
		fillCase(mc, send, r, 0)
		if err := c.Gather(ctx, B(send), B(recv), mc.root); err != nil {
			return err
		}
		if r != mc.root {
			return nil
		}
		return checkElems(mc, recv, "result", func(i int) float64 { return value(mc, i/max(mc.count, 1), i%max(mc.count, 1)) })
	case OpScatter:
		send := buf(n * mc.count)
		fillCase(mc, send, r, 0)
		recv := send[r*bl : (r+1)*bl]
		if !mc.inPlace || r != mc.root {
			recv = buf(mc.count)
		}
		if err := c.Scatter(ctx, B(send), B(recv), mc.root); err != nil {
			return err
		}
		return checkElems(mc, recv, "result", func(i int) float64 { return value(mc, mc.root, r*mc.count+i) })
	case OpGroup:
		if n == 1 {
			return nil
		}
		// A pipeline-parallel exchange: send to both neighbours and receive
		// from both, which deadlocks as separate blocking calls.
		next, prev := (r+1)%n, (r+n-1)%n
		toNext, toPrev := buf(mc.count), buf(mc.count+1)
		fillCase(mc, toNext, r, 0)
		fillCase(mc, toPrev, r, 1000)
		fromPrev, fromNext := buf(mc.count), buf(mc.count+1)
		ops := []P2P{SendTo(next, B(toNext)), RecvFrom(prev, B(fromPrev)), SendTo(prev, B(toPrev)), RecvFrom(next, B(fromNext))}
		if n == 2 { // next == prev: order is what matches
			ops = []P2P{SendTo(next, B(toNext)), SendTo(prev, B(toPrev)), RecvFrom(prev, B(fromPrev)), RecvFrom(next, B(fromNext))}
		}
		if err := c.SendRecv(ctx, ops...); err != nil {
			return err
		}
		if err := checkElems(mc, fromPrev, "from prev", func(i int) float64 { return value(mc, prev, i) }); err != nil {
			return err
		}
		return checkElems(mc, fromNext, "from next", func(i int) float64 { return value(mc, next, 1000+i) })
	case OpBarrier:
		return c.Barrier(ctx)
	}
	return fmt.Errorf("no case for %v", mc.op)
}

// onRanks runs fn on every communicator at once, as each rank's process
// would, and returns their errors in the order of comms.
func onRanks(comms []*Comm, fn func(c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(c)
		}()
	}
	wg.Wait()
	return errs
}

// allReduceOnAll sums n float32 in place on every communicator at once.
func allReduceOnAll(ctx context.Context, comms []*Comm, n int) error {
	return runOnAll(comms, func(c *Comm) error {
		buf := make([]float32, n)
		return AllReduce(ctx, c, buf, buf, Sum)
	})
}

// runOnAll runs fn on every communicator at once and returns the first
// rank's error.
func runOnAll(comms []*Comm, fn func(c *Comm) error) error {
	for i, err := range onRanks(comms, fn) {
		if err != nil {
			return fmt.Errorf("rank %d: %w", i, err)
		}
	}
	return nil
}

func TestMatrix(t *testing.T) {
	t.Parallel()
	for _, tr := range []string{"loop", "tcp", "shm"} {
		runMatrix(t, tr, WithTransport(tr))
	}
	// The direct algorithms, which the tuner picks only for large calls
	// on hosts with a core per rank, on every size and over the
	// transport they are for (single copy included).
	runMatrix(t, "shm/direct", func(o *options) {
		WithTransport("shm")(o)
		WithAlgorithm(AlgoDirect)(o)
	})
}

// runMatrix runs the matrix on NewLocal communicators made with opt, in
// subtests named name/n=N.
func runMatrix(t *testing.T, name string, opt Option) {
	sizes := []int{1, 2, 3, 4, 5, 8}
	large, sample := 4099, 40
	if fullMatrix {
		sizes = []int{1, 2, 3, 4, 5, 6, 7, 8}
		large, sample = 100003, 1
	}
	if testing.Short() {
		sizes, sample = []int{2, 3}, 80
	}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("%s/n=%d", name, n), func(t *testing.T) {
			ctx := testCtx(t, 5*time.Minute)
			comms, err := NewLocal(ctx, n, opt, WithChunkSize(8<<10))
			if err != nil {
				t.Fatal(err)
			}
			defer runOnAll(comms, func(c *Comm) error { return c.Close() })
			cases := matrixCases(n, large)
			if sample > 1 {
				cases = sampled(cases, sample, uint64(n))
			}
			for _, mc := range cases {
				if err := runOnAll(comms, func(c *Comm) error { return runCase(ctx, c, mc) }); err != nil {
					t.Fatalf("%v: %v", mc, err)
				}
			}
			t.Logf("%d cases", len(cases))
		})
	}
}
