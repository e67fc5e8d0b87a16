use super::*;

fn ramp(w: usize, h: usize) -> Picture {
    let rgb = (0..h)
        .flat_map(|y| (0..w).flat_map(move |x| [(x * 10) as u8, (y * 10) as u8, 7]))
        .collect();
    Picture { w, h, rgb }
}

const RAW: Norm = Norm {
    mean: [0.0; 3],
    std: [1.0 / 255.0; 3],
};

#[test]
fn a_same_size_crop_copies_pads_black_and_mirrors() {
    let p = ramp(4, 3);
    let mut out = vec![0.0; 3 * 4 * 3];
    let r = Region {
        x: 1.0,
        y: -1.0,
        w: 4.0,
        h: 3.0,
    };
    p.render(r, 4, 3, false, &RAW, &mut out);
    // red plane: row 0 is padding; rows 1-2 are source rows 0-1 shifted left by one
    assert_eq!(
        &out[..12],
        &[0., 0., 0., 0., 10., 20., 30., 0., 10., 20., 30., 0.]
    );
    // green plane: source row y has 10*y
    assert_eq!(
        &out[12..24],
        &[0., 0., 0., 0., 0., 0., 0., 0., 10., 10., 10., 0.]
    );
    p.render(r, 4, 3, true, &RAW, &mut out);
    assert_eq!(&out[4..8], &[0., 30., 20., 10.]);
}

#[test]
fn normalisation_is_per_channel() {
    let p = Picture {
        w: 1,
        h: 1,
        rgb: vec![255, 0, 51],
    };
    let norm = Norm {
        mean: [0.5, 0.5, 0.2],
        std: [0.5, 0.25, 0.1],
    };
    let mut out = [0.0; 3];
    p.render(Region::centre(1.0, 1.0, 1, 1), 1, 1, false, &norm, &mut out);
    for (got, want) in out.iter().zip([1.0, -2.0, 0.0]) {
        assert!((got - want).abs() < 1e-5, "{out:?}");
    }
}

#[test]
fn halving_averages_pixel_pairs_and_keeps_flat_colour() {
    // a ramp 0,10,20,.. halved: the antialiased filter averages neighbours (PIL gives
    // 5, 25, ... in the interior; the edge pixel's filter leaves out what is past the edge)
    let p = ramp(8, 2);
    let small = p.shorter_side(1);
    assert_eq!((small.w, small.h), (4, 1));
    let reds: Vec<u8> = small.rgb.chunks(3).map(|c| c[0]).collect();
    assert!(reds.windows(2).all(|w| w[1] > w[0]), "{reds:?}");
    assert!(
        (reds[1] as i32 - 25).abs() <= 1 && (reds[2] as i32 - 45).abs() <= 1,
        "{reds:?}"
    );
    assert!(
        small.rgb.chunks(3).all(|c| c[2] == 7),
        "blue is flat: {:?}",
        small.rgb
    );
    // upscaling a flat picture stays flat
    let flat = Picture {
        w: 3,
        h: 2,
        rgb: [9u8, 99, 199].repeat(6),
    };
    let big = flat.shorter_side(5);
    assert_eq!(
        (big.w, big.h),
        (7, 5),
        "7.5 rounded down, as torchvision's Resize"
    );
    assert!(big.rgb.chunks(3).all(|c| c == [9, 99, 199]));
}

/// Output pixel (x, y)'s channel c by the plain definition: the vertical taps over the
/// horizontal taps' sums, each sum tap by tap.
fn plain(p: &Picture, r: Region, w: usize, h: usize) -> Vec<f32> {
    let (tx, ty) = (Taps::new(r.x, r.w, w, p.w), Taps::new(r.y, r.h, h, p.h));
    let mut out = vec![0f32; 3 * w * h];
    for y in 0..h {
        let (fy, wy) = ty.of(y);
        for x in 0..w {
            let (fx, wx) = tx.of(x);
            for c in 0..3 {
                let mut v = 0f32;
                for (j, &ky) in wy.iter().enumerate() {
                    let mut across = 0f32;
                    for (i, &kx) in wx.iter().enumerate() {
                        across += kx * p.rgb[((fy + j) * p.w + fx + i) * 3 + c] as f32;
                    }
                    v += ky * across;
                }
                out[c * w * h + y * w + x] = v;
            }
        }
    }
    out
}

#[test]
fn resampling_equals_the_plain_filter_bit_for_bit() {
    let p = Picture {
        w: 37,
        h: 23,
        rgb: (0..37 * 23 * 3).map(|i| (i * 7919 % 251) as u8).collect(),
    };
    let regions = [
        (3.0, 2.0, 30.0, 19.0, 11, 7),
        (0.0, 0.0, 37.0, 23.0, 37, 23),
        (5.5, 1.25, 9.0, 14.0, 20, 31),
        (0.0, 0.0, 37.0, 23.0, 4, 3),
        // 4, 5 and 6 taps across (the unrolled passes) and down
        (0.0, 0.0, 37.0, 23.0, 30, 20),
        (1.0, 0.5, 36.0, 22.0, 19, 10),
    ];
    for (x, y, rw, rh, w, h) in regions {
        let r = Region { x, y, w: rw, h: rh };
        let mut out = vec![0.0; 3 * w * h];
        p.render(r, w, h, false, &RAW, &mut out);
        assert_eq!(out, plain(&p, r, w, h), "{r:?} -> {w}x{h}");
    }
}

#[test]
fn a_scaled_region_is_resampled_inside_the_picture() {
    let p = ramp(10, 10);
    let mut out = vec![0.0; 3 * 2 * 2];
    let r = Region {
        x: 2.0,
        y: 2.0,
        w: 4.0,
        h: 4.0,
    };
    p.render(r, 2, 2, false, &RAW, &mut out);
    // red of output column 0 averages source columns 2..4 (20, 30 in the middle)
    assert!(out[0] > 15.0 && out[0] < 35.0 && out[1] > out[0], "{out:?}");
    let mut flipped = vec![0.0; 12];
    p.render(r, 2, 2, true, &RAW, &mut flipped);
    assert_eq!((flipped[0], flipped[1]), (out[1], out[0]));
}

#[test]
fn resizing_and_centre_crops_round_as_torchvision_does() {
    // Resize(72) of 100x130: int(72 * 130 / 100) = 93, not 94
    assert_eq!(shorter_side_size(100, 130, 72), (72, 93));
    assert_eq!(shorter_side_size(130, 100, 72), (93, 72));
    assert_eq!(shorter_side_size(500, 375, 256), (341, 256));
    assert_eq!(shorter_side_size(1, 1000, 1), (1, 1000));
    // CenterCrop's offsets are Python's round: halves to even
    assert_eq!(Region::centre(93.0, 72.0, 72, 72).x, 10.0);
    assert_eq!(Region::centre(95.0, 72.0, 72, 72).x, 12.0);
    assert_eq!(Region::centre(94.0, 72.0, 72, 72).x, 11.0);
}

/// Against PIL's `Image.resize(size, BILINEAR, box)` of a picture of noise (the worst case for
/// its edges): shrinking, enlarging and a box inside it, within one level of 255
/// (`scripts/pil_bilinear_fixture.py` made the fixture).
#[test]
fn resampling_matches_pil_bilinear_to_one_level_edges_included() {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("../../../tests/fixtures/pil_bilinear.json")).unwrap();
    let (w, h) = (23, 17);
    assert_eq!(
        (fixture["w"].as_u64(), fixture["h"].as_u64()),
        (Some(w), Some(h))
    );
    let mut s: u64 = 1;
    let rgb = (0..w * h * 3)
        .map(|_| {
            s = (s * 1_103_515_245 + 12_345) % (1 << 31);
            (s >> 16) as u8
        })
        .collect();
    let p = Picture {
        w: w as usize,
        h: h as usize,
        rgb,
    };
    for case in fixture["cases"].as_array().unwrap() {
        let (ow, oh) = (
            case["w"].as_u64().unwrap() as usize,
            case["h"].as_u64().unwrap() as usize,
        );
        let b: Vec<f32> = (case["box"].as_array().unwrap().iter())
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let region = Region {
            x: b[0],
            y: b[1],
            w: b[2] - b[0],
            h: b[3] - b[1],
        };
        let mut out = vec![0.0; 3 * ow * oh];
        p.render(region, ow, oh, false, &RAW, &mut out);
        let pil = case["rgb"].as_array().unwrap();
        for (i, want) in pil.iter().enumerate() {
            let (pixel, c) = (i / 3, i % 3);
            let got = out[c * ow * oh + pixel];
            let want = want.as_f64().unwrap() as f32;
            assert!(
                (got - want).abs() <= 1.0,
                "{ow}x{oh} from {b:?}: pixel ({}, {}) channel {c}: {got} where PIL gives {want}",
                pixel % ow,
                pixel / ow
            );
        }
    }
}

/// A region reaching past the picture (a padded crop) is black there, its filter's taps
/// outside weighed as black: a pixel half over the edge is half the picture's.
#[test]
fn a_region_past_the_picture_resamples_black_outside_it() {
    let p = Picture {
        w: 4,
        h: 4,
        rgb: vec![100; 4 * 4 * 3],
    };
    let r = Region {
        x: -1.5,
        y: 0.0,
        w: 7.0,
        h: 4.0,
    };
    let mut out = vec![0.0; 3 * 7 * 4];
    p.render(r, 7, 4, false, &RAW, &mut out);
    let row: Vec<f32> = out[..7].iter().map(|v| v.round()).collect();
    assert_eq!(row, [0.0, 50.0, 100.0, 100.0, 100.0, 50.0, 0.0]);
}
