package collective

import "math"

// Float32 returns h as a float32. The conversion is exact: every binary16
// value (subnormals, ±Inf and NaN included) is representable as a float32.
// NaN payloads are kept (shifted into the top of the float32 mantissa).
func (h Half) Float32() float32 {
	// Fast path, small enough to inline: normal numbers only need the
	// exponent rebiased (+112) and the fraction shifted into place.
	if em := uint32(h) & 0x7fff; em-0x0400 < 0x7800 {
		return math.Float32frombits(uint32(h&0x8000)<<16 | (em<<13 + 112<<23))
	}
	return h.float32Slow()
}

func (h Half) float32Slow() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch exp {
	case 0:
		if man == 0 {
			return math.Float32frombits(sign) // ±0
		}
		// Subnormal: man × 2^-24, exact in float32.
		f := float32(man) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(f))
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13) // ±Inf, NaN
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// HalfFrom returns the binary16 value nearest to f, ties to even. Values too
// large for binary16 become ±Inf, values too small become (signed) subnormals
// or ±0. A NaN becomes a quiet NaN with the same sign and the top bits of
// the payload.
func HalfFrom(f float32) Half {
	// Fast path, small enough to inline: |f| in [2^-14, 65520) gives a
	// normal binary16. Rebias the exponent and round the 13 dropped bits to
	// nearest even; a carry out of the fraction correctly bumps the exponent,
	// and the bound 65520 (halfway to 2^16) keeps the result finite.
	bits := math.Float32bits(f)
	if a := bits & 0x7fffffff; a-0x38800000 < 0x477ff000-0x38800000 {
		return Half(bits>>16&0x8000 | (a-112<<23+0xfff+a>>13&1)>>13)
	}
	return halfFromSlow(f)
}

func halfFromSlow(f float32) Half {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int(bits>>23) & 0xff
	man := bits & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return Half(sign | 0x7e00 | uint16(man>>13))
		}
		return Half(sign | 0x7c00)
	}
	e := exp - 127 + 15 // biased binary16 exponent
	if e >= 0x1f {
		return Half(sign | 0x7c00)
	}
	if e <= 0 {
		// Subnormal (or zero) result: the value in units of 2^-24 is
		// m >> shift, m being the 24-bit significand (float32 subnormal
		// inputs have exp == 0, far below this range, and round to 0).
		shift := uint(14 - e)
		if shift > 24 {
			return Half(sign)
		}
		m := man | 0x800000
		q := m >> shift
		rem := m & (1<<shift - 1)
		halfway := uint32(1) << (shift - 1)
		if rem > halfway || rem == halfway && q&1 == 1 {
			q++ // may carry into the smallest normal: still the right encoding
		}
		return Half(sign | uint16(q))
	}
	q := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && q&1 == 1 {
		q++ // may carry into the exponent, up to 0x7c00 (Inf)
	}
	return Half(sign | uint16(q))
}

// Float32 returns b as a float32 (exact).
func (b BFloat) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// BFloatFrom returns the bfloat16 value nearest to f, ties to even; overflow
// gives ±Inf, subnormals round like any other value. A NaN becomes a quiet
// NaN with the same sign and the top bits of the payload.
func BFloatFrom(f float32) BFloat {
	bits := math.Float32bits(f)
	if bits&0x7fffffff > 0x7f800000 {
		return BFloat(bits>>16 | 0x40)
	}
	return BFloat((bits + 0x7fff + (bits>>16)&1) >> 16)
}
