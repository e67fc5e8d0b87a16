//! `selftest`'s check of cuDNN: its convolutions against the own kernels (`dnn::check`), in
//! strict fp32 and, from Ampere on, with TF32 allowed, in NCHW and channels last, through the
//! legacy API and the graph API.

use super::compare::Check;
use super::guarded;
use crate::backend::cuda::layout::Layout;
use crate::backend::cuda::{blas, dnn, libs, Gpu};
use crate::nn::precision::Precision;

/// cuDNN's convolutions (dense and depthwise, forward and both gradients) against the own
/// kernels, in strict fp32 and, from Ampere on, with TF32 allowed; skipped where cuDNN does not
/// load (or MGTOP_CUDNN=off).
pub fn checks(gpu: &Gpu) -> Vec<Check> {
    let index = gpu.index;
    if !dnn::wanted() {
        return vec![Check {
            name: format!("gpu{index} cuDNN convolutions"),
            worst: Some(0.0),
            max_abs: f64::NAN,
            note: format!(
                "skipped: cuDNN not loaded (MGTOP_CUDNN=off, or not found: {})",
                libs::CUDNN.install()
            ),
        }];
    }
    let mut precisions = vec![Precision::Fp32];
    if gpu.has_tf32() {
        precisions.push(Precision::Tf32);
    }
    let mut out = Vec::new();
    for (p, api) in precisions
        .into_iter()
        .flat_map(|p| [(p, dnn::Api::Legacy), (p, dnn::Api::Graph)])
    {
        let through = match api {
            dnn::Api::Legacy => "",
            dnn::Api::Graph => " graph API",
        };
        let name = format!(
            "gpu{index} cuDNN {}{through} convolutions ({p})",
            dnn::version()
        );
        out.extend(guarded(&name, || {
            let run = (|| {
                let blas = cudarc::cublas::CudaBlas::new(gpu.stream.clone())
                    .map_err(|e| format!("create cuBLAS handle: {e:?}"))?;
                blas::set_precision(&blas, p).map_err(|e| format!("{e:?}"))?;
                let mut d = dnn::Dnn::open_with(&gpu.stream, p, api)?;
                let tf32 = p == Precision::Tf32;
                let checked = dnn::check(gpu, &blas, &mut d, tf32, Layout::Nchw)
                    .and_then(|()| dnn::check(gpu, &blas, &mut d, tf32, Layout::Nhwc))
                    .map_err(|e| format!("{e} (NCHW, then channels last)"));
                let coverage = d.graph_coverage();
                dnn::close(d);
                blas::close(blas);
                checked?;
                // a graph API that planned nothing checked nothing (the legacy API ran)
                match coverage {
                    Some(c) if c.planned == 0 => Err(c.to_string()),
                    Some(c) => Ok(format!("; {c}")),
                    None => Ok(String::new()),
                }
            })();
            vec![Check {
                name: name.clone(),
                worst: run.is_ok().then_some(0.0),
                max_abs: f64::NAN,
                note: match run {
                    Ok(planned) => {
                        format!("agrees with the own kernels, NCHW and channels last{planned}")
                    }
                    Err(e) => e,
                },
            }]
        }));
    }
    out
}
