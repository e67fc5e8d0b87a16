use super::*;

#[test]
fn half_floats_convert_exactly() {
    for (h, f) in [
        (0x3c00u16, 1.0f32),
        (0xc000, -2.0),
        (0x0000, 0.0),
        (0x7bff, 65504.0),
        (0x0001, 5.960_464_5e-8),
        (0x3555, 0.333_251_95),
    ] {
        assert_eq!(f16_to_f32(h), f, "{h:#x}");
    }
    assert!(f16_to_f32(0x7c00).is_infinite() && f16_to_f32(0x7e00).is_nan());
}
