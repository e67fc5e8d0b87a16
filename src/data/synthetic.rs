//! A seeded, learnable "teacher" dataset for benchmarks (the recipe of ../shared/bench):
//! x ~ U[0,1)^D, y = argmax((x - 0.5) W + 0.5 noise) with W, noise ~ N(0,1).

use super::host_memory;
use super::Dataset;
use crate::nn::gemm::sgemm;
use crate::nn::rng::{tag, Rng};

/// The bytes the set takes while it is made and split: x three times (x, centred, the split
/// copies), the logits and the teacher's weights, as f32; `None` past `u64`.
fn bytes_needed(n: usize, d: usize, c: usize) -> Option<u64> {
    let (n, d, c) = (n as u64, d as u64, c as u64);
    let x = n.checked_mul(d)?.checked_mul(3)?;
    let floats = x
        .checked_add(n.checked_mul(c)?)?
        .checked_add(d.checked_mul(c)?)?;
    floats.checked_mul(4)
}

/// Refuses sizes whose arrays cannot be held in the memory this process has left.
fn check_size(n: usize, d: usize, c: usize, memory: u64, memory_text: &str) -> Result<(), String> {
    match bytes_needed(n, d, c) {
        Some(b) if b <= memory => Ok(()),
        Some(b) => Err(format!(
            "{n} samples x {d} features needs about {} ({b} bytes) to make and split, more than {memory_text}; use fewer samples or features",
            crate::text::bytes(b)
        )),
        None => Err(format!(
            "{n} samples x {d} features is more values than any memory holds; use fewer samples or features"
        )),
    }
}

pub(super) fn teacher(n: usize, d: usize, c: usize, seed: u64) -> Result<Dataset, String> {
    // (what is left now: under `ulimit -v` or a cgroup, or beside other programs, a set made
    // past it ended the process in an allocation failure)
    let (memory, text) = match host_memory::room() {
        Some(r) => (
            r.bytes,
            format!("the {} {}", crate::text::bytes(r.bytes), r.what),
        ),
        None => (host_memory::machine_memory().0, host_memory::memory_text()),
    };
    check_size(n, d, c, memory, &text)?;
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
    Ok(Dataset {
        features: d,
        classes: c,
        image: None,
        x,
        y,
        names: Vec::new(),
        pictures: None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn classes_are_balanced_and_seeded() {
        let a = super::teacher(5000, 20, 4, 1).unwrap();
        let mut counts = [0usize; 4];
        for &y in &a.y {
            counts[y as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 700), "{counts:?}");
        assert_eq!(a.y, super::teacher(5000, 20, 4, 1).unwrap().y);
        assert_ne!(a.y, super::teacher(5000, 20, 4, 2).unwrap().y);
    }

    #[test]
    fn sizes_past_memory_or_past_u64_are_refused_before_allocating() {
        let e = super::teacher(usize::MAX, 2, 2, 0).unwrap_err();
        assert!(e.contains("more values than any memory holds"), "{e}");
        let e = super::teacher(1 << 40, 1 << 10, 10, 0).unwrap_err();
        assert!(
            e.contains("needs about 12 PiB") && e.contains("more than the "),
            "{e}"
        );
        let e = super::check_size(1000, 1000, 10, 1 << 20, "1 MiB").unwrap_err();
        assert!(
            e.contains("needs about 11.5 MiB") && e.contains("more than 1 MiB"),
            "{e}"
        );
        assert!(super::check_size(1000, 1000, 10, 1 << 30, "1 GiB").is_ok());
    }
}
