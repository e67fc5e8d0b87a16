//! Themes: the embedded ones, theme files and their errors, cycling.

use super::*;

#[test]
fn embedded_themes_parse_and_cycle() {
    let names: Vec<&str> = Theme::embedded_names().collect();
    assert_eq!(names, ["dark", "light", "mono"]);
    let dark = Theme::embedded("dark").unwrap();
    assert!(!dark.mono);
    assert!(Theme::embedded("mono").unwrap().mono);
    assert_eq!(dark.next(&dark).name, "light");
    let third = dark.next(&dark).next(&dark).next(&dark);
    assert_eq!(third.name, "dark");
}

#[test]
fn t_comes_back_to_the_theme_file_the_screen_started_with() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("mine.toml");
    std::fs::write(&f, "extends = \"light\"\naccent = \"red\"\n").unwrap();
    let mine = Theme::load(f.to_str().unwrap()).unwrap();
    let mut t = mine.clone();
    let mut seen = Vec::new();
    for _ in 0..4 {
        t = t.next(&mine);
        seen.push(t.name.clone());
    }
    assert_eq!(seen, ["dark", "light", "mono", "mine"]);
    assert_eq!(t, mine);
}

#[test]
fn a_theme_file_may_change_a_few_keys_of_another() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("mine.toml");
    std::fs::write(&f, "extends = \"light\"\naccent = \"red\"\n").unwrap();
    let t = Theme::load(f.to_str().unwrap()).unwrap();
    let light = Theme::embedded("light").unwrap();
    assert_eq!((t.name.as_str(), t.accent), ("mine", Color::Red));
    // a name the footer shows: escapes cannot reach the terminal, nor a page of text fill it
    std::fs::write(
        &f,
        "extends = \"light\"\nname = \"\\u001b[2J\\u001b]0;pwned\"\n",
    )
    .unwrap();
    let named = Theme::load(f.to_str().unwrap()).unwrap();
    assert_eq!(named.name, "\\u{1b}[2J\\u{1b}]0;pwned");
    std::fs::write(
        &f,
        format!("name = \"{}\"\nextends = \"light\"\n", "x".repeat(5000)),
    )
    .unwrap();
    assert!(
        Theme::load(f.to_str().unwrap())
            .unwrap()
            .name
            .chars()
            .count()
            <= 41
    );
    assert_eq!((t.text, t.series.clone()), (light.text, light.series));
    std::fs::write(&f, "good = \"2\"\n").unwrap();
    let t = Theme::load(f.to_str().unwrap()).unwrap();
    assert_eq!(
        (t.good, t.text),
        (Color::Indexed(2), Theme::embedded("dark").unwrap().text)
    );
    // a bare index, as the README allows
    std::fs::write(&f, "good = 2\nseries = [1, \"red\"]\n").unwrap();
    let t = Theme::load(f.to_str().unwrap()).unwrap();
    assert_eq!(
        (t.good, t.series),
        (Color::Indexed(2), vec![Color::Indexed(1), Color::Red])
    );
    std::fs::write(&f, "good = 300\n").unwrap();
    let e = Theme::load(f.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("line 1: key `good`"), "{e}");
    // a file of another kind: the form a theme takes
    std::fs::write(&f, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    let e = Theme::load(f.to_str().unwrap()).unwrap_err().to_string();
    assert!(
        e.contains("line 1: ") && e.contains("a theme file is TOML, keys of themes/dark.toml"),
        "{e}"
    );
}

/// The colour a 256-colour terminal shows for `c` (xterm's palette); `None` for the
/// terminal's own colour.
fn rgb(c: Color) -> Option<[f64; 3]> {
    const BASIC: [[u8; 3]; 16] = [
        [0, 0, 0],
        [128, 0, 0],
        [0, 128, 0],
        [128, 128, 0],
        [0, 0, 128],
        [128, 0, 128],
        [0, 128, 128],
        [192, 192, 192],
        [128, 128, 128],
        [255, 0, 0],
        [0, 255, 0],
        [255, 255, 0],
        [0, 0, 255],
        [255, 0, 255],
        [0, 255, 255],
        [255, 255, 255],
    ];
    let v = match c {
        Color::Reset => return None,
        Color::Indexed(i @ 0..=15) => BASIC[i as usize],
        Color::Indexed(i @ 16..=231) => {
            let l = |x: u8| if x == 0 { 0 } else { 55 + 40 * x };
            let i = i - 16;
            [l(i / 36), l(i / 6 % 6), l(i % 6)]
        }
        Color::Indexed(i) => [8 + 10 * (i - 232); 3],
        Color::Rgb(r, g, b) => [r, g, b],
        other => panic!("a named colour in an embedded theme: {other:?}"),
    };
    Some(v.map(f64::from))
}

/// WCAG contrast ratio of two colours (1 to 21).
fn contrast(a: [f64; 3], b: [f64; 3]) -> f64 {
    let lum = |c: [f64; 3]| {
        let ch = |x: f64| {
            let x = x / 255.0;
            if x <= 0.03928 {
                x / 12.92
            } else {
                ((x + 0.055) / 1.055).powf(2.4)
            }
        };
        0.2126 * ch(c[0]) + 0.7152 * ch(c[1]) + 0.0722 * ch(c[2])
    };
    let (x, y) = (lum(a), lum(b));
    (x.max(y) + 0.05) / (x.min(y) + 0.05)
}

#[test]
fn the_dark_and_light_themes_read_on_dark_and_light_terminals() {
    for name in ["dark", "light"] {
        the_theme_reads_on_its_own_background(&Theme::embedded(name).unwrap());
    }
}

fn the_theme_reads_on_its_own_background(t: &Theme) {
    // with the terminal's own background, dark text vanishes on a dark terminal (and light
    // text on a light one): the theme brings its background, and its text must read on that
    let bg = rgb(t.background).expect("the theme sets its own background");
    let check = |name: &str, c: Color, min: f64| {
        let fg = rgb(c).unwrap_or_else(|| panic!("{name} is the terminal's own colour"));
        let r = contrast(fg, bg);
        assert!(
            r >= min,
            "{name} {c:?} on {:?}: contrast {r:.2} < {min}",
            t.background
        );
    };
    check("text", t.text, 7.0);
    for (name, c) in [
        ("muted", t.muted),
        ("title", t.title),
        ("accent", t.accent),
        ("good", t.good),
        ("warn", t.warn),
        ("error", t.error),
    ] {
        check(name, c, 4.0);
    }
    for (i, c) in t.series.iter().enumerate() {
        check(&format!("series[{i}]"), *c, 3.0);
    }
    // a highlighted row keeps its text readable
    let hl = rgb(t.highlight_bg).unwrap();
    assert!(contrast(rgb(t.text).unwrap(), hl) >= 7.0);
    // mono leaves both to the terminal, which is readable by construction
    let mono = Theme::embedded("mono").unwrap();
    assert_eq!((mono.text, mono.background), (Color::Reset, Color::Reset));
}

#[test]
fn no_color_picks_mono_unless_a_theme_is_asked_for() {
    assert_eq!(Theme::choose(None, true).unwrap().name, "mono");
    assert_eq!(Theme::choose(None, false).unwrap().name, "dark");
    assert_eq!(Theme::choose(Some("light"), true).unwrap().name, "light");
}

#[test]
fn bad_theme_files_name_the_file_and_the_key() {
    // a misspelt name (no such file) is named with the theme it likely means
    let e = Theme::load("drak").unwrap_err().to_string();
    assert!(
        e.contains("did you mean dark? --theme takes dark, light, mono"),
        "{e}"
    );
    let e = Theme::load("nothing-like-it").unwrap_err().to_string();
    assert!(!e.contains("did you mean"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("mine.toml");
    let good = include_str!("../../../../themes/dark.toml");
    std::fs::write(
        &f,
        good.replace("accent = \"81\"", "accent = \"chartreuse\""),
    )
    .unwrap();
    let e = Theme::load(f.to_str().unwrap()).unwrap_err().to_string();
    let line = 1 + good.lines().position(|l| l.starts_with("accent")).unwrap();
    assert!(
        e.contains("mine.toml") && e.contains(&format!("line {line}: key `accent`")),
        "{e}"
    );
    std::fs::write(&f, good.replace("good = \"114\"", "good = \"#00ff00\"")).unwrap();
    let e = Theme::load(f.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("`good`") && e.contains("256-colour"), "{e}");
    std::fs::write(&f, format!("{good}\nsparkle = \"1\"\n")).unwrap();
    let e = Theme::load(f.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("sparkle") && e.contains("line"), "{e}");
    std::fs::write(&f, "extends = \"sepia\"\n").unwrap();
    let e = Theme::load(f.to_str().unwrap()).unwrap_err().to_string();
    assert!(
        e.contains("line 1: key `extends`") && e.contains("sepia"),
        "{e}"
    );
    let e = Theme::load("no-such-theme").unwrap_err().to_string();
    assert!(
        e.contains("no-such-theme") && e.contains("dark, light, mono"),
        "{e}"
    );
    std::fs::write(&f, good.replace("name = \"dark\"", "name = \"mine\"")).unwrap();
    assert_eq!(Theme::load(f.to_str().unwrap()).unwrap().name, "mine");
}

#[test]
fn theme_files_are_read_within_limits() {
    let e = Theme::load("/dev/zero").unwrap_err().to_string();
    assert!(
        e.starts_with("theme `/dev/zero`: a character device, not a regular file; --theme needs"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("big.toml");
    std::fs::File::create(&f).unwrap().set_len(2 << 20).unwrap();
    let e = Theme::load(f.to_str().unwrap()).unwrap_err().to_string();
    assert!(
        e.contains("2 MiB, more than the 1 MiB mgtop-train reads as a theme file"),
        "{e}"
    );
    // values from the file are quoted short and escaped
    let long = "c".repeat(500_000);
    std::fs::write(&f, format!("accent = \"{long}\"\n")).unwrap();
    let e = Theme::load(f.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.len() < 300 && e.contains("ccc…`"), "{e}");
    std::fs::write(&f, "accent = \"\\u001b[31m\"\n").unwrap();
    let e = Theme::load(f.to_str().unwrap()).unwrap_err().to_string();
    assert!(!e.contains('\x1b') && e.contains("\\u{1b}[31m"), "{e}");
}

#[test]
fn terminals_without_colours_are_told_from_those_with() {
    for mono in ["xterm-mono", "linux-m", "vt100", "vt220"] {
        assert!(mono_terminal(mono), "{mono}");
    }
    for colour in [
        "xterm-256color",
        "screen",
        "tmux-256color",
        "linux",
        "xterm",
    ] {
        assert!(!mono_terminal(colour), "{colour}");
    }
}

#[test]
fn an_unknown_key_is_told_the_nearest_or_every_key() {
    let e = Theme::parse("accnet = \"red\"\n", "t.toml").unwrap_err();
    assert!(
        e.message.contains("did you mean `accent`?"),
        "{}",
        e.message
    );
    // (nothing near: a theme file's keys are few enough to list)
    let e = Theme::parse("name = \"x\"\n\nbogus = \"blue\"\n", "t.toml").unwrap_err();
    assert!(
        e.message
            .starts_with("line 3: unknown key `bogus`: the keys are name, extends, background,"),
        "{}",
        e.message
    );
}
