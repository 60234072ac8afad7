package collective

import (
	"math"
	"testing"
)

// refRound rounds |f| (finite, non-negative) to a binary format with p-bit
// significands and minimum normal exponent emin, ties to even, using float64
// arithmetic only. It returns the encoding without sign: exponent field and
// fraction, assuming bias 1-emin; overflow is left to the caller.
func refRound(a float64, p, emin int) (expField, frac uint64) {
	if a < math.Ldexp(1, emin) { // subnormal range: units of 2^(emin-p+1)
		q := math.RoundToEven(math.Ldexp(a, p-1-emin))
		if q >= math.Ldexp(1, p-1) { // rounded up to the smallest normal
			return 1, 0
		}
		return 0, uint64(q)
	}
	_, e := math.Frexp(a) // a = fr × 2^e, fr in [0.5, 1)
	e--                   // a in [2^e, 2^(e+1))
	q := math.RoundToEven(math.Ldexp(a, p-1-e))
	if q == math.Ldexp(1, p) {
		q /= 2
		e++
	}
	return uint64(e - emin + 1), uint64(q) - 1<<(p-1)
}

// refHalfBits is an independent binary16 rounding of any float64.
func refHalfBits(f float64) uint16 {
	var sign uint16
	if math.Signbit(f) {
		sign = 0x8000
	}
	a := math.Abs(f)
	switch {
	case math.IsNaN(f):
		return sign | 0x7e00
	case a >= 65520: // halfway between 65504 and 2^16: ties to even = up
		return sign | 0x7c00
	}
	e, m := refRound(a, 11, -14)
	return sign | uint16(e<<10|m)
}

// refBFloatBits is an independent bfloat16 rounding of any float64.
func refBFloatBits(f float64) uint16 {
	var sign uint16
	if math.Signbit(f) {
		sign = 0x8000
	}
	a := math.Abs(f)
	if math.IsNaN(f) {
		return sign | 0x7fc0
	}
	if math.IsInf(f, 0) {
		return sign | 0x7f80
	}
	e, m := refRound(a, 8, -126)
	if e >= 0xff {
		return sign | 0x7f80
	}
	return sign | uint16(e<<7|m)
}

// refHalfValue decodes binary16 bits with float64 arithmetic.
func refHalfValue(h uint16) float64 {
	exp, man := int(h>>10&0x1f), float64(h&0x3ff)
	var v float64
	switch exp {
	case 0:
		v = math.Ldexp(man, -24)
	case 0x1f:
		if man != 0 {
			v = math.NaN()
		} else {
			v = math.Inf(1)
		}
	default:
		v = math.Ldexp(1024+man, exp-25)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

func sameFloat32(x, y float32) bool {
	if x != x || y != y {
		return x != x && y != y
	}
	return math.Float32bits(x) == math.Float32bits(y)
}

func TestHalfFloat32Exhaustive(t *testing.T) {
	t.Parallel()
	for i := 0; i < 1<<16; i++ {
		h := Half(i)
		f := h.Float32()
		want := refHalfValue(uint16(h))
		if math.IsNaN(want) {
			if !math.IsNaN(float64(f)) || math.Signbit(float64(f)) != (i&0x8000 != 0) ||
				math.Float32bits(f)>>13&0x3ff != uint32(i)&0x3ff {
				t.Fatalf("Half(%#04x).Float32() = %#08x, want NaN with sign and payload kept", i, math.Float32bits(f))
			}
		} else if !sameFloat32(f, float32(want)) || math.Signbit(float64(f)) != math.Signbit(want) {
			t.Fatalf("Half(%#04x).Float32() = %v, want %v", i, f, want)
		}
		// Round trip: exact for every value; NaNs stay NaNs of the same
		// sign, and quiet NaNs keep their payload.
		back := HalfFrom(f)
		switch {
		case i&0x7c00 == 0x7c00 && i&0x3ff != 0:
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 || back&0x8000 != h&0x8000 || h&0x200 != 0 && back != h {
				t.Fatalf("HalfFrom(Half(%#04x).Float32()) = %#04x, want a NaN like it", i, uint16(back))
			}
		case back != h:
			t.Fatalf("HalfFrom(Half(%#04x).Float32()) = %#04x", i, uint16(back))
		}
		if got := refHalfBits(want); !math.IsNaN(want) && got != uint16(h) {
			t.Fatalf("refHalfBits(%v) = %#04x, want %#04x (reference broken)", want, got, i)
		}
	}
}

// Midpoints between adjacent binary16 values round to the even one; one
// float32 ulp either side rounds to the nearer one. This covers every
// rounding boundary, subnormal, normal and overflow.
func TestHalfFromRoundingBoundaries(t *testing.T) {
	t.Parallel()
	for i := 0; i < 0x7c00; i++ {
		lo := refHalfValue(uint16(i))
		hi := refHalfValue(uint16(i + 1))
		if i+1 == 0x7c00 {
			hi = 65536 // the next value if the exponent went on
		}
		mid := float32((lo + hi) / 2) // exact: 12 significant bits
		even := uint16(i)
		if i&1 == 1 {
			even = uint16(i + 1)
		}
		for _, sign := range []float32{1, -1} {
			sb := uint16(0)
			if sign < 0 {
				sb = 0x8000
			}
			m := sign * mid
			if got := HalfFrom(m); uint16(got) != even|sb {
				t.Fatalf("HalfFrom(%v) = %#04x, want %#04x (tie to even)", m, uint16(got), even|sb)
			}
			away := math.Nextafter32(m, sign*float32(math.Inf(1)))
			if got := HalfFrom(away); uint16(got) != uint16(i+1)|sb {
				t.Fatalf("HalfFrom(%v) = %#04x, want %#04x", away, uint16(got), uint16(i+1)|sb)
			}
			toward := math.Nextafter32(m, 0)
			if got := HalfFrom(toward); uint16(got) != uint16(i)|sb {
				t.Fatalf("HalfFrom(%v) = %#04x, want %#04x", toward, uint16(got), uint16(i)|sb)
			}
		}
	}
}

// HalfFrom and BFloatFrom against the float64 references over a spread of
// float32 bit patterns (every 251st: all exponents, assorted mantissas).
func TestHalfBFloatFromSampled(t *testing.T) {
	t.Parallel()
	step := uint64(251)
	if testing.Short() {
		step = 4093
	}
	for u := uint64(0); u < 1<<32; u += step {
		f := math.Float32frombits(uint32(u))
		if math.IsNaN(float64(f)) {
			h := HalfFrom(f)
			if h&0x7c00 != 0x7c00 || h&0x200 == 0 || (h&0x8000 != 0) != math.Signbit(float64(f)) {
				t.Fatalf("HalfFrom(NaN %#08x) = %#04x, want a quiet NaN of the same sign", u, uint16(h))
			}
			bf := BFloatFrom(f)
			if bf&0x7f80 != 0x7f80 || bf&0x40 == 0 || (bf&0x8000 != 0) != math.Signbit(float64(f)) {
				t.Fatalf("BFloatFrom(NaN %#08x) = %#04x, want a quiet NaN of the same sign", u, uint16(bf))
			}
			continue
		}
		if got, want := uint16(HalfFrom(f)), refHalfBits(float64(f)); got != want {
			t.Fatalf("HalfFrom(%v = %#08x) = %#04x, want %#04x", f, u, got, want)
		}
		if got, want := uint16(BFloatFrom(f)), refBFloatBits(float64(f)); got != want {
			t.Fatalf("BFloatFrom(%v = %#08x) = %#04x, want %#04x", f, u, got, want)
		}
	}
}

func TestBFloatExhaustive(t *testing.T) {
	t.Parallel()
	for i := 0; i < 1<<16; i++ {
		b := BFloat(i)
		f := b.Float32()
		if math.Float32bits(f) != uint32(i)<<16 {
			t.Fatalf("BFloat(%#04x).Float32() bits = %#08x", i, math.Float32bits(f))
		}
		back := BFloatFrom(f)
		isNaN := i&0x7f80 == 0x7f80 && i&0x7f != 0
		switch {
		case isNaN:
			if back&0x7f80 != 0x7f80 || back&0x40 == 0 || back&0x8000 != b&0x8000 || b&0x40 != 0 && back != b {
				t.Fatalf("BFloatFrom(BFloat(%#04x).Float32()) = %#04x, want a NaN like it", i, uint16(back))
			}
		case back != b:
			t.Fatalf("BFloatFrom(BFloat(%#04x).Float32()) = %#04x", i, uint16(back))
		}
		if isNaN {
			continue
		}
		if got := refBFloatBits(float64(f)); got != uint16(i) {
			t.Fatalf("refBFloatBits(%v) = %#04x, want %#04x (reference broken)", f, got, i)
		}
		// Rounding boundaries above this value (positive and negative).
		if i&0x7fff >= 0x7f80 {
			continue
		}
		next := BFloat(i + 1).Float32()
		if i&0x7fff == 0x7f7f {
			next = float32(math.Inf(1)) // formally 2^128
			if i&0x8000 != 0 {
				next = -next
			}
		}
		mid := math.Float32frombits(uint32(i)<<16 | 0x8000) // halfway to next
		even := BFloat(i)
		if i&1 == 1 {
			even = BFloat(i + 1)
		}
		if got := BFloatFrom(mid); got != even {
			t.Fatalf("BFloatFrom(%v) = %#04x, want %#04x (tie to even)", mid, uint16(got), uint16(even))
		}
		if got := BFloatFrom(math.Nextafter32(mid, next)); got != BFloat(i+1) {
			t.Fatalf("BFloatFrom(just above %v) = %#04x, want %#04x", mid, uint16(got), i+1)
		}
		if got := BFloatFrom(math.Nextafter32(mid, f)); got != b {
			t.Fatalf("BFloatFrom(just below %v) = %#04x, want %#04x", mid, uint16(got), i)
		}
	}
}

func TestHalfSpecialValues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		f    float32
		want Half
	}{
		{0, 0}, {float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65519.99, 0x7bff}, {65520, 0x7c00}, {1e6, 0x7c00},
		{float32(math.Inf(1)), 0x7c00}, {float32(math.Inf(-1)), 0xfc00},
		{5.9604645e-08, 0x0001}, {2.98e-08, 0x0000}, {math.Float32frombits(0x33000000), 0x0000}, {math.Float32frombits(0x33000001), 0x0001},
		{6.097555e-05, 0x03ff}, {6.1035156e-05, 0x0400}, {1e-40, 0}, {-1e-40, 0x8000},
	}
	for _, c := range cases {
		if got := HalfFrom(c.f); got != c.want {
			t.Errorf("HalfFrom(%v) = %#04x, want %#04x", c.f, uint16(got), uint16(c.want))
		}
	}
	if h := HalfFrom(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("HalfFrom(NaN) = %#04x", uint16(h))
	}
	bcases := []struct {
		f    float32
		want BFloat
	}{
		{1, 0x3f80}, {-1, 0xbf80}, {3.4028235e38, 0x7f80}, {float32(math.Inf(-1)), 0xff80},
		{1e-45, 0x0000}, {math.Float32frombits(0x00008000), 0x0000}, {math.Float32frombits(0x00018000), 0x0002},
		{math.Float32frombits(0x00008001), 0x0001},
	}
	for _, c := range bcases {
		if got := BFloatFrom(c.f); got != c.want {
			t.Errorf("BFloatFrom(%v) = %#04x, want %#04x", c.f, uint16(got), uint16(c.want))
		}
	}
}
