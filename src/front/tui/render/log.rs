//! The events panel (newest first) and the key footer.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

use super::header::clip;
use super::{fit, wrap_text};
use crate::front::tui::app::{App, Level, LogEntry, LogFit, Mode, RunState, View};
use crate::front::tui::theme::Theme;
use crate::front::units::clock;

/// The events, newest first: the overview's panel (`scrolled` None), or the events view from
/// its `scrolled`th newest, its title saying what is above and below; returns its pages as
/// drawn, in entries.
pub fn render_log(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    theme: &Theme,
    scrolled: Option<usize>,
) -> LogFit {
    let skip = scrolled.unwrap_or(0);
    let inner = Block::bordered().inner(area);
    let rows = inner.height as usize;
    let at = |e: &LogEntry| format!("{} ", clock(e.at));
    // an entry's text wraps after its time, under itself
    let text_w = |e: &LogEntry| {
        (inner.width as usize)
            .saturating_sub(at(e).chars().count())
            .max(1)
    };
    let height = |e: &LogEntry| wrap_event(&e.shown(), text_w(e)).len();
    let pages = LogFit {
        shown: app
            .log
            .iter()
            .skip(skip)
            .scan(0, |used, e| {
                *used += height(e);
                (*used <= rows).then_some(())
            })
            .count(),
        above: skip - fill_back(app.log.iter().take(skip).rev().map(height), rows),
        oldest: app.log.len() - fill_back(app.log.iter().rev().map(height), rows),
    };
    let below = app.log.len().saturating_sub(skip + pages.shown);
    let title = match (skip, below) {
        _ if scrolled.is_none() => "newest first ".to_string(),
        (0, 0) => "newest first ".to_string(),
        (0, n) => format!("newest first · {n} older below (↓ PgDn End) "),
        (n, 0) => format!("newest first · {n} newer above (↑ PgUp Home) "),
        (n, m) => format!("newest first · {n} newer above, {m} older below "),
    };
    let block = Block::bordered()
        .border_style(theme.border())
        .title(Line::from(vec![
            Span::styled(" events ", theme.title()),
            Span::styled(title, theme.muted()),
        ]));
    let mut lines: Vec<Line> = Vec::new();
    for e in app.log.iter().skip(skip) {
        if lines.len() >= rows {
            break;
        }
        let style = match e.level {
            Level::Info => theme.base(),
            Level::Warn => theme.badge(theme.warn),
            Level::Error => theme.badge(theme.error),
        };
        let at = at(e);
        let lead_w = at.chars().count();
        let tw = text_w(e);
        let mut parts = wrap_event(&e.shown(), tw);
        let room = rows - lines.len();
        if parts.len() > room {
            // the oldest line shown is cut: say so
            parts.truncate(room);
            let last = parts.pop().unwrap_or_default();
            parts.push(fit(&format!("{last} …"), tw));
        }
        for (i, p) in parts.into_iter().enumerate() {
            let lead = if i == 0 {
                Span::styled(at.clone(), theme.muted())
            } else {
                Span::raw(" ".repeat(lead_w))
            };
            lines.push(Line::from(vec![lead, Span::styled(p, style)]));
        }
    }
    frame.render_widget(Paragraph::new(lines).block(block), area);
    pages
}

/// How many entries of `heights` (taken in turn) fit whole in `rows` (at least one, where
/// there is one: an entry taller than the view is shown cut).
fn fill_back(heights: impl Iterator<Item = usize>, rows: usize) -> usize {
    let mut used = 0;
    let mut n = 0;
    for h in heights {
        used += h;
        if used > rows && n > 0 {
            break;
        }
        n += 1;
        if used >= rows {
            break;
        }
    }
    n
}

/// An event's text in lines of `w`: its " | "-separated parts are kept whole where they fit
/// a line ("val loss 0.1150 acc 97.00%" does not break after "acc").
fn wrap_event(text: &str, w: usize) -> Vec<String> {
    const GLUE: char = '\u{a0}';
    let parts: Vec<&str> = text.split(" | ").collect();
    let last = parts.len() - 1;
    let glued: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let p = if i < last {
                format!("{p} |")
            } else {
                p.to_string()
            };
            if p.chars().count() <= w {
                p.replace(' ', &GLUE.to_string())
            } else {
                glue_figures(&p, GLUE)
            }
        })
        .collect();
    wrap_text(&glued.join(" "), w)
        .into_iter()
        .map(|l| l.replace(GLUE, " "))
        .collect()
}

/// `part` with `glue` for the spaces that hold a figure together: a number and its unit
/// (`12.3 ms`, `45 MiB`), and a count and what it counts (`step 138`, `rank 1`).
fn glue_figures(part: &str, glue: char) -> String {
    const UNITS: &[&str] = &[
        "ms",
        "s",
        "µs",
        "MiB",
        "GiB",
        "KiB",
        "%",
        "x",
        "samples/s",
        "steps",
        "samples",
        "W",
        "MHz",
        "GB/s",
    ];
    const COUNTED: &[&str] = &["step", "epoch", "rank", "batch"];
    let number = |w: &str| w.starts_with(|c: char| c.is_ascii_digit());
    let words: Vec<&str> = part.split(' ').collect();
    let mut out = String::with_capacity(part.len());
    for (i, word) in words.iter().enumerate() {
        if i > 0 {
            let (before, after) = (words[i - 1], *word);
            let unit = number(before) && UNITS.contains(&after.trim_end_matches([',', ';', ')']));
            let counted = number(after) && COUNTED.contains(&before);
            out.push(if unit || counted { glue } else { ' ' });
        }
        out.push_str(word);
    }
    out
}

pub fn render_footer(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let keys: &[(&str, &str)] = if app.disconnected.is_some() {
        &[
            ("r", "reconnect"),
            ("Tab", "view"),
            ("?", "help"),
            ("q", "quit"),
        ]
    } else if app.state.ended() {
        &[
            ("q", "quit"),
            ("Esc", "summary"),
            ("Tab", "view"),
            ("1-9", "device"),
            ("?", "help"),
        ]
    } else if app.state == RunState::Stopping && app.mode == Mode::Local && !app.readonly {
        // nothing changes a run that is finishing its step
        &[
            ("Tab", "view"),
            ("?", "help"),
            ("Ctrl-C", "leave without waiting"),
        ]
    } else if app.watching_file() {
        &[
            ("Tab", "view"),
            ("1-9", "device"),
            ("w", "window"),
            ("?", "help"),
            ("q", "quit"),
        ]
    } else if app.readonly && app.mode == Mode::Attached {
        &[
            ("Tab", "view"),
            ("1-9", "device"),
            ("w", "window"),
            ("?", "help"),
            ("q", "detach"),
        ]
    } else if app.readonly {
        &[
            ("Tab", "view"),
            ("1-9", "device"),
            ("w", "window"),
            ("t", "theme"),
            ("?", "help"),
        ]
    } else {
        // what `p` asks for: the state the run is headed for decides (PAUSING: resume)
        let pause = match app.pending_pause.unwrap_or(app.state == RunState::Paused) {
            true => "resume",
            false => "pause",
        };
        &[
            ("p", pause),
            ("]/[", "batch"),
            ("s", "ckpt"),
            ("1-9", "device"),
            ("Tab", "view"),
            ("w", "window"),
            ("?", "help"),
            ("q", "quit"),
        ]
    };
    let mut lead = Vec::new();
    if app.disconnected.is_some() {
        lead.push(Span::styled(" DISCONNECTED ", theme.badge(theme.error)));
    } else if app.watching_file() {
        lead.push(Span::styled(" VIEW ", theme.badge(theme.warn)));
    } else if app.mode == Mode::Attached && app.readonly {
        lead.push(Span::styled(
            " ATTACHED READ-ONLY ",
            theme.badge(theme.warn),
        ));
    } else if app.mode == Mode::Attached {
        lead.push(Span::styled(" ATTACHED ", theme.badge(theme.accent)));
    } else if app.readonly {
        lead.push(Span::styled(" READ-ONLY ", theme.badge(theme.warn)));
    }
    // the answer to the last key comes first: the keys after it go before it is shortened,
    // all but help (which lists them), reconnecting and leaving (quit, Ctrl-C)
    let mut flash = app.flash.clone();
    let kept: &[&str] = match flash {
        Some(_) => &["?", "q", "r", "Ctrl-C"],
        None => &["?", "q", "p", "r", "Ctrl-C"],
    };
    // what does not fit goes, least needed first: the view's name, then keys from the right,
    // never those kept (cut at the edge, quit would go first)
    let mut keys: Vec<(&str, &str)> = keys.to_vec();
    let mut label = true;
    let line = loop {
        let mut spans = lead.clone();
        if let Some(f) = &flash {
            spans.push(Span::styled(format!(" {f} "), theme.badge(theme.warn)));
            spans.push(Span::styled(" │", theme.muted()));
        }
        for (k, v) in &keys {
            spans.push(Span::styled(format!(" {k}"), theme.badge(theme.accent)));
            spans.push(Span::styled(format!(" {v}"), theme.muted()));
        }
        if label {
            spans.push(Span::styled(
                match (app.view, app.focus.and_then(|i| app.devices.get(i))) {
                    (View::Overview, Some(d)) => format!("  [{}]", d.label),
                    (v, _) => format!("  [{}]", v.label()),
                },
                theme.muted(),
            ));
        }
        let line = Line::from(spans);
        if line.width() <= area.width as usize {
            break line;
        }
        let spare = keys.iter().rposition(|(k, _)| !kept.contains(k));
        match (label, spare) {
            (true, _) => label = false,
            (false, Some(i)) => {
                keys.remove(i);
            }
            (false, None) => match &flash {
                Some(f) if f.chars().count() > 12 => {
                    let over = line.width() - area.width as usize;
                    let keep = f.chars().count().saturating_sub(over).max(12);
                    flash = Some(fit(f, keep));
                }
                _ => break line,
            },
        }
    };
    frame.render_widget(Paragraph::new(clip(line, area.width as usize)), area);
}

#[cfg(test)]
mod tests {
    use super::wrap_event;

    #[test]
    fn an_event_breaks_between_its_parts() {
        let t = "epoch 6/30 done at step 138 | train loss 0.0833 | val loss 0.1150 acc 97.00%";
        assert_eq!(
            wrap_event(t, 72),
            [
                "epoch 6/30 done at step 138 | train loss 0.0833 |",
                "val loss 0.1150 acc 97.00%"
            ]
        );
        assert_eq!(wrap_event(t, 200), [t]);
        // a part longer than a line breaks at its spaces
        let w = wrap_event("straggler: rank 1 is 1.98x slower than rank 0", 20);
        assert_eq!(w, ["straggler: rank 1 is", "1.98x slower than", "rank 0"]);
        // and keeps a figure whole: a number with its unit, a count with what it counts
        let t = "rank 1 waits 12.3 ms per step for its data, 45 MiB queued at step 138";
        let w = wrap_event(t, 16);
        for whole in ["12.3 ms", "45 MiB", "step 138", "rank 1"] {
            assert!(
                w.iter().any(|l| l.contains(whole)),
                "{whole:?} split in {w:?}"
            );
        }
        assert!(w.iter().all(|l| l.chars().count() <= 16), "{w:?}");
    }
}
