package collective

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/vccl-go/vccl/flowtel"
)

// Reduction semantics (reduceInto, reduceSlices, reduceRef):
//
//   - Integers: Sum and Prod wrap around (two's complement, modulo 2^bits);
//     Min and Max compare as signed or unsigned according to the type.
//   - float32, float64: IEEE 754 arithmetic, round to nearest even.
//     Min and Max follow Go's builtin min and max: if either operand is NaN
//     the result is NaN (which NaN, and its payload, is unspecified), and
//     min(-0, +0) = -0, max(-0, +0) = +0.
//   - float16 and bfloat16: both operands are widened to float32 (exactly),
//     the operation is done in float32 and the result rounded back to
//     nearest even (HalfFrom, BFloatFrom). Min and Max as for float32.
//   - Avg reduces like Sum; the caller divides once at the end (scaleDiv).

// kernel is an element-wise vector reduction over n bytes, n a multiple of
// block. fnNT is the same with non-temporal stores: dst must be aligned to
// align bytes and must not alias a or b.
type kernel struct {
	fn    func(dst, a, b *byte, n int)
	fnNT  func(dst, a, b *byte, n int)
	block int
	align int
}

// ntThreshold is the dst size from which an out-of-place reduction uses
// non-temporal stores: writing dst around the caches saves reading every dst
// line before it is overwritten, a quarter of the memory traffic, once the
// three buffers no longer fit in the caches. Below it the result stays in
// cache for the step that consumes it. The three buffers outgrow the
// caches a core gets (1 MiB L2, a share of the L3) at a few MiB of dst,
// later than copy()'s two, for which runtime.memmove switches at 1 MiB. In-place reductions (dst == a or b) never use NT
// stores: their dst lines are read anyway.
// (A variable so that tests can exercise the NT kernels on small buffers.)
var ntThreshold = 4 << 20

// kernelSet holds the vector kernels of one instruction set, by type and op;
// a zero entry means the pure-Go loop handles that pair.
type kernelSet struct {
	name string
	k    [flowtel.DatatypeCount][reduceOpEnd]kernel
}

var (
	// kernelSets lists the kernel sets this CPU can run (tests run them all).
	kernelSets []*kernelSet
	// activeKernels is the set reduceInto uses; nil means pure Go only.
	activeKernels *kernelSet
)

// unalignedOK reports whether the pure-Go loops may access elements through
// misaligned typed pointers; elsewhere misaligned buffers are staged through
// aligned scratch space.
const unalignedOK = runtime.GOARCH == "amd64" || runtime.GOARCH == "386" ||
	runtime.GOARCH == "arm64" || runtime.GOARCH == "ppc64le" ||
	runtime.GOARCH == "ppc64" || runtime.GOARCH == "s390x"

// reduceInto computes dst[i] = a[i] op b[i] over buffers of dt elements. The
// three slices must have the same length, a multiple of dt.Size(); dst may be
// a or b (the very same elements) but must not overlap them otherwise. The
// buffers need no alignment. Avg is computed as Sum (see scaleDiv).
func reduceInto(dt Datatype, op ReduceOp, dst, a, b []byte) {
	reduceWith(activeKernels, dt, op, dst, a, b)
}

// reduceSlices is the typed form of reduceInto.
func reduceSlices[T Element](op ReduceOp, dst, a, b []T) {
	reduceInto(DatatypeOf[T](), op, AsBytes(dst), AsBytes(a), AsBytes(b))
}

func checkReduce(dt Datatype, op ReduceOp, dst, a, b []byte) {
	if !dt.Valid() || !op.Valid() {
		panic(fmt.Sprintf("collective: reduce: invalid datatype %v or op %v", dt, op))
	}
	if len(a) != len(dst) || len(b) != len(dst) || len(dst)%dt.Size() != 0 {
		panic(fmt.Sprintf("collective: reduce %v: lengths dst %d, a %d, b %d (must be equal multiples of %d)",
			dt, len(dst), len(a), len(b), dt.Size()))
	}
}

// reduceWith is reduceInto with an explicit kernel set (nil: pure Go).
func reduceWith(ks *kernelSet, dt Datatype, op ReduceOp, dst, a, b []byte) {
	checkReduce(dt, op, dst, a, b)
	if op == Avg {
		op = Sum
	}
	if len(dst) == 0 {
		return
	}
	var k kernel
	if ks != nil {
		k = ks.k[dt][op]
	}
	if n := len(dst); n >= ntThreshold && k.fnNT != nil && &dst[0] != &a[0] && &dst[0] != &b[0] {
		// Align dst to the vector size with an ordinary head, then use
		// non-temporal stores (if dst is element-aligned, so is the head).
		addr := uintptr(unsafe.Pointer(&dst[0]))
		head := int(-addr & uintptr(k.align-1))
		if addr%uintptr(dt.Size()) == 0 && n-head >= k.block {
			reduceVec(k, dt, op, dst[:head], a[:head], b[:head])
			m := n - head
			m -= m % k.block
			k.fnNT(&dst[head], &a[head], &b[head], m)
			dst, a, b = dst[head+m:], a[head+m:], b[head+m:]
		}
	}
	reduceVec(k, dt, op, dst, a, b)
}

// reduceVec runs kernel k (if any) over the whole blocks of dst, and the
// pure-Go loop over the rest.
func reduceVec(k kernel, dt Datatype, op ReduceOp, dst, a, b []byte) {
	done := 0
	if n := len(dst); k.fn != nil && n >= k.block {
		done = n - n%k.block
		k.fn(&dst[0], &a[0], &b[0], done)
	}
	if done < len(dst) {
		reduceGo(dt, op, dst[done:], a[done:], b[done:])
	}
}

// view returns the bytes of b as a slice of T (len(b)/sizeof(T) elements).
func view[T any](b []byte) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

func misaligned(size int, bufs ...[]byte) bool {
	for _, b := range bufs {
		if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(size) != 0 {
			return true
		}
	}
	return false
}

// reduceGo is the pure-Go reduction (op is not Avg).
func reduceGo(dt Datatype, op ReduceOp, dst, a, b []byte) {
	if !unalignedOK && dt.Size() > 1 && misaligned(dt.Size(), dst, a, b) {
		reduceGoStaged(dt, op, dst, a, b)
		return
	}
	switch dt {
	case Int8:
		loopOp(op, view[int8](dst), view[int8](a), view[int8](b))
	case Uint8:
		loopOp(op, dst, a, b)
	case Int32:
		loopOp(op, view[int32](dst), view[int32](a), view[int32](b))
	case Uint32:
		loopOp(op, view[uint32](dst), view[uint32](a), view[uint32](b))
	case Int64:
		loopOp(op, view[int64](dst), view[int64](a), view[int64](b))
	case Uint64:
		loopOp(op, view[uint64](dst), view[uint64](a), view[uint64](b))
	case Float32:
		loopOp(op, view[float32](dst), view[float32](a), view[float32](b))
	case Float64:
		loopOp(op, view[float64](dst), view[float64](a), view[float64](b))
	case Float16:
		halfLoop(op, view[Half](dst), view[Half](a), view[Half](b))
	case BFloat16:
		bfloatLoop(op, view[BFloat](dst), view[BFloat](a), view[BFloat](b))
	}
}

// reduceGoStaged runs reduceGo through aligned scratch buffers, for
// architectures that fault on (or emulate) misaligned typed accesses.
func reduceGoStaged(dt Datatype, op ReduceOp, dst, a, b []byte) {
	var scratch [3][512]uint64
	sd, sa, sb := AsBytes(scratch[0][:]), AsBytes(scratch[1][:]), AsBytes(scratch[2][:])
	for len(dst) > 0 {
		m := min(len(dst), len(sd))
		copy(sa, a[:m])
		copy(sb, b[:m])
		reduceGo(dt, op, sd[:m], sa[:m], sb[:m])
		copy(dst[:m], sd[:m])
		dst, a, b = dst[m:], a[m:], b[m:]
	}
}

type number interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

func loopOp[T number](op ReduceOp, d, x, y []T) {
	switch op {
	case Sum, Avg:
		sumLoop(d, x, y)
	case Prod:
		prodLoop(d, x, y)
	case Min:
		minLoop(d, x, y)
	case Max:
		maxLoop(d, x, y)
	}
}

// The loops below are unrolled by four and free of bounds checks (verified
// with -gcflags=-d=ssa/check_bce): the main loop tests all three lengths and
// the tail re-slices x and y to len(d).

func sumLoop[T number](d, x, y []T) {
	x, y = x[:len(d)], y[:len(d)]
	for len(d) >= 4 && len(x) >= 4 && len(y) >= 4 {
		d[0] = x[0] + y[0]
		d[1] = x[1] + y[1]
		d[2] = x[2] + y[2]
		d[3] = x[3] + y[3]
		d, x, y = d[4:], x[4:], y[4:]
	}
	x, y = x[:len(d)], y[:len(d)]
	for i := range d {
		d[i] = x[i] + y[i]
	}
}

func prodLoop[T number](d, x, y []T) {
	x, y = x[:len(d)], y[:len(d)]
	for len(d) >= 4 && len(x) >= 4 && len(y) >= 4 {
		d[0] = x[0] * y[0]
		d[1] = x[1] * y[1]
		d[2] = x[2] * y[2]
		d[3] = x[3] * y[3]
		d, x, y = d[4:], x[4:], y[4:]
	}
	x, y = x[:len(d)], y[:len(d)]
	for i := range d {
		d[i] = x[i] * y[i]
	}
}

// minLoop and maxLoop use the builtins, whose float semantics (NaN wins,
// -0 < +0) are the ones documented above.
func minLoop[T number](d, x, y []T) {
	x, y = x[:len(d)], y[:len(d)]
	for len(d) >= 4 && len(x) >= 4 && len(y) >= 4 {
		d[0] = min(x[0], y[0])
		d[1] = min(x[1], y[1])
		d[2] = min(x[2], y[2])
		d[3] = min(x[3], y[3])
		d, x, y = d[4:], x[4:], y[4:]
	}
	x, y = x[:len(d)], y[:len(d)]
	for i := range d {
		d[i] = min(x[i], y[i])
	}
}

func maxLoop[T number](d, x, y []T) {
	x, y = x[:len(d)], y[:len(d)]
	for len(d) >= 4 && len(x) >= 4 && len(y) >= 4 {
		d[0] = max(x[0], y[0])
		d[1] = max(x[1], y[1])
		d[2] = max(x[2], y[2])
		d[3] = max(x[3], y[3])
		d, x, y = d[4:], x[4:], y[4:]
	}
	x, y = x[:len(d)], y[:len(d)]
	for i := range d {
		d[i] = max(x[i], y[i])
	}
}

// halfLoop and bfloatLoop widen chunks of both operands to float32, reduce
// them with the float32 loops, and round the chunk back. Reading a chunk of
// x and y before writing the same chunk of d keeps exact aliasing safe.
func halfLoop(op ReduceOp, d, x, y []Half) {
	var fx, fy [256]float32
	x, y = x[:len(d)], y[:len(d)]
	for len(d) > 0 {
		m := min(len(d), len(fx))
		halvesToFloat32(fx[:m], x[:m])
		halvesToFloat32(fy[:m], y[:m])
		loopOp(op, fx[:m], fx[:m], fy[:m])
		float32sToHalves(d[:m], fx[:m])
		d, x, y = d[m:], x[m:], y[m:]
	}
}

func bfloatLoop(op ReduceOp, d, x, y []BFloat) {
	var fx, fy [256]float32
	x, y = x[:len(d)], y[:len(d)]
	for len(d) > 0 {
		m := min(len(d), len(fx))
		fa, fb := fx[:m], fy[:m]
		for i, v := range x[:m] {
			fa[i] = v.Float32()
		}
		for i, v := range y[:m] {
			fb[i] = v.Float32()
		}
		loopOp(op, fa, fa, fb)
		dd := d[:m]
		for i, v := range fa {
			dd[i] = BFloatFrom(v)
		}
		d, x, y = d[m:], x[m:], y[m:]
	}
}

// halvesToFloat32 is Half.Float32 over a slice, written without calls or
// data-dependent branches: the 15 magnitude bits shifted into a float32 and
// scaled by 2^112 give every finite value, subnormals included (exactly: a
// power-of-two scaling); Inf and NaN then get the all-ones exponent.
func halvesToFloat32(dst []float32, src []Half) {
	src = src[:len(dst)]
	for i, h := range src {
		em := uint32(h) & 0x7fff
		bits := math.Float32bits(math.Float32frombits(em<<13)*0x1p112) | uint32(h&0x8000)<<16
		if em >= 0x7c00 {
			bits |= 0x7f800000
		}
		dst[i] = math.Float32frombits(bits)
	}
}

// float32sToHalves is HalfFrom over a slice, with HalfFrom's normal-range
// fast path inline.
func float32sToHalves(dst []Half, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		bits := math.Float32bits(f)
		if a := bits & 0x7fffffff; a-0x38800000 < 0x477ff000-0x38800000 {
			dst[i] = Half(bits>>16&0x8000 | (a-112<<23+0xfff+a>>13&1)>>13)
		} else {
			dst[i] = halfFromSlow(f)
		}
	}
}

// scaleDiv divides every dt element of buf by n (n >= 1), finishing an Avg
// reduction. Integers use truncating division (toward zero; the quotient of
// the wrapped sum). Floats divide exactly by n and round to nearest even:
// float32 and float64 directly; float16 and bfloat16 widen to float32,
// divide, and round back (for n < 2^24 this is the float32 quotient).
func scaleDiv(dt Datatype, buf []byte, n int) {
	if !dt.Valid() || len(buf)%dt.Size() != 0 {
		panic(fmt.Sprintf("collective: scaleDiv %v: length %d", dt, len(buf)))
	}
	if n < 1 {
		panic(fmt.Sprintf("collective: scaleDiv by %d", n))
	}
	if n == 1 || len(buf) == 0 {
		return
	}
	if !unalignedOK && dt.Size() > 1 && misaligned(dt.Size(), buf) {
		scaleDivStaged(dt, buf, n)
		return
	}
	switch dt {
	case Int8:
		divSigned(view[int8](buf), int64(n))
	case Uint8:
		divUnsigned(buf, uint64(n))
	case Int32:
		divSigned(view[int32](buf), int64(n))
	case Uint32:
		divUnsigned(view[uint32](buf), uint64(n))
	case Int64:
		divSigned(view[int64](buf), int64(n))
	case Uint64:
		divUnsigned(view[uint64](buf), uint64(n))
	case Float32:
		s, d := view[float32](buf), float64(n)
		for i := range s {
			// The float64 quotient rounded to float32 is the correctly
			// rounded float32 quotient (53 >= 2*24+2).
			s[i] = float32(float64(s[i]) / d)
		}
	case Float64:
		s, d := view[float64](buf), float64(n)
		for i := range s {
			s[i] /= d
		}
	case Float16:
		s, d := view[Half](buf), float64(n)
		for i := range s {
			s[i] = HalfFrom(float32(float64(s[i].Float32()) / d))
		}
	case BFloat16:
		s, d := view[BFloat](buf), float64(n)
		for i := range s {
			s[i] = BFloatFrom(float32(float64(s[i].Float32()) / d))
		}
	}
}

// scaleDivStaged runs scaleDiv through an aligned scratch buffer.
func scaleDivStaged(dt Datatype, buf []byte, n int) {
	var scratch [512]uint64
	s := AsBytes(scratch[:])
	for len(buf) > 0 {
		m := copy(s, buf)
		scaleDiv(dt, s[:m], n)
		copy(buf, s[:m])
		buf = buf[m:]
	}
}

func divSigned[T ~int8 | ~int32 | ~int64](s []T, n int64) {
	for i := range s {
		s[i] = T(int64(s[i]) / n)
	}
}

func divUnsigned[T ~uint8 | ~uint32 | ~uint64](s []T, n uint64) {
	for i := range s {
		s[i] = T(uint64(s[i]) / n)
	}
}
