//! Picture data as a user gives it: image folders of JPEG and PNG files of several kinds (grey,
//! RGBA, 16-bit, EXIF-rotated, corrupt, truncated, a decompression bomb), CIFAR binaries, and
//! what the loader makes of them: classes, pixels, augmentation, validation sets, errors.

mod common;

use std::io::Cursor;
use std::path::Path;

use image::{ImageBuffer, ImageFormat, Luma, Rgb, Rgba};
use mgtop::data::{load, DataOptions, DataSpec, Dataset, LoadedData};

/// A 8x6 RGB picture whose pixel (x, y) is (10x + 3, 20y + 5, 7 + salt).
fn pixels(salt: u8) -> ImageBuffer<Rgb<u8>, Vec<u8>> {
    ImageBuffer::from_fn(8, 6, |x, y| {
        Rgb([10 * x as u8 + 3, 20 * y as u8 + 5, 7 + salt])
    })
}

fn save(img: impl Fn(&Path), path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    img(path);
}

fn png_rgb(path: &Path, salt: u8) {
    save(
        |p| pixels(salt).save_with_format(p, ImageFormat::Png).unwrap(),
        path,
    );
}

fn jpeg(img: &ImageBuffer<Rgb<u8>, Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    let enc = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 100);
    img.write_with_encoder(enc).unwrap();
    out
}

/// A JPEG with an EXIF APP1 segment saying "rotate 90 degrees clockwise to show" (6).
fn jpeg_rotated(img: &ImageBuffer<Rgb<u8>, Vec<u8>>) -> Vec<u8> {
    let plain = jpeg(img);
    let mut tiff = b"II*\0\x08\0\0\0".to_vec();
    tiff.extend([1, 0]); // one entry
    tiff.extend([0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0]); // Orientation, SHORT, 1, = 6
    tiff.extend([0, 0, 0, 0]); // no next IFD
    let mut app1 = b"Exif\0\0".to_vec();
    app1.extend(tiff);
    let len = (app1.len() + 2) as u16;
    let mut out = plain[..2].to_vec(); // SOI
    out.extend([0xFF, 0xE1]);
    out.extend(len.to_be_bytes());
    out.extend(app1);
    out.extend(&plain[2..]);
    out
}

/// A PNG that declares `w x h` pixels and holds none (a decompression bomb's header).
fn png_declaring(w: u32, h: u32) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = b"IHDR".to_vec();
    ihdr.extend(w.to_be_bytes());
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    out.extend(13u32.to_be_bytes());
    out.extend(&ihdr);
    let mut crc = flate2::Crc::new();
    crc.update(&ihdr);
    out.extend(crc.sum().to_be_bytes());
    out
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-6
}

fn opts(extra: impl FnOnce(&mut DataOptions)) -> DataOptions {
    let mut o = DataOptions {
        val_fraction: Some(0.0),
        normalize: "unit".parse().unwrap(),
        ..DataOptions::default()
    };
    extra(&mut o);
    o
}

fn images(dir: &Path, o: &DataOptions) -> Result<LoadedData, String> {
    let spec: DataSpec = format!("images:{}", dir.display()).parse().unwrap();
    load(&spec, o, 0).map_err(|e| e.to_string())
}

fn sample(d: &Dataset, i: u32, epoch: u64) -> Vec<f32> {
    let mut out = Vec::new();
    d.gather(&[i], epoch, &mut out);
    out
}

/// A folder of 8x6 pictures: cat/ holds PNG (RGB, grey, 16-bit) and a JPEG, dog/ holds an RGBA
/// PNG, a JPEG and a corrupt file.
fn pets(dir: &Path) {
    png_rgb(&dir.join("cat/a.png"), 0);
    let grey: ImageBuffer<Luma<u8>, Vec<u8>> =
        ImageBuffer::from_fn(8, 6, |x, _| Luma([x as u8 * 30]));
    grey.save(dir.join("cat/b_grey.png")).unwrap();
    let deep: ImageBuffer<Rgb<u16>, Vec<u16>> =
        ImageBuffer::from_fn(8, 6, |x, _| Rgb([x as u16 * 8000, 65535, 0]));
    deep.save(dir.join("cat/c_16bit.png")).unwrap();
    std::fs::write(dir.join("cat/d.JPG"), jpeg(&pixels(1))).unwrap();
    std::fs::create_dir_all(dir.join("dog")).unwrap();
    let rgba: ImageBuffer<Rgba<u8>, Vec<u8>> =
        ImageBuffer::from_fn(8, 6, |_, _| Rgba([1, 2, 3, 0]));
    rgba.save(dir.join("dog/a_rgba.png")).unwrap();
    std::fs::write(dir.join("dog/b.jpeg"), jpeg(&pixels(2))).unwrap();
    std::fs::write(dir.join("dog/corrupt.jpg"), b"not a picture at all").unwrap();
    std::fs::write(dir.join("dog/notes.txt"), b"ignored").unwrap();
}

#[test]
fn a_folder_of_classes_loads_with_its_pixels() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pets");
    pets(&dir);
    std::fs::create_dir(dir.join(".ipynb_checkpoints")).unwrap();
    let d = images(&dir, &opts(|_| {})).unwrap();
    assert_eq!(
        (d.train.len(), d.train.classes, d.train.image),
        (6, 2, Some([3, 6, 8]))
    );
    assert!(
        d.notes
            .iter()
            .any(|n| n.contains(".ipynb_checkpoints: a hidden folder, not a class")),
        "{:?}",
        d.notes
    );
    assert_eq!(d.train.y, [0, 0, 0, 0, 1, 1]);
    assert_eq!(d.val.len(), 0);
    let notes = d.notes.join("\n");
    assert!(notes.contains("2 classes: cat (4), dog (2)"), "{notes}");
    assert!(
        notes.contains("corrupt.jpg") && notes.contains("not a readable JPEG or PNG"),
        "{notes}"
    );
    assert!(
        notes.contains("1 file that is not .jpg/.jpeg/.png ignored (.txt 1)"),
        "{notes}"
    );
    assert!(notes.contains("kept in memory"), "{notes}");
    assert!(
        d.description
            .contains("6 images, 3x6x8, 2 classes; no validation"),
        "{}",
        d.description
    );
    // PNG pixels exactly, channel planes of x/255
    let a = sample(&d.train, 0, 0);
    let want = pixels(0);
    for (i, p) in want.pixels().enumerate() {
        for c in 0..3 {
            assert!(
                close(a[c * 48 + i], p[c] as f32 / 255.0),
                "pixel {i} channel {c}"
            );
        }
    }
    // greyscale repeats its value in the three channels; 16-bit is rounded to 8
    let g = sample(&d.train, 1, 0);
    assert!(
        [g[3], g[48 + 3], g[96 + 3]]
            .iter()
            .all(|&v| close(v, 90.0 / 255.0)),
        "{g:?}"
    );
    let deep = sample(&d.train, 2, 0);
    let want = [(8000.0f32 / 257.0).round() / 255.0, 1.0, 0.0];
    assert!(close(deep[1], want[0]) && close(deep[48 + 1], want[1]) && close(deep[96], want[2]));
    // JPEG within its quantisation (quality 100)
    let j = sample(&d.train, 3, 0);
    let want = pixels(1);
    for (i, p) in want.pixels().enumerate() {
        for c in 0..3 {
            let got = j[c * 48 + i] * 255.0;
            assert!(
                (got - p[c] as f32).abs() <= 6.0,
                "jpeg pixel {i} channel {c}: {got} vs {}",
                p[c]
            );
        }
    }
    // alpha is dropped
    let rgba = sample(&d.train, 4, 0);
    assert!(
        close(rgba[0], 1.0 / 255.0) && close(rgba[48], 2.0 / 255.0) && close(rgba[96], 3.0 / 255.0)
    );
}

#[test]
fn augmentation_is_seeded_per_epoch_and_keeps_labels() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pets");
    pets(&dir);
    let o = opts(|o| {
        o.augment = "crop:2,flip".parse().unwrap();
        o.val_fraction = Some(0.5);
    });
    let d = images(&dir, &o).unwrap();
    let again = images(&dir, &o).unwrap();
    let (n, all): (u32, Vec<u32>) = (d.train.len() as u32, (0..d.train.len() as u32).collect());
    let batch = |d: &Dataset, epoch| {
        let mut out = Vec::new();
        d.gather(&all, epoch, &mut out);
        out
    };
    assert_eq!(
        batch(&d.train, 0),
        batch(&again.train, 0),
        "same seed, same epoch"
    );
    let epochs: Vec<Vec<f32>> = (0..4).map(|e| batch(&d.train, e)).collect();
    assert!(
        epochs.windows(2).any(|w| w[0] != w[1]),
        "epochs draw new crops"
    );
    // the loader writes batches into buffers of earlier ones: stale values, any length
    let mut reused = vec![f32::NAN; epochs[0].len() + 7];
    for (e, want) in epochs.iter().enumerate().rev() {
        d.train.gather(&all, e as u64, &mut reused);
        assert_eq!(&reused, want, "epoch {e} gathered over an older batch");
    }
    assert_eq!(d.train.y, again.train.y);
    assert_eq!(n as usize + d.val.len(), 6);
    // validation never augments: the same every epoch, the picture itself
    let v0 = sample(&d.val, 0, 0);
    assert_eq!(v0, sample(&d.val, 0, 7));
}

#[test]
fn sizes_rotation_and_resizing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("turned");
    png_rgb(&dir.join("a/plain.png"), 0);
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::write(dir.join("b/rotated.jpg"), jpeg_rotated(&pixels(0))).unwrap();
    // the rotated JPEG stands 6 wide and 8 high: mixed sizes need --image-size
    let e = images(&dir, &opts(|_| {})).err().unwrap();
    assert!(
        e.contains("different sizes (8x6 (")
            && e.contains("plain.png) and 6x8 (")
            && e.contains("rotated.jpg")
            && e.contains("--image-size"),
        "{e}"
    );
    let d = images(&dir, &opts(|o| o.image_size = Some(4))).unwrap();
    assert_eq!(d.train.image, Some([3, 4, 4]));
    // kept at the size the crops are chosen on, however much memory the machine has: the
    // samples are the same on every machine (and a 64-pixel run does not hold whole photos)
    let notes = d.notes.join("\n");
    assert!(
        notes.contains("kept in memory after their first use (")
            && notes.contains("shorter side 4 at most)"),
        "{notes}"
    );
    // upright: the rotated picture's top row came from the original's left column, bottom to
    // top, so green (20y+5 of the original row) falls from left to right
    let r = sample(&d.train, 1, 0);
    let green_row0 = &r[16..20];
    assert!(green_row0[0] > green_row0[3], "{green_row0:?}");
    let red_col0: Vec<f32> = (0..4).map(|y| r[y * 4]).collect();
    assert!(red_col0[0] < red_col0[3], "{red_col0:?}");
}

#[test]
fn bad_folders_are_clear_errors_and_bad_files_are_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pets");
    pets(&dir);
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    let e = images(&dir, &opts(|_| {})).err().unwrap();
    assert!(
        e.contains("empty holds no JPEG or PNG images") && e.contains("remove the folder"),
        "{e}"
    );
    // a folder of other pictures says what it holds; hidden files are not counted
    std::fs::write(dir.join("empty/a.bmp"), b"BM").unwrap();
    std::fs::write(dir.join("empty/.DS_Store"), b"x").unwrap();
    let e = images(&dir, &opts(|_| {})).err().unwrap();
    assert!(
        e.contains("only other files (.bmp 1): convert them to JPEG or PNG"),
        "{e}"
    );
    std::fs::remove_dir_all(dir.join("empty")).unwrap();
    // a picture beside the class folders is said to be left out; a hidden file is not said
    png_rgb(&dir.join("stray.png"), 0);
    std::fs::write(dir.join("cat/.DS_Store"), b"x").unwrap();
    let d = images(&dir, &opts(|_| {})).unwrap();
    let notes = d.notes.join("\n");
    assert!(
        notes.contains(
            "1 picture beside the class folders, in none of them, left out (e.g. stray.png)"
        ) && !notes.contains("no extension")
            && !notes.contains("DS_Store"),
        "{notes}"
    );
    std::fs::remove_file(dir.join("stray.png")).unwrap();
    // a picture deeper than the walk goes is said to be left out, not ignored in silence
    let deep: std::path::PathBuf = (0..17).fold(dir.join("cat"), |p, i| p.join(format!("d{i}")));
    png_rgb(&deep.join("deep.png"), 0);
    let d = images(&dir, &opts(|_| {})).unwrap();
    assert!(
        d.notes
            .iter()
            .any(|n| n.contains("d15/d16: more than 16 folders below its class folder: not read")),
        "{:?}",
        d.notes
    );
    std::fs::remove_dir_all(dir.join("cat/d0")).unwrap();
    // a bomb's header is refused before anything is allocated for it
    std::fs::write(dir.join("dog/bomb.png"), png_declaring(100_000, 100_000)).unwrap();
    let d = images(&dir, &opts(|_| {})).unwrap();
    assert!(
        d.notes
            .iter()
            .any(|n| n.contains("bomb.png") && n.contains("larger than 32768 pixels a side")),
        "{:?}",
        d.notes
    );
    // a cut-short PNG passes the header check; decoding it fails once, named, and another
    // picture of its class stands in
    let mut whole = Vec::new();
    pixels(3)
        .write_to(&mut Cursor::new(&mut whole), ImageFormat::Png)
        .unwrap();
    std::fs::write(dir.join("dog/c_cut.png"), &whole[..whole.len() / 2]).unwrap();
    // a cut-short JPEG may decode (grey where data is missing) or fail; either way no panic
    let whole = jpeg(&pixels(3));
    std::fs::write(dir.join("cat/e_cut.jpg"), &whole[..whole.len() - 40]).unwrap();
    let d = images(&dir, &opts(|_| {})).unwrap();
    assert_eq!(d.train.len(), 8, "{:?}", d.notes);
    let set = &d.train.pictures.as_ref().unwrap().set;
    let stood_in = sample(&d.train, 7, 0);
    let failures = set.take_failures();
    assert!(
        failures.len() == 1 && failures[0].message.contains("c_cut.png") && failures[0].stood_in,
        "{failures:?}"
    );
    assert_eq!(
        stood_in,
        sample(&d.train, 5, 0),
        "the class's next good picture stands in"
    );
    assert_eq!(d.train.y[7], 1);
    let _ = sample(&d.train, 4, 0);
    let _ = set.take_failures();
    let _ = sample(&d.train, 7, 1);
    assert!(set.take_failures().is_empty(), "told once");
    // a FIFO named like a picture is skipped, not waited on; a link back into the data folder
    // (here a loop) is not followed, so no picture is read twice or under another class
    let fifo = dir.join("cat/fifo.png");
    let made = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path
    assert_eq!(unsafe { libc::mkfifo(made.as_ptr(), 0o644) }, 0);
    std::os::unix::fs::symlink("..", dir.join("cat/loop")).unwrap();
    let d = images(&dir, &opts(|_| {})).unwrap();
    assert_eq!(d.train.len(), 8, "{:?}", d.notes);
    for (what, why) in [
        ("fifo.png", "a FIFO (named pipe), not a regular file"),
        ("loop", "a link to a folder inside the data folder"),
    ] {
        assert!(
            d.notes.iter().any(|n| n.contains(what) && n.contains(why)),
            "{what}: {:?}",
            d.notes
        );
    }
    std::fs::remove_file(&fifo).unwrap();
    std::fs::remove_file(dir.join("cat/loop")).unwrap();
    // two class folders that are one folder: an error naming both, not a class read twice
    std::os::unix::fs::symlink(dir.join("dog"), dir.join("pup")).unwrap();
    let e = images(&dir, &opts(|_| {})).err().unwrap();
    assert!(
        e.contains("class folders")
            && e.contains("dog")
            && e.contains("pup")
            && e.contains("one folder"),
        "{e}"
    );
    std::fs::remove_file(dir.join("pup")).unwrap();
    // no class folders, no folder, no readable images
    let flat = tmp.path().join("flat");
    png_rgb(&flat.join("x.png"), 0);
    let e = images(&flat, &opts(|_| {})).err().unwrap();
    assert!(
        e.contains("flat holds 1 picture but no class folders")
            && e.contains("DIR/cat/*.jpg")
            && e.contains("if this is one class's folder, give the folder above it: images:"),
        "{e}"
    );
    // a class none of whose files can be read: one of them named, with why
    let bad = tmp.path().join("bad");
    png_rgb(&bad.join("cat/x.png"), 0);
    std::fs::create_dir_all(bad.join("dog")).unwrap();
    std::fs::write(bad.join("dog/0.png"), b"not a picture").unwrap();
    let e = images(&bad, &opts(|_| {})).err().unwrap();
    assert!(
        e.contains("class folder")
            && e.contains("dog holds no readable images (every file was skipped; e.g. ")
            && e.contains("dog/0.png: "),
        "{e}"
    );
    let one = tmp.path().join("one");
    png_rgb(&one.join("cat/x.png"), 0);
    let e = images(&one, &opts(|_| {})).err().unwrap();
    assert!(
        e.contains("one class folder (cat)") && e.contains("two or more"),
        "{e}"
    );
    let e = images(&tmp.path().join("nowhere"), &opts(|_| {}))
        .err()
        .unwrap();
    assert!(e.contains("nowhere does not exist"), "{e}");
    std::fs::write(tmp.path().join("a-file"), b"x").unwrap();
    let e = images(&tmp.path().join("a-file"), &opts(|_| {}))
        .err()
        .unwrap();
    assert!(e.contains("is not a folder"), "{e}");
    let junk = tmp.path().join("junk");
    std::fs::create_dir_all(junk.join("a")).unwrap();
    std::fs::write(junk.join("a/x.png"), b"junk").unwrap();
    let e = images(&junk, &opts(|_| {})).err().unwrap();
    assert!(
        e.contains("no readable JPEG or PNG images (1 skipped"),
        "{e}"
    );
    // two folders whose names show alike (not UTF-8) are not one class
    use std::os::unix::ffi::OsStrExt;
    let alike = tmp.path().join("alike");
    for name in [&b"c\xffat"[..], b"c\xfeat"] {
        let class = alike.join(std::ffi::OsStr::from_bytes(name));
        std::fs::create_dir_all(&class).unwrap();
        png_rgb(&class.join("a.png"), 1);
    }
    let e = images(&alike, &opts(|_| {})).err().unwrap();
    assert!(
        e.contains("have the same name as shown (`c\u{fffd}at`"),
        "{e}"
    );
}

#[test]
fn train_and_val_folders_and_val_data() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("split");
    for (part, n) in [("train", 3), ("val", 1)] {
        for class in ["ant", "bee"] {
            for i in 0..n {
                png_rgb(&dir.join(format!("{part}/{class}/{i}.png")), i as u8);
            }
        }
    }
    let d = images(&dir, &opts(|o| o.val_fraction = None)).unwrap();
    assert_eq!((d.train.len(), d.val.len()), (6, 2));
    assert_eq!(d.val.y, [0, 1]);
    assert!(
        d.description.contains("validation images"),
        "{}",
        d.description
    );
    // the set's own validation and --val-split do not mix; --val-split 0 turns it off
    let e = images(&dir, &opts(|o| o.val_fraction = Some(0.3)))
        .err()
        .unwrap();
    assert!(e.contains("--val-split only cuts a set without one"), "{e}");
    assert_eq!(images(&dir, &opts(|_| {})).unwrap().val.len(), 0);
    // --val-data naming a folder with train/ and val/ validates on its val/
    let o = opts(|o| {
        o.val_fraction = None;
        o.val_data = Some(format!("images:{}", dir.display()).parse().unwrap());
    });
    let d = images(&dir.join("train"), &o).unwrap();
    assert_eq!((d.train.len(), d.val.len()), (6, 2));
    let named = format!("validation images {}: 2 images", dir.join("val").display());
    assert!(d.description.contains(&named), "{}", d.description);
    assert_eq!(d.val_text, named);
    // ... which is not the training data, though both flags name the folder
    let d = images(&dir, &o).unwrap();
    assert!(d.description.contains(&named), "{}", d.description);
    assert!(!d.description.contains("training data itself"));
    // a validation folder with a class the training folder lacks
    png_rgb(&dir.join("val/cow/0.png"), 0);
    let e = images(&dir, &opts(|o| o.val_fraction = None))
        .err()
        .unwrap();
    assert!(
        e.contains("cow is not a class of the training set (ant, bee)"),
        "{e}"
    );
    // every such folder is named, and one named as a class but for its case is told so
    png_rgb(&dir.join("val/Ant/0.png"), 0);
    let e = images(&dir, &opts(|o| o.val_fraction = None))
        .err()
        .unwrap();
    let (a, c) = (dir.join("val/Ant"), dir.join("val/cow"));
    assert!(
        e.contains(&format!("class folders {}, {} are not classes of the training set (ant, bee); Ant differs from the class ant only in case: rename it", a.display(), c.display())),
        "{e}"
    );
    std::fs::remove_dir_all(&a).unwrap();
    // ... which --val-split 0 neither reads nor checks: it says so
    let d = images(&dir, &opts(|o| o.val_fraction = Some(0.0))).unwrap();
    let unused = format!("{}: not used: --val-split 0", dir.join("val").display());
    assert!(
        d.notes.iter().any(|n| n.starts_with(&unused)),
        "{:?}",
        d.notes
    );
    // ... nor a --val-data given beside it (its cow would be refused)
    let o = opts(|o| {
        o.val_fraction = Some(0.0);
        o.val_data = Some(
            format!("images:{}", dir.join("val").display())
                .parse()
                .unwrap(),
        );
    });
    let d = images(&dir.join("train"), &o).unwrap();
    assert_eq!(d.val.len(), 0);
    assert!(d.val_text.contains("--val-data images:"), "{}", d.val_text);
    // --val-data names another folder
    let other = tmp.path().join("other");
    png_rgb(&other.join("ant/z.png"), 9);
    let o = opts(|o| {
        o.val_fraction = None;
        o.val_data = Some(format!("images:{}", other.display()).parse().unwrap());
    });
    let d = images(&dir.join("train"), &o).unwrap();
    assert_eq!(
        (d.train.len(), d.val.len(), d.val.y.clone()),
        (6, 1, vec![0])
    );
    assert!(!d.description.contains("the training data itself"));
    // ... which holds no bee: said, as its accuracy scores ants only
    let lacks = format!("{}: no picture of 1 class (bee)", other.display());
    assert!(
        d.notes.iter().any(|n| n.starts_with(&lacks)),
        "{:?}",
        d.notes
    );
    // the training folder again: said to show fit, not what was not seen
    let o = opts(|o| {
        o.val_fraction = None;
        let train = dir.join("train").display().to_string();
        o.val_data = Some(format!("images:{train}").parse().unwrap());
    });
    let d = images(&dir.join("train"), &o).unwrap();
    assert!(
        d.description.contains("6 images, the training data itself"),
        "{}",
        d.description
    );
    // ... whose notes are the validation set's too (eval says them; the run's start, once)
    let classes = format!("{}: 2 classes", dir.join("train").display());
    let val = &d.notes[d.val_notes..];
    assert!(val.iter().any(|n| n.starts_with(&classes)), "{:?}", d.notes);
    // its classes are matched by name: one holding the second class alone is that class
    let second = tmp.path().join("second");
    png_rgb(&second.join("bee/z.png"), 9);
    let o = opts(|o| {
        o.val_fraction = None;
        o.val_data = Some(format!("images:{}", second.display()).parse().unwrap());
    });
    assert_eq!(images(&dir.join("train"), &o).unwrap().val.y, [1]);
    // a problem of that folder is named as --val-data's, not --data's
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = opts(|o| {
        o.val_fraction = None;
        o.val_data = Some(format!("images:{}", empty.display()).parse().unwrap());
    });
    let e = images(&dir.join("train"), &o).err().unwrap();
    assert!(
        e.starts_with(&format!("--val-data images:{}: ", empty.display())),
        "{e}"
    );
    // as is its pictures' size, where it is not the training set's
    let larger = tmp.path().join("larger");
    let big: ImageBuffer<Rgb<u8>, Vec<u8>> = ImageBuffer::from_fn(9, 6, |_, _| Rgb([1, 2, 3]));
    save(|p| big.save(p).unwrap(), &larger.join("ant/z.png"));
    let o = opts(|o| {
        o.val_fraction = None;
        o.val_data = Some(format!("images:{}", larger.display()).parse().unwrap());
    });
    let e = images(&dir.join("train"), &o).err().unwrap();
    assert!(
        e.starts_with(&format!("--val-data images:{}: ", larger.display()))
            && e.contains("different sizes (8x6")
            && e.contains("--image-size"),
        "{e}"
    );
    // and a set of pictures to validate a table of numbers on is refused, not taken
    let table = tmp.path().join("t.csv");
    std::fs::write(&table, "0,1,2\n1,3,4\n0,5,6\n1,7,8\n").unwrap();
    let spec: DataSpec = format!("csv:{}", table.display()).parse().unwrap();
    let o = DataOptions {
        val_data: o.val_data,
        ..DataOptions::default()
    };
    let e = load(&spec, &o, 0).err().unwrap().to_string();
    assert!(
        e.starts_with(&format!(
            "--val-data images:{}: is a set of picture files",
            larger.display()
        )) && e.contains("is not pictures")
            && e.contains("csv:FILE"),
        "{e}"
    );
    // synthetic pictures are pictures, made here: said as such
    let spec: DataSpec = "synthetic-images:100,3,8,8,2".parse().unwrap();
    let e = load(&spec, &o, 0).err().unwrap().to_string();
    assert!(
        e.contains("makes its pictures and validates on a split of them (--val-split)"),
        "{e}"
    );
}

/// A split's folders are not taken for classes: `validation/` is a validation folder as `val/`
/// is, and `train/` + `test/` without one are refused with the flags that take them.
#[test]
fn split_folders_are_not_classes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pets");
    for (i, f) in ["train/ant/0.png", "train/bee/1.png", "train/ant/2.png"]
        .iter()
        .enumerate()
    {
        png_rgb(&dir.join(f), i as u8);
    }
    png_rgb(&dir.join("validation/bee/3.png"), 3);
    let d = images(&dir, &opts(|o| o.val_fraction = None)).unwrap();
    assert_eq!(
        (d.train.len(), d.val.len(), d.val.y.clone()),
        (3, 1, vec![1])
    );
    std::fs::rename(dir.join("validation"), dir.join("test")).unwrap();
    let e = images(&dir, &opts(|o| o.val_fraction = None))
        .err()
        .unwrap();
    let d = dir.display();
    assert!(
        e.contains("holds a train/ folder of class folders but no val/")
            && e.contains("(test, train)")
            && e.contains(&format!("give images:{d}/train --val-data images:{d}/test")),
        "{e}"
    );
    // a val/ that is a file is said as such; one whose class folders are empty names them
    std::fs::write(dir.join("val"), b"x").unwrap();
    let e = images(&dir, &opts(|o| o.val_fraction = None))
        .err()
        .unwrap();
    assert!(e.contains(&format!("{d}/val is not a folder")), "{e}");
    std::fs::remove_file(dir.join("val")).unwrap();
    for class in ["ant", "bee"] {
        std::fs::create_dir_all(dir.join("val").join(class)).unwrap();
    }
    let e = images(&dir, &opts(|o| o.val_fraction = None))
        .err()
        .unwrap();
    assert!(
        e.contains("val holds no images: its class folders (ant, bee) are empty"),
        "{e}"
    );
    // a class called train (CIFAR-100 has one) is a class: pictures of its own
    let classes = tmp.path().join("classes");
    png_rgb(&classes.join("train/0.png"), 0);
    png_rgb(&classes.join("tractor/1.png"), 1);
    let d = images(&classes, &opts(|_| {})).unwrap();
    assert_eq!(d.train.len() + d.val.len(), 2);
    // training/ + Val/ in any case are a split's folders too
    let named = tmp.path().join("named");
    png_rgb(&named.join("Training/ant/0.png"), 0);
    png_rgb(&named.join("Training/bee/1.png"), 1);
    png_rgb(&named.join("Val/bee/2.png"), 2);
    let d = images(&named, &opts(|o| o.val_fraction = None)).unwrap();
    assert_eq!((d.train.len(), d.val.len()), (2, 1));
    // a validation folder beside the class folders is not a class named val
    let beside = tmp.path().join("beside");
    png_rgb(&beside.join("ant/0.png"), 0);
    png_rgb(&beside.join("bee/1.png"), 1);
    png_rgb(&beside.join("val/bee/2.png"), 2);
    let e = images(&beside, &opts(|_| {})).err().unwrap();
    let b = beside.display();
    assert!(
        e.contains(&format!("{b}/val holds class folders of its own"))
            && e.contains(&format!("into {b}/train")),
        "{e}"
    );
    std::fs::rename(beside.join("val"), beside.join("test")).unwrap();
    let e = images(&beside, &opts(|_| {})).err().unwrap();
    assert!(e.contains(&format!("--val-data images:{b}/test")), "{e}");
}

#[test]
fn cifar_binaries_train_on_batches_and_validate_on_the_test_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let record = |label: u8, v: u8| {
        let mut r = vec![label];
        r.extend(vec![v; 1024]);
        r.extend(vec![0; 2048]);
        r
    };
    for (i, f) in [
        "data_batch_1.bin",
        "data_batch_2.bin",
        "data_batch_3.bin",
        "data_batch_4.bin",
        "data_batch_5.bin",
        "test_batch.bin",
    ]
    .iter()
    .enumerate()
    {
        let bytes: Vec<u8> = (0..4).flat_map(|k| record(k as u8, 50 * i as u8)).collect();
        std::fs::write(dir.join(f), bytes).unwrap();
    }
    let spec: DataSpec = format!("cifar10:{}", dir.display()).parse().unwrap();
    let d = load(&spec, &DataOptions::default(), 0).unwrap();
    assert_eq!((d.train.len(), d.val.len(), d.train.classes), (20, 4, 10));
    // the same directory as --val-data gives its test file too, not its training batches
    let o = DataOptions {
        val_data: Some(spec.clone()),
        ..DataOptions::default()
    };
    assert_eq!(load(&spec, &o, 0).unwrap().val.len(), 4);
    // and a folder holding its test file alone will do (the training batches are not read)
    let only_test = tmp.path().join("test-only");
    std::fs::create_dir(&only_test).unwrap();
    std::fs::copy(dir.join("test_batch.bin"), only_test.join("test_batch.bin")).unwrap();
    let val = |d: &Path| DataOptions {
        val_data: Some(format!("cifar10:{}", d.display()).parse().unwrap()),
        ..DataOptions::default()
    };
    assert_eq!(load(&spec, &val(&only_test), 0).unwrap().val.len(), 4);
    let e = load(&spec, &val(&tmp.path().join("none")), 0)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.starts_with("--val-data cifar10:")
            && e.contains("holds no test_batch.bin")
            && e.contains("add --download"),
        "{e}"
    );
    assert!(
        d.description.contains("validation cifar10"),
        "{}",
        d.description
    );
    // CIFAR's own normalisation: red 250 of the test file's pictures
    let v = sample(&d.val, 0, 0);
    assert!(
        (v[0] - (250.0 / 255.0 - 0.4914) / 0.2470).abs() < 1e-5,
        "{}",
        v[0]
    );
    // crop:4 pads with black: some of the training samples' corners are black
    let o = DataOptions {
        augment: "crop:4,flip".parse().unwrap(),
        normalize: "unit".parse().unwrap(),
        ..DataOptions::default()
    };
    let d = load(&spec, &o, 0).unwrap();
    let all: Vec<u32> = (0..20).collect();
    let mut x = Vec::new();
    d.train.gather(&all, 0, &mut x);
    // every red value is the picture's own or black padding, and some crops reach the padding
    let mut padded = 0;
    for (s, &row) in x.chunks(3072).zip(&d.train.pictures.as_ref().unwrap().rows) {
        let v = 50.0 * (row / 4) as f32 / 255.0;
        assert!(
            s[..1024].iter().all(|&r| r == 0.0 || close(r, v)),
            "row {row}"
        );
        padded += usize::from(v > 0.0 && s[..1024].contains(&0.0));
    }
    assert!(padded > 0);
    assert!(!d
        .notes
        .iter()
        .any(|n| n.contains("most of a crop is padding")));
    // a padding as large as the pictures is said (crop:P is no crop size)
    let o = DataOptions {
        augment: "crop:40".parse().unwrap(),
        ..DataOptions::default()
    };
    let d = load(&spec, &o, 0).unwrap();
    assert!(
        d.notes.iter().any(|n| n.contains(
            "--augment crop:40 pads 40 black pixels a side of 32x32 pictures: most of a crop is padding"
        )),
        "{:?}",
        d.notes
    );
    // a folder of pictures validates it by the classes' names (the archive's list): cat is 3
    let names = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n";
    std::fs::write(dir.join("batches.meta.txt"), names).unwrap();
    let pets = tmp.path().join("pets");
    png_rgb(&pets.join("cat/0.png"), 1);
    png_rgb(&pets.join("dog/0.png"), 2);
    let o = DataOptions {
        val_data: Some(format!("images:{}", pets.display()).parse().unwrap()),
        image_size: Some(32),
        ..DataOptions::default()
    };
    assert_eq!(load(&spec, &o, 0).unwrap().val.y, [3, 5]);
    png_rgb(&pets.join("zebra/0.png"), 3);
    let e = load(&spec, &o, 0).err().unwrap().to_string();
    assert!(
        e.contains("zebra is not a class of the training set (airplane, "),
        "{e}"
    );
    let e = load(
        &"cifar100:/no/such/dir".parse().unwrap(),
        &DataOptions::default(),
        0,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("cifar-100-binary.tar.gz") && e.contains("tar xzf"),
        "{e}"
    );
}

#[test]
fn a_run_tells_of_a_file_it_cannot_decode_and_counts_it_at_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pics");
    for class in ["a", "b"] {
        for i in 0..3 {
            png_rgb(&dir.join(format!("{class}/{i}.png")), i);
        }
    }
    let mut whole = Vec::new();
    pixels(9)
        .write_to(&mut Cursor::new(&mut whole), ImageFormat::Png)
        .unwrap();
    std::fs::write(dir.join("b/cut.png"), &whole[..whole.len() / 2]).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
        .current_dir(tmp.path())
        .args([
            "--headless",
            "--data",
            "images:pics",
            "--model",
            "mlp:16",
            "--devices",
            "cpu:1",
        ])
        .args([
            "--steps",
            "4",
            "--batch-per-replica",
            "4",
            "--val-split",
            "0",
            "--log-every",
            "1",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let warnings: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("WARNING at step"))
        .collect();
    assert!(
        warnings.len() == 1 && warnings[0].contains("cut.png"),
        "{out}"
    );
    assert!(
        out.contains("note: 1 image file(s) could not be decoded"),
        "{out}"
    );
    assert!(out.contains("input: 1 loader thread per rank"), "{out}");
}

#[test]
fn how_busy_the_loaders_are_building_picture_batches_is_said_and_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    for class in ["a", "b"] {
        for i in 0..6 {
            png_rgb(&tmp.path().join(format!("pics/{class}/{i}.png")), i);
        }
    }
    let common = ["--headless", "--model", "mlp:16", "--devices", "cpu:1"];
    let steps = [
        "--steps",
        "6",
        "--batch-per-replica",
        "4",
        "--log-every",
        "1",
    ];
    // built on the worker's own thread: the building is inside the step's wait for its data
    let o = common::cli::run_in(
        tmp.path(),
        &[
            &common[..],
            &steps,
            &["--data", "images:pics", "--prefetch", "0"],
            &["--metrics-out", "m.jsonl"],
        ]
        .concat(),
    );
    let out = common::cli::text(&o);
    assert!(o.status.success(), "{out}");
    // (no loader threads to tell of: the building is the step's wait for data)
    assert!(out.contains("] step ") && !out.contains("loaders"), "{out}");
    let metrics = std::fs::read_to_string(tmp.path().join("m.jsonl")).unwrap();
    let mut recorded = 0;
    for record in metrics
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
    {
        if record["type"] != "step" {
            continue;
        }
        let rank = &record["per_rank"][0];
        let (busy, wait) = (
            rank["loader_busy_ms"].as_f64(),
            rank["data_wait_ms"].as_f64(),
        );
        let (busy, wait) = (busy.unwrap(), wait.unwrap());
        assert!(busy > 0.0 && busy <= wait + 0.002, "{record}");
        assert!(
            record["totals"]["loader_s"].as_f64().unwrap() > 0.0,
            "{record}"
        );
        recorded += 1;
    }
    assert_eq!(recorded, 6, "{metrics}");
    // on loader threads
    let o = common::cli::run_in(
        tmp.path(),
        &[&common[..], &steps, &["--data", "images:pics"]].concat(),
    );
    let out = common::cli::text(&o);
    assert!(o.status.success(), "{out}");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("] step ")).collect();
    assert_eq!(lines.len(), 6, "{out}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("% busy") && l.contains("| loaders ")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("summary:") && l.contains("| loaders ")),
        "{out}"
    );
    // samples held ready: no loaders' share in the lines
    let o = common::cli::run_in(tmp.path(), &[&common[..], &steps].concat());
    let out = common::cli::text(&o);
    assert!(o.status.success() && out.contains("] step "), "{out}");
    assert!(!out.contains("loaders"), "{out}");
}

#[test]
fn a_folder_s_class_names_go_with_its_checkpoints_and_exports() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pics");
    // (sorted as text, as torchvision's ImageFolder sorts them: "10" before "2")
    for class in ["2", "10", "Apple"] {
        for i in 0..3 {
            png_rgb(&dir.join(format!("{class}/{i}.png")), i);
        }
    }
    let run = |args: &[&str]| {
        let o = common::cli::run_in(tmp.path(), args);
        let text = common::cli::text(&o);
        assert!(o.status.success(), "{text}");
        text
    };
    run(&[
        "--headless",
        "--data",
        "images:pics",
        "--model",
        "mlp:8",
        "--devices",
        "cpu:1",
        "--steps",
        "2",
        "--val-split",
        "0",
        "--run-dir",
        "run",
    ]);
    let state =
        std::fs::read_to_string(tmp.path().join("run/checkpoints/step-00000002/state.json"));
    let state: serde_json::Value = serde_json::from_str(&state.unwrap()).unwrap();
    assert_eq!(state["classes"], serde_json::json!(["10", "2", "Apple"]));
    let said = run(&["export", "run", "w.safetensors"]);
    assert!(said.contains(r#"metadata()["mgtop.classes"]"#), "{said}");
    let bytes = std::fs::read(tmp.path().join("w.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let classes = header["__metadata__"]["mgtop.classes"].as_str().unwrap();
    assert_eq!(classes, r#"["10","2","Apple"]"#);
}

#[test]
fn a_class_none_of_whose_pictures_decode_stops_the_run_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pics");
    let mut whole = Vec::new();
    pixels(9)
        .write_to(&mut Cursor::new(&mut whole), ImageFormat::Png)
        .unwrap();
    for i in 0..3 {
        png_rgb(&dir.join(format!("cat/{i}.png")), i);
        std::fs::create_dir_all(dir.join("dog")).unwrap();
        std::fs::write(dir.join(format!("dog/{i}.png")), &whole[..whole.len() / 2]).unwrap();
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
        .current_dir(tmp.path())
        .args(["--headless", "--data", "images:pics", "--model", "mlp:16"])
        .args([
            "--devices",
            "cpu:2",
            "--steps",
            "20",
            "--batch-per-replica",
            "2",
        ])
        .args(["--val-split", "0"])
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(!o.status.success(), "trained on blank dogs:\n{out}{err}");
    assert!(
        err.contains("no picture of class 1")
            && err.contains("pics/dog")
            && err.contains("all 3 of its files failed"),
        "{out}{err}"
    );
    assert!(!out.contains("finished"), "{out}");
    // and where its record is, with the files that failed
    let run_dir = (out.lines().chain(err.lines()))
        .find_map(|l| l.strip_prefix("run dir: "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_else(|| panic!("no run dir line:\n{out}{err}"));
    let metrics = std::fs::read_to_string(tmp.path().join(run_dir).join("metrics.jsonl")).unwrap();
    assert!(metrics.contains("dog/0.png"), "{metrics}");
}

#[test]
fn validation_pictures_that_do_not_decode_are_said_and_a_class_of_none_is_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let mut whole = Vec::new();
    pixels(9)
        .write_to(&mut Cursor::new(&mut whole), ImageFormat::Png)
        .unwrap();
    let cut = &whole[..whole.len() / 2];
    for (set, class) in [("train", "cat"), ("train", "dog"), ("val", "cat")] {
        for i in 0..3 {
            png_rgb(&tmp.path().join(format!("pics/{set}/{class}/{i}.png")), i);
        }
    }
    std::fs::create_dir_all(tmp.path().join("pics/val/dog")).unwrap();
    for i in 0..2 {
        std::fs::write(tmp.path().join(format!("pics/val/dog/{i}.png")), cut).unwrap();
    }
    let train = |run: &str| {
        let args = ["--headless", "--data", "images:pics", "--model", "mlp:8"];
        let more = ["--devices", "cpu:1", "--steps", "2", "--run-dir", run];
        common::cli::run_in(tmp.path(), &[&args[..], &more[..]].concat())
    };
    // every validation dog blank: the figures are over the cats, said (blank dogs were
    // counted: 100% accuracy; then the run stopped, its training lost)
    let o = train("none");
    let text = common::cli::text(&o);
    assert!(o.status.success(), "{text}");
    let warning = (text.lines())
        .find(|l| l.contains("WARNING") && l.contains("no picture of class 1"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        warning.contains("val/dog") && warning.contains("validation leaves the class out"),
        "{text}"
    );
    assert!(text.contains("val loss"), "{text}");
    // (its files said, with no stand-in claimed: none decodes)
    let skipped: Vec<&str> = (text.lines())
        .filter(|l| l.contains("skipped") && l.contains("val/dog/"))
        .collect();
    assert!(
        skipped.len() == 2 && skipped.iter().all(|l| !l.contains("stands in")),
        "{text}"
    );
    let o = common::cli::run_in(tmp.path(), &["eval", "none"]);
    let text = common::cli::text(&o);
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("its 2 samples are left out of the figures")
            && text.contains("evaluated 3 samples"),
        "{text}"
    );
    // one that decodes: it stands in for the other, said; eval leaves the other out, said
    png_rgb(&tmp.path().join("pics/val/dog/0.png"), 0);
    let o = train("one");
    let text = common::cli::text(&o);
    assert!(o.status.success(), "{text}");
    assert!(
        (text.lines()).any(|l| l.contains("skipped")
            && l.contains("val/dog/1.png")
            && l.contains("another picture of its class stands in for it")),
        "{text}"
    );
    let o = common::cli::run_in(tmp.path(), &["eval", "one", "--data", "images:pics/val"]);
    let text = common::cli::text(&o);
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("val/dog/1.png")
            && text.contains("left out of the figures")
            && text.contains("evaluated 4 samples"),
        "{text}"
    );
    // no class that decodes: nothing to evaluate
    for i in 0..3 {
        std::fs::write(tmp.path().join(format!("pics/val/cat/{i}.png")), cut).unwrap();
    }
    std::fs::write(tmp.path().join("pics/val/dog/0.png"), cut).unwrap();
    let o = common::cli::run_in(tmp.path(), &["eval", "one", "--data", "images:pics/val"]);
    let text = common::cli::text(&o);
    assert!(!o.status.success(), "{text}");
    assert!(
        text.contains("no class of the set has a picture that decodes"),
        "{text}"
    );
}

/// Serves `body` over HTTP on a port of its own to every request; the base URL.
fn http_server(body: Vec<u8>) -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut head = [0u8; 4096];
            let _ = s.read(&mut head);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(&body);
        }
    });
    url
}

#[test]
fn download_checks_the_published_md5_and_leaves_nothing_half_done() {
    let dir = tempfile::tempdir().unwrap();
    // a mirror serving an archive that is not the published one
    let mut fake = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut fake, b"not CIFAR").unwrap();
    let url = http_server(fake.finish().unwrap());
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
            .current_dir(dir.path())
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .env("MGTOP_DATASETS_MIRROR", &url)
            .env("NO_PROXY", "127.0.0.1")
            .args(["--headless", "--steps", "2"])
            .args(args)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.code(), text)
    };
    // without --download the error says how to get the files, --download first
    let (code, out) = run(&["--data", "cifar10:data"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("add --download to fetch them"), "{out}");
    // with it: fetched from the mirror, refused for its checksum, nothing kept
    let (code, out) = run(&["--data", "cifar10:data", "--download"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("--download: fetching ")
            && out.contains("/cifar-10-binary.tar.gz")
            && out.contains("published one is c32a1d4ab5d03f1284b67883e8d87530"),
        "{out}"
    );
    let cache = dir.path().join("cache/mgtop/datasets");
    assert_eq!(
        std::fs::read_dir(&cache).unwrap().count(),
        0,
        "nothing cached"
    );
    assert!(!dir.path().join("data/cifar-10-batches-bin").exists());
    // other data is not fetched
    let (code, out) = run(&["--data", "digits", "--download"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("--download fetches CIFAR-10 and CIFAR-100"),
        "{out}"
    );
}
