use super::*;

#[test]
fn every_source_names_its_kernels_by_op_and_element_type() {
    let names: Vec<&str> = SOURCES.iter().flat_map(|(_, s)| entry_points(s)).collect();
    assert_eq!(
        names,
        [
            "bias_add_f32",
            "bias_add_bf16",
            "bias_grad_f32",
            "bias_grad_bf16",
            "relu_forward_f32",
            "relu_forward_bf16",
            "relu_backward_f32",
            "relu_backward_bf16",
            "softmax_xent_f32",
            "softmax_xent_bf16",
            "grad_sumsq_f32",
            "step_end_f32",
            "sgd_f32",
            "momentum_f32",
            "adam_f32",
            "scale_f32",
            "metrics_f32",
            "im2col_f32",
            "col2im_f32",
            "conv_bias_add_f32",
            "conv_bias_add_bf16",
            "conv_bias_grad_f32",
            "conv_bias_grad_bf16",
            "conv_dw_sum_f32",
            "maxpool_forward_f32",
            "maxpool_forward_bf16",
            "maxpool_backward_f32",
            "maxpool_backward_bf16",
            "maxpool_padded_forward_f32",
            "maxpool_padded_forward_bf16",
            "maxpool_padded_backward_f32",
            "maxpool_padded_backward_bf16",
            "gather_rows_f32",
            "gather_rows_bf16",
            "relu6_forward_f32",
            "relu6_forward_bf16",
            "relu6_backward_f32",
            "relu6_backward_bf16",
            "add_f32",
            "add_bf16",
            "add_backward_f32",
            "add_backward_bf16",
            "accumulate_f32",
            "accumulate_bf16",
            "mul_f32",
            "mul_bf16",
            "dropout_mask_f32",
            "count_pass_u64",
            "bn_sums_f32",
            "bn_wide_sums_f32",
            "bn_sums_bf16",
            "bn_wide_sums_bf16",
            "bn_moments_f32",
            "bn_wide_moments_f32",
            "bn_moments_bf16",
            "bn_wide_moments_bf16",
            "bn_reduce_f32",
            "bn_finish_f32",
            "bn_fixed_saved_f32",
            "bn_apply_f32",
            "bn_wide_apply_f32",
            "bn_apply_bf16",
            "bn_wide_apply_bf16",
            "bn_eval_f32",
            "bn_wide_eval_f32",
            "bn_eval_bf16",
            "bn_wide_eval_bf16",
            "bn_grad_sums_f32",
            "bn_wide_grad_sums_f32",
            "bn_grad_sums_bf16",
            "bn_wide_grad_sums_bf16",
            "bn_param_grads_f32",
            "bn_backward_dx_f32",
            "bn_wide_backward_dx_f32",
            "bn_backward_dx_bf16",
            "bn_wide_backward_dx_bf16",
            "bn_nhwc_sums_f32",
            "bn_nhwc_sums_bf16",
            "bn_nhwc_wide_sums_f32",
            "bn_nhwc_wide_sums_bf16",
            "bn_nhwc_moments_f32",
            "bn_nhwc_moments_bf16",
            "bn_nhwc_wide_moments_f32",
            "bn_nhwc_wide_moments_bf16",
            "bn_reduce_parts_f32",
            "bn_nhwc_apply_f32",
            "bn_nhwc_apply_bf16",
            "bn_nhwc_wide_apply_f32",
            "bn_nhwc_wide_apply_bf16",
            "bn_nhwc_eval_f32",
            "bn_nhwc_eval_bf16",
            "bn_nhwc_wide_eval_f32",
            "bn_nhwc_wide_eval_bf16",
            "bn_nhwc_grad_sums_f32",
            "bn_nhwc_grad_sums_bf16",
            "bn_nhwc_wide_grad_sums_f32",
            "bn_nhwc_wide_grad_sums_bf16",
            "bn_nhwc_backward_dx_f32",
            "bn_nhwc_backward_dx_bf16",
            "bn_nhwc_wide_backward_dx_f32",
            "bn_nhwc_wide_backward_dx_bf16",
            "dwconv_forward_f32",
            "dwconv_forward_bf16",
            "dwconv_backward_input_f32",
            "dwconv_backward_input_bf16",
            "dwconv_backward_weight_f32",
            "dwconv_backward_weight_bf16",
            "dwconv_weight_parts3_f32",
            "dwconv_weight_parts3_bf16",
            "dwconv_weight_sum_f32",
            "dwconv_nhwc_forward_f32",
            "dwconv_nhwc_forward_bf16",
            "dwconv_nhwc_wide3_forward_f32",
            "dwconv_nhwc_wide3_forward_bf16",
            "dwconv_nhwc_backward_input_f32",
            "dwconv_nhwc_backward_input_bf16",
            "dwconv_nhwc_wide3_backward_input_f32",
            "dwconv_nhwc_wide3_backward_input_bf16",
            "dwconv_nhwc_weight_parts_f32",
            "dwconv_nhwc_weight_parts_bf16",
            "dwconv_nhwc_wide3_weight_parts_f32",
            "dwconv_nhwc_wide3_weight_parts_bf16",
            "avgpool_forward_f32",
            "avgpool_forward_bf16",
            "avgpool_backward_f32",
            "avgpool_backward_bf16",
            "gap_forward_f32",
            "gap_forward_bf16",
            "gap_backward_f32",
            "gap_backward_bf16",
            "f32_to_bf16",
            "bf16_to_f32",
            "bf16_add_to_f32",
            "f32_to_bf16_chunks",
            "nchw_to_nhwc_f32",
            "nchw_to_nhwc_bf16",
            "krsc_from_kcrs_f32",
            "krsc_from_kcrs_bf16",
            "kcrs_add_krsc_f32",
            "kcrs_add_krsc_bf16",
        ]
    );
    // every file in kernels/ is embedded
    let on_disk = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "cu")
        })
        .count();
    assert_eq!(on_disk, SOURCES.len());
}

#[test]
fn includes_are_put_in_place_between_line_directives_and_unknown_ones_named() {
    let src = "a\n#include \"bn.cuh\"\nb\n";
    let out = expand("bn.cu", src).unwrap();
    let bn = HEADERS[0].1;
    assert_eq!(
        out,
        format!("a\n#line 1 \"bn.cuh\"\n{bn}\n#line 3 \"bn.cu\"\nb\n")
    );
    let e = expand("x.cu", "#include \"nope.cuh\"\n").unwrap_err();
    assert!(e.contains("x.cu") && e.contains("nope.cuh"), "{e}");
    // every source's includes resolve
    for (file, src) in SOURCES {
        expand(file, src).unwrap();
    }
}

#[test]
fn a_device_gets_its_own_cubin_or_the_nearest_the_nvrtc_knows() {
    let nvrtc12 = [50, 60, 70, 75, 80, 86, 87, 89, 90];
    assert_eq!(Target::for_device(90, &nvrtc12), Some(Target::Cubin(90)));
    assert_eq!(Target::for_device(80, &nvrtc12), Some(Target::Cubin(80)));
    // sm_88 (hypothetical): the newest of its major, binary compatible
    assert_eq!(Target::for_device(88, &nvrtc12), Some(Target::Cubin(87)));
    // a Blackwell GPU with an NVRTC that predates it: PTX for the newest, JIT by the driver
    assert_eq!(Target::for_device(120, &nvrtc12), Some(Target::Ptx(90)));
    assert_eq!(Target::for_device(100, &nvrtc12), Some(Target::Ptx(90)));
    // an NVRTC 13 (sm_75 and up) on a Pascal GPU: nothing it can do
    assert_eq!(Target::for_device(61, &[75, 80, 90, 100, 120]), None);
    assert_eq!(Target::Cubin(90).arch(), "sm_90");
    assert_eq!(Target::Ptx(90).arch(), "compute_90");
}

#[test]
fn a_start_that_compiled_kernels_says_how_many_and_whether_the_next_reads_them_back() {
    let image = |compiled| Image {
        file: "a.cu",
        target: Target::Cubin(90),
        bytes: Vec::new(),
        compiled,
    };
    let took = std::time::Duration::from_millis(4240);
    let dir = Path::new("/home/u/.cache/mgtop/kernels");
    let all_read = [image(false), image(false)];
    assert_eq!(
        compiled_note(&all_read, Target::Cubin(90), took, Some(dir)),
        None
    );
    let one = [image(true), image(false)];
    assert_eq!(
        compiled_note(&one, Target::Cubin(90), took, Some(dir)).as_deref(),
        Some("compiled 1 of 2 kernel files for sm_90 in 4.2 s (kept in /home/u/.cache/mgtop/kernels: the next start reads them)")
    );
    let ptx = compiled_note(&[image(true)], Target::Ptx(90), took, None).unwrap();
    assert!(
        ptx.contains("for compute_90")
            && ptx.contains("MGTOP_KERNEL_CACHE=off: every start compiles them"),
        "{ptx}"
    );
}
