//! A layer's weights transformed for the Winograd products (U = G g G^T), and the way back for
//! their gradient (G^T s G).

use super::{RB, XI};

/// A layer's weights transformed (U = G g G^T per output and input channel), made once per
/// pass over the layer: `rows` outputs (padded to RB with zeros) by `inner` inputs, laid out
/// u[((xi * rows / RB + block) * inner + i) * RB + r] so a product tile's RB weights of input
/// i sit side by side.
pub struct Weights {
    pub(super) u: Vec<f32>,
    pub(super) rows: usize,
    pub(super) inner: usize,
}

impl Weights {
    /// For the forward pass of w[OC, C, 3, 3].
    pub fn forward(w: &[f32], c: usize, oc: usize) -> Weights {
        Weights::make(oc, c, |k, i| taps(w, (k * c + i) * 9, false))
    }

    /// For the input gradient of the same: C outputs, OC inputs, each window flipped.
    pub fn input_grad(w: &[f32], c: usize, oc: usize) -> Weights {
        Weights::make(c, oc, |ci, k| taps(w, (k * c + ci) * 9, true))
    }

    fn make(rows: usize, inner: usize, g: impl Fn(usize, usize) -> [f32; 9]) -> Weights {
        let padded = rows.next_multiple_of(RB);
        let mut u = vec![0.0; XI * padded * inner];
        for r in 0..rows {
            for i in 0..inner {
                let t = transform_weights(&g(r, i));
                for (xi, v) in t.into_iter().enumerate() {
                    u[((xi * padded / RB + r / RB) * inner + i) * RB + r % RB] = v;
                }
            }
        }
        Weights {
            u,
            rows: padded,
            inner,
        }
    }
}

/// The nine taps of the window at w[at..], flipped (ky, kx -> 2 - ky, 2 - kx) where asked.
fn taps(w: &[f32], at: usize, flip: bool) -> [f32; 9] {
    std::array::from_fn(|t| w[at + if flip { 8 - t } else { t }])
}

/// G x for a column x of 3: G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
fn g_of(x: [f32; 3]) -> [f32; 4] {
    [
        x[0],
        0.5 * (x[0] + x[1] + x[2]),
        0.5 * (x[0] - x[1] + x[2]),
        x[2],
    ]
}

/// G^T x for a column x of 4.
fn gt_of(x: [f32; 4]) -> [f32; 3] {
    [
        x[0] + 0.5 * (x[1] + x[2]),
        0.5 * (x[1] - x[2]),
        0.5 * (x[1] + x[2]) + x[3],
    ]
}

/// U = G g G^T of a 3 x 3 window g (row-major), row-major 4 x 4.
pub(super) fn transform_weights(g: &[f32; 9]) -> [f32; XI] {
    let cols: [[f32; 4]; 3] = std::array::from_fn(|x| g_of([g[x], g[3 + x], g[6 + x]]));
    let mut u = [0.0; XI];
    for a in 0..4 {
        let row = g_of([cols[0][a], cols[1][a], cols[2][a]]);
        u[a * 4..a * 4 + 4].copy_from_slice(&row);
    }
    u
}

/// The weights' gradient from the gradient of their transform: G^T s G, row-major 3 x 3.
pub(super) fn untransform_grad(s: &[f32; XI]) -> [f32; 9] {
    let cols: [[f32; 3]; 4] = std::array::from_fn(|b| gt_of([s[b], s[4 + b], s[8 + b], s[12 + b]]));
    let mut g = [0.0; 9];
    for y in 0..3 {
        let row = gt_of([cols[0][y], cols[1][y], cols[2][y], cols[3][y]]);
        g[y * 3..y * 3 + 3].copy_from_slice(&row);
    }
    g
}

/// dw[k][i] += G^T S[k][i] G for k < oc, i < c, entry xi of S[k][i] at s[(xi * c + i) * kp + k]
/// (the weight gradient's sums over the blocks).
pub(super) fn add_weight_grads(dw: &mut [f32], s: &[f32], c: usize, oc: usize, kp: usize) {
    for k in 0..oc {
        for i in 0..c {
            let t: [f32; XI] = std::array::from_fn(|xi| s[(xi * c + i) * kp + k]);
            for (d, v) in dw[(k * c + i) * 9..][..9]
                .iter_mut()
                .zip(untransform_grad(&t))
            {
                *d += v;
            }
        }
    }
}
