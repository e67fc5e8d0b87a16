use super::*;

#[test]
fn bf16_tensors_take_the_tensor_cores_tf32_may_and_fp32_stays_strict() {
    use cudnnMathType_t::*;
    assert_eq!(math(true, Precision::Bf16), CUDNN_TENSOR_OP_MATH);
    assert_eq!(math(false, Precision::Tf32), CUDNN_DEFAULT_MATH);
    assert_eq!(math(false, Precision::Fp32), CUDNN_FMA_MATH);
    // a bf16 run's fp32 check (`check`) compares strictly
    assert_eq!(math(false, Precision::Bf16), CUDNN_FMA_MATH);
}

#[test]
fn versions_read_as_each_cudnn_writes_them() {
    assert_eq!(version_text(90300), "9.3.0");
    assert_eq!(version_text(91002), "9.10.2");
    assert_eq!((major(90300), major(91400)), (9, 9));
    // cuDNN 8 and older: major * 1000 + minor * 100 + patch (too old for these convolutions)
    assert_eq!(version_text(8907), "8.9.7");
    assert_eq!(version_text(7605), "7.6.5");
    assert_eq!((major(8907), major(7605)), (8, 7));
}

#[test]
fn mgtop_cudnn_is_on_or_off_and_a_slip_is_said() {
    for (v, on) in [(None, true), (Some("on"), true), (Some("1"), true)] {
        assert_eq!(asked(v), Ok(on));
    }
    assert_eq!(asked(Some("off")), Ok(false));
    assert_eq!(asked(Some("0")), Ok(false));
    let e = asked(Some("of")).unwrap_err();
    assert!(
        e.contains("MGTOP_CUDNN=of is neither on nor off: cuDNN is used"),
        "{e}"
    );
}
