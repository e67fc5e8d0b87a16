//! Depthwise "same" convolutions (stride 1, 3x3 or 5x5), one plane at a time: out[q] = bias +
//! sum_t w[t] * plane[off(t) + q] with the taps' weights held in registers; the input gradient is
//! the same sum over dout's plane with the taps reversed; the weight gradient sum_q dout[q] *
//! plane[off(t) + q] keeps one vector of partial sums per tap. The caller spreads channels over
//! threads and adds each image's weight gradient in image order.

use std::cell::RefCell;

use super::{available, grow, same, Plane, V};

/// Taps a kernel keeps in registers, at most (5x5; a 7x7 depthwise layer goes row by row).
const MAX_TAPS: usize = 25;

/// Whether `forward_plane` / `backward_plane` compute this depthwise convolution.
pub fn applies(k: usize, stride: usize, pad: usize) -> bool {
    same(k, k, stride, pad) && k > 1 && k * k <= MAX_TAPS && available()
}

/// A plane's height and width, and the kernel's size.
pub type Hwk = (usize, usize, usize);

/// This thread's planes: the input's, dout's, and an output plane.
#[derive(Default)]
struct Buffers {
    plane: Vec<f32>,
    dplane: Vec<f32>,
    outq: Vec<f32>,
    offs: Vec<usize>,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

impl Buffers {
    fn ready(&mut self, g: &Plane) {
        grow(&mut self.plane, g.len);
        grow(&mut self.dplane, g.len);
        grow(&mut self.outq, g.positions());
        g.taps(1, 1, &mut self.offs);
    }
}

/// out[h, w] = inp[h, w] (*) taps[k, k] + bias, padding k/2 (`applies` holds).
pub fn forward_plane(out: &mut [f32], inp: &[f32], taps: &[f32], bias: f32, (h, w, k): Hwk) {
    let g = Plane::new(h, w, k);
    BUFFERS.with(|s| {
        let s = &mut *s.borrow_mut();
        s.ready(&g);
        g.fill(&mut s.plane, inp);
        sweep(&mut s.outq, &s.plane, &s.offs, taps, bias, &g, false);
        g.gather(out, &s.outq);
    });
}

/// For `forward_plane`'s convolution: dtaps[k, k] += d/dtaps, dinp[h, w] = d/dinp (overwritten;
/// skipped when `None`).
pub fn backward_plane(
    dinp: Option<&mut [f32]>,
    dtaps: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    taps: &[f32],
    (h, w, k): Hwk,
) {
    let g = Plane::new(h, w, k);
    BUFFERS.with(|s| {
        let s = &mut *s.borrow_mut();
        s.ready(&g);
        g.fill(&mut s.plane, inp);
        g.fill(&mut s.dplane, dout);
        let sums = tap_sums(&s.dplane, &s.plane, &s.offs, &g);
        for (d, v) in dtaps.iter_mut().zip(&sums) {
            *d += v;
        }
        if let Some(dinp) = dinp {
            sweep(&mut s.outq, &s.dplane, &s.offs, taps, 0.0, &g, true);
            g.gather(dinp, &s.outq);
        }
    });
}

/// outq[q] = bias + sum_t taps[t] * plane[offs[t] + q] for q < g.positions() (`flip`: the taps
/// in reverse order).
fn sweep(
    outq: &mut [f32],
    plane: &[f32],
    offs: &[usize],
    taps: &[f32],
    bias: f32,
    g: &Plane,
    flip: bool,
) {
    let positions = g.positions();
    let n = offs.len();
    assert!(n <= MAX_TAPS && taps.len() >= n && outq.len() >= positions);
    assert!(offs.iter().max().copied().unwrap_or(0) + positions <= plane.len());
    let mut w = [0.0f32; MAX_TAPS];
    for (t, wt) in w[..n].iter_mut().enumerate() {
        *wt = taps[if flip { n - 1 - t } else { t }];
    }
    // SAFETY: `applies` saw AVX-512F; reads reach max(offs) + positions <= plane.len() and
    // writes positions <= outq.len() (asserted).
    unsafe {
        match n {
            9 => sweep_avx512::<9>(outq.as_mut_ptr(), plane.as_ptr(), offs, &w, bias, positions),
            _ => sweep_avx512::<MAX_TAPS>(
                outq.as_mut_ptr(),
                plane.as_ptr(),
                offs,
                &w,
                bias,
                positions,
            ),
        }
    }
}

/// sums[t] = sum_q dplane[origin + q] * plane[offs[t] + q] over q < g.positions() (dout's plane
/// is zero at the dropped positions).
fn tap_sums(dplane: &[f32], plane: &[f32], offs: &[usize], g: &Plane) -> [f32; MAX_TAPS] {
    let positions = g.positions();
    let n = offs.len();
    assert!(n <= MAX_TAPS && g.origin() + positions <= dplane.len());
    assert!(offs.iter().max().copied().unwrap_or(0) + positions <= plane.len());
    let mut sums = [0.0f32; MAX_TAPS];
    let d = dplane[g.origin()..].as_ptr();
    // SAFETY: `applies` saw AVX-512F; reads stay inside both planes (asserted).
    unsafe {
        match n {
            9 => tap_sums_avx512::<9>(&mut sums, d, plane.as_ptr(), offs, positions),
            _ => tap_sums_avx512::<MAX_TAPS>(&mut sums, d, plane.as_ptr(), offs, positions),
        }
    }
    sums
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl")]
unsafe fn sweep_avx512<const N: usize>(
    outq: *mut f32,
    plane: *const f32,
    offs: &[usize],
    w: &[f32; MAX_TAPS],
    bias: f32,
    positions: usize,
) {
    use std::arch::x86_64::*;
    let n = offs.len().min(N);
    let mut wv = [_mm512_setzero_ps(); N];
    for (v, &x) in wv.iter_mut().zip(w) {
        *v = _mm512_set1_ps(x);
    }
    let mut q = 0;
    // four vectors of positions at a time, then one
    while q + 4 * V <= positions {
        let mut acc = [_mm512_set1_ps(bias); 4];
        for t in 0..n {
            // SAFETY: inside the plane and the output (the caller's bounds).
            unsafe {
                let src = plane.add(offs[t] + q);
                for (u, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(wv[t], _mm512_loadu_ps(src.add(u * V)), *a);
                }
            }
        }
        for (u, a) in acc.iter().enumerate() {
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(outq.add(q + u * V), *a) };
        }
        q += 4 * V;
    }
    while q < positions {
        let mut acc = _mm512_set1_ps(bias);
        for t in 0..n {
            // SAFETY: as above.
            acc = _mm512_fmadd_ps(
                wv[t],
                unsafe { _mm512_loadu_ps(plane.add(offs[t] + q)) },
                acc,
            );
        }
        // SAFETY: as above.
        unsafe { _mm512_storeu_ps(outq.add(q), acc) };
        q += V;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl")]
unsafe fn tap_sums_avx512<const N: usize>(
    sums: &mut [f32; MAX_TAPS],
    dout: *const f32,
    plane: *const f32,
    offs: &[usize],
    positions: usize,
) {
    use std::arch::x86_64::*;
    let n = offs.len().min(N);
    let mut acc = [_mm512_setzero_ps(); N];
    for q in (0..positions).step_by(V) {
        // SAFETY: inside both planes (the caller's bounds).
        unsafe {
            let d = _mm512_loadu_ps(dout.add(q));
            for t in 0..n {
                acc[t] = _mm512_fmadd_ps(d, _mm512_loadu_ps(plane.add(offs[t] + q)), acc[t]);
            }
        }
    }
    for (s, a) in sums.iter_mut().zip(&acc[..n]) {
        *s = _mm512_reduce_add_ps(*a);
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn sweep_avx512<const N: usize>(
    _: *mut f32,
    _: *const f32,
    _: &[usize],
    _: &[f32; MAX_TAPS],
    _: f32,
    _: usize,
) {
    unreachable!("direct convolutions need AVX-512")
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tap_sums_avx512<const N: usize>(
    _: &mut [f32; MAX_TAPS],
    _: *const f32,
    _: *const f32,
    _: &[usize],
    _: usize,
) {
    unreachable!("direct convolutions need AVX-512")
}
