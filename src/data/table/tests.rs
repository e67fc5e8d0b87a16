//! The table sets (the embedded digits, CSV, IDX, synthetic): loaded, split, normalised, described.

use super::*;

fn split(f: f64) -> DataOptions {
    DataOptions {
        val_fraction: Some(f),
        ..DataOptions::default()
    }
}

#[test]
fn digits_loads_with_expected_shape_and_split() {
    let d = load(&DataSpec::Digits, &DataOptions::default(), 0).unwrap();
    assert_eq!(d.train.len() + d.val.len(), 1797);
    assert_eq!(d.val.len(), 359);
    assert_eq!((d.train.features, d.train.classes), (64, 10));
    assert!(d.train.x.iter().all(|v| (0.0..=1.0).contains(v)));
    assert!(d.description.contains("x*1/16"), "{}", d.description);
    assert_eq!(
        (d.train.image, d.val.image),
        (Some([1, 8, 8]), Some([1, 8, 8]))
    );
    assert!(
        d.description
            .contains("1797 samples, 64 features (1x8x8), 10 classes"),
        "{}",
        d.description
    );
    // the same seed gives the same split; another seed a different one
    let again = load(&DataSpec::Digits, &DataOptions::default(), 0).unwrap();
    assert_eq!(again.val.y, d.val.y);
    assert_ne!(
        load(&DataSpec::Digits, &DataOptions::default(), 1)
            .unwrap()
            .val
            .y,
        d.val.y
    );
}

#[test]
fn a_file_whose_every_label_is_the_same_is_refused_with_the_likely_cause() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("one.csv");
    // (the label read from a column of features that are all 1)
    std::fs::write(&f, "0.5,1\n0.25,1\n0.75,1\n").unwrap();
    let spec: DataSpec = format!("csv:{}", f.display()).parse().unwrap();
    let e = load(&spec, &split(0.0), 0).err().unwrap().to_string();
    assert!(
        e.contains("every sample's label is 1") && e.contains("label=first"),
        "{e}"
    );
}

#[test]
fn labels_that_are_not_class_numbers_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("ids.csv");
    std::fs::write(&f, "0.5,0\n0.25,6000\n0.75,0\n").unwrap();
    let spec: DataSpec = format!("csv:{}", f.display()).parse().unwrap();
    let d = load(&spec, &split(0.0), 0).unwrap();
    assert!(
        d.description
            .contains("6001 classes (labels run to 6000 but only 2 values occur"),
        "{}",
        d.description
    );
    // numbered from 1: said, as the output layer's idle unit 0
    std::fs::write(&f, "0.5,1\n0.25,3\n0.75,2\n").unwrap();
    let d = load(&spec, &split(0.0), 0).unwrap();
    assert!(
        d.description
            .contains("4 classes (labels run from 1 to 3: no sample is class 0"),
        "{}",
        d.description
    );
    // class numbers as they should be: nothing said
    std::fs::write(&f, "0.5,0\n0.25,2\n0.75,1\n").unwrap();
    let d = load(&spec, &split(0.0), 0).unwrap();
    assert!(!d.description.contains("values occur"), "{}", d.description);
    assert!(!d.description.contains("run from 1"), "{}", d.description);
}

#[test]
fn val_data_that_val_split_0_leaves_unread_is_said() {
    let opts = DataOptions {
        val_data: Some("csv:nowhere.csv".parse().unwrap()),
        ..split(0.0)
    };
    let d = load(&DataSpec::Digits, &opts, 0).unwrap();
    assert_eq!(d.val.len(), 0);
    assert!(
        d.description
            .contains("no validation (--val-split 0: --val-data csv:nowhere.csv"),
        "{}",
        d.description
    );
}

#[test]
fn validating_on_the_training_data_is_said() {
    let opts = DataOptions {
        val_data: Some(DataSpec::Digits),
        ..DataOptions::default()
    };
    let d = load(&DataSpec::Digits, &opts, 0).unwrap();
    assert!(
        d.description.contains("the training data itself"),
        "{}",
        d.description
    );
}

#[test]
fn too_large_a_synthetic_set_names_the_spec() {
    let spec: DataSpec = "synthetic:18446744073709551615,2,2".parse().unwrap();
    let e = load(&spec, &split(0.1), 0).err().unwrap().to_string();
    assert!(
        e.starts_with("--data synthetic:18446744073709551615,2,2: ")
            && e.contains("use fewer samples or features"),
        "{e}"
    );
}

#[test]
fn standardise_uses_train_statistics() {
    let mut train = Dataset {
        features: 1,
        classes: 2,
        image: None,
        x: vec![1.0, 3.0],
        y: vec![0, 1],
        names: Vec::new(),
        pictures: None,
    };
    let mut val = Dataset {
        features: 1,
        classes: 2,
        image: None,
        x: vec![5.0],
        y: vec![0],
        names: Vec::new(),
        pictures: None,
    };
    normalise(&mut train, &mut val, &Normalisation::Standardise);
    assert_eq!(train.x, vec![-1.0, 1.0]);
    assert_eq!(val.x, vec![3.0]);
    // values at f32's limits stay finite (their difference overflowed f32)
    let mut train = Dataset {
        x: vec![-3e38, 3e38, 3e38, -3e38],
        y: vec![0, 1, 1, 0],
        ..train
    };
    let mut val = Dataset {
        x: vec![f32::MAX],
        ..val
    };
    normalise(&mut train, &mut val, &Normalisation::Standardise);
    assert_eq!(train.x, vec![-1.0, 1.0, 1.0, -1.0]);
    assert!(
        val.x[0].is_finite() && (val.x[0] - 1.134).abs() < 1e-3,
        "{:?}",
        val.x
    );
}

#[test]
fn a_column_far_from_zero_is_standardised_by_its_own_spread_and_said_when_floats_blur_it() {
    // a timestamp column: 1.6e9 + 0, 256, 512, 768 (exact in f32), std about 286; one pass's
    // sum of squares less the squared mean cancelled it to a constant (scale 1)
    let x: Vec<f32> = (0..4).map(|k| 1.6e9 + 256.0 * k as f32).collect();
    let mut train = Dataset {
        features: 1,
        classes: 2,
        image: None,
        x,
        y: vec![0, 1, 0, 1],
        names: Vec::new(),
        pictures: None,
    };
    let mut val = train.clone();
    let (_, affine) = normalise(&mut train, &mut val, &Normalisation::Standardise);
    let (shift, scale) = affine.unwrap();
    // the shift kept whole (f32 would be off by up to 64: most of a deviation)
    assert_eq!(shift, vec![1.6e9 + 384.0]);
    assert!((1.0 / scale[0] - 286.2).abs() < 0.1, "{scale:?}");
    let xs: Vec<f32> = train.x.iter().map(|v| (v * 1e3).round() / 1e3).collect();
    assert_eq!(xs, vec![-1.342, -0.447, 0.447, 1.342]);
    // its spread is a few of f32's steps there (128): said, with the fix
    let note = coarse_columns(&(shift, scale)).unwrap();
    assert!(
        note.starts_with("feature 0") && note.contains("subtract an offset"),
        "{note}"
    );
    // ordinary columns are not
    assert_eq!(coarse_columns(&(vec![2024.0, 0.5], vec![0.1, 3.0])), None);
}

#[test]
fn a_csv_shape_must_match_the_features() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pixels.csv");
    std::fs::write(&f, "0,1,2,3,4,5,6,7,8\n1,8,7,6,5,4,3,2,1\n").unwrap();
    let spec = |opts: &str| -> DataSpec {
        format!("csv:{},label=first{opts}", f.display())
            .parse()
            .unwrap()
    };
    let d = load(&spec(",shape=1x2x4"), &split(0.5), 0).unwrap();
    assert_eq!(
        (d.train.image, d.val.image),
        (Some([1, 2, 4]), Some([1, 2, 4]))
    );
    assert!(
        d.description.contains("8 features (1x2x4)"),
        "{}",
        d.description
    );
    let d = load(&spec(""), &split(0.5), 0).unwrap();
    assert_eq!(d.train.image, None);
    assert!(
        d.description.contains("8 features, 2 classes"),
        "{}",
        d.description
    );
    let e = load(&spec(",shape=1x3x3"), &split(0.5), 0)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "--data {}: shape=1x3x3 is 9 values per image but the rows have 8 features",
            spec(",shape=1x3x3")
        )) && e.contains("give a shape of 8 values"),
        "{e}"
    );
    // a validation set of pictures of another shape, as many values
    let opts = DataOptions {
        val_data: Some(spec(",shape=2x2x2")),
        val_fraction: None,
        ..DataOptions::no_validation()
    };
    let e = load(&spec(",shape=1x2x4"), &opts, 0)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("its samples are pictures of 2x2x2 and the training set's of 1x2x4: give --val-data the training set's shape (shape=1x2x4)"),
        "{e}"
    );
    let e = csv_shape([1, 4, 4], 16 * 3).unwrap_err();
    assert!(e.contains("give a shape of 48 values, or"), "{e}");
    let e = csv_shape([1, 3, 3], 16).unwrap_err();
    assert!(e.contains("(e.g. shape=1x4x4)"), "{e}");
}

#[test]
fn synthetic_images_keep_their_shape_through_the_split() {
    let spec: DataSpec = "synthetic-images:50,3,4,5,2".parse().unwrap();
    let d = load(&spec, &split(0.2), 3).unwrap();
    assert_eq!((d.train.len(), d.val.len()), (40, 10));
    assert_eq!(
        (d.train.image, d.val.image),
        (Some([3, 4, 5]), Some([3, 4, 5]))
    );
    assert_eq!((d.train.features, d.train.classes), (60, 2));
    assert!(
        d.description
            .starts_with("synthetic images (seed 3): 50 samples, 60 features (3x4x5), 2 classes"),
        "{}",
        d.description
    );
    let spec: DataSpec = "synthetic-images:18446744073709551615,1,28,28,10"
        .parse()
        .unwrap();
    let e = load(&spec, &split(0.1), 0).err().unwrap().to_string();
    assert!(
        e.starts_with("--data synthetic-images:18446744073709551615,1,28,28,10: ")
            && e.contains("use fewer samples or smaller images"),
        "{e}"
    );
}

#[test]
fn a_val_data_table_of_named_classes_is_matched_to_the_training_sets_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (train, val) = (dir.path().join("train.csv"), dir.path().join("val.csv"));
    std::fs::write(&train, "0.1,cat\n0.9,dog\n0.5,eel\n0.2,cat\n").unwrap();
    // dog and eel only, eel first: numbered by name, 2 and 1, not by their own order
    std::fs::write(&val, "0.5,eel\n0.8,dog\n").unwrap();
    let spec: DataSpec = format!("csv:{}", train.display()).parse().unwrap();
    let opts = DataOptions {
        val_data: Some(format!("csv:{}", val.display()).parse().unwrap()),
        ..DataOptions::default()
    };
    let d = load(&spec, &opts, 0).unwrap();
    assert!(
        d.description.contains("3 classes (cat, dog, eel)"),
        "{}",
        d.description
    );
    assert_eq!(d.val.y, [2, 1]);
    assert_eq!(
        (d.val.class_names(), d.val.classes),
        (d.train.class_names(), 3)
    );
    std::fs::write(&val, "0.5,fox\n").unwrap();
    let e = load(&spec, &opts, 0).err().unwrap().to_string();
    assert!(
        e.starts_with("--val-data csv:")
            && e.contains(
                "its class `fox` is not one of the training set's classes (cat, dog, eel)"
            ),
        "{e}"
    );
}

#[test]
fn validation_samples_that_are_training_samples_are_counted_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let (train, val) = (dir.path().join("train.csv"), dir.path().join("val.csv"));
    // every row twice: a split puts copies on both sides
    let rows: String = (0..50).map(|i| format!("{i},{}\n", i % 2)).collect();
    std::fs::write(&train, rows.repeat(2)).unwrap();
    let spec: DataSpec = format!("csv:{}", train.display()).parse().unwrap();
    let d = load(&spec, &split(0.5), 0).unwrap();
    let note = d
        .notes
        .iter()
        .find(|n| n.contains("validation samples have the values"));
    let note = note.unwrap_or_else(|| panic!("{:?}", d.notes));
    assert!(
        note.contains(" of the 50 validation samples")
            && note.contains("more than once")
            && note.contains("awk"),
        "{note}"
    );
    // --val-data with 3 of the training file's rows among 5: said with the count
    std::fs::write(&val, "0,0\n1,1\n2,0\n0.5,1\n1.5,0\n").unwrap();
    let opts = DataOptions {
        val_data: Some(format!("csv:{}", val.display()).parse().unwrap()),
        ..DataOptions::default()
    };
    let d = load(&spec, &opts, 0).unwrap();
    assert!(
        d.notes
            .iter()
            .any(|n| n.starts_with("3 of the 5 validation samples")
                && n.contains("--val-data holds samples of the training set")),
        "{:?}",
        d.notes
    );
    // the training file itself: said as that, not counted
    let opts = DataOptions {
        val_data: Some(spec.clone()),
        ..DataOptions::default()
    };
    let d = load(&spec, &opts, 0).unwrap();
    assert!(
        d.notes
            .iter()
            .all(|n| !n.contains("validation samples have")),
        "{:?}",
        d.notes
    );
    // rows once each: nothing said
    std::fs::write(&train, &rows).unwrap();
    let d = load(&spec, &split(0.5), 0).unwrap();
    assert!(d.notes.is_empty(), "{:?}", d.notes);
}
