package collective

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// testSets returns every kernel set this CPU runs, plus nil (pure Go).
func testSets() []*kernelSet { return append([]*kernelSet{nil}, kernelSets...) }

// TestReduceKernelSets checks the shape of every kernel set: unique names,
// the active set the last (the preferred one), and each vector kernel
// usable as reduceWith uses it.
func TestReduceKernelSets(t *testing.T) {
	t.Parallel()
	if len(kernelSets) == 0 {
		if activeKernels != nil {
			t.Fatalf("no kernel sets, but %s is active", activeKernels.name)
		}
		return
	}
	if last := kernelSets[len(kernelSets)-1]; activeKernels != last {
		t.Errorf("active set %s, want the last listed, %s", setName(activeKernels), last.name)
	}
	names := map[string]bool{}
	for _, ks := range kernelSets {
		if names[ks.name] {
			t.Errorf("two kernel sets named %s", ks.name)
		}
		names[ks.name] = true
		vector := 0
		for _, dt := range Datatypes() {
			for _, op := range ReduceOps() {
				k := ks.k[dt][op]
				if k.fn == nil {
					if k.fnNT != nil {
						t.Errorf("%s/%v/%v: a non-temporal kernel without its ordinary one", ks.name, dt, op)
					}
					continue
				}
				vector++
				if k.block <= 0 || k.block%dt.Size() != 0 {
					t.Errorf("%s/%v/%v: block %d, want a positive multiple of %d", ks.name, dt, op, k.block, dt.Size())
				}
				if k.fnNT != nil && (k.align <= 0 || k.align&(k.align-1) != 0) {
					t.Errorf("%s/%v/%v: align %d, want a power of two", ks.name, dt, op, k.align)
				}
			}
		}
		if vector == 0 {
			t.Errorf("kernel set %s has no vector kernel", ks.name)
		}
	}
}

func setName(ks *kernelSet) string {
	if ks == nil {
		return "go"
	}
	return ks.name
}

// putFloat stores v as element i of a dt buffer (dt a float type).
func putFloat(dt Datatype, buf []byte, i int, v float64) {
	ne := binary.NativeEndian
	switch dt {
	case Float32:
		ne.PutUint32(buf[4*i:], math.Float32bits(float32(v)))
	case Float64:
		ne.PutUint64(buf[8*i:], math.Float64bits(v))
	case Float16:
		ne.PutUint16(buf[2*i:], uint16(HalfFrom(float32(v))))
	case BFloat16:
		ne.PutUint16(buf[2*i:], uint16(BFloatFrom(float32(v))))
	default:
		panic(dt)
	}
}

// getFloat returns element i of a dt buffer as a float64 (exact).
func getFloat(dt Datatype, buf []byte, i int) float64 {
	ne := binary.NativeEndian
	switch dt {
	case Float32:
		return float64(math.Float32frombits(ne.Uint32(buf[4*i:])))
	case Float64:
		return math.Float64frombits(ne.Uint64(buf[8*i:]))
	case Float16:
		return float64(Half(ne.Uint16(buf[2*i:])).Float32())
	case BFloat16:
		return float64(BFloat(ne.Uint16(buf[2*i:])).Float32())
	}
	panic(dt)
}

var floatSpecials = []float64{
	math.NaN(), math.Copysign(math.NaN(), -1), math.Inf(1), math.Inf(-1),
	0, math.Copysign(0, -1), 1, -1, 0.5, 3, -2.75, 1e-40, -1e-40, 6e-8, 65504, 3.4e38, -3.4e38,
}

// fill writes test data of type dt into buf: for integers random bytes; for
// floats a mix of random bit patterns (any value, NaNs with payloads,
// subnormals), moderate random values (inexact sums and products), and
// special values.
func fill(rng *rand.Rand, dt Datatype, buf []byte) {
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	if !dt.IsFloat() {
		return
	}
	for i := 0; i < len(buf)/dt.Size(); i++ {
		switch r := rng.IntN(10); {
		case r < 3:
			// keep the random bits
		case r < 8:
			putFloat(dt, buf, i, (rng.Float64()-0.5)*8)
		default:
			putFloat(dt, buf, i, floatSpecials[rng.IntN(len(floatSpecials))])
		}
	}
}

// sameResult reports the first element where got and want differ bit-wise,
// treating any two NaNs as equal for float types, or -1.
func sameResult(dt Datatype, got, want []byte) int {
	sz := dt.Size()
	for i := 0; i < len(want)/sz; i++ {
		g, w := got[i*sz:(i+1)*sz], want[i*sz:(i+1)*sz]
		if bytes.Equal(g, w) {
			continue
		}
		if dt.IsFloat() && math.IsNaN(getFloat(dt, got, i)) && math.IsNaN(getFloat(dt, want, i)) {
			continue
		}
		return i
	}
	return -1
}

func describe(dt Datatype, buf []byte, i int) string {
	sz := dt.Size()
	e := buf[i*sz : (i+1)*sz]
	if dt.IsFloat() {
		return fmt.Sprintf("%x (%v)", e, getFloat(dt, buf, i))
	}
	return fmt.Sprintf("%x", e)
}

var testLens = []int{0, 1, 7, 31, 33, 1000, 4099}

// withNT runs f with the non-temporal kernels off (default threshold, all
// test buffers being small) and then on for every size.
func withNT(f func(nt string)) {
	f("")
	defer func(old int) { ntThreshold = old }(ntThreshold)
	ntThreshold = 0
	f("nt/")
}

func TestReduceMatchesRef(t *testing.T) {
	withNT(func(nt string) { testReduceMatchesRef(t, nt) })
}

func testReduceMatchesRef(t *testing.T, nt string) {
	rng := rand.New(rand.NewPCG(1, 2))
	const guard = 72
	for _, ks := range testSets() {
		for _, dt := range Datatypes() {
			for _, op := range ReduceOps() {
				for _, n := range testLens {
					for _, offs := range [][3]int{{0, 0, 0}, {1, 3, 5}, {7, 2, 0}, {16, 0, 0}, {40, 0, 8}} {
						for _, alias := range []string{"none", "dst=a", "dst=b"} {
							name := fmt.Sprintf("%s%s/%v/%v/n=%d/off=%v/%s", nt, setName(ks), dt, op, n, offs, alias)
							nb := n * dt.Size()
							back := [3][]byte{}
							for j := range back {
								back[j] = make([]byte, nb+offs[j]+2*guard)
								for k := range back[j] {
									back[j][k] = 0xA5
								}
							}
							dst := back[0][guard+offs[0] : guard+offs[0]+nb]
							a := back[1][guard+offs[1] : guard+offs[1]+nb]
							b := back[2][guard+offs[2] : guard+offs[2]+nb]
							fill(rng, dt, a)
							fill(rng, dt, b)
							want := make([]byte, nb)
							reduceRef(dt, op, want, bytes.Clone(a), bytes.Clone(b))
							switch alias {
							case "dst=a":
								dst = a
							case "dst=b":
								dst = b
							}
							reduceWith(ks, dt, op, dst, a, b)
							if i := sameResult(dt, dst, want); i >= 0 {
								t.Fatalf("%s: element %d: got %s, want %s", name, i, describe(dt, dst, i), describe(dt, want, i))
							}
							for j := range back {
								for k, c := range back[j] {
									inside := k >= guard+offs[j] && k < guard+offs[j]+nb
									if !inside && c != 0xA5 {
										t.Fatalf("%s: buffer %d byte %d outside the slice changed", name, j, k)
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestReduceStaged covers the aligned-scratch path that strict-alignment
// architectures take for misaligned buffers (amd64 never needs it).
func TestReduceStaged(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	for _, dt := range Datatypes() {
		for _, op := range ReduceOps() {
			for _, n := range []int{1, 33, 4099} {
				nb := n * dt.Size()
				a := make([]byte, nb+3)[3:]
				b := make([]byte, nb+1)[1:]
				fill(rng, dt, a)
				fill(rng, dt, b)
				want, got := make([]byte, nb), make([]byte, nb+5)[5:]
				reduceRef(dt, op, want, a, b)
				reduceGoStaged(dt, op, got, a, b)
				if i := sameResult(dt, got, want); i >= 0 {
					t.Fatalf("%v/%v/n=%d: element %d: got %s, want %s", dt, op, n, i, describe(dt, got, i), describe(dt, want, i))
				}
				if op == Sum {
					s1, s2 := bytes.Clone(want), make([]byte, nb+7)[7:]
					copy(s2, want)
					scaleDiv(dt, s1, 3)
					scaleDivStaged(dt, s2, 3)
					if i := sameResult(dt, s2, s1); i >= 0 {
						t.Fatalf("%v/n=%d: staged scaleDiv element %d differs", dt, n, i)
					}
				}
			}
		}
	}
}

// TestReduceAvgIsSum: Avg reduces exactly like Sum.
func TestReduceAvgIsSum(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, dt := range Datatypes() {
		a, b := make([]byte, 100*dt.Size()), make([]byte, 100*dt.Size())
		fill(rng, dt, a)
		fill(rng, dt, b)
		s, v := make([]byte, len(a)), make([]byte, len(a))
		reduceInto(dt, Sum, s, a, b)
		reduceInto(dt, Avg, v, a, b)
		if i := sameResult(dt, v, s); i >= 0 {
			t.Errorf("%v: avg differs from sum at %d", dt, i)
		}
	}
}

func TestReduceFloatSpecials(t *testing.T) {
	t.Parallel()
	nan, inf, negz := math.NaN(), math.Inf(1), math.Copysign(0, -1)
	cases := []struct{ x, y, min, max float64 }{
		{nan, 1, nan, nan},
		{1, nan, nan, nan},
		{nan, nan, nan, nan},
		{nan, inf, nan, nan},
		{-inf, nan, nan, nan},
		{0, negz, negz, 0},
		{negz, 0, negz, 0},
		{negz, negz, negz, negz},
		{0, 0, 0, 0},
		{inf, 1, 1, inf},
		{-inf, inf, -inf, inf},
		{-1, 0.5, -1, 0.5},
		{2, -3, -3, 2},
		{negz, -1, -1, negz},
		{1, negz, negz, 1},
	}
	for _, ks := range testSets() {
		for _, dt := range []Datatype{Float16, BFloat16, Float32, Float64} {
			for _, op := range []ReduceOp{Min, Max} {
				const n = 131 // several vectors and a tail
				a, b, d := make([]byte, n*dt.Size()), make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
				for i := 0; i < n; i++ {
					c := cases[i%len(cases)]
					putFloat(dt, a, i, c.x)
					putFloat(dt, b, i, c.y)
				}
				reduceWith(ks, dt, op, d, a, b)
				for i := 0; i < n; i++ {
					c := cases[i%len(cases)]
					want := c.min
					if op == Max {
						want = c.max
					}
					got := getFloat(dt, d, i)
					ok := math.IsNaN(want) && math.IsNaN(got) ||
						got == want && math.Signbit(got) == math.Signbit(want)
					if !ok {
						t.Errorf("%s/%v: %v(%v, %v) = %v, want %v", setName(ks), dt, op, c.x, c.y, got, want)
					}
				}
			}
		}
	}
}

// reduceTyped runs reduceWith on typed slices.
func reduceTyped[T Element](ks *kernelSet, op ReduceOp, d, a, b []T) {
	reduceWith(ks, DatatypeOf[T](), op, AsBytes(d), AsBytes(a), AsBytes(b))
}

// checkTyped repeats one case over 70 elements (vectors and a tail).
func checkTyped[T Element](t *testing.T, op ReduceOp, x, y, want T) {
	t.Helper()
	const n = 70
	for _, ks := range testSets() {
		a, b, d := make([]T, n), make([]T, n), make([]T, n)
		for i := range a {
			a[i], b[i] = x, y
		}
		reduceTyped(ks, op, d, a, b)
		for i := range d {
			if d[i] != want {
				t.Errorf("%s/%v: %v(%v, %v) = %v, want %v", setName(ks), DatatypeOf[T](), op, x, y, d[i], want)
				break
			}
		}
	}
}

func TestReduceIntegerWrap(t *testing.T) {
	t.Parallel()
	checkTyped[int8](t, Sum, 127, 1, -128)
	checkTyped[int8](t, Sum, -128, -1, 127)
	checkTyped[int8](t, Prod, 16, 16, 0)
	checkTyped[int8](t, Prod, -128, -1, -128)
	checkTyped[int8](t, Prod, 11, 13, int8(-113)) // 143 - 256
	checkTyped[int8](t, Min, -128, 127, -128)
	checkTyped[int8](t, Max, -128, 127, 127)
	checkTyped[uint8](t, Sum, 255, 1, 0)
	checkTyped[uint8](t, Prod, 16, 17, 16)
	checkTyped[uint8](t, Min, 200, 100, 100)
	checkTyped[uint8](t, Max, 200, 100, 200)
	checkTyped[int32](t, Sum, math.MaxInt32, 1, math.MinInt32)
	checkTyped[int32](t, Prod, 65536, 65536, 0)
	checkTyped[int32](t, Prod, 0x10001, 0x10001, 0x20001)
	checkTyped[int32](t, Prod, math.MinInt32, -1, math.MinInt32)
	checkTyped[int32](t, Min, -5, 3, -5)
	checkTyped[int32](t, Max, -5, 3, 3)
	checkTyped[uint32](t, Sum, math.MaxUint32, 2, 1)
	checkTyped[uint32](t, Prod, 0x80000000, 2, 0)
	checkTyped[uint32](t, Min, 0x80000000, 1, 1)
	checkTyped[uint32](t, Max, 0x80000000, 1, 0x80000000)
	checkTyped[int64](t, Sum, math.MaxInt64, 1, math.MinInt64)
	checkTyped[int64](t, Prod, 1<<32, 1<<32, 0)
	checkTyped[int64](t, Prod, 1<<32+1, 1<<32+1, 1<<33+1)
	checkTyped[int64](t, Prod, -3, 1<<62, 1<<62) // -3·2^62 mod 2^64
	checkTyped[int64](t, Prod, math.MinInt64, -1, math.MinInt64)
	checkTyped[int64](t, Min, -1, 1, -1)
	checkTyped[int64](t, Max, -1, 1, 1)
	checkTyped[int64](t, Min, math.MinInt64, math.MaxInt64, math.MinInt64)
	checkTyped[uint64](t, Sum, math.MaxUint64, 1, 0)
	checkTyped[uint64](t, Prod, math.MaxUint64, math.MaxUint64, 1)
	checkTyped[uint64](t, Prod, 0xdeadbeefcafebabe, 0x123456789, (0xdeadbeefcafebabe*0x123456789)%(1<<64))
	checkTyped[uint64](t, Min, 1<<63, 1, 1)
	checkTyped[uint64](t, Max, 1<<63, 1, 1<<63)
	checkTyped[uint64](t, Max, math.MaxUint64, 0, math.MaxUint64)
}

func TestReduceSlicesTypes(t *testing.T) {
	t.Parallel()
	testReduceSlices[int8](t)
	testReduceSlices[uint8](t)
	testReduceSlices[int32](t)
	testReduceSlices[uint32](t)
	testReduceSlices[int64](t)
	testReduceSlices[uint64](t)
	testReduceSlices[float32](t)
	testReduceSlices[float64](t)
	testReduceSlices[Half](t)
	testReduceSlices[BFloat](t)
}

func testReduceSlices[T Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	dt := DatatypeOf[T]()
	a, b, d := make([]T, 77), make([]T, 77), make([]T, 77)
	fill(rng, dt, AsBytes(a))
	fill(rng, dt, AsBytes(b))
	for _, op := range ReduceOps() {
		want := make([]byte, len(AsBytes(d)))
		reduceRef(dt, op, want, AsBytes(a), AsBytes(b))
		reduceSlices(op, d, a, b)
		if i := sameResult(dt, AsBytes(d), want); i >= 0 {
			t.Errorf("%v %v: element %d differs", dt, op, i)
		}
	}
}

func TestReducePanics(t *testing.T) {
	t.Parallel()
	for _, f := range []func(){
		func() { reduceInto(Float32, Sum, make([]byte, 8), make([]byte, 4), make([]byte, 8)) },
		func() { reduceInto(Float32, Sum, make([]byte, 6), make([]byte, 6), make([]byte, 6)) },
		func() { reduceInto(0, Sum, nil, nil, nil) },
		func() { reduceInto(Float32, 0, nil, nil, nil) },
		func() { scaleDiv(Int32, make([]byte, 4), 0) },
		func() { scaleDiv(Int32, make([]byte, 3), 2) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}

// Every float16 / bfloat16 bit pattern against a handful of partners, for
// every op and kernel set: checks the vector conversions against the scalar
// ones (HalfFrom, BFloatFrom) on all inputs, subnormals and NaNs included.
func TestReduceHalfBFloatAllPatterns(t *testing.T) {
	t.Parallel()
	partners := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 3, 1.0 / 3, 65504, 6e-8, -1e-40, math.Inf(1), math.NaN(), 1e30}
	for _, dt := range []Datatype{Float16, BFloat16} {
		const n = 1 << 16
		a, b, d, want := make([]byte, 2*n), make([]byte, 2*n), make([]byte, 2*n), make([]byte, 2*n)
		for i := 0; i < n; i++ {
			binary.NativeEndian.PutUint16(a[2*i:], uint16(i))
		}
		for _, p := range partners {
			for i := 0; i < n; i++ {
				putFloat(dt, b, i, p)
			}
			for _, op := range []ReduceOp{Sum, Prod, Min, Max} {
				reduceRef(dt, op, want, a, b)
				for _, ks := range testSets() {
					reduceWith(ks, dt, op, d, a, b)
					if i := sameResult(dt, d, want); i >= 0 {
						t.Errorf("%s/%v/%v: %#04x op %v: got %s, want %s", setName(ks), dt, op, i, p, describe(dt, d, i), describe(dt, want, i))
					}
				}
			}
		}
	}
}

func TestScaleDiv(t *testing.T) {
	t.Parallel()
	check := func(dt Datatype, in []byte, n int, want []byte) {
		t.Helper()
		for _, off := range []int{0, 1, 3} {
			buf := make([]byte, len(in)+off)[off:]
			copy(buf, in)
			scaleDiv(dt, buf, n)
			if i := sameResult(dt, buf, want); i >= 0 {
				t.Errorf("%v /%d (offset %d): element %d = %s, want %s", dt, n, off, i, describe(dt, buf, i), describe(dt, want, i))
			}
		}
	}
	check(Int8, AsBytes([]int8{-7, 127, -128, -128, 5, 0}), 2, AsBytes([]int8{-3, 63, -64, -64, 2, 0}))
	check(Int8, AsBytes([]int8{-128, 127, -7}), 200, AsBytes([]int8{0, 0, 0}))
	check(Int8, AsBytes([]int8{-128, 127}), 128, AsBytes([]int8{-1, 0}))
	check(Uint8, []byte{255, 7, 0}, 4, []byte{63, 1, 0})
	check(Uint8, []byte{255, 7}, 300, []byte{0, 0})
	check(Int32, AsBytes([]int32{-9, 9, math.MinInt32, math.MaxInt32}), 4, AsBytes([]int32{-2, 2, math.MinInt32 / 4, math.MaxInt32 / 4}))
	check(Uint32, AsBytes([]uint32{math.MaxUint32, 3}), 2, AsBytes([]uint32{math.MaxUint32 / 2, 1}))
	check(Int64, AsBytes([]int64{math.MinInt64, -1, -7}), 2, AsBytes([]int64{math.MinInt64 / 2, 0, -3}))
	check(Int64, AsBytes([]int64{math.MaxInt64, -5}), 1<<30, AsBytes([]int64{math.MaxInt64 >> 30, 0}))
	check(Uint64, AsBytes([]uint64{math.MaxUint64, 10}), 3, AsBytes([]uint64{math.MaxUint64 / 3, 3}))
	check(Float32, AsBytes([]float32{1, -3, float32(math.Inf(-1)), float32(math.NaN()), float32(math.Copysign(0, -1)), 1e-45}),
		3, AsBytes([]float32{float32(1.0 / 3), -1, float32(math.Inf(-1)), float32(math.NaN()), float32(math.Copysign(0, -1)), 0}))
	check(Float32, AsBytes([]float32{1e-45}), 2, AsBytes([]float32{0}))         // tie: to even (0)
	check(Float32, AsBytes([]float32{4.2e-45}), 2, AsBytes([]float32{2.8e-45})) // 1.5 ulp -> 2 ulp
	check(Float64, AsBytes([]float64{1, 7, math.Inf(1)}), 7, AsBytes([]float64{1.0 / 7, 1, math.Inf(1)}))
	// float16 and bfloat16: expected values from the independent float64
	// rounding references in float16_test.go.
	for _, n := range []int{2, 3, 7, 8, 1000} {
		for _, dt := range []Datatype{Float16, BFloat16} {
			const m = 1 << 16
			in, want := make([]byte, 2*m), make([]byte, 2*m)
			for i := 0; i < m; i++ {
				binary.NativeEndian.PutUint16(in[2*i:], uint16(i))
				q := getFloat(dt, in, i) / float64(n)
				var w uint16
				if dt == Float16 {
					w = refHalfBits(q)
				} else {
					w = refBFloatBits(q)
				}
				binary.NativeEndian.PutUint16(want[2*i:], w)
			}
			check(dt, in, n, want)
		}
	}
	// n == 1 is a no-op, even for NaN payloads.
	for _, dt := range Datatypes() {
		in := make([]byte, 16*dt.Size())
		fill(rand.New(rand.NewPCG(7, 8)), dt, in)
		buf := bytes.Clone(in)
		scaleDiv(dt, buf, 1)
		if !bytes.Equal(buf, in) {
			t.Errorf("%v: scaleDiv by 1 changed the buffer", dt)
		}
	}
}

func FuzzReduceFloat32(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 64}, uint8(0), uint8(0))
	f.Add(bytes.Repeat([]byte{0xff, 0xff, 0x7f, 0x7f, 1, 0, 0, 0x80, 0, 0, 0xc0, 0x7f}, 30), uint8(2), uint8(1))
	f.Add(bytes.Repeat([]byte{0, 0, 0, 0x80, 0, 0, 0, 0}, 40), uint8(3), uint8(3))
	f.Add(bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, 100), uint8(1), uint8(5))
	f.Fuzz(func(t *testing.T, data []byte, op, shift uint8) {
		rop := ReduceOps()[int(op)%len(ReduceOps())]
		n := len(data) / 8 * 4 // bytes per operand
		off := int(shift % 8)
		a := make([]byte, n+off)[off:]
		b := make([]byte, n+off)[off:]
		copy(a, data[:n])
		copy(b, data[n:2*n])
		want := make([]byte, n)
		reduceRef(Float32, rop, want, a, b)
		withNT(func(nt string) {
			for _, ks := range testSets() {
				d := make([]byte, n+off)[off:]
				reduceWith(ks, Float32, rop, d, a, b)
				if i := sameResult(Float32, d, want); i >= 0 {
					t.Fatalf("%s%s %v: element %d: %s op %s = %s, want %s", nt, setName(ks), rop, i,
						describe(Float32, a, i), describe(Float32, b, i), describe(Float32, d, i), describe(Float32, want, i))
				}
			}
		})
	})
}

// ---- benchmarks ----

var benchSizes = []struct {
	name string
	n    int
}{{"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"16MiB", 16 << 20}}

// BenchmarkCopy is the yardstick for BenchmarkReduceFloat32Sum: copy() of
// the same number of dst bytes.
func BenchmarkCopy(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			dst, src := make([]byte, s.n), make([]byte, s.n)
			for i := range src {
				src[i] = byte(i)
			}
			b.SetBytes(int64(s.n))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

func benchFloat32(n int) (dst, a, bb []byte) {
	av, bv := make([]float32, n/4), make([]float32, n/4)
	for i := range av {
		av[i], bv[i] = float32(i%1000)*0.25, 1.5
	}
	return make([]byte, n), AsBytes(av), AsBytes(bv)
}

// BenchmarkReduceFloat32Sum: dst = a + b, three distinct buffers; SetBytes
// counts dst bytes, as BenchmarkCopy does.
func BenchmarkReduceFloat32Sum(b *testing.B) { benchReduceFloat32Sum(b, false) }

// BenchmarkReduceFloat32SumInPlace: a += b, the usual collective step.
func BenchmarkReduceFloat32SumInPlace(b *testing.B) { benchReduceFloat32Sum(b, true) }

func benchReduceFloat32Sum(b *testing.B, inPlace bool) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			dst, x, y := benchFloat32(s.n)
			if inPlace {
				dst = x
			}
			b.SetBytes(int64(s.n))
			for b.Loop() {
				reduceInto(Float32, Sum, dst, x, y)
			}
		})
	}
}

// BenchmarkKernel compares every type × op on each kernel set at 1 MiB of
// dst (not matched by -bench Reduce; run with -bench Kernel).
func BenchmarkKernel(b *testing.B) {
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(9, 10))
	for _, dt := range Datatypes() {
		x, y, d := make([]byte, n), make([]byte, n), make([]byte, n)
		fill(rng, dt, x)
		fill(rng, dt, y)
		for _, op := range []ReduceOp{Sum, Prod, Min, Max} {
			for _, ks := range testSets() {
				b.Run(fmt.Sprintf("%v/%v/%s", dt, op, setName(ks)), func(b *testing.B) {
					b.SetBytes(n)
					for b.Loop() {
						reduceWith(ks, dt, op, d, x, y)
					}
				})
			}
		}
	}
}
