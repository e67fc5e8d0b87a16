//! The element-wise passes of a CPU model's step (residual adds, ReLU masks, gradient sums)
//! over the worker's intra-op threads, in contiguous pieces (`intraop::pieces`): the same
//! results as one pass, element for element. Without them one worker's helper threads waited
//! through every such pass.

use crate::nn::intraop::{pieces, Disjoint};

/// `f(out piece, range)` over the first `n` elements of `out`, piece by piece.
fn over(out: &mut [f32], n: usize, f: &(dyn Fn(&mut [f32], std::ops::Range<usize>) + Sync)) {
    let d = Disjoint::new(&mut out[..n]);
    // SAFETY: the pieces are disjoint ranges of 0..n, each given to one task.
    pieces(n, &|r| f(unsafe { d.range(r.start, r.len()) }, r));
}

/// `ops::add_forward`.
pub fn add_forward(out: &mut [f32], a: &[f32], b: &[f32]) {
    let n = out.len().min(a.len()).min(b.len());
    over(out, n, &|o, r| super::add_forward(o, &a[r.clone()], &b[r]));
}

/// `ops::add_relu_forward`.
pub fn add_relu_forward(out: &mut [f32], a: &[f32], b: &[f32]) {
    let n = out.len().min(a.len()).min(b.len());
    over(out, n, &|o, r| {
        super::add_relu_forward(o, &a[r.clone()], &b[r])
    });
}

/// `ops::accumulate`.
pub fn accumulate(acc: &mut [f32], x: &[f32]) {
    let n = acc.len().min(x.len());
    over(acc, n, &|a, r| super::accumulate(a, &x[r]));
}

/// `ops::accumulate` of each of `parts` in turn (each at least as long as `acc`): every element
/// gets its terms in the parts' order, as from the serial loop.
pub fn accumulate_all(acc: &mut [f32], parts: &[&[f32]]) {
    let n = acc.len();
    over(acc, n, &|a, r| {
        for p in parts {
            super::accumulate(a, &p[r.clone()]);
        }
    });
}

/// `ops::relu_backward`.
pub fn relu_backward(dx: &mut [f32], out: &[f32]) {
    let n = dx.len().min(out.len());
    over(dx, n, &|d, r| super::relu_backward(d, &out[r]));
}

/// `ops::relu_backward_accumulate`.
pub fn relu_backward_accumulate(dx: &mut [f32], acc: &mut [f32], out: &[f32]) {
    let n = dx.len().min(acc.len()).min(out.len());
    let a = Disjoint::new(&mut acc[..n]);
    over(dx, n, &|d, r| {
        // SAFETY: as `over`'s: this task's range only.
        let a = unsafe { a.range(r.start, r.len()) };
        super::relu_backward_accumulate(d, a, &out[r])
    });
}

/// `ops::relu_backward_copy`.
pub fn relu_backward_copy(dx: &mut [f32], to: &mut [f32], out: &[f32]) {
    let n = dx.len().min(to.len()).min(out.len());
    let t = Disjoint::new(&mut to[..n]);
    over(dx, n, &|d, r| {
        // SAFETY: as `over`'s: this task's range only.
        let t = unsafe { t.range(r.start, r.len()) };
        super::relu_backward_copy(d, t, &out[r])
    });
}

/// to = from (equal lengths).
pub fn copy(to: &mut [f32], from: &[f32]) {
    assert_eq!(to.len(), from.len(), "copy: lengths differ");
    over(to, from.len(), &|t, r| t.copy_from_slice(&from[r]));
}

#[cfg(test)]
mod tests {
    use crate::nn::intraop;
    use crate::nn::rng::Rng;

    fn randn(n: usize, seed: u64) -> Vec<f32> {
        crate::nn::gradcheck::randn(&mut Rng::new(seed), n)
    }

    /// Each pass on three threads, over lengths below, at and past several pieces, equals the
    /// one-thread pass element for element.
    #[test]
    fn the_pieces_give_the_one_pass_results() {
        let pool = intraop::for_worker(3, "par-test").unwrap();
        assert!(pool.is_some());
        intraop::install(pool);
        for n in [0, 7, 1 << 17, 3 * (1 << 17) + 5, 1_000_003] {
            let (a, b, out) = (randn(n, 1), randn(n, 2), randn(n, 3));
            let (mut o1, mut o2) = (vec![0.0; n], vec![0.0; n]);
            super::add_relu_forward(&mut o1, &a, &b);
            crate::nn::ops::add_relu_forward(&mut o2, &a, &b);
            assert_eq!(o1, o2, "add_relu_forward, {n}");
            super::add_forward(&mut o1, &a, &b);
            crate::nn::ops::add_forward(&mut o2, &a, &b);
            assert_eq!(o1, o2, "add_forward, {n}");
            let (mut acc1, mut acc2) = (b.clone(), b.clone());
            super::accumulate(&mut acc1, &a);
            crate::nn::ops::accumulate(&mut acc2, &a);
            assert_eq!(acc1, acc2, "accumulate, {n}");
            let (mut d1, mut d2) = (a.clone(), a.clone());
            super::relu_backward(&mut d1, &out);
            crate::nn::ops::relu_backward(&mut d2, &out);
            assert_eq!(d1, d2, "relu_backward, {n}");
            let (mut d1, mut d2, mut t1, mut t2) = (a.clone(), a.clone(), b.clone(), b.clone());
            super::relu_backward_accumulate(&mut d1, &mut t1, &out);
            crate::nn::ops::relu_backward_accumulate(&mut d2, &mut t2, &out);
            assert_eq!((&d1, &t1), (&d2, &t2), "relu_backward_accumulate, {n}");
            let (mut d1, mut d2) = (a.clone(), a.clone());
            super::relu_backward_copy(&mut d1, &mut t1, &out);
            crate::nn::ops::relu_backward_copy(&mut d2, &mut t2, &out);
            assert_eq!((&d1, &t1), (&d2, &t2), "relu_backward_copy, {n}");
            let (mut s1, mut s2) = (b.clone(), b.clone());
            super::accumulate_all(&mut s1, &[&a, &out, &a]);
            for p in [&a, &out, &a] {
                crate::nn::ops::accumulate(&mut s2, p);
            }
            assert_eq!(s1, s2, "accumulate_all, {n}");
            super::copy(&mut t1, &a);
            assert_eq!(t1, a, "copy, {n}");
        }
        intraop::install(None);
    }
}
