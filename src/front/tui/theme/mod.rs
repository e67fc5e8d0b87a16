//! Colour themes: TOML files in `themes/`, embedded in the binary, or a user's own file.

use std::path::Path;

use ratatui::style::{Color, Modifier, Style};
use serde::Deserialize;

use crate::files::read::{self, Expect, ReadError};
use crate::text::excerpt;

/// The embedded themes, in the order `t` cycles through them.
const EMBEDDED: [(&str, &str); 3] = [
    ("dark", include_str!("../../../../themes/dark.toml")),
    ("light", include_str!("../../../../themes/light.toml")),
    ("mono", include_str!("../../../../themes/mono.toml")),
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
#[error("theme `{source_name}`: {message}")]
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
        let f: ThemeFile =
            toml::from_str(text).map_err(|e| {
                // (not TOML at all, or a slip in a theme: the form it takes, either way)
                let form = "a theme file is TOML, keys of themes/dark.toml such as `extends = \"light\"` and `accent = \"red\"`";
                match crate::text::toml_error(text, &e) {
                    (Some(line), msg) => err(format!("line {line}: {msg}; {form}")),
                    (None, msg) => err(format!("{msg}; {form}")),
                }
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
            // (shown in the footer: the file's words cannot drive the terminal, nor fill it)
            name: crate::text::excerpt(&f.name.unwrap_or_else(|| {
                Path::new(source_name)
                    .file_stem()
                    .map_or("custom".into(), |s| s.to_string_lossy().into_owned())
            })),
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
        let names: Vec<&str> = Theme::embedded_names().collect();
        // (a misspelt name, not a file: the name it likely means)
        let meant = match path.exists() {
            false => crate::text::nearest(name_or_path, &names)
                .map_or(String::new(), |n| format!("did you mean {n}? ")),
            true => String::new(),
        };
        let text = read::read_text(path, &expect).map_err(|e| ThemeError {
            source_name: path.display().to_string(),
            message: match e {
                ReadError::Io { source, .. } => format!(
                    "cannot read it ({source}); {meant}--theme takes {} or the path of a theme file",
                    names.join(", ")
                ),
                ReadError::Refused { problem, .. } => problem,
            },
        })?;
        Theme::parse(&text, &path.display().to_string())
    }

    /// The theme to start with: the one asked for (which overrides NO_COLOR), else mono under
    /// NO_COLOR, else dark.
    /// Whether this environment asks for no colour: `NO_COLOR` set (no-color.org), or a
    /// terminal type without colours (`xterm-mono`, `linux-m`, `vt100`, `vt220`).
    pub fn colourless() -> bool {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        no_color || std::env::var("TERM").is_ok_and(|t| mono_terminal(&t))
    }

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

    /// Whether its series' colours tell two devices apart (`mono`'s do not).
    pub fn series_apart(&self) -> bool {
        self.series.iter().any(|c| *c != self.series[0])
    }
}

/// A terminal type that shows no colours (terminfo's monochrome entries).
fn mono_terminal(term: &str) -> bool {
    term.ends_with("-mono")
        || term.ends_with("-m")
        || term.starts_with("vt1")
        || term.starts_with("vt2")
}

#[cfg(test)]
mod tests;
