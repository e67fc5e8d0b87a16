//! The input pipeline per loader thread: images/s decoded, augmented and normalised into a
//! batch by one thread, for ImageNet-style JPEGs (500x375 photos-like files, shorter side to
//! 256, random resized crop to 224, flip) on their first, decoding pass, and for CIFAR-style
//! pictures held in memory (pad 4 and random 32x32 crop, flip). The same files feed
//! `scripts/bench_loader.py` (PyTorch's DataLoader with torchvision transforms, one process).
//! Run: `cargo bench --bench loader [-- DIR]` (DIR: where the files go; default
//! target/loader-bench).

use std::path::{Path, PathBuf};
use std::time::Instant;

use image::{ImageBuffer, Rgb};
use mgtop::data::{load, DataOptions, DataSpec, Dataset};
use mgtop::nn::rng::Rng;

const JPEGS: usize = 256;
const CIFAR: usize = 10_000;

/// A photo-like 500x375 picture: smooth gradients, a few discs, a little noise (so it
/// compresses as photos do, about 30-60 KB at quality 90).
fn photo(i: usize) -> ImageBuffer<Rgb<u8>, Vec<u8>> {
    let mut rng = Rng::new(i as u64);
    let base: Vec<f32> = (0..6).map(|_| rng.uniform(0.0, 255.0)).collect();
    let discs: Vec<(f32, f32, f32, [f32; 3])> = (0..5)
        .map(|_| {
            let c = [
                rng.uniform(0.0, 255.0),
                rng.uniform(0.0, 255.0),
                rng.uniform(0.0, 255.0),
            ];
            (
                rng.uniform(0.0, 500.0),
                rng.uniform(0.0, 375.0),
                rng.uniform(20.0, 90.0),
                c,
            )
        })
        .collect();
    ImageBuffer::from_fn(500, 375, |x, y| {
        let (fx, fy) = (x as f32 / 500.0, y as f32 / 375.0);
        let mut px = [0f32; 3];
        for c in 0..3 {
            px[c] = base[c] * (1.0 - fx) + base[c + 3] * fy;
        }
        for (cx, cy, r, col) in &discs {
            if (x as f32 - cx).powi(2) + (y as f32 - cy).powi(2) < r * r {
                px = *col;
            }
        }
        let n = ((x * 7919 + y * 104729 + i as u32 * 31) % 17) as f32 - 8.0;
        Rgb(px.map(|v| (v + n).clamp(0.0, 255.0) as u8))
    })
}

fn make_files(dir: &Path) {
    let jpegs = dir.join("jpeg");
    if !jpegs
        .join("b")
        .join(format!("{:04}.jpg", JPEGS / 2 - 1))
        .exists()
    {
        for i in 0..JPEGS {
            let class = if i % 2 == 0 { "a" } else { "b" };
            let d = jpegs.join(class);
            std::fs::create_dir_all(&d).unwrap();
            let mut out = std::fs::File::create(d.join(format!("{:04}.jpg", i / 2))).unwrap();
            let enc = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90);
            photo(i).write_with_encoder(enc).unwrap();
        }
    }
    let cifar = dir.join("cifar");
    if !cifar.join("test_batch.bin").exists() {
        std::fs::create_dir_all(&cifar).unwrap();
        let mut rng = Rng::new(7);
        let records: Vec<u8> = (0..CIFAR * 3073)
            .map(|i| {
                if i % 3073 == 0 {
                    (rng.below(10)) as u8
                } else {
                    rng.below(256) as u8
                }
            })
            .collect();
        for f in [
            "data_batch_1.bin",
            "data_batch_2.bin",
            "data_batch_3.bin",
            "data_batch_4.bin",
            "data_batch_5.bin",
            "test_batch.bin",
        ] {
            let n = if f == "data_batch_1.bin" { CIFAR } else { 1 };
            std::fs::write(cifar.join(f), &records[..n * 3073]).unwrap();
        }
    }
}

/// Images/s of gathering every training sample of a fresh load in batches of 64, one thread:
/// the first epoch (every file decoded) and the second (decoded pictures kept in memory).
fn rate(spec: &str, opts: &DataOptions) -> (f64, f64) {
    let spec: DataSpec = spec.parse().unwrap();
    let d: Dataset = load(&spec, opts, 0).unwrap().train;
    let all: Vec<u32> = (0..d.len() as u32).collect();
    let mut x = Vec::new();
    let mut epoch = |e| {
        let t = Instant::now();
        for batch in all.chunks(64) {
            d.gather(batch, e, &mut x);
        }
        d.len() as f64 / t.elapsed().as_secs_f64()
    };
    (epoch(0), epoch(1))
}

fn main() {
    // as the program does (`main`): freed buffers kept for reuse
    mgtop::data::host_memory::reuse_freed_memory();
    let dir = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or_else(|| PathBuf::from("target/loader-bench"), PathBuf::from);
    make_files(&dir);
    let imagenet = DataOptions {
        val_fraction: Some(0.0),
        image_size: Some(224),
        augment: "random-resized-crop,flip".parse().unwrap(),
        normalize: "imagenet".parse().unwrap(),
        ..DataOptions::default()
    };
    let cifar = DataOptions {
        val_fraction: Some(0.0),
        augment: "crop:4,flip".parse().unwrap(),
        ..DataOptions::default()
    };
    println!("files: {}", dir.display());
    for round in 1..=3 {
        let (j, kept) = rate(&format!("images:{}", dir.join("jpeg").display()), &imagenet);
        let (c, _) = rate(&format!("cifar10:{}", dir.join("cifar").display()), &cifar);
        println!("round {round}: jpeg 500x375 -> rrc 224 + flip: {j:.0} images/s/thread ({kept:.0} once kept in memory) | cifar crop:4 + flip: {c:.0} images/s/thread");
    }
}
