//! The IDX reader's tests.

use super::*;

fn idx_bytes(kind: u8, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, kind, dims.len() as u8];
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.extend_from_slice(data);
    v
}

fn parse(bytes: &[u8]) -> Result<Idx, String> {
    from_reader(
        bytes,
        Some(bytes.len() as u64),
        host_memory::machine_memory().0,
    )
    .map_err(|f| match f {
        Fail::Format(m) => m,
        Fail::Io(e) => e.to_string(),
    })
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut enc, bytes).unwrap();
    enc.finish().unwrap()
}

#[test]
fn parses_and_rejects() {
    let ok = parse(&idx_bytes(UBYTE, &[2, 2, 2], &[0; 8])).unwrap();
    assert_eq!(ok.dims, vec![2, 2, 2]);
    let e = parse(&idx_bytes(UBYTE, &[2, 2, 2], &[0; 7])).err().unwrap();
    assert!(e.contains("2x2x2 = 8 bytes of data but 7 follow"), "{e}");
    let e = parse(&idx_bytes(UBYTE, &[2, 2, 2], &[0; 9])).err().unwrap();
    assert!(e.contains("2x2x2 = 8 bytes of data but 9 follow"), "{e}");
    let e = parse(b"PK\x03\x04").err().unwrap();
    assert!(e.contains("not an IDX file"), "{e}");
    let e = parse(&idx_bytes(0x0B, &[1], &[0, 0])).err().unwrap();
    assert!(e.contains("0x0B"), "{e}");
    let e = parse(&[0, 0, 8, 0]).err().unwrap();
    assert!(e.contains("declares 0 dimensions"), "{e}");
    let e = parse(&[0, 0, 8, 3, 0, 0]).err().unwrap();
    assert!(
        e.contains("3 dimensions but the file ends at byte 6"),
        "{e}"
    );
}

#[test]
fn header_sizes_are_checked_before_they_are_used() {
    for dims in [&[0u32, 28, 28][..], &[2, 0], &[0]] {
        let e = parse(&idx_bytes(UBYTE, dims, &[])).err().unwrap();
        assert!(
            e.contains("is 0, so the file holds no samples"),
            "{dims:?}: {e}"
        );
    }
    // the product wraps to 0 in 64 bits: 4 x 2^31 x 2^31 x 2^31 x 2^31 = 2^126
    let e = parse(&idx_bytes(FLOAT, &[1 << 31; 4], &[])).err().unwrap();
    assert!(e.contains("more than 64-bit sizes count"), "{e}");
    let e = parse(&idx_bytes(UBYTE, &[u32::MAX; 3], &[])).err().unwrap();
    assert!(e.contains("more than 64-bit sizes count"), "{e}");
    // fits in 64 bits, but not in any machine's memory: refused before allocating
    let e = parse(&idx_bytes(UBYTE, &[1 << 31, 1 << 31], &[1, 2]))
        .err()
        .unwrap();
    assert!(
        e.contains("4611686018427387904 bytes of data")
            && e.contains("once loaded")
            && e.contains("more than this machine's memory"),
        "{e}"
    );
}

#[test]
fn a_gzip_stream_stops_at_what_the_header_declares() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bomb.gz");
    let mut bomb = idx_bytes(UBYTE, &[2, 2], &[1, 2, 3, 4]);
    bomb.resize(64 << 20, 0);
    std::fs::write(&f, gzip(&bomb)).unwrap();
    let e = read(&f, "--data").err().unwrap().to_string();
    assert!(
        e.contains("decompresses to more than its header declares (16 bytes)"),
        "{e}"
    );
    assert!(!e.contains("download"), "{e}");
    let whole = gzip(&idx_bytes(UBYTE, &[4], &[0; 4]));
    std::fs::write(&f, &whole[..whole.len() - 10]).unwrap();
    let e = read(&f, "--data").err().unwrap().to_string();
    assert!(e.contains("gzip data is corrupt"), "{e}");
    std::fs::write(&f, gzip(&idx_bytes(UBYTE, &[4], &[0; 3]))).unwrap();
    let e = read(&f, "--data").err().unwrap().to_string();
    assert!(e.contains("4 = 4 bytes of data but 3 follow"), "{e}");
    // two files joined (`cat a.gz a.gz`), or bytes after the stream
    std::fs::write(&f, [whole.clone(), whole.clone()].concat()).unwrap();
    let e = read(&f, "--data").err().unwrap().to_string();
    assert!(
        e.contains("decompresses to more than its header declares"),
        "{e}"
    );
    std::fs::write(&f, [whole.clone(), b"junk".to_vec()].concat()).unwrap();
    let e = read(&f, "--data").err().unwrap().to_string();
    assert!(e.contains("bytes that are no gzip member follow"), "{e}");
    // one file compressed in parts and joined (`cat a.gz b.gz`, bgzip), as gunzip reads it
    let bytes = idx_bytes(UBYTE, &[2, 3], &[1, 2, 3, 4, 5, 6]);
    let parts = [gzip(&bytes[..7]), gzip(&bytes[7..13]), gzip(&bytes[13..])];
    std::fs::write(&f, parts.concat()).unwrap();
    let d = read(&f, "--data").ok().unwrap();
    assert_eq!((d.dims, d.data), (vec![2, 3], vec![1, 2, 3, 4, 5, 6]));
    // a first member of 8191 bytes: the reader's 8 KiB buffer ends on the next one's first byte
    let big = idx_bytes(UBYTE, &[100, 100], &[7; 10_000]);
    let stored = |b: &[u8]| {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
        std::io::Write::write_all(&mut enc, b).unwrap();
        enc.finish().unwrap()
    };
    let cut = (1..big.len())
        .find(|&n| stored(&big[..n]).len() == 8191)
        .unwrap();
    std::fs::write(&f, [stored(&big[..cut]), stored(&big[cut..])].concat()).unwrap();
    assert_eq!(read(&f, "--data").ok().unwrap().data.len(), 10_000);
    std::fs::write(&f, &whole).unwrap();
    assert!(read(&f, "--data").is_ok());
    std::fs::write(&f, [whole.clone(), vec![0; 512]].concat()).unwrap();
    assert!(read(&f, "--data").is_ok(), "zero padding, as gzip takes it");
}

#[test]
fn float_images_must_be_finite() {
    let dir = tempfile::tempdir().unwrap();
    let (imgs, labs) = (dir.path().join("img"), dir.path().join("lab"));
    let values = [0.5f32, 1.0, f32::NAN, 2.0];
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
    std::fs::write(&imgs, idx_bytes(FLOAT, &[2, 2], &data)).unwrap();
    std::fs::write(&labs, idx_bytes(UBYTE, &[2], &[1, 0])).unwrap();
    let e = load(&imgs, &labs, None, "--data")
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("image 1, value 0: NaN is not a finite number"),
        "{e}"
    );
    let data: Vec<u8> = [0.5f32, 1.0, 3.0, 2.0]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect();
    std::fs::write(&imgs, idx_bytes(FLOAT, &[2, 2], &data)).unwrap();
    let (ds, norm, _) = load(&imgs, &labs, None, "--data").unwrap();
    assert_eq!(
        (ds.x, norm),
        (vec![0.5, 1.0, 3.0, 2.0], Normalisation::None)
    );
}

#[test]
fn loads_gzip_and_raw_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("img.gz");
    let labs = dir.path().join("lab");
    std::fs::write(
        &imgs,
        gzip(&idx_bytes(UBYTE, &[3, 2], &[0, 255, 51, 0, 0, 0])),
    )
    .unwrap();
    std::fs::write(&labs, idx_bytes(UBYTE, &[3], &[1, 0, 2])).unwrap();
    let (ds, norm, _) = load(&imgs, &labs, None, "--data").unwrap();
    assert_eq!((ds.len(), ds.features, ds.classes), (3, 2, 3));
    assert_eq!(norm, Normalisation::Scale(1.0 / 255.0));
    std::fs::write(&labs, idx_bytes(UBYTE, &[2], &[1, 0])).unwrap();
    let e = load(&imgs, &labs, None, "--data")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("2 labels but") && e.contains("3 images"), "{e}");
}

/// The shape a model is checked against before the data loads: the header's, where the
/// file's length (a gzip file's recorded length) agrees with it; none where it does not
/// (the load says why).
#[test]
fn a_sample_shape_is_read_from_a_header_the_file_bears_out() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("img");
    let cases: [(Vec<u8>, Option<Shape>); 5] = [
        (
            idx_bytes(UBYTE, &[2, 3, 2], &[0; 12]),
            Some(Shape::Image { c: 1, h: 3, w: 2 }),
        ),
        (
            gzip(&idx_bytes(FLOAT, &[2, 5], &[0; 40])),
            Some(Shape::Flat(5)),
        ),
        (
            idx_bytes(UBYTE, &[2, 2, 2, 3], &[0; 24]),
            Some(Shape::Image { c: 3, h: 2, w: 2 }),
        ),
        // cut short; a header of more than the file holds
        (idx_bytes(UBYTE, &[2, 3, 2], &[0; 11]), None),
        (gzip(&idx_bytes(UBYTE, &[u32::MAX, 9], &[0; 18])), None),
    ];
    for (bytes, shape) in cases {
        std::fs::write(&f, bytes).unwrap();
        assert_eq!(sample_shape(&f, None), shape);
    }
}

#[test]
fn images_carry_their_shape_from_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let (imgs, labs) = (dir.path().join("img"), dir.path().join("lab"));
    std::fs::write(&labs, idx_bytes(UBYTE, &[2], &[1, 0])).unwrap();
    // 3-d [N,H,W], as MNIST / Fashion-MNIST: 1xHxW
    std::fs::write(&imgs, idx_bytes(UBYTE, &[2, 3, 2], &[0; 12])).unwrap();
    let (ds, _, note) = load(&imgs, &labs, None, "--data").unwrap();
    assert_eq!(
        (ds.image, ds.features, note.as_str()),
        (Some([1, 3, 2]), 6, "")
    );
    let e = load(&imgs, &labs, Some(ImageLayout::ChannelsLast), "--data")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("layout=nhwc is for 4-d images files"), "{e}");
    // 4-d [N,H,W,C], 2x2 RGB: read as CHW
    let hwc: Vec<u8> = (0..24).collect();
    std::fs::write(&imgs, idx_bytes(UBYTE, &[2, 2, 2, 3], &hwc)).unwrap();
    let (ds, _, note) = load(&imgs, &labs, None, "--data").unwrap();
    assert_eq!(ds.image, Some([3, 2, 2]));
    assert!(note.contains("N,H,W,C (guessed from the sizes)"), "{note}");
    let red: Vec<f32> = ds.row(0)[..4].to_vec();
    assert_eq!(red, vec![0.0, 3.0, 6.0, 9.0]);
    assert_eq!(ds.row(1)[4..8].to_vec(), vec![13.0, 16.0, 19.0, 22.0]);
    // 4-d [N,C,H,W]: read as stored
    std::fs::write(&imgs, idx_bytes(UBYTE, &[2, 3, 2, 2], &hwc)).unwrap();
    let (ds, _, note) = load(&imgs, &labs, None, "--data").unwrap();
    assert_eq!(ds.image, Some([3, 2, 2]));
    assert!(note.contains("N,C,H,W"), "{note}");
    assert_eq!(ds.x, (0..24).map(|v| v as f32).collect::<Vec<_>>());
    // the same bytes, said to be channels last
    let (ds, _, note) = load(&imgs, &labs, Some(ImageLayout::ChannelsLast), "--data").unwrap();
    assert_eq!(ds.image, Some([2, 3, 2]));
    assert!(note.contains("(layout=nhwc)"), "{note}");
    assert_eq!(ds.row(0)[..6].to_vec(), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    // 2-d [N,D]: flat vectors
    std::fs::write(&imgs, idx_bytes(UBYTE, &[2, 5], &[0; 10])).unwrap();
    assert_eq!(load(&imgs, &labs, None, "--data").unwrap().0.image, None);
}
