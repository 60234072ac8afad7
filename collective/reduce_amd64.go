//go:build amd64 && !purego

package collective

//go:generate go run reduce_asmgen.go

// CPU feature groups an assembly kernel may need.
const (
	featAVX2     = iota // AVX + AVX2, OS saves YMM state
	featAVX2F16C        // featAVX2 + F16C
	featAVX512          // AVX-512 F, BW, DQ, VL; OS saves ZMM state
)

type asmKernel struct {
	feat   int
	dt     Datatype
	op     ReduceOp
	prefer bool // an AVX-512 kernel faster than its AVX2 counterpart
	k      kernel
}

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

// CPUID feature bits: leaf 1 ECX, then leaf 7 EBX.
const (
	bitF16C    = 1 << 29
	bitOSXSAVE = 1 << 27
	bitAVX     = 1 << 28

	bitAVX2     = 1 << 5
	bitAVX512F  = 1 << 16
	bitAVX512DQ = 1 << 17
	bitAVX512BW = 1 << 30
	bitAVX512VL = 1 << 31
)

// cpuFeatures reports which feature groups this CPU and OS support.
func cpuFeatures() (has [3]bool) {
	maxID, _, _, _ := cpuid(0, 0)
	if maxID < 7 {
		return
	}
	_, _, ecx1, _ := cpuid(1, 0)
	if ecx1&bitOSXSAVE == 0 || ecx1&bitAVX == 0 {
		return
	}
	xcr0, _ := xgetbv()
	if xcr0&0x6 != 0x6 { // XMM and YMM state
		return
	}
	_, ebx7, _, _ := cpuid(7, 0)
	has[featAVX2] = ebx7&bitAVX2 != 0
	has[featAVX2F16C] = has[featAVX2] && ecx1&bitF16C != 0
	const avx512 = bitAVX512F | bitAVX512DQ | bitAVX512BW | bitAVX512VL
	has[featAVX512] = has[featAVX2] && ebx7&avx512 == avx512 && xcr0&0xe6 == 0xe6 // + opmask, ZMM state
	return
}

func init() {
	has := cpuFeatures()
	if !has[featAVX2] {
		return
	}
	avx2 := &kernelSet{name: "avx2"}
	for _, k := range asmKernels {
		if k.feat == featAVX2 || k.feat == featAVX2F16C && has[featAVX2F16C] {
			avx2.k[k.dt][k.op] = k.k
		}
	}
	kernelSets = append(kernelSets, avx2)
	activeKernels = avx2
	if !has[featAVX512] {
		return
	}
	// Two sets with AVX-512: all of its kernels (for tests and benchmarks),
	// and the default, AVX2 with the AVX-512 kernels marked prefer (the
	// others gain nothing over the 256-bit loops on Zen 4, and on Intel
	// parts the 256-bit loops avoid the 512-bit frequency penalty).
	avx512 := &kernelSet{name: "avx512", k: avx2.k}
	best := &kernelSet{name: "avx2+512", k: avx2.k}
	for _, k := range asmKernels {
		if k.feat == featAVX512 {
			avx512.k[k.dt][k.op] = k.k
			if k.prefer {
				best.k[k.dt][k.op] = k.k
			}
		}
	}
	kernelSets = append(kernelSets, avx512, best)
	activeKernels = best
}
