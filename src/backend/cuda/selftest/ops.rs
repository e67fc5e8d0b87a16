//! `selftest`'s checks of the graph's other ops (`cuda::ops`, `cuda::bn`, `cuda::dwconv`, and the
//! padded, average and global pooling of `pool.rs`: through them every kernel of
//! `kernels/eltwise.cu`, `bn.cu`, `depthwise.cu`, `avgpool.cu` and the padded ones of
//! `pool.cu`) against the CPU functions they mirror, on small random inputs. Outputs start as
//! NaN, so an element a kernel leaves unwritten fails; accumulated gradients start random, so
//! one that is overwritten instead of added to fails.

use cudarc::driver::CudaSlice;

use super::compare::{check, compare, Check};
use crate::backend::cuda::elem::bf16;
use crate::backend::cuda::{convert, on, ops, CudaError, Gpu};
use crate::nn::ops as cpu;
use crate::nn::ops::Act;
use crate::nn::rng::Rng;

pub(super) type Got = Result<Vec<f32>, CudaError>;
/// An output as computed on the GPU, and as the CPU computes it.
pub(super) type Pair = (Vec<f32>, Vec<f32>);

/// `v` on the device (an empty one as one NaN: CUDA allocates no empty buffers).
pub(super) fn up(gpu: &Gpu, v: &[f32]) -> Result<CudaSlice<f32>, CudaError> {
    match v.is_empty() {
        true => gpu.stream.clone_htod(&[f32::NAN]),
        false => gpu.stream.clone_htod(v),
    }
    .map_err(on(gpu.index, "upload"))
}

pub(super) fn nans(gpu: &Gpu, n: usize) -> Result<CudaSlice<f32>, CudaError> {
    up(gpu, &vec![f32::NAN; n.max(1)])
}

/// The first `n` elements of `v`, on the host.
pub(super) fn down(gpu: &Gpu, v: &CudaSlice<f32>, n: usize) -> Got {
    if n == 0 {
        return Ok(Vec::new());
    }
    gpu.stream
        .clone_dtoh(&v.slice(..n))
        .map_err(on(gpu.index, "download"))
}

pub(super) fn randn(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.normal()).collect()
}

/// A comparison whose absolute limit scales with the tensor (sums of many terms round
/// differently on the GPU; an indexing error is of the size of the terms).
pub(super) fn scaled(got: &[f32], want: &[f32]) -> (f64, f64) {
    let big = want.iter().fold(0.0f64, |m, v| m.max((*v as f64).abs()));
    compare(got, want, 1e-4 * big + 1e-6, 1e-4)
}

/// Several outputs of one op compared at once: (got, want) pairs, concatenated.
pub(super) fn joined(parts: Result<Vec<Pair>, CudaError>) -> Result<(f64, f64), CudaError> {
    parts.map(|parts| {
        parts
            .iter()
            .map(|(g, w)| scaled(g, w))
            .fold((0.0f64, 0.0f64), |(a, r), (pa, pr)| (a.max(pa), r.max(pr)))
    })
}

/// Every check of these ops on `gpu`.
pub fn checks(gpu: &Gpu) -> Vec<Check> {
    let mut rng = Rng::new(29);
    let mut out = elementwise(gpu, &mut rng);
    out.push(dropout(gpu));
    out.extend(bf16(gpu, &mut rng));
    out
}

/// The conversions to and from bf16 against the CPU's (`nn::bf16`), bit for bit: fp32 of every
/// kind (random bit patterns: NaNs, infinities, subnormals, ties) to bf16, and every bf16 back.
fn bf16(gpu: &Gpu, rng: &mut Rng) -> Vec<Check> {
    use crate::nn::bf16 as cpu16;
    let mut x: Vec<f32> = (0..100_000)
        .map(|_| f32::from_bits((rng.next_u64() >> 32) as u32))
        .collect();
    x.extend([
        0.0,
        -0.0,
        f32::MAX,
        f32::from_bits(0x3F80_8000),
        f32::from_bits(0x7F7F_8000),
    ]);
    let all: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
    let mismatches = |n: usize| match n {
        0 => (0.0, 0.0),
        n => (n as f64, f64::INFINITY),
    };
    let s = &gpu.stream;
    let to = (|| {
        let xd = up(gpu, &x)?;
        let mut out = s
            .alloc_zeros::<bf16>(x.len())
            .map_err(on(gpu.index, "allocate"))?;
        convert::to_elem(gpu, &mut out.slice_mut(..), &xd.slice(..), x.len())?;
        let got = s.clone_dtoh(&out).map_err(on(gpu.index, "download"))?;
        let bad = got
            .iter()
            .zip(&x)
            .filter(|(g, v)| g.to_bits() != cpu16::to_bf16(**v));
        Ok(mismatches(bad.count()))
    })();
    let back = (|| {
        let hd = s.clone_htod(&all).map_err(on(gpu.index, "upload"))?;
        let mut out = nans(gpu, all.len())?;
        convert::from_bf16(gpu, &mut out.slice_mut(..), &hd.slice(..), all.len())?;
        let got = down(gpu, &out, all.len())?;
        let bad = got.iter().zip(&all);
        let bad = bad.filter(|(g, h)| g.to_bits() != cpu16::from_bf16(h.to_bits()).to_bits());
        Ok(mismatches(bad.count()))
    })();
    vec![
        check(format!("gpu{} f32_to_bf16 (bits)", gpu.index), to),
        check(format!("gpu{} bf16_to_f32 (bits)", gpu.index), back),
    ]
}

/// ReLU6 forward and backward, add and its backward, accumulate and the mask product on random
/// data, exactly.
fn elementwise(gpu: &Gpu, rng: &mut Rng) -> Vec<Check> {
    let index = gpu.index;
    let n = 77 * 133;
    // wide enough that ReLU6 clamps at both ends; its output has exact 0s and 6s
    let x: Vec<f32> = (0..n).map(|_| 5.0 * rng.normal()).collect();
    let y = randn(rng, n);
    let mask: Vec<f32> = (0..n)
        .map(|_| if rng.next_f32() < 0.4 { 0.0 } else { 1.0 / 0.6 })
        .collect();
    let name = |op: &str| format!("gpu{index} {op}");
    let exact = |got: Got, want: Vec<f32>| got.map(|g| compare(&g, &want, 0.0, 0.0));
    let mut checks = Vec::new();

    let mut want6 = x.clone();
    cpu::relu6_forward(&mut want6);
    let got = (|| {
        let mut v = up(gpu, &x)?;
        ops::relu6_forward(gpu, &mut v.slice_mut(..), n)?;
        down(gpu, &v, n)
    })();
    checks.push(check(name("relu6_forward_f32"), exact(got, want6.clone())));

    let mut want = y.clone();
    cpu::relu6_backward(&mut want, &want6);
    let got = (|| {
        let (mut d, o) = (up(gpu, &y)?, up(gpu, &want6)?);
        ops::relu6_backward(gpu, &mut d.slice_mut(..), &o.slice(..), n)?;
        down(gpu, &d, n)
    })();
    checks.push(check(name("relu6_backward_f32"), exact(got, want)));

    // the add alone, and with the activation it applies as it writes (a residual's ReLU)
    for act in [Act::None, Act::Relu, Act::Relu6] {
        let mut want = vec![0.0; n];
        cpu::add_forward(&mut want, &x, &y);
        act.forward(&mut want);
        let got = (|| {
            let (a, b, mut o) = (up(gpu, &x)?, up(gpu, &y)?, nans(gpu, n)?);
            ops::add(
                gpu,
                &mut o.slice_mut(..),
                (&a.slice(..), &b.slice(..)),
                n,
                act,
            )?;
            down(gpu, &o, n)
        })();
        checks.push(check(
            name(&format!("add_f32{}", act.suffix())),
            exact(got, want),
        ));
    }

    // views one element in (off the 16-byte boundaries the vectorised add takes): element by
    // element, the same values
    let mut want = vec![0.0; n - 1];
    cpu::add_forward(&mut want, &x[1..], &y[1..]);
    Act::Relu.forward(&mut want);
    let got = (|| {
        let (a, b, mut o) = (up(gpu, &x)?, up(gpu, &y)?, nans(gpu, n)?);
        let ins = (&a.slice(1..), &b.slice(1..));
        ops::add(gpu, &mut o.slice_mut(1..), ins, n - 1, Act::Relu)?;
        Ok(down(gpu, &o, n)?[1..].to_vec())
    })();
    checks.push(check(name("add_f32+relu, unaligned"), exact(got, want)));

    // the add's backward: its activation's mask (from an output with exact 0s and 6s), then
    // one input's gradient written and the other's added to
    for act in [Act::None, Act::Relu, Act::Relu6] {
        let mut out = x.clone();
        act.forward(&mut out);
        let mut d = y.clone();
        act.backward(&mut d, &out);
        let mut added = x.clone();
        cpu::accumulate(&mut added, &d);
        let got = (|| {
            let (dout, o) = (up(gpu, &y)?, up(gpu, &out)?);
            let (mut d0, mut d1) = (nans(gpu, n)?, up(gpu, &x)?);
            let both = [&mut d0.slice_mut(..), &mut d1.slice_mut(..)];
            ops::add_backward(
                gpu,
                both,
                [false, true],
                (&dout.slice(..), &o.slice(..)),
                n,
                act,
            )?;
            let mut got = down(gpu, &d0, n)?;
            got.extend(down(gpu, &d1, n)?);
            Ok(got)
        })();
        let want = [d, added].concat();
        checks.push(check(
            name(&format!("add_backward_f32{}", act.suffix())),
            exact(got, want),
        ));
    }

    let mut want = y.clone();
    cpu::accumulate(&mut want, &x);
    let got = (|| {
        let (mut acc, v) = (up(gpu, &y)?, up(gpu, &x)?);
        ops::accumulate(gpu, &mut acc.slice_mut(..), &v.slice(..), n)?;
        down(gpu, &acc, n)
    })();
    checks.push(check(name("accumulate_f32"), exact(got, want)));

    let mut want = vec![0.0; n];
    cpu::mul(&mut want, &x, &mask);
    let got = (|| {
        let (v, m, mut o) = (up(gpu, &x)?, up(gpu, &mask)?, nans(gpu, n)?);
        ops::mul(gpu, &mut o.slice_mut(..), &v.slice(..), &m.slice(..), n)?;
        down(gpu, &o, n)
    })();
    checks.push(check(name("mul_f32"), exact(got, want)));
    checks
}

/// Dropout's mask: the CPU's (`nn::ops::dropout_mask`, whose draws a unit test checks) to the
/// bit, so both backends drop the same elements; the pass in its key counted on the device
/// (`count_pass`: 1, then 2), as a training pass replayed from a CUDA graph counts.
fn dropout(gpu: &Gpu) -> Check {
    let (n, p) = (200_000usize, 0.3f32);
    let mut want = vec![0.0; n];
    cpu::dropout_mask(&mut want, cpu::dropout_key(1, 2, 3), p);
    let got = (|| {
        let mut m = nans(gpu, n)?;
        let mut passes = (gpu.stream.clone_htod(&[1u64])).map_err(on(gpu.index, "upload"))?;
        ops::count_pass(gpu, &mut passes.slice_mut(..))?;
        ops::dropout_mask(gpu, &mut m.slice_mut(..), n, (1, &passes.slice(..), 3), p)?;
        down(gpu, &m, n)
    })();
    let got = got.map(|g| compare(&g, &want, 0.0, 0.0));
    check(format!("gpu{} dropout_mask_f32 p{p}", gpu.index), got)
}
