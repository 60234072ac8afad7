//go:build ignore

// reduce_asmgen generates reduce_amd64.s and reduce_kernels_amd64.go: the
// AVX2 and AVX-512 element-wise reduction kernels used by reduceInto.
//
//	go generate ./collective/   (or: cd collective && go run reduce_asmgen.go)
//
// Every kernel has the Go signature
//
//	func k<Type><Op><ISA>(dst, a, b *byte, n int)
//
// and computes dst[i] = a[i] op b[i] over n bytes, where n is a multiple of
// the kernel's block size (the Go caller handles the remaining tail). dst may
// alias a or b exactly: each block is loaded completely before it is stored.
// All loads and stores are unaligned.
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"log"
	"os"
	"strings"
)

// isa describes one instruction-set flavour.
type isa struct {
	name    string // kernel name suffix, "AVX2" or "AVX512"
	v       string // vector register prefix: "Y" or "Z"
	vbytes  int    // bytes per vector register
	nregs   int    // vector registers usable as temporaries
	avx512  bool
	goGroup string // Go constant naming the feature group a kernel needs
}

var (
	avx2   = isa{name: "AVX2", v: "Y", vbytes: 32, nregs: 16, goGroup: "featAVX2"}
	avx512 = isa{name: "AVX512", v: "Z", vbytes: 64, nregs: 32, avx512: true, goGroup: "featAVX512"}
)

// kernel is one generated function.
type kernel struct {
	dt, op string // Go constant names: Float32, Sum …
	isa    isa
	feat   string // Go feature constant; defaults to isa.goGroup
	// prefer marks an AVX-512 kernel that beats the AVX2 one for its type
	// and op on Zen 4 (BenchmarkKernel decides); the default kernel set
	// takes only these.
	prefer bool
	block  int // bytes of dst per block
	unroll int // blocks per main-loop iteration
	consts []konst
	body   func(g *gen, off int) // emits one block at byte offset AX+off
}

// konst is a 32- or 64-bit value broadcast into a vector register before the loop.
type konst struct {
	reg   string // full vector register name
	val   uint64
	width int // 32 or 64
}

type gen struct {
	buf bytes.Buffer
	k   *kernel
	nt  bool // emitting the non-temporal-store variant
}

// store writes vector register r to dst at AX+off: an unaligned store, or in
// the NT variant a non-temporal one (the caller aligns dst to the vector size).
func (g *gen) store(r string, off int) {
	switch {
	case g.nt:
		g.p("VMOVNTDQ %s, %s", r, mem("DI", off))
	case r[0] == 'Z':
		g.p("VMOVDQU64 %s, %s", r, mem("DI", off))
	default:
		g.p("VMOVDQU %s, %s", r, mem("DI", off))
	}
}

func (g *gen) p(format string, args ...any) {
	fmt.Fprintf(&g.buf, "\t"+format+"\n", args...)
}

func (g *gen) label(l string) { fmt.Fprintf(&g.buf, "%s:\n", l) }

// reg returns temporary vector register i of the kernel's ISA.
func (g *gen) reg(i int) string { return fmt.Sprintf("%s%d", g.k.isa.v, i) }

// half returns the register with half the width of vector register r.
func half(r string) string {
	switch r[0] {
	case 'Z':
		return "Y" + r[1:]
	case 'Y':
		return "X" + r[1:]
	}
	panic(r)
}

func mem(base string, off int) string {
	if off == 0 {
		return fmt.Sprintf("(%s)(AX*1)", base)
	}
	return fmt.Sprintf("%d(%s)(AX*1)", off, base)
}

func (k *kernel) name() string { return "k" + k.dt + k.op + k.isa.name }

func (k *kernel) ntName() string { return k.name() + "NT" }

// ---- element-type descriptions ----

type ftype struct {
	sfx       string // PS or PD
	mov       string // VMOVUPS / VMOVUPD
	and, or   string // bitwise ops usable on the register width
	elemWidth int
}

func fty(is isa, dbl bool) ftype {
	if dbl {
		f := ftype{sfx: "PD", mov: "VMOVUPD", and: "VANDPD", or: "VORPD", elemWidth: 64}
		if is.avx512 {
			f.and, f.or = "VPANDQ", "VPORQ"
		}
		return f
	}
	f := ftype{sfx: "PS", mov: "VMOVUPS", and: "VANDPS", or: "VORPS", elemWidth: 32}
	if is.avx512 {
		f.and, f.or = "VPANDD", "VPORD"
	}
	return f
}

func intMov(is isa) string {
	if is.avx512 {
		return "VMOVDQU64"
	}
	return "VMOVDQU"
}

// ---- floating-point op sequences on registers ----

// fop emits r = x op y for float vectors x, y (neither is clobbered) using
// temporaries t0, t1 (t1 may be unused) and mask register km (AVX-512).
// It returns the register holding the result.
//
// min: MINPS returns its second source when the inputs are equal or either is
// NaN, so min(x,y) | min(y,x) is the min for ordinary values, -0 for {-0,+0}
// (the OR of the two zeros), and a NaN whenever either input is NaN (OR-ing
// anything into a NaN leaves a NaN).
// max: max(x,y) & max(y,x) is the max for ordinary values and +0 for {-0,+0};
// NaN lanes are then forced to NaN (all ones, or x|y under a mask).
func fop(g *gen, f ftype, op, x, y, t0, t1, km string) string {
	is := g.k.isa
	switch op {
	case "Sum":
		g.p("VADD%s %s, %s, %s", f.sfx, y, x, t0)
	case "Prod":
		g.p("VMUL%s %s, %s, %s", f.sfx, y, x, t0)
	case "Min":
		g.p("VMIN%s %s, %s, %s", f.sfx, y, x, t0)
		g.p("VMIN%s %s, %s, %s", f.sfx, x, y, t1)
		g.p("%s %s, %s, %s", f.or, t1, t0, t0)
	case "Max":
		if is.avx512 {
			g.p("VCMP%s $3, %s, %s, %s", f.sfx, y, x, km)
			g.p("VMAX%s %s, %s, %s", f.sfx, y, x, t0)
			g.p("VMAX%s %s, %s, %s", f.sfx, x, y, t1)
			g.p("%s %s, %s, %s", f.and, t1, t0, t0)
			g.p("%s %s, %s, %s, %s", f.or, y, x, km, t0)
		} else {
			g.p("VMAX%s %s, %s, %s", f.sfx, y, x, t0)
			g.p("VMAX%s %s, %s, %s", f.sfx, x, y, t1)
			g.p("%s %s, %s, %s", f.and, t1, t0, t0)
			g.p("VCMP%s $3, %s, %s, %s", f.sfx, y, x, t1)
			g.p("%s %s, %s, %s", f.or, t1, t0, t0)
		}
	default:
		panic(op)
	}
	return t0
}

// ---- kernel constructors ----

// floatKernel: float32/float64 with the full set of ops.
func floatKernel(is isa, dt, op string) *kernel {
	dbl := dt == "Float64"
	f := fty(is, dbl)
	k := &kernel{dt: dt, op: op, isa: is, block: is.vbytes, unroll: 4}
	k.body = func(g *gen, off int) {
		r0, r1, r2, r3 := g.reg(0), g.reg(1), g.reg(2), g.reg(3)
		switch op {
		case "Sum", "Prod":
			ins := map[string]string{"Sum": "VADD", "Prod": "VMUL"}[op] + f.sfx
			g.p("%s %s, %s", f.mov, mem("SI", off), r0)
			g.p("%s %s, %s, %s", ins, mem("DX", off), r0, r0)
			g.store(r0, off)
		default:
			g.p("%s %s, %s", f.mov, mem("SI", off), r0)
			g.p("%s %s, %s", f.mov, mem("DX", off), r1)
			r := fop(g, f, op, r0, r1, r2, r3, "K1")
			g.store(r, off)
		}
	}
	return k
}

// intSimple: integer ops that are one instruction with a memory operand.
func intSimple(is isa, dt, op, ins string) *kernel {
	k := &kernel{dt: dt, op: op, isa: is, block: is.vbytes, unroll: 4}
	mov := intMov(is)
	k.body = func(g *gen, off int) {
		r0 := g.reg(0)
		g.p("%s %s, %s", mov, mem("SI", off), r0)
		g.p("%s %s, %s, %s", ins, mem("DX", off), r0, r0)
		g.store(r0, off)
	}
	return k
}

// int64MinMaxAVX2: AVX2 has no 64-bit min/max; compare and blend. Unsigned
// compares flip the sign bit of both operands first (constant in Y15).
func int64MinMaxAVX2(dt, op string) *kernel {
	unsigned := dt == "Uint64"
	k := &kernel{dt: dt, op: op, isa: avx2, block: 32, unroll: 4}
	if unsigned {
		k.consts = []konst{{reg: "Y15", val: 1 << 63, width: 64}}
	}
	k.body = func(g *gen, off int) {
		g.p("VMOVDQU %s, Y0", mem("SI", off))
		g.p("VMOVDQU %s, Y1", mem("DX", off))
		if unsigned {
			g.p("VPXOR Y15, Y0, Y2")
			g.p("VPXOR Y15, Y1, Y3")
			g.p("VPCMPGTQ Y3, Y2, Y2") // Y2 = a > b
		} else {
			g.p("VPCMPGTQ Y1, Y0, Y2") // Y2 = a > b
		}
		if op == "Min" {
			g.p("VPBLENDVB Y2, Y1, Y0, Y3") // a > b ? b : a
		} else {
			g.p("VPBLENDVB Y2, Y0, Y1, Y3") // a > b ? a : b
		}
		g.store("Y3", off)
	}
	return k
}

// int64ProdAVX2: 64-bit wrapping multiply from 32x32->64 multiplies:
// a*b mod 2^64 = lo(a)*lo(b) + ((hi(a)*lo(b) + lo(a)*hi(b)) << 32).
func int64ProdAVX2(dt string) *kernel {
	k := &kernel{dt: dt, op: "Prod", isa: avx2, block: 32, unroll: 4}
	k.body = func(g *gen, off int) {
		g.p("VMOVDQU %s, Y0", mem("SI", off))
		g.p("VMOVDQU %s, Y1", mem("DX", off))
		g.p("VPSRLQ $32, Y0, Y2")
		g.p("VPMULUDQ Y1, Y2, Y2") // hi(a)*lo(b)
		g.p("VPSRLQ $32, Y1, Y3")
		g.p("VPMULUDQ Y3, Y0, Y3") // lo(a)*hi(b)
		g.p("VPADDQ Y3, Y2, Y2")
		g.p("VPSLLQ $32, Y2, Y2")
		g.p("VPMULUDQ Y1, Y0, Y0") // lo(a)*lo(b)
		g.p("VPADDQ Y2, Y0, Y0")
		g.store("Y0", off)
	}
	return k
}

// halfKernel: float16 through F16C (AVX2) or AVX-512F conversions; the op
// runs in float32 and VCVTPS2PH rounds to nearest even (imm8 = 0).
func halfKernel(is isa, op string) *kernel {
	f := fty(is, false)
	k := &kernel{dt: "Float16", op: op, isa: is, block: is.vbytes / 2, unroll: 4}
	if !is.avx512 {
		k.feat = "featAVX2F16C"
	}
	k.body = func(g *gen, off int) {
		r0, r1, r2, r3 := g.reg(0), g.reg(1), g.reg(2), g.reg(3)
		g.p("VCVTPH2PS %s, %s", mem("SI", off), r0)
		g.p("VCVTPH2PS %s, %s", mem("DX", off), r1)
		r := fop(g, f, op, r0, r1, r2, r3, "K1")
		g.p("VCVTPS2PH $0, %s, %s", r, half(r))
		g.store(half(r), off)
	}
	return k
}

// bfloatKernel: bfloat16 in float32 without any shuffles. A vector of
// bfloat16 pairs is split into its even elements (x << 16) and its odd
// elements (x & 0xffff0000), both exact float32 vectors; the op runs on each,
// and each result is rounded to nearest even,
//
//	(r + 0x7fff + (r>>16 & 1)) >> 16     NaN: (r>>16) | 0x40 (quiet)
//
// keeping the even results in the low and the odd results in the high half
// of each 32-bit lane, which are then OR-ed together.
func bfloatKernel(is isa, op string) *kernel {
	f := fty(is, false)
	k := &kernel{dt: "BFloat16", op: op, isa: is, block: is.vbytes, unroll: 2}
	top := is.nregs - 1
	r := func(i int) string { return fmt.Sprintf("%s%d", is.v, i) }
	one, bias, qnan, himask, qnanhi := r(top), r(top-1), r(top-2), r(top-3), r(top-4)
	k.consts = []konst{{one, 1, 32}, {bias, 0x7fff, 32}, {qnan, 0x40, 32}, {himask, 0xffff0000, 32}, {qnanhi, 0x400000, 32}}
	and, or := "VPAND", "VPOR"
	if is.avx512 {
		and, or = "VPANDD", "VPORD"
	}
	k.body = func(g *gen, off int) {
		aLo, aHi, bLo, bHi := g.reg(0), g.reg(1), g.reg(2), g.reg(3)
		if is.avx512 { // EVEX shifts and ANDs take the memory operand
			g.p("VPSLLD $16, %s, %s", mem("SI", off), aLo)
			g.p("%s %s, %s, %s", and, mem("SI", off), himask, aHi)
			g.p("VPSLLD $16, %s, %s", mem("DX", off), bLo)
			g.p("%s %s, %s, %s", and, mem("DX", off), himask, bHi)
		} else {
			g.p("VMOVDQU %s, %s", mem("SI", off), aHi)
			g.p("VMOVDQU %s, %s", mem("DX", off), bHi)
			g.p("VPSLLD $16, %s, %s", aHi, aLo)
			g.p("VPSLLD $16, %s, %s", bHi, bLo)
			g.p("%s %s, %s, %s", and, himask, aHi, aHi)
			g.p("%s %s, %s, %s", and, himask, bHi, bHi)
		}
		rLo := fop(g, f, op, aLo, bLo, g.reg(4), g.reg(5), "K1")
		rHi := fop(g, f, op, aHi, bHi, g.reg(6), g.reg(7), "K3")
		// u = r + 0x7fff + (r>>16 & 1); t = r >> 16. The inputs (0-3) and
		// the op's second temporaries (5, 7) are free by now.
		round := func(rr, t, l, u string) {
			g.p("VPSRLD $16, %s, %s", rr, t)
			g.p("%s %s, %s, %s", and, one, t, l)
			g.p("VPADDD %s, %s, %s", bias, rr, u)
			g.p("VPADDD %s, %s, %s", l, u, u)
		}
		tLo, uLo := g.reg(0), g.reg(2)
		uHi := g.reg(7)
		round(rLo, tLo, g.reg(1), uLo)
		round(rHi, g.reg(3), g.reg(5), uHi)
		g.p("VPSRLD $16, %s, %s", uLo, uLo)
		if is.avx512 {
			g.p("VCMPPS $3, %s, %s, K2", rLo, rLo)
			g.p("VPORD %s, %s, K2, %s", qnan, tLo, uLo) // NaN lanes: (r>>16)|0x40
			g.p("VCMPPS $3, %s, %s, K4", rHi, rHi)
			g.p("VPORD %s, %s, K4, %s", qnanhi, rHi, uHi)         // NaN lanes: r|0x400000
			g.p("VPTERNLOGD $0xEA, %s, %s, %s", uLo, himask, uHi) // (uHi & himask) | uLo
			g.store(uHi, off)
			return
		}
		m, q := g.reg(8), g.reg(9)
		g.p("VCMPPS $3, %s, %s, %s", rLo, rLo, m)
		g.p("%s %s, %s, %s", or, qnan, tLo, q)
		g.p("VPBLENDVB %s, %s, %s, %s", m, q, uLo, uLo)
		g.p("VCMPPS $3, %s, %s, %s", rHi, rHi, m)
		g.p("%s %s, %s, %s", or, qnanhi, rHi, q)
		g.p("VPBLENDVB %s, %s, %s, %s", m, q, uHi, uHi)
		g.p("%s %s, %s, %s", and, himask, uHi, uHi)
		g.p("%s %s, %s, %s", or, uLo, uHi, uHi)
		g.store(uHi, off)
	}
	return k
}

// int8ProdKernel: there is no byte multiply; multiply the even and the odd
// bytes of each 16-bit word separately with VPMULLW (the low byte of a
// product depends only on the low bytes of its factors) and merge:
//
//	even = (a & 0x00ff) * (b & 0x00ff)            low byte is the product
//	odd  = (a >> 8) * (b & 0xff00)                high byte is the product
//	dst  = (even & 0x00ff) | odd
func int8ProdKernel(is isa, dt string) *kernel {
	k := &kernel{dt: dt, op: "Prod", isa: is, block: is.vbytes, unroll: 4}
	top := is.nregs - 1
	lo := fmt.Sprintf("%s%d", is.v, top) // 0x00ff in every word
	k.consts = []konst{{lo, 0x00ff00ff, 32}}
	mov := intMov(is)
	and, andn, or := "VPAND", "VPANDN", "VPOR"
	if is.avx512 {
		and, andn, or = "VPANDD", "VPANDND", "VPORD"
	}
	k.body = func(g *gen, off int) {
		a, b, e, o := g.reg(0), g.reg(1), g.reg(2), g.reg(3)
		g.p("%s %s, %s", mov, mem("SI", off), a)
		g.p("%s %s, %s", mov, mem("DX", off), b)
		g.p("%s %s, %s, %s", and, lo, a, e)
		g.p("%s %s, %s, %s", and, lo, b, o)
		g.p("VPMULLW %s, %s, %s", o, e, e)
		g.p("%s %s, %s, %s", and, lo, e, e)
		g.p("VPSRLW $8, %s, %s", a, a)
		g.p("%s %s, %s, %s", andn, b, lo, b) // b & 0xff00
		g.p("VPMULLW %s, %s, %s", b, a, a)
		g.p("%s %s, %s, %s", or, a, e, e)
		g.store(e, off)
	}
	return k
}

// ---- the kernel list ----

func kernels() []*kernel {
	var ks []*kernel
	for _, is := range []isa{avx2, avx512} {
		for _, dt := range []string{"Float32", "Float64"} {
			for _, op := range []string{"Sum", "Prod", "Min", "Max"} {
				ks = append(ks, floatKernel(is, dt, op))
			}
		}
		type iop struct{ dt, op, ins string }
		iops := []iop{
			{"Int8", "Sum", "VPADDB"}, {"Uint8", "Sum", "VPADDB"},
			{"Int8", "Min", "VPMINSB"}, {"Int8", "Max", "VPMAXSB"},
			{"Uint8", "Min", "VPMINUB"}, {"Uint8", "Max", "VPMAXUB"},
			{"Int32", "Sum", "VPADDD"}, {"Uint32", "Sum", "VPADDD"},
			{"Int32", "Prod", "VPMULLD"}, {"Uint32", "Prod", "VPMULLD"},
			{"Int32", "Min", "VPMINSD"}, {"Int32", "Max", "VPMAXSD"},
			{"Uint32", "Min", "VPMINUD"}, {"Uint32", "Max", "VPMAXUD"},
			{"Int64", "Sum", "VPADDQ"}, {"Uint64", "Sum", "VPADDQ"},
		}
		if is.avx512 {
			iops = append(iops,
				iop{"Int64", "Prod", "VPMULLQ"}, iop{"Uint64", "Prod", "VPMULLQ"},
				iop{"Int64", "Min", "VPMINSQ"}, iop{"Int64", "Max", "VPMAXSQ"},
				iop{"Uint64", "Min", "VPMINUQ"}, iop{"Uint64", "Max", "VPMAXUQ"},
			)
		}
		for _, o := range iops {
			ks = append(ks, intSimple(is, o.dt, o.op, o.ins))
		}
		ks = append(ks, int8ProdKernel(is, "Int8"), int8ProdKernel(is, "Uint8"))
		if !is.avx512 {
			for _, dt := range []string{"Int64", "Uint64"} {
				ks = append(ks, int64MinMaxAVX2(dt, "Min"), int64MinMaxAVX2(dt, "Max"), int64ProdAVX2(dt))
			}
		}
		for _, op := range []string{"Sum", "Prod", "Min", "Max"} {
			ks = append(ks, halfKernel(is, op))
			ks = append(ks, bfloatKernel(is, op))
		}
	}
	// AVX-512 kernels worth preferring over AVX2 ones: native 64-bit
	// min/max/multiply, the mask-register float max, bfloat16.
	for _, k := range ks {
		if !k.isa.avx512 {
			continue
		}
		switch {
		case (k.dt == "Int64" || k.dt == "Uint64") && k.op != "Sum",
			(k.dt == "Float32" || k.dt == "Float64") && k.op == "Max",
			k.dt == "BFloat16":
			k.prefer = true
		}
	}
	return ks
}

// ---- emission ----

func (g *gen) kernel(k *kernel, nt bool) {
	g.k, g.nt = k, nt
	name := k.name()
	if nt {
		name = k.ntName()
	}
	fmt.Fprintf(&g.buf, "// func %s(dst, a, b *byte, n int)\n", name)
	fmt.Fprintf(&g.buf, "TEXT ·%s(SB), NOSPLIT, $0-32\n", name)
	g.p("MOVQ dst+0(FP), DI")
	g.p("MOVQ a+8(FP), SI")
	g.p("MOVQ b+16(FP), DX")
	g.p("MOVQ n+24(FP), CX")
	for _, c := range k.consts {
		x := "X" + c.reg[1:]
		if k.isa.avx512 { // EVEX broadcasts straight from a GPR
			if c.width == 64 {
				g.p("MOVQ $%#x, BX", c.val)
				g.p("VPBROADCASTQ BX, %s", c.reg)
			} else {
				g.p("MOVL $%#x, BX", c.val)
				g.p("VPBROADCASTD BX, %s", c.reg)
			}
			continue
		}
		if c.width == 64 {
			g.p("MOVQ $%#x, BX", c.val)
			g.p("MOVQ BX, %s", x)
			g.p("VPBROADCASTQ %s, %s", x, c.reg)
		} else {
			g.p("MOVL $%#x, BX", c.val)
			g.p("MOVQ BX, %s", x)
			g.p("VPBROADCASTD %s, %s", x, c.reg)
		}
	}
	step := k.block * k.unroll
	g.p("XORQ AX, AX")
	g.p("MOVQ CX, BX")
	g.p("SUBQ $%d, BX", step)
	g.p("JL tail")
	g.label("loop")
	for u := 0; u < k.unroll; u++ {
		k.body(g, u*k.block)
	}
	g.p("ADDQ $%d, AX", step)
	g.p("CMPQ AX, BX")
	g.p("JLE loop")
	g.label("tail")
	g.p("CMPQ AX, CX")
	g.p("JAE done")
	k.body(g, 0)
	g.p("ADDQ $%d, AX", k.block)
	g.p("JMP tail")
	g.label("done")
	if nt {
		g.p("SFENCE") // order the weakly-ordered NT stores before returning
	}
	g.p("VZEROUPPER")
	g.p("RET")
	g.buf.WriteString("\n")
}

func main() {
	ks := kernels()
	var s gen
	s.buf.WriteString("// Code generated by reduce_asmgen.go; DO NOT EDIT.\n\n")
	s.buf.WriteString("//go:build amd64 && !purego\n\n#include \"textflag.h\"\n\n")
	for _, k := range ks {
		s.kernel(k, false)
		s.kernel(k, true)
	}
	// CPU feature detection helpers.
	s.buf.WriteString(`// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET
`)
	if err := os.WriteFile("reduce_amd64.s", s.buf.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}

	var d strings.Builder
	d.WriteString("// Code generated by reduce_asmgen.go; DO NOT EDIT.\n\n")
	d.WriteString("//go:build amd64 && !purego\n\npackage collective\n\n")
	for _, k := range ks {
		fmt.Fprintf(&d, "//go:noescape\nfunc %s(dst, a, b *byte, n int)\n\n", k.name())
		fmt.Fprintf(&d, "//go:noescape\nfunc %s(dst, a, b *byte, n int)\n\n", k.ntName())
	}
	d.WriteString("// asmKernels lists every assembly kernel with the CPU features it needs.\n")
	d.WriteString("var asmKernels = [...]asmKernel{\n")
	for _, k := range ks {
		feat := k.feat
		if feat == "" {
			feat = k.isa.goGroup
		}
		fmt.Fprintf(&d, "\t{%s, %s, %s, %v, kernel{%s, %s, %d, %d}},\n", feat, k.dt, k.op, k.prefer, k.name(), k.ntName(), k.block, k.isa.vbytes)
	}
	d.WriteString("}\n")
	src, err := format.Source([]byte(d.String()))
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("reduce_kernels_amd64.go", src, 0o644); err != nil {
		log.Fatal(err)
	}
}
