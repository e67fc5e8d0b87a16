//! `synthetic-images:N,C,H,W,K`, a seeded image set that a small CNN learns, for benchmarks:
//! each of the K classes is a smooth random template (per channel, a few Gaussian blobs of random
//! place, width and height); a sample is its class's template shifted by up to H/8 rows and W/8
//! columns (edge pixels repeated) plus N(0, 0.3^2) noise per value. Labels are balanced
//! (i mod K, shuffled). Values lie around [0, 1] and are used as given.

use super::host_memory;
use super::image_shape::MAX_IMAGE_VALUES;
use super::Dataset;
use crate::nn::rng::{tag, Rng};

/// The synthetic sets share the tag; the teacher set uses stream 0, images stream 1.
const STREAM: u64 = 1;
/// Blobs per channel of a template.
const BLOBS: usize = 4;
/// The standard deviation of the noise added to every value.
const NOISE: f32 = 0.3;

pub const MAX_CHANNELS: usize = 1024;
pub const MAX_SIDE: usize = 4096;
pub const MAX_CLASSES: usize = 65536;

const EXAMPLE: &str = "e.g. synthetic-images:60000,1,28,28,10";

/// Checks the sizes of `synthetic-images:N,C,H,W,K` (not yet the memory they take).
pub(super) fn check_spec(n: usize, c: usize, h: usize, w: usize, k: usize) -> Result<(), String> {
    if n < 2 {
        return Err(format!(
            "N={n} samples: at least 2 are needed (one to train, one to validate); {EXAMPLE}"
        ));
    }
    if !(1..=MAX_CHANNELS).contains(&c) {
        return Err(format!(
            "C={c} channels: use 1 to {MAX_CHANNELS} (1 grey, 3 RGB); {EXAMPLE}"
        ));
    }
    for (name, v) in [("H", h), ("W", w)] {
        if !(1..=MAX_SIDE).contains(&v) {
            return Err(format!(
                "{name}={v} pixels: height and width must be 1 to {MAX_SIDE}; {EXAMPLE}"
            ));
        }
    }
    if c * h * w > MAX_IMAGE_VALUES {
        return Err(format!(
            "{c}x{h}x{w} = {} values per image, more than {MAX_IMAGE_VALUES}; use fewer channels or smaller images",
            c * h * w
        ));
    }
    if !(2..=MAX_CLASSES).contains(&k) {
        return Err(format!(
            "K={k} classes: use 2 to {MAX_CLASSES} classes; {EXAMPLE}"
        ));
    }
    Ok(())
}

/// The bytes the set takes while it is made and split: the images three times (made, the split
/// copies, a margin as the teacher set counts) and the templates, as f32; `None` past `u64`.
fn bytes_needed(n: usize, per_image: usize, k: usize) -> Option<u64> {
    let (n, f, k) = (n as u64, per_image as u64, k as u64);
    let floats = n
        .checked_mul(f)?
        .checked_mul(3)?
        .checked_add(k.checked_mul(f)?)?;
    floats.checked_mul(4)
}

/// Refuses sizes whose arrays cannot be held in this machine's memory.
fn check_size(
    n: usize,
    shape: [usize; 3],
    k: usize,
    memory: u64,
    memory_text: &str,
) -> Result<(), String> {
    let [c, h, w] = shape;
    match bytes_needed(n, c * h * w, k) {
        Some(b) if b <= memory => Ok(()),
        Some(b) => Err(format!(
            "{n} images of {c}x{h}x{w} need about {} ({b} bytes) to make and split, more than {memory_text}; use fewer samples or smaller images",
            crate::text::bytes(b)
        )),
        None => Err(format!(
            "{n} images of {c}x{h}x{w} are more values than any memory holds; use fewer samples or smaller images"
        )),
    }
}

/// One class's template, [C, H, W]: per channel `BLOBS` Gaussian blobs, summed and capped at 1.
fn template(rng: &mut Rng, [c, h, w]: [usize; 3]) -> Vec<f32> {
    let mut t = vec![0.0f32; c * h * w];
    let side = h.min(w) as f32;
    for plane in t.chunks_exact_mut(h * w) {
        for _ in 0..BLOBS {
            let (cy, cx) = (rng.uniform(0.0, h as f32), rng.uniform(0.0, w as f32));
            let sigma = (side * rng.uniform(0.1, 0.3)).max(0.6);
            let amp = rng.uniform(0.4, 1.0);
            let inv = 1.0 / (2.0 * sigma * sigma);
            for (p, v) in plane.iter_mut().enumerate() {
                let (dy, dx) = ((p / w) as f32 + 0.5 - cy, (p % w) as f32 + 0.5 - cx);
                *v += amp * (-(dy * dy + dx * dx) * inv).exp();
            }
        }
        for v in plane.iter_mut() {
            *v = v.min(1.0);
        }
    }
    t
}

/// Makes `n` images of `shape` in `k` classes from `seed` (see the module's doc).
pub(super) fn generate(
    n: usize,
    shape: [usize; 3],
    k: usize,
    seed: u64,
) -> Result<Dataset, String> {
    let [c, h, w] = shape;
    check_spec(n, c, h, w, k)?;
    let (memory, _) = host_memory::machine_memory();
    check_size(n, shape, k, memory, &host_memory::memory_text())?;
    let mut rng = Rng::stream(seed, tag::SYNTHETIC, STREAM);
    let per = c * h * w;
    let mut templates = Vec::with_capacity(k * per);
    for _ in 0..k {
        templates.extend(template(&mut rng, shape));
    }
    let mut y: Vec<u32> = (0..n).map(|i| (i % k) as u32).collect();
    rng.shuffle(&mut y);
    let (sy, sx) = (h / 8, w / 8);
    let mut x = Vec::with_capacity(n * per);
    for &label in &y {
        let t = &templates[label as usize * per..][..per];
        let dy = rng.below(2 * sy + 1) as isize - sy as isize;
        let dx = rng.below(2 * sx + 1) as isize - sx as isize;
        for plane in t.chunks_exact(h * w) {
            for row in 0..h {
                let src = (row as isize - dy).clamp(0, h as isize - 1) as usize;
                let src_row = &plane[src * w..][..w];
                for col in 0..w {
                    let s = (col as isize - dx).clamp(0, w as isize - 1) as usize;
                    x.push(src_row[s] + NOISE * rng.normal());
                }
            }
        }
    }
    Ok(Dataset {
        features: per,
        classes: k,
        image: Some(shape),
        x,
        y,
        names: Vec::new(),
        pictures: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The share of `test` that the nearest class mean of `train` labels right.
    fn nearest_mean_accuracy(train: &Dataset, test: &Dataset) -> f64 {
        let f = train.features;
        let mut means = vec![0.0f64; train.classes * f];
        let mut counts = vec![0usize; train.classes];
        for i in 0..train.len() {
            let k = train.y[i] as usize;
            counts[k] += 1;
            for (m, &v) in means[k * f..][..f].iter_mut().zip(train.row(i)) {
                *m += v as f64;
            }
        }
        for (k, mean) in means.chunks_exact_mut(f).enumerate() {
            mean.iter_mut().for_each(|m| *m /= counts[k].max(1) as f64);
        }
        let right = (0..test.len())
            .filter(|&i| {
                let d = |k: usize| -> f64 {
                    means[k * f..][..f]
                        .iter()
                        .zip(test.row(i))
                        .map(|(m, &v)| (m - v as f64).powi(2))
                        .sum()
                };
                let best = (0..train.classes)
                    .min_by(|&a, &b| d(a).total_cmp(&d(b)))
                    .unwrap();
                best == test.y[i] as usize
            })
            .count();
        right as f64 / test.len() as f64
    }

    #[test]
    fn the_set_is_seeded_balanced_and_shaped() {
        let a = generate(1000, [3, 8, 6], 5, 7).unwrap();
        assert_eq!(
            (a.len(), a.features, a.classes, a.image),
            (1000, 144, 5, Some([3, 8, 6]))
        );
        assert_eq!(a.x.len(), 1000 * 144);
        for k in 0..5 {
            assert_eq!(a.y.iter().filter(|&&y| y == k).count(), 200);
        }
        let again = generate(1000, [3, 8, 6], 5, 7).unwrap();
        assert_eq!((&a.x, &a.y), (&again.x, &again.y));
        let other = generate(1000, [3, 8, 6], 5, 8).unwrap();
        assert_ne!(a.x, other.x);
        assert!(a.x.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn classes_are_told_apart_by_their_means() {
        let d = generate(2000, [1, 8, 8], 10, 0).unwrap();
        let (train, test) = d.split(0.5, 0);
        let acc = nearest_mean_accuracy(&train, &test);
        assert!(acc > 0.8, "nearest class mean accuracy {acc}");
        // and the class means differ by far more than the noise left in a mean of ~100 images
        let f = d.features;
        let mean = |k: u32| -> Vec<f64> {
            let rows: Vec<usize> = (0..d.len()).filter(|&i| d.y[i] == k).collect();
            (0..f)
                .map(|j| rows.iter().map(|&i| d.row(i)[j] as f64).sum::<f64>() / rows.len() as f64)
                .collect()
        };
        let (m0, m1) = (mean(0), mean(1));
        let dist = m0
            .iter()
            .zip(&m1)
            .map(|(a, b)| (a - b).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!(dist > 1.0, "class means 0 and 1 are {dist} apart");
    }

    #[test]
    fn absurd_sizes_are_refused_with_the_fix() {
        let cases = [
            ((1, 1, 8, 8, 2), "N=1 samples: at least 2"),
            ((10, 0, 8, 8, 2), "C=0 channels: use 1 to 1024"),
            ((10, 5000, 8, 8, 2), "C=5000 channels"),
            (
                (10, 1, 0, 8, 2),
                "H=0 pixels: height and width must be 1 to 4096",
            ),
            ((10, 1, 8, 100000, 2), "W=100000 pixels"),
            (
                (10, 1024, 4096, 4096, 2),
                "values per image, more than 50331648",
            ),
            ((10, 1, 8, 8, 1), "K=1 classes: use 2 to 65536"),
            ((10, 1, 8, 8, 70000), "K=70000 classes"),
        ];
        for ((n, c, h, w, k), want) in cases {
            let e = generate(n, [c, h, w], k, 0).unwrap_err();
            assert!(e.contains(want), "{n},{c},{h},{w},{k}: {e}");
        }
        let e = generate(usize::MAX, [1, 28, 28], 10, 0).unwrap_err();
        assert!(e.contains("more values than any memory holds"), "{e}");
        let e = generate(1 << 40, [3, 64, 64], 10, 0).unwrap_err();
        assert!(
            e.contains("need about") && e.contains("use fewer samples or smaller images"),
            "{e}"
        );
        let e = check_size(1000, [1, 32, 32], 10, 1 << 20, "1 MiB").unwrap_err();
        assert!(
            e.contains("need about 11.8 MiB") && e.contains("more than 1 MiB"),
            "{e}"
        );
        assert!(check_size(1000, [1, 32, 32], 10, 1 << 30, "1 GiB").is_ok());
    }
}
