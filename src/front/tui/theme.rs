//! Colour themes: TOML files in `themes/`, embedded in the binary, or a user's own file.

use std::path::Path;

use ratatui::style::{Color, Modifier, Style};
use serde::Deserialize;

use crate::data::read::{self, excerpt, Expect, ReadError};

/// The embedded themes, in the order `t` cycles through them.
const EMBEDDED: [(&str, &str); 3] = [
    ("dark", include_str!("../../../themes/dark.toml")),
    ("light", include_str!("../../../themes/light.toml")),
    ("mono", include_str!("../../../themes/mono.toml")),
];

#[derive(Clone, Debug, PartialEq)]
pub struct Theme {
    pub name: String,
    pub background: Color,
    pub text: Color,
    pub muted: Color,
    pub border: Color,
    pub title: Color,
    pub accent: Color,
    pub good: Color,
    pub warn: Color,
    pub error: Color,
    pub highlight_bg: Color,
    /// The parts of the step-time bar.
    pub data: Color,
    pub compute: Color,
    pub comm: Color,
    pub wait: Color,
    /// One colour per device in charts (cycled).
    pub series: Vec<Color>,
    /// No colours at all: emphasis by bold / reverse only.
    pub mono: bool,
}

/// A theme file: any subset of the keys; the rest come from the theme it `extends` (dark).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ThemeFile {
    name: Option<String>,
    extends: Option<String>,
    background: Option<ColorText>,
    text: Option<ColorText>,
    muted: Option<ColorText>,
    border: Option<ColorText>,
    title: Option<ColorText>,
    accent: Option<ColorText>,
    good: Option<ColorText>,
    warn: Option<ColorText>,
    error: Option<ColorText>,
    highlight_bg: Option<ColorText>,
    data: Option<ColorText>,
    compute: Option<ColorText>,
    comm: Option<ColorText>,
    wait: Option<ColorText>,
    series: Option<Vec<ColorText>>,
}

/// A colour as a theme file gives it: a name (`"lightblue"`, `"42"`) or a bare 256-colour
/// index (`42`).
struct ColorText(String);

impl<'de> Deserialize<'de> for ColorText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ColorText, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Text(String),
            Index(i64),
        }
        match Given::deserialize(d) {
            Ok(Given::Text(t)) => Ok(ColorText(t)),
            Ok(Given::Index(i)) => Ok(ColorText(i.to_string())),
            Err(_) => Err(serde::de::Error::custom(
                "a colour is a name such as \"lightblue\" or a 256-colour index (0-255)",
            )),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("theme {source_name}: {message}")]
pub struct ThemeError {
    pub source_name: String,
    pub message: String,
}

fn color(key: &str, v: &str) -> Result<Color, String> {
    if v.starts_with('#') {
        return Err(format!(
            "key `{key}`: `{}` is a 24-bit colour; use a name or a 256-colour index (0-255) so the theme works on 256-colour terminals",
            excerpt(v)
        ));
    }
    v.parse().map_err(|_| {
        format!("key `{key}`: `{}` is not a colour; use a name such as lightblue, a 256-colour index (0-255), or reset", excerpt(v))
    })
}

/// The line (from 1) of `text` that sets `key` (`key = ...`), if one does.
fn key_line(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

impl Theme {
    /// Parses a theme file's text; `source_name` names it in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Theme, ThemeError> {
        let err = |message: String| ThemeError {
            source_name: source_name.to_string(),
            message,
        };
        let f: ThemeFile = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| format!("line {}: ", text[..s.start].matches('\n').count() + 1));
            err(format!(
                "{}{}",
                line.unwrap_or_default(),
                read::excerpt_quotes(e.message())
            ))
        })?;
        // a key's problem, with the line that sets it
        let at = |key: &str, message: String| match key_line(text, key) {
            Some(n) => err(format!("line {n}: {message}")),
            None => err(message),
        };
        let base = match f.extends.as_deref() {
            None if f.name.is_some() && f.series.is_some() && f.text.is_some() => None,
            None => Some(Theme::embedded("dark").expect("dark is embedded")),
            Some(name) => Some(Theme::embedded(name).ok_or_else(|| {
                let names = Theme::embedded_names().collect::<Vec<_>>().join(", ");
                let message = format!(
                    "key `extends`: `{}` is not a theme; use one of {names}",
                    excerpt(name),
                );
                at("extends", message)
            })?),
        };
        let pick = |key: &str,
                    v: Option<ColorText>,
                    from: fn(&Theme) -> Color|
         -> Result<Color, ThemeError> {
            match (v, &base) {
                (Some(v), _) => color(key, &v.0).map_err(|m| at(key, m)),
                (None, Some(b)) => Ok(from(b)),
                (None, None) => Err(err(format!("key `{key}` is missing"))),
            }
        };
        let series = match (f.series, &base) {
            (Some(v), _) => v
                .iter()
                .map(|v| color("series", &v.0).map_err(|m| at("series", m)))
                .collect::<Result<Vec<_>, _>>()?,
            (None, Some(b)) => b.series.clone(),
            (None, None) => return Err(err("key `series` is missing".into())),
        };
        if series.is_empty() {
            return Err(at(
                "series",
                "key `series`: give at least one colour (one per device, cycled)".into(),
            ));
        }
        let t = Theme {
            name: f.name.unwrap_or_else(|| {
                Path::new(source_name)
                    .file_stem()
                    .map_or("custom".into(), |s| s.to_string_lossy().into_owned())
            }),
            background: pick("background", f.background, |t| t.background)?,
            text: pick("text", f.text, |t| t.text)?,
            muted: pick("muted", f.muted, |t| t.muted)?,
            border: pick("border", f.border, |t| t.border)?,
            title: pick("title", f.title, |t| t.title)?,
            accent: pick("accent", f.accent, |t| t.accent)?,
            good: pick("good", f.good, |t| t.good)?,
            warn: pick("warn", f.warn, |t| t.warn)?,
            error: pick("error", f.error, |t| t.error)?,
            highlight_bg: pick("highlight-bg", f.highlight_bg, |t| t.highlight_bg)?,
            data: pick("data", f.data, |t| t.data)?,
            compute: pick("compute", f.compute, |t| t.compute)?,
            comm: pick("comm", f.comm, |t| t.comm)?,
            wait: pick("wait", f.wait, |t| t.wait)?,
            series,
            mono: false,
        };
        let mono = [t.text, t.accent, t.good, t.warn, t.error, t.compute]
            .iter()
            .all(|c| *c == Color::Reset);
        Ok(Theme { mono, ..t })
    }

    pub fn embedded_names() -> impl Iterator<Item = &'static str> {
        EMBEDDED.iter().map(|(n, _)| *n)
    }

    /// An embedded theme by name.
    pub fn embedded(name: &str) -> Option<Theme> {
        let (n, text) = EMBEDDED.iter().find(|(n, _)| *n == name)?;
        Some(Theme::parse(text, &format!("{n} (embedded)")).expect("embedded themes parse"))
    }

    /// `--theme NAME|PATH`: an embedded name, else a file.
    pub fn load(name_or_path: &str) -> Result<Theme, ThemeError> {
        if let Some(t) = Theme::embedded(name_or_path) {
            return Ok(t);
        }
        let path = Path::new(name_or_path);
        let expect = Expect {
            what: "a theme file",
            flag: "--theme",
            max: read::SETTINGS_MAX,
            fix: "check that --theme names a theme file",
        };
        let text = read::read_text(path, &expect).map_err(|e| ThemeError {
            source_name: path.display().to_string(),
            message: match e {
                ReadError::Io { source, .. } => format!(
                    "cannot read it ({source}); --theme takes {} or the path of a theme file",
                    Theme::embedded_names().collect::<Vec<_>>().join(", ")
                ),
                ReadError::Refused { problem, .. } => problem,
            },
        })?;
        Theme::parse(&text, &path.display().to_string())
    }

    /// The theme to start with: the one asked for (which overrides NO_COLOR), else mono under
    /// NO_COLOR, else dark.
    pub fn choose(requested: Option<&str>, no_color: bool) -> Result<Theme, ThemeError> {
        match requested {
            Some(r) => Theme::load(r),
            None if no_color => Ok(Theme::embedded("mono").expect("mono is embedded")),
            None => Ok(Theme::embedded("dark").expect("dark is embedded")),
        }
    }

    /// The theme after this one (`t`): the embedded ones in turn, and the theme the screen
    /// started with (`first`, a theme file's) among them.
    pub fn next(&self, first: &Theme) -> Theme {
        let mut cycle: Vec<Theme> = Theme::embedded_names()
            .filter_map(Theme::embedded)
            .collect();
        if !cycle.contains(first) {
            cycle.insert(0, first.clone());
        }
        let i = cycle.iter().position(|t| t == self).map_or(0, |i| i + 1);
        cycle.swap_remove(i % cycle.len())
    }

    pub fn base(&self) -> Style {
        Style::default().fg(self.text).bg(self.background)
    }
    pub fn muted(&self) -> Style {
        Style::default().fg(self.muted)
    }
    pub fn border(&self) -> Style {
        Style::default().fg(self.border)
    }
    pub fn title(&self) -> Style {
        Style::default().fg(self.title).add_modifier(Modifier::BOLD)
    }
    pub fn fg(&self, c: Color) -> Style {
        Style::default().fg(c)
    }
    /// A state or warning badge: reversed in mono so it still stands out.
    pub fn badge(&self, c: Color) -> Style {
        let s = Style::default().add_modifier(Modifier::BOLD);
        if self.mono {
            s.add_modifier(Modifier::REVERSED)
        } else {
            s.fg(c)
        }
    }
    /// A highlighted row (focused device or one with a warning).
    pub fn highlight(&self) -> Style {
        if self.mono {
            Style::default().add_modifier(Modifier::BOLD)
        } else {
            Style::default().bg(self.highlight_bg)
        }
    }
    pub fn series(&self, i: usize) -> Color {
        self.series[i % self.series.len()]
    }
}

#[cfg(test)]
mod tests {
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
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("mine.toml");
        let good = include_str!("../../../themes/dark.toml");
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
            e.starts_with("theme /dev/zero: a character device, not a regular file; --theme needs"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("big.toml");
        std::fs::File::create(&f).unwrap().set_len(2 << 20).unwrap();
        let e = Theme::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            e.contains("larger than the 1 MiB that a theme file may hold"),
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
}
