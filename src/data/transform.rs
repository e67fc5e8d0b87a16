//! What turns a stored picture into a sample: `--augment` (CIFAR's padded random crop,
//! ImageNet's random resized crop, horizontal flips) for training, the centre crop for
//! validation, and `--normalize` (per-channel mean and standard deviation).

use std::fmt;
use std::str::FromStr;

use super::picture::{shorter_side_size, Norm, Picture, Region};
use crate::nn::rng::Rng;

/// Training-time augmentation (`--augment`); validation never augments.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Augment {
    /// `crop:P`: pad P black pixels on every side, then a random crop of the input size.
    pub pad_crop: usize,
    /// `random-resized-crop`: a random 8%-100% of the area at aspect 3/4-4/3, resized.
    pub resized_crop: bool,
    /// `flip`: mirror left-right half the time.
    pub flip: bool,
}

const AUGMENT_HELP: &str =
    "use a comma-separated list of crop:P (pad P pixels, random crop), random-resized-crop, flip, or none; e.g. crop:4,flip";

impl FromStr for Augment {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut a = Augment::default();
        // (names as the help writes them, whatever their case: `Flip`)
        let lower = s.to_ascii_lowercase();
        let parts: Vec<&str> = lower.split(',').map(str::trim).collect();
        if parts.len() > 1 && parts.contains(&"none") {
            return Err(format!(
                "`{}`: none is no augmentation at all, not one among others; {AUGMENT_HELP}",
                s.trim()
            ));
        }
        for (i, &part) in parts.iter().enumerate() {
            // (a name twice: the second crop would have replaced the first unsaid)
            let name = part.split(':').next().unwrap_or(part);
            if !name.is_empty() && parts[..i].iter().any(|p| p.split(':').next() == Some(name)) {
                return Err(format!(
                    "`{}` names {name} twice; give each augmentation once, e.g. crop:4,flip",
                    s.trim()
                ));
            }
            match part.split_once(':') {
                _ if part.is_empty() => {
                    return Err(format!(
                        "`{}` has an empty name in its list; {AUGMENT_HELP}",
                        s.trim()
                    ))
                }
                _ if part == "none" => {}
                _ if part == "flip" => a.flip = true,
                _ if part == "random-resized-crop" => a.resized_crop = true,
                Some(("crop", p)) => {
                    a.pad_crop =
                        p.parse()
                            .ok()
                            .filter(|p| (1..=1024).contains(p))
                            .ok_or(format!(
                                "crop:{p} needs a padding of 1 to 1024 pixels, e.g. crop:4"
                            ))?
                }
                _ if part == "crop" => {
                    return Err("crop needs its padding in pixels: crop:P, e.g. crop:4".into())
                }
                _ => return Err(format!("unknown augmentation `{part}`; {AUGMENT_HELP}")),
            }
        }
        if a.pad_crop > 0 && a.resized_crop {
            return Err("crop:P and random-resized-crop both choose the crop; keep one".into());
        }
        Ok(a)
    }
}

impl fmt::Display for Augment {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let mut parts = Vec::new();
        if self.pad_crop > 0 {
            parts.push(format!("crop:{}", self.pad_crop));
        }
        if self.resized_crop {
            parts.push("random-resized-crop".into());
        }
        if self.flip {
            parts.push("flip".into());
        }
        if parts.is_empty() {
            parts.push("none".into());
        }
        write!(f, "{}", parts.join(","))
    }
}

/// `--normalize`: a named set of per-channel statistics or `MEAN,MEAN,MEAN/STD,STD,STD`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum NormSpec {
    /// The data's own convention: ImageNet's for image folders, CIFAR's for CIFAR.
    #[default]
    Auto,
    Given(Norm),
}

pub const IMAGENET: Norm = Norm {
    mean: [0.485, 0.456, 0.406],
    std: [0.229, 0.224, 0.225],
};
pub const CIFAR10: Norm = Norm {
    mean: [0.4914, 0.4822, 0.4465],
    std: [0.2470, 0.2435, 0.2616],
};
pub const CIFAR100: Norm = Norm {
    mean: [0.5071, 0.4865, 0.4409],
    std: [0.2673, 0.2564, 0.2762],
};
/// Pixels scaled to [0, 1].
pub const UNIT: Norm = Norm {
    mean: [0.0; 3],
    std: [1.0; 3],
};

const NORM_HELP: &str = "use imagenet, cifar10, cifar100, unit (pixels/255) or MEAN,MEAN,MEAN/STD,STD,STD in [0,1] units, e.g. 0.5,0.5,0.5/0.25,0.25,0.25";

fn three(s: &str, what: &str, spec: &str) -> Result<[f32; 3], String> {
    let v: Vec<f32> = s
        .split(',')
        .map(|p| p.trim().parse::<f32>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("`{spec}`: the {what} `{s}` is not three numbers; {NORM_HELP}"))?;
    let v: [f32; 3] = v.try_into().map_err(|v: Vec<f32>| {
        format!(
            "`{spec}`: {} given, one per channel (R,G,B) needed; {NORM_HELP}",
            crate::text::counted(v.len(), &format!("{what} value"))
        )
    })?;
    Ok(v)
}

impl FromStr for NormSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let named = s.to_ascii_lowercase();
        let norm = match named.as_str() {
            "auto" => return Ok(NormSpec::Auto),
            "imagenet" => IMAGENET,
            "cifar10" => CIFAR10,
            "cifar100" => CIFAR100,
            "unit" => UNIT,
            _ => {
                // (three numbers alone are means without their deviations)
                let numbers = s.split(',').all(|v| v.trim().parse::<f32>().is_ok());
                let (m, d) = s.split_once('/').ok_or(match numbers {
                    true => format!("`{s}` gives means without standard deviations: MEAN,MEAN,MEAN/STD,STD,STD; {NORM_HELP}"),
                    false => format!("unknown normalisation `{s}`; {NORM_HELP}"),
                })?;
                let (mean, std) = (three(m, "mean", s)?, three(d, "standard deviation", s)?);
                if mean.iter().any(|v| !v.is_finite())
                    || std.iter().any(|v| !(v.is_finite() && *v > 1e-6))
                {
                    return Err(format!(
                        "`{s}`: means must be finite and standard deviations above 1e-6 (each pixel is divided by them); {NORM_HELP}"
                    ));
                }
                // figures on the 0-255 scale would leave every pixel near -mean/std
                if mean.iter().chain(&std).any(|v| v.abs() > 2.0) {
                    // (only a half on that scale is divided: the other may be right already)
                    let unit = |v: [f32; 3]| match v.iter().any(|x| x.abs() > 2.0) {
                        true => v.map(|x| format!("{:.3}", x / 255.0)).join(","),
                        false => v.map(|x| x.to_string()).join(","),
                    };
                    return Err(format!(
                        "`{s}`: means and standard deviations are in units of the pixel's full scale (0 to 1, as torchvision's Normalize after ToTensor), not 0-255; divided by 255: --normalize {}/{}",
                        unit(mean),
                        unit(std)
                    ));
                }
                Norm { mean, std }
            }
        };
        Ok(NormSpec::Given(norm))
    }
}

impl fmt::Display for NormSpec {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            NormSpec::Auto => write!(f, "auto"),
            NormSpec::Given(n) => write!(
                f,
                "{},{},{}/{},{},{}",
                n.mean[0], n.mean[1], n.mean[2], n.std[0], n.std[1], n.std[2]
            ),
        }
    }
}

/// How every picture of a set becomes a `w x h` sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Look {
    pub w: usize,
    pub h: usize,
    pub norm: Norm,
    /// Applied to training samples (`None` for a validation set).
    pub augment: Option<Augment>,
    /// Crops are chosen on the picture scaled so its shorter side is this many pixels (`None`:
    /// as stored); only the crop is resampled, the scaled picture is never made.
    pub side: Option<usize>,
}

impl Look {
    /// Writes sample `p` to `out` (3*w*h values): augmented with draws from `rng` when this is a
    /// training look, else the centre crop.
    pub fn render(&self, p: &Picture, rng: &mut Rng, out: &mut [f32]) {
        let (w, h) = (self.w, self.h);
        // the scaled picture's size, and how its pixels map onto the stored one's
        let (vw, vh) = match self.side {
            Some(side) => shorter_side_size(p.w, p.h, side),
            None => (p.w, p.h),
        };
        let (vw, vh) = (vw as f32, vh as f32);
        let (sx, sy) = (p.w as f32 / vw, p.h as f32 / vh);
        let a = self.augment.unwrap_or_default();
        let mut region = if a.resized_crop {
            resized_crop(vw, vh, rng)
        } else {
            Region::centre(vw, vh, w, h)
        };
        if a.pad_crop > 0 {
            let span = 2 * a.pad_crop + 1;
            region.x += rng.below(span) as f32 - a.pad_crop as f32;
            region.y += rng.below(span) as f32 - a.pad_crop as f32;
        }
        let flip = a.flip && rng.below(2) == 1;
        let stored = Region {
            x: region.x * sx,
            y: region.y * sy,
            w: region.w * sx,
            h: region.h * sy,
        };
        p.render(stored, w, h, flip, &self.norm, out);
    }
}

/// torchvision's RandomResizedCrop region of a `pw x ph` picture: scale (0.08, 1), ratio
/// (3/4, 4/3), ten tries, then the centre crop at the nearest allowed aspect.
fn resized_crop(pw: f32, ph: f32, rng: &mut Rng) -> Region {
    let area = pw * ph;
    let (lo, hi) = ((3.0f32 / 4.0).ln(), (4.0f32 / 3.0).ln());
    for _ in 0..10 {
        let target = area * rng.uniform(0.08, 1.0);
        let aspect = rng.uniform(lo, hi).exp();
        let w = (target * aspect).sqrt().round();
        let h = (target / aspect).sqrt().round();
        if w > 0.0 && h > 0.0 && w <= pw && h <= ph {
            let x = rng.below((pw - w) as usize + 1) as f32;
            let y = rng.below((ph - h) as usize + 1) as f32;
            return Region { x, y, w, h };
        }
    }
    let ratio = pw / ph;
    let (w, h) = if ratio < 3.0 / 4.0 {
        (pw, (pw / (3.0 / 4.0)).round())
    } else if ratio > 4.0 / 3.0 {
        ((ph * 4.0 / 3.0).round(), ph)
    } else {
        (pw, ph)
    };
    Region {
        x: ((pw - w) / 2.0).round(),
        y: ((ph - h) / 2.0).round(),
        w,
        h,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn augment_lists_parse_and_print_back() {
        for s in ["crop:4,flip", "random-resized-crop,flip", "none", "flip"] {
            assert_eq!(s.parse::<Augment>().unwrap().to_string(), s);
        }
        let e = "crop:0".parse::<Augment>().unwrap_err();
        assert!(e.contains("1 to 1024 pixels"), "{e}");
        let e = "crop:4,rotate".parse::<Augment>().unwrap_err();
        assert!(
            e.contains("unknown augmentation `rotate`") && e.contains("crop:4,flip"),
            "{e}"
        );
        let e = " , ".parse::<Augment>().unwrap_err();
        assert!(e.starts_with("`,` has an empty name in its list;"), "{e}");
        let e = "crop:4,random-resized-crop".parse::<Augment>().unwrap_err();
        assert!(e.contains("keep one"), "{e}");
        // names in any case; crop without its padding and none among others said as such
        assert_eq!("Flip".parse::<Augment>().unwrap().to_string(), "flip");
        let e = "crop,flip".parse::<Augment>().unwrap_err();
        assert!(
            e.starts_with("crop needs its padding in pixels: crop:P"),
            "{e}"
        );
        let e = "none,flip".parse::<Augment>().unwrap_err();
        assert!(e.contains("none is no augmentation at all"), "{e}");
        // one named twice (the second crop had replaced the first)
        let e = "flip,crop:2,crop:3".parse::<Augment>().unwrap_err();
        assert!(e.contains("names crop twice"), "{e}");
    }

    #[test]
    fn normalize_takes_names_or_numbers() {
        assert_eq!(
            "imagenet".parse::<NormSpec>().unwrap(),
            NormSpec::Given(IMAGENET)
        );
        assert_eq!(
            "ImageNet".parse::<NormSpec>().unwrap(),
            NormSpec::Given(IMAGENET)
        );
        let e = "0.5,0.5,0.5".parse::<NormSpec>().unwrap_err();
        assert!(e.contains("means without standard deviations"), "{e}");
        let e = "0.5,0.5,0.5/1e-30,1,1".parse::<NormSpec>().unwrap_err();
        assert!(e.contains("standard deviations above 1e-6"), "{e}");
        let n = "0.5,0.5,0.5/0.25,0.25,0.25".parse::<NormSpec>().unwrap();
        assert_eq!(
            n,
            NormSpec::Given(Norm {
                mean: [0.5; 3],
                std: [0.25; 3]
            })
        );
        assert_eq!(n.to_string().parse::<NormSpec>().unwrap(), n);
        for bad in [
            "0.5,0.5/0.2,0.2,0.2",
            "a,b,c/1,1,1",
            "0,0,0/1,0,1",
            "imagenette",
        ] {
            let e = bad.parse::<NormSpec>().unwrap_err();
            assert!(
                e.contains(&format!("`{bad}`")) && e.contains("imagenet"),
                "{e}"
            );
        }
        // figures on the 0-255 scale are refused with the same divided by 255
        let e = "123.7,116.3,103.5/58.4,57.1,57.4"
            .parse::<NormSpec>()
            .unwrap_err();
        assert!(
            e.contains("not 0-255")
                && e.ends_with("--normalize 0.485,0.456,0.406/0.229,0.224,0.225"),
            "{e}"
        );
        // only the half on that scale is divided
        let e = "0.5,0.5,0.5/64,64,64".parse::<NormSpec>().unwrap_err();
        assert!(
            e.ends_with("--normalize 0.5,0.5,0.5/0.251,0.251,0.251"),
            "{e}"
        );
    }

    #[test]
    fn augmentation_is_seeded_and_validation_is_the_centre() {
        let p = Picture {
            w: 40,
            h: 30,
            rgb: (0..40 * 30 * 3).map(|i| (i * 7 % 251) as u8).collect(),
        };
        let look = Look {
            w: 24,
            h: 24,
            norm: UNIT,
            augment: Some("random-resized-crop,flip".parse().unwrap()),
            side: None,
        };
        let draw = |seed| {
            let mut out = vec![0.0; 3 * 24 * 24];
            look.render(&p, &mut Rng::new(seed), &mut out);
            out
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
        let val = Look {
            augment: None,
            ..look.clone()
        };
        let (mut a, mut b) = (vec![0.0; 3 * 24 * 24], vec![0.0; 3 * 24 * 24]);
        val.render(&p, &mut Rng::new(1), &mut a);
        val.render(&p, &mut Rng::new(2), &mut b);
        assert_eq!(a, b);
        // the centre crop of 24x24 from 40x30 starts at (8, 3)
        assert_eq!(a[0], p.rgb[(3 * 40 + 8) * 3] as f32 / 255.0);
    }

    #[test]
    fn resized_crops_stay_inside_with_allowed_shapes() {
        let mut rng = Rng::new(3);
        for _ in 0..500 {
            let r = resized_crop(50.0, 20.0, &mut rng);
            assert!(
                r.x >= 0.0 && r.y >= 0.0 && r.x + r.w <= 50.0 && r.y + r.h <= 20.0,
                "{r:?}"
            );
            assert!(r.w * r.h >= 0.07 * 1000.0, "{r:?}");
        }
    }
}
