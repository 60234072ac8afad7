//go:build amd64 && !purego

package collective

import (
	"reflect"
	"slices"
	"testing"
)

// TestReduceKernelSetsMatchCPU checks that the kernel sets are the ones this
// CPU's features allow, each holding exactly the assembly kernels it should.
func TestReduceKernelSetsMatchCPU(t *testing.T) {
	t.Parallel()
	has := cpuFeatures()
	var want []string
	if has[featAVX2] {
		want = append(want, "avx2")
	}
	if has[featAVX512] {
		want = append(want, "avx512", "avx2+512")
	}
	var got []string
	for _, ks := range kernelSets {
		got = append(got, ks.name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("kernel sets %q on a CPU with AVX2 %v, F16C %v, AVX-512 %v; want %q",
			got, has[featAVX2], has[featAVX2F16C], has[featAVX512], want)
	}
	// The kernel a set holds for a type and operation: its AVX2 kernel
	// (where the CPU can run it), replaced by the AVX-512 one in "avx512",
	// and in "avx2+512" where that one is preferred.
	wantKernel := func(set string, dt Datatype, op ReduceOp) (func(dst, a, b *byte, n int), bool) {
		var fn func(dst, a, b *byte, n int)
		for _, k := range asmKernels {
			if k.dt != dt || k.op != op {
				continue
			}
			switch {
			case k.feat == featAVX2, k.feat == featAVX2F16C && has[featAVX2F16C]:
				if fn == nil {
					fn = k.k.fn
				}
			case k.feat == featAVX512 && (set == "avx512" || set == "avx2+512" && k.prefer):
				return k.k.fn, true
			}
		}
		return fn, fn != nil
	}
	ptr := func(fn func(dst, a, b *byte, n int)) uintptr { return reflect.ValueOf(fn).Pointer() }
	for _, ks := range kernelSets {
		for _, dt := range Datatypes() {
			for _, op := range ReduceOps() {
				fn, ok := wantKernel(ks.name, dt, op)
				got := ks.k[dt][op].fn
				switch {
				case !ok && got != nil:
					t.Errorf("%s/%v/%v: a vector kernel where none applies", ks.name, dt, op)
				case ok && got == nil:
					t.Errorf("%s/%v/%v: no vector kernel", ks.name, dt, op)
				case ok && ptr(got) != ptr(fn):
					t.Errorf("%s/%v/%v: the wrong kernel", ks.name, dt, op)
				}
			}
		}
	}
}
