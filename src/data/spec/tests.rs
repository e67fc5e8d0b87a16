//! `--data` specs: parsing, spelling, absolute paths.

use super::*;

fn parse(s: &str) -> Result<DataSpec, String> {
    s.parse()
}

#[test]
fn absolute_specs_name_the_same_files_from_anywhere() {
    let here = std::env::current_dir().unwrap();
    for spec in [
        "csv:d/a.csv,label=first,header",
        "idx:i,l,layout=nhwc",
        "cifar100:c,labels=coarse",
        "images:p",
    ] {
        let abs = parse(spec).unwrap().absolute();
        let text = abs.to_string();
        assert!(text.contains(&here.display().to_string()), "{text}");
        assert_eq!(parse(&text).unwrap(), abs, "round trip of {text}");
    }
    assert_eq!(parse("digits").unwrap().absolute(), DataSpec::Digits);
    let csv = parse("csv:/x/a.csv").unwrap();
    assert_eq!(csv.absolute(), csv);
    // a kind in capitals is the kind
    assert_eq!(parse("CSV:/x/a.csv").unwrap(), csv);
    assert_eq!(parse("Images:p").unwrap(), parse("images:p").unwrap());
}

#[test]
fn a_path_with_commas_is_one_path_where_it_names_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    std::fs::write(dir.path().join("a,b.csv"), "1,0\n").unwrap();
    std::fs::write(dir.path().join("l,1"), "").unwrap();
    std::fs::write(dir.path().join("i"), "").unwrap();
    let csv = parse(&format!("csv:{d}/a,b.csv,label=first,header")).unwrap();
    let DataSpec::Csv { path, header, .. } = &csv else {
        panic!("{csv:?}")
    };
    assert!(path.ends_with("a,b.csv") && *header, "{csv:?}");
    // as a checkpoint records it and a resume reads it back
    assert_eq!(parse(&csv.to_string()).unwrap(), csv);
    let idx = parse(&format!("idx:{d}/i,{d}/l,1,layout=nhwc")).unwrap();
    let DataSpec::Idx { images, labels, .. } = &idx else {
        panic!("{idx:?}")
    };
    assert!(images.ends_with("i") && labels.ends_with("l,1"), "{idx:?}");
    // where nothing is there, the first piece is the path and the rest options, as before
    let e = parse("csv:missing.csv,lable=last").unwrap_err();
    assert!(e.contains("unknown CSV option `lable=last`"), "{e}");
    // a path with a comma that is not there is named as the path
    let e = parse(&format!("csv:{d}/x,y.csv")).unwrap_err();
    assert!(
        e.contains(&format!("neither `{d}/x,y.csv` nor `{d}/x` exists")),
        "{e}"
    );
    // where the part before the comma is a file, the whole is named too
    std::fs::write(format!("{d}/x"), "1,0\n").unwrap();
    let e = parse(&format!("csv:{d}/x,y.csv")).unwrap_err();
    assert!(
        e.contains(&format!(
            "unknown CSV option `y.csv` (nor is there a file `{d}/x,y.csv`)"
        )),
        "{e}"
    );
}

#[test]
fn parses_data_specs() {
    assert_eq!(parse("digits").unwrap(), DataSpec::Digits);
    assert_eq!(
        parse("csv:a.csv,label=first,header").unwrap(),
        DataSpec::Csv {
            path: "a.csv".into(),
            label: LabelColumn::First,
            header: true,
            shape: None,
        }
    );
    assert_eq!(
        parse("synthetic:100,5,3").unwrap(),
        DataSpec::Synthetic { n: 100, d: 5, c: 3 }
    );
    assert!(parse("idx:onlyone").unwrap_err().contains("IMAGES,LABELS"));
    assert!(parse("synthetic:1,2").unwrap_err().contains("N,D,C"));
    assert!(parse("parquet:x").unwrap_err().contains("unknown data"));
    // a bare folder or CSV file: the spec it likely is
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let e = parse(&d).unwrap_err();
    assert!(
        e.contains(&format!("a folder is given as images:{d} (")),
        "{e}"
    );
    let e = parse("runs/table.CSV").unwrap_err();
    assert!(
        e.contains("a CSV file is given as csv:runs/table.CSV ("),
        "{e}"
    );
    assert!(parse("csv:x.csv,sep=;").unwrap_err().contains("sep=;"));
    assert_eq!(
        parse("cifar100:d,labels=coarse").unwrap(),
        DataSpec::Cifar {
            dir: "d".into(),
            kind: CifarKind::Hundred { coarse: true }
        }
    );
    assert!(parse("cifar10:d,labels=coarse")
        .unwrap_err()
        .contains("options: none"));
    assert!(parse("cifar10:").unwrap_err().contains("missing folder"));
    assert!(parse("images:").unwrap_err().contains("missing folder"));
}

#[test]
fn csv_takes_an_image_shape() {
    assert_eq!(
        parse("csv:pixels.csv,label=first,shape=1x8x8").unwrap(),
        DataSpec::Csv {
            path: "pixels.csv".into(),
            label: LabelColumn::First,
            header: false,
            shape: Some([1, 8, 8]),
        }
    );
    for (s, want) in [
        (
            "csv:p.csv,shape=0x8x8",
            "channels is 0; every size must be at least 1",
        ),
        (
            "csv:p.csv,shape=8x8",
            "shape `8x8` has 2 parts, not three; write it as CxHxW",
        ),
        (
            "csv:p.csv,shape=1xeightx8",
            "height `eight` is not a whole number",
        ),
        ("csv:p.csv,shape=", "shape `` has 1 part"),
        (
            "csv:p.csv,shape=9999x9999x9999",
            "more than 50331648 values per image",
        ),
        // an option given twice: the last would win unsaid
        (
            "csv:p.csv,label=first,label=last",
            "`label` is given twice; give it once",
        ),
        ("csv:p.csv,header,header", "`header` is given twice"),
        ("idx:a,b,layout=nchw,layout=nhwc", "`layout` is given twice"),
        (
            "cifar100:d,labels=fine,labels=coarse",
            "`labels` is given twice",
        ),
    ] {
        let e = parse(s).unwrap_err();
        assert!(
            e.starts_with(&format!("data `{s}`: ")) && e.contains(want),
            "{s}: {e}"
        );
    }
}

#[test]
fn idx_takes_a_layout() {
    assert_eq!(
        parse("idx:i.gz,l.gz").unwrap(),
        DataSpec::Idx {
            images: "i.gz".into(),
            labels: "l.gz".into(),
            layout: None
        }
    );
    assert_eq!(
        parse("idx:i,l,layout=nhwc").unwrap(),
        DataSpec::Idx {
            images: "i".into(),
            labels: "l".into(),
            layout: Some(ImageLayout::ChannelsLast)
        }
    );
    let e = parse("idx:i,l,layout=hwc").unwrap_err();
    assert!(e.contains("layout `hwc` is not nchw or nhwc"), "{e}");
    let e = parse("idx:i,l,nchw").unwrap_err();
    assert!(
        e.contains("`nchw` is no idx option") && e.contains("layout=nchw|nhwc"),
        "{e}"
    );
    assert!(parse("idx:,l").unwrap_err().contains("IMAGES,LABELS"));
}

#[test]
fn parses_synthetic_images_and_refuses_bad_sizes() {
    assert_eq!(
        parse("synthetic-images:60000,1,28,28,10").unwrap(),
        DataSpec::SyntheticImages {
            n: 60000,
            c: 1,
            h: 28,
            w: 28,
            k: 10
        }
    );
    for (s, want) in [
        (
            "synthetic-images:100,1,8,8",
            "4 numbers given; synthetic-images needs N,C,H,W,K",
        ),
        ("synthetic-images:", "`` is not a whole number"),
        (
            "synthetic-images:100,1,x,8,10",
            "`x` is not a whole number; synthetic-images needs",
        ),
        (
            "synthetic-images:100,-1,8,8,10",
            "`-1` is not a whole number",
        ),
        ("synthetic-images:1,1,8,8,10", "N=1 samples"),
        ("synthetic-images:100,0,8,8,10", "C=0 channels"),
        ("synthetic-images:100,1,0,8,10", "H=0 pixels"),
        ("synthetic-images:100,1,8,99999,10", "W=99999 pixels"),
        ("synthetic-images:100,1000,4000,4000,10", "values per image"),
        ("synthetic-images:100,1,8,8,1", "K=1 classes"),
        (
            "synthetic-images:100,1,8,8,99999999999999999999",
            "is not a whole number",
        ),
    ] {
        let e = parse(s).unwrap_err();
        assert!(
            e.starts_with(&format!("data `{s}`: ")) && e.contains(want),
            "{s}: {e}"
        );
    }
}

#[test]
fn display_round_trips_and_short_names() {
    for s in [
        "digits",
        "csv:a.csv",
        "csv:a.csv,label=first",
        "csv:a.csv,label=3,header,shape=3x4x5",
        "idx:i.gz,l.gz",
        "idx:i.gz,l.gz,layout=nchw",
        "synthetic:100,5,3",
        "synthetic-images:100,3,16,12,7",
        "cifar10:data/c10",
        "cifar100:c100,labels=coarse",
        "images:photos/pets",
    ] {
        let spec = parse(s).unwrap();
        assert_eq!(spec.to_string(), s);
        assert_eq!(parse(&spec.to_string()).unwrap(), spec);
    }
    // the default label column is not spelled out (an error echoes what was given)
    assert_eq!(
        parse("csv:a.csv,label=last").unwrap().to_string(),
        "csv:a.csv"
    );
    let names: Vec<String> = [
        "digits",
        "csv:d/pixels.csv,shape=1x8x8",
        "idx:d/train-images.gz,l",
        "synthetic-images:10,1,8,8,2",
        "images:photos/pets/",
        "images:tiny/Train",
        "images:train",
        "cifar100:x",
        // (named as a built-in set: told apart)
        "csv:shared/digits.csv",
        "idx:synthetic,l",
        "images:data/cifar10/",
        "images:synthetic",
    ]
    .iter()
    .map(|s| parse(s).unwrap().short_name())
    .collect();
    assert_eq!(
        names,
        [
            "digits",
            "pixels",
            "train-images",
            "synthetic-images",
            "pets",
            "tiny-Train",
            "train",
            "cifar100",
            "digits-csv",
            "synthetic-idx",
            "cifar10-folder",
            "synthetic-folder"
        ]
    );
}

/// `label=NAME`: the column line 1 names that (its position), line 1 then being the header; a
/// name line 1 does not hold, or holds twice, is refused, naming the columns it does.
#[test]
fn a_label_column_is_named_by_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("iris.csv");
    std::fs::write(&f, "\u{feff}len,\"species\",width\r\n1,a,2\r\n").unwrap();
    let csv = parse(&format!("csv:{},label=species", f.display())).unwrap();
    let DataSpec::Csv { label, header, .. } = &csv else {
        panic!("{csv:?}")
    };
    assert_eq!((*label, *header), (LabelColumn::Index(1), true));
    // as a checkpoint records it: by position
    assert!(csv.to_string().ends_with(",label=1,header"), "{csv}");
    let e = parse(&format!("csv:{},label=kind", f.display())).unwrap_err();
    assert!(
        e.contains("no column of line 1") && e.contains("`len`, `species`, `width`"),
        "{e}"
    );
    // a name two columns bear: the other is no feature to read (it may copy the label)
    std::fs::write(&f, "label,a,label\n1,0,1\n").unwrap();
    let e = parse(&format!("csv:{},label=label", f.display())).unwrap_err();
    assert!(
        e.contains("names 2 columns `label` (columns 0, 2 from 0)") && e.contains("label=N"),
        "{e}"
    );
    // a number is a position, first and last are what they say
    let csv = parse(&format!("csv:{},label=first", f.display())).unwrap();
    assert!(matches!(
        csv,
        DataSpec::Csv {
            label: LabelColumn::First,
            header: false,
            ..
        }
    ));
}
