//! bf16 (bfloat16): fp32's sign and 8-bit exponent with a 7-bit mantissa, the number format a
//! GPU's bf16 mixed precision stores activations and weights in. This is the CPU's mirror of
//! the device's conversions (`kernels/convert.cu`): round to nearest, ties to even; a NaN stays
//! a (quiet) NaN of the same sign; infinities, signed zeros and subnormals keep their meaning;
//! finite values past bf16's largest round to infinity as IEEE rounding does. The GPU's
//! selftest compares the device's conversions with these bit for bit.

/// `x` rounded to bf16, as its 16 bits.
pub fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        // the top half, with the quiet bit set (a NaN whose payload sat only in the low half
        // would otherwise truncate to an infinity)
        return ((bits >> 16) as u16) | 0x0040;
    }
    let tie_to_even = (bits >> 16) & 1;
    (bits.wrapping_add(0x7FFF + tie_to_even) >> 16) as u16
}

/// The fp32 value of bf16 bits (exact: every bf16 is an fp32).
pub fn from_bf16(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `x` rounded to the nearest bf16, as an fp32.
pub fn round_bf16(x: f32) -> f32 {
    from_bf16(to_bf16(x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::rng::Rng;

    /// The reference: the `half` crate's conversion (IEEE round to nearest even).
    fn reference(x: f32) -> u16 {
        half::bf16::from_f32(x).to_bits()
    }

    #[test]
    fn rounding_matches_the_reference_on_every_kind_of_value() {
        let special = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            f32::from_bits(1),           // the smallest subnormal
            f32::from_bits(0x007F_FFFF), // the largest subnormal
            f32::from_bits(0x3F80_8000), // 1 + 2^-8: a tie, to even (down)
            f32::from_bits(0x3F81_8000), // a tie, to even (up)
            f32::from_bits(0x3F80_8001), // just past a tie: up
            f32::from_bits(0x7F7F_8000), // a tie at the top: to infinity
            f32::from_bits(0x7F7F_7FFF), // just under it: the largest bf16
            std::f32::consts::PI,
        ];
        for &x in &special {
            assert_eq!(to_bf16(x), reference(x), "{x:e} ({:#010x})", x.to_bits());
        }
        let mut rng = Rng::new(11);
        for _ in 0..1_000_000 {
            let bits = (rng.next_u64() >> 32) as u32;
            let x = f32::from_bits(bits);
            if x.is_nan() {
                continue;
            }
            assert_eq!(to_bf16(x), reference(x), "{x:e} ({bits:#010x})");
        }
    }

    #[test]
    fn nans_stay_nans_of_their_sign_and_values_come_back_exactly() {
        for bits in [
            0x7FC0_0000u32,
            0xFFC0_0000,
            0x7F80_0001,
            0xFF80_0001,
            0x7FBF_FFFF,
        ] {
            let h = to_bf16(f32::from_bits(bits));
            let back = from_bf16(h);
            assert!(back.is_nan(), "{bits:#010x} -> {h:#06x}");
            assert_eq!(back.is_sign_negative(), bits >> 31 == 1, "{bits:#010x}");
        }
        // every bf16 that is not a NaN is an fp32 that rounds to itself
        for h in 0..=u16::MAX {
            let x = from_bf16(h);
            if !x.is_nan() {
                assert_eq!(to_bf16(x), h, "{h:#06x}");
                assert_eq!(round_bf16(x).to_bits(), x.to_bits());
            }
        }
        // 7 mantissa bits: 1 + 2^-7 is kept, 1 + 2^-9 rounds away
        assert_eq!(round_bf16(1.0 + 1.0 / 128.0), 1.0 + 1.0 / 128.0);
        assert_eq!(round_bf16(1.0 + 1.0 / 512.0), 1.0);
    }
}
