//! The CSV reader's tests.

use super::*;

fn parse(text: &str, label: LabelColumn, header: bool) -> Result<Dataset, String> {
    super::parse(text, label, header, "--data")
}

#[test]
fn parses_label_columns_and_header() {
    let d = parse("a,b,c\n1,2,0\n3,4,1\n", LabelColumn::Last, true).unwrap();
    assert_eq!(
        (d.features, d.classes, d.x.clone(), d.y.clone()),
        (2, 2, vec![1.0, 2.0, 3.0, 4.0], vec![0, 1])
    );
    let d = parse("2,1.5,7\n0,2.5,8\n", LabelColumn::First, false).unwrap();
    assert_eq!((d.y.clone(), d.classes), (vec![2, 0], 3));
    let d = parse("1.5,2,7\n2.5,0,8\n", LabelColumn::Index(1), false).unwrap();
    assert_eq!(d.x, vec![1.5, 7.0, 2.5, 8.0]);
    // every field quoted (pandas' QUOTE_ALL, spreadsheets): read as the numbers inside
    let quoted = "\"a\",\"b\",\"label\"\n\"1.5\",\" 2\",\"1\"\n\"3\",\"4\",\"0\"\n";
    let d = parse(quoted, LabelColumn::Last, true).unwrap();
    assert_eq!(
        (d.x.clone(), d.y.clone()),
        (vec![1.5, 2.0, 3.0, 4.0], vec![1, 0])
    );
    let e = parse("\"1\",\"\",\"0\"\n", LabelColumn::Last, false).unwrap_err();
    assert!(e.contains("column 1 (from 0) is empty"), "{e}");
    let e = parse("\"1,5\",\"2\",\"0\"\n", LabelColumn::Last, false).unwrap_err();
    assert!(
        e.contains("`1,5` is not a number (a decimal comma: numbers take a decimal point, 1.5)"),
        "{e}"
    );
    // a quoted label holds commas and doubled quotes as text
    let d = parse(
        "1,\"Iris, setosa\"\n2,\"say \"\"hi\"\"\"\n",
        LabelColumn::Last,
        false,
    )
    .unwrap();
    assert_eq!(d.names, ["Iris, setosa", "say \"hi\""]);
}

#[test]
fn a_line_1_read_otherwise_than_it_looks_is_said() {
    let note = |text: &str, label, header| {
        let set = parse(text, label, header).unwrap();
        super::line_one_note(text, label, header, &set)
    };
    // a sample skipped under ,header: numbers and a label like the others', numbered or named
    for text in ["1,2.5,0\n3,4,1\n5,6,0\n", "1,2,cat\n3,4,dog\n5,6,cat\n"] {
        let n = note(text, LabelColumn::Last, true).unwrap();
        assert!(
            n.contains("its line 1, numbers and a label like the samples'"),
            "{n}"
        );
    }
    // a real header of numbered columns (pandas' for integer column names) is no sample
    assert_eq!(
        note("0,1,species\n3,4,dog\n5,6,cat\n", LabelColumn::Last, true),
        None
    );
    assert_eq!(note("a,b,label\n3,4,1\n", LabelColumn::Last, true), None);
    let quoted = "\"a\",\"b\",\"label\"\n\"1.5\",\" 2\",\"1\"\n\"3\",\"4\",\"0\"\n";
    assert_eq!(note(quoted, LabelColumn::Last, true), None);
    // without ,header: a header of numbered columns reads as a class of one sample
    let n = note(
        "0,1,species\n3,4,dog\n5,6,cat\n7,8,dog\n",
        LabelColumn::Last,
        false,
    )
    .unwrap();
    assert!(
        n.contains(
            "line 1's label `species` is no other row's class: if line 1 is a header, add ,header"
        ),
        "{n}"
    );
    assert_eq!(
        note("1,2,cat\n3,4,dog\n5,6,cat\n", LabelColumn::Last, false),
        None
    );
    // a word among the features: its column may be the labels' (on line 1 too, where the
    // line after has a word there; a word over a number is a header's)
    let e = parse("setosa,1,2\nversicolor,3,4\n", LabelColumn::Last, false).unwrap_err();
    assert!(e.contains("line 1, column 0 (from 0): `setosa` is not a number (if column 0 holds the class labels, pick it with label=first)"), "{e}");
    let e = parse("x,y,label\n1,2,0\n", LabelColumn::Last, false).unwrap_err();
    assert!(
        e.contains("(if line 1 is a header, add ,header to --data)"),
        "{e}"
    );
    let e = parse("1,2,3\nsetosa,4,1\n", LabelColumn::Last, false).unwrap_err();
    assert!(
        e.contains("`setosa` is not a number (if column 0 holds the class labels, pick it with label=first)") && !e.contains(",header"),
        "{e}"
    );
}

#[test]
fn errors_name_the_line_and_the_fix() {
    let e = parse("1,2,0\n3,4\n", LabelColumn::Last, false).unwrap_err();
    assert!(e.contains("line 2 has 2 fields"), "{e}");
    let e = parse("1;2;0\n3;4;1\n", LabelColumn::Last, false).unwrap_err();
    assert!(
        e.contains("line 1 has 1 field") && e.contains("separated by semicolons"),
        "{e}"
    );
    let e = parse("x,y,label\n1,2,0\n", LabelColumn::Last, false).unwrap_err();
    assert!(
        e.contains("line 1, column 0 (from 0)") && e.contains(",header"),
        "{e}"
    );
    let e = parse("1,2,-1\n", LabelColumn::Last, false).unwrap_err();
    assert!(e.contains("label `-1`"), "{e}");
    let e = parse("1,2,0.5\n", LabelColumn::Last, false).unwrap_err();
    assert!(e.contains("label `0.5`"), "{e}");
    // class names are the classes, in sorted order
    let d = parse(
        "a,b,label\n1,2,setosa\n3,4,Iris virginica\n",
        LabelColumn::Last,
        true,
    )
    .unwrap();
    assert_eq!(
        (d.names.as_slice(), d.y.as_slice(), d.classes),
        (
            &["Iris virginica".to_string(), "setosa".into()][..],
            &[1, 0][..],
            2
        )
    );
    let e = parse("", LabelColumn::Last, false).unwrap_err();
    assert!(e.contains("empty"), "{e}");
    let e = parse("1,2\n", LabelColumn::Index(5), false).unwrap_err();
    assert!(e.contains("label column 5"), "{e}");
    // a missing value, a feature's or the label's, is said as one
    for text in ["1,2,0\n3,,1\n", "1,2,0\n3,4,\n"] {
        let label = LabelColumn::First;
        let e = parse(text, label, false).unwrap_err();
        assert!(
            e.contains("line 2, column ") && e.contains("is empty: a missing value"),
            "{e}"
        );
    }
    let e = parse("1,,0\n", LabelColumn::Last, false).unwrap_err();
    assert!(e.contains("line 1, column 1 (from 0) is empty"), "{e}");
    // a comma ending every line: named, with the way to drop it
    let e = parse("1,2,0,\n3,4,1,\n", LabelColumn::Index(2), false).unwrap_err();
    assert!(
        e.starts_with("line 1 ends with a comma") && e.contains("sed"),
        "{e}"
    );
}

#[test]
fn files_that_are_not_text_say_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    for (bytes, said) in [
        (&b"\x1f\x8b\x08\0\0\0"[..], "gzip-compressed: unpack it first (gunzip -k FILE)"),
        (b"PK\x03\x04\x14\0", "a zip archive"),
        (b"\xff\xfe1\x002\x00", "UTF-16 text"),
        (b"1\x00,\x002\x00,\x000\x00\n\x001\x00,\x002\x00,\x000\x00\n\x001\x00,\x002\x00,\x000\x00\n\x00", "UTF-16 text"),
        (b"1,2,0\n\x003,4,1\n", "a NUL byte (byte 6): it is a binary file"),
        // a binary file's NULs are not UTF-16's (an IDX file given as csv:)
        (&[0u8, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 0][..], "binary file"),
        (b"BZh91AY&SY", "bzip2-compressed"),
    ] {
        let f = dir.path().join("d.csv");
        std::fs::write(&f, bytes).unwrap();
        let e = super::read(&f, "--data").unwrap_err().to_string();
        assert!(e.contains(said) && e.contains("plain UTF-8 text"), "{e}");
    }
    // text that begins as bzip2's mark does is text
    let f = dir.path().join("d.csv");
    std::fs::write(&f, "BZh,2,0\n1,2,1\n").unwrap();
    let e = super::read(&f, "--data").err().map(|e| e.to_string());
    assert!(e.as_ref().is_none_or(|e| !e.contains("bzip2")), "{e:?}");
}

#[test]
fn a_csv_larger_than_an_eighth_of_memory_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("big.csv");
    let (memory, _) = host_memory::machine_memory();
    // sparse: nothing is written, and nothing may be read
    std::fs::File::create(&f)
        .unwrap()
        .set_len(memory / 8 + 1)
        .unwrap();
    let e = super::read(&f, "--data").unwrap_err().to_string();
    assert!(
        e.contains("mgtop-train reads as a CSV file")
            && e.contains("train on a sample of its rows"),
        "{e}"
    );
}

#[test]
fn a_byte_order_mark_and_any_line_ending_are_read() {
    let d = parse("\u{feff}1,2,0\n3,4,1\n", LabelColumn::Last, false).unwrap();
    assert_eq!(d.x, vec![1.0, 2.0, 3.0, 4.0]);
    let d = parse("\u{feff}a,b,c\r\n1,2,0\r\n", LabelColumn::Last, true).unwrap();
    assert_eq!(d.x, vec![1.0, 2.0]);
    let d = parse("1,2,0\r3,4,1\r", LabelColumn::Last, false).unwrap();
    assert_eq!(
        (d.x.clone(), d.y.clone()),
        (vec![1.0, 2.0, 3.0, 4.0], vec![0, 1])
    );
    let e = parse("1,2,0\r3,x,1\r", LabelColumn::Last, false).unwrap_err();
    assert!(e.starts_with("line 2, column 1 (from 0): `x`"), "{e}");
}

#[test]
fn a_file_without_rows_says_what_it_holds() {
    let e = parse("\r\r\r\r", LabelColumn::Last, false).unwrap_err();
    assert!(
        e.contains("no data rows") && e.contains("4 carriage return (CR)"),
        "{e}"
    );
    let e = parse(" \n\n\t\r\n", LabelColumn::Last, false).unwrap_err();
    assert!(
        e.contains("no data rows") && e.contains("whitespace"),
        "{e}"
    );
    assert!(!e.contains("empty"), "{e}");
    let e = parse("a,b,label\n\n", LabelColumn::Last, true).unwrap_err();
    assert!(e.contains("only the header line"), "{e}");
}

#[test]
fn rows_with_too_many_fields_are_refused_before_they_are_stored() {
    let wide = ",".repeat(MAX_FIELDS + 10);
    let e = parse(&wide, LabelColumn::Last, false).unwrap_err();
    assert!(e.contains("line 1 has more than 1048576 fields"), "{e}");
    let e = parse(&format!("1,2,0\n{wide}"), LabelColumn::Last, false).unwrap_err();
    assert!(e.contains("line 2 has more than 3 fields"), "{e}");
}

#[test]
fn fields_in_messages_are_cut_short_and_escaped() {
    let huge = "9".repeat(10_000_000) + "x";
    let e = parse(&format!("1,{huge},0\n"), LabelColumn::Last, false).unwrap_err();
    assert!(e.len() < 300 && e.contains("9999…`"), "{} bytes", e.len());
    let e = parse(&format!("1,2,0\n1,2,{huge}\n"), LabelColumn::Last, false).unwrap_err();
    assert!(
        e.len() < 300 && e.contains("label `9999"),
        "{} bytes",
        e.len()
    );
    let e = parse("1,\x1b[2J,0\n", LabelColumn::Last, false).unwrap_err();
    assert!(e.contains("`\\u{1b}[2J`"), "{e}");
}

#[test]
fn nan_and_infinite_values_are_refused_with_their_place() {
    for v in ["NaN", "inf", "-infinity"] {
        let e = parse(&format!("1,2,0\n3,{v},1\n"), LabelColumn::Last, false).unwrap_err();
        assert!(
            e.contains("line 2, column 1 (from 0)") && e.contains("not a finite number"),
            "{v}: {e}"
        );
    }
    // finite, but past what a 32-bit float holds
    for v in ["1e39", "-1e308", "1e400"] {
        let e = parse(&format!("1,2,0\n3,{v},1\n"), LabelColumn::Last, false).unwrap_err();
        assert!(
            e.contains(&format!(
                "line 2, column 1 (from 0): `{v}` is too large for the 32-bit floats"
            )),
            "{v}: {e}"
        );
    }
    let e = parse("1,2,0\n1,2,NaN\n", LabelColumn::Last, false).unwrap_err();
    assert!(e.contains("label `NaN` is a name"), "{e}");
}

/// What a model is checked against before the file is read whole: the width of its first row
/// as `parse` takes it (after the header, past blank lines; a header of other width is not
/// it), and nothing where the file is not text.
#[test]
fn the_first_rows_width_is_read_alone_as_parse_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.csv");
    let cases: [(&[u8], bool, Option<usize>); 6] = [
        (b"\xef\xbb\xbfa,b,label\r\n1,2,x\r\n", true, Some(2)),
        (b"x,label\n\n  \n1,2,3,4,y\n", true, Some(4)),
        (b"\n1,\"2,5\",3\n", false, Some(2)),
        (b"1,2,3\r4,5,6\r", false, Some(2)),
        (b"a,b,label\n", true, None),
        (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", false, None),
    ];
    for (bytes, header, features) in cases {
        std::fs::write(&f, bytes).unwrap();
        let got = features_of_first_row(&f, LabelColumn::Last, header);
        assert_eq!(got, features, "{:?}", String::from_utf8_lossy(bytes));
    }
    // a label column past the row's: the load says so
    std::fs::write(&f, "1,2,3\n").unwrap();
    assert_eq!(
        features_of_first_row(&f, LabelColumn::Index(3), false),
        None
    );
}
