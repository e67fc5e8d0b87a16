//! A seeded, learnable "teacher" dataset for benchmarks (the recipe of ../shared/bench):
//! x ~ U[0,1)^D, y = argmax((x - 0.5) W + 0.5 noise) with W, noise ~ N(0,1).

use super::Dataset;
use crate::nn::gemm::sgemm;
use crate::nn::rng::{tag, Rng};

pub(super) fn teacher(n: usize, d: usize, c: usize, seed: u64) -> Dataset {
    let mut rng = Rng::stream(seed, tag::SYNTHETIC, 0);
    let w: Vec<f32> = (0..d * c).map(|_| rng.normal()).collect();
    let x: Vec<f32> = (0..n * d).map(|_| rng.next_f32()).collect();
    let mut logits: Vec<f32> = (0..n * c).map(|_| 0.5 * rng.normal()).collect();
    let centred: Vec<f32> = x.iter().map(|v| v - 0.5).collect();
    sgemm(false, false, n, c, d, 1.0, &centred, &w, 1.0, &mut logits);
    let y = logits
        .chunks_exact(c)
        .map(|row| {
            row.iter()
                .enumerate()
                .fold((0, f32::NEG_INFINITY), |best, (j, &v)| {
                    if v > best.1 {
                        (j, v)
                    } else {
                        best
                    }
                })
                .0 as u32
        })
        .collect();
    Dataset {
        features: d,
        classes: c,
        x,
        y,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn classes_are_balanced_and_seeded() {
        let a = super::teacher(5000, 20, 4, 1);
        let mut counts = [0usize; 4];
        for &y in &a.y {
            counts[y as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 700), "{counts:?}");
        assert_eq!(a.y, super::teacher(5000, 20, 4, 1).y);
        assert_ne!(a.y, super::teacher(5000, 20, 4, 2).y);
    }
}
