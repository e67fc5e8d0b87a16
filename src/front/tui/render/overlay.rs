//! What is drawn over the panels: help, the quit popup, the end-of-run summary, and the
//! "terminal too small" notice.

use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};
use ratatui::Frame;

use super::{wrap_text, MIN_HEIGHT, MIN_WIDTH};
use crate::engine::events::Ending;
use crate::front::tui::app::{App, Mode, Popup};
use crate::front::tui::theme::Theme;
use crate::front::units::{si, took};

fn popup(
    frame: &mut Frame,
    area: Rect,
    w: u16,
    h: u16,
    title: &str,
    lines: Vec<Line>,
    theme: &Theme,
) {
    let r = area.centered(
        Constraint::Length(w.min(area.width)),
        Constraint::Length(h.min(area.height)),
    );
    frame.render_widget(Clear, r);
    let block = Block::bordered()
        .border_style(theme.fg(theme.accent))
        .style(theme.base())
        .title(Span::styled(format!(" {title} "), theme.title()));
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        r,
    );
}

pub fn render_help(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    // a small screen gets the same keys in fewer, shorter lines
    let compact = area.height < 20 || area.width < 72;
    // (what q does: leaves at once where nothing is left to stop: a file viewed, a run over,
    // a read-only or disconnected client)
    let quit = match () {
        _ if app.leaves_at_once() => "leave",
        _ if app.mode == Mode::Attached => "detach or stop (asks first)",
        _ => "quit (asks first)",
    };
    // (a run in this process stops with it; one attached to or viewed goes on)
    let suspend = match app.mode {
        Mode::Local => "suspend, training too (fg: back)",
        _ => "suspend this screen (fg: back)",
    };
    let short = [
        ("p, space", "pause / resume"),
        ("] [ + -", "double / halve the batch"),
        ("s", "checkpoint now"),
        ("1-9 ← →, 0 Esc", "one device / all"),
        ("Tab, S-Tab", "next / previous view"),
        ("↑↓ jk PgUp/Dn", "events: scroll; Home, End"),
        ("w", "history window"),
        ("t / r, Ctrl-L", "theme / redraw"),
        ("?, h", "this help"),
        ("q, Ctrl-C", quit),
    ];
    let full = [
        ("p, space", "pause / resume at the next step boundary"),
        ("] or +", "double the batch per replica"),
        ("[ or -", "halve the batch per replica"),
        ("s", "write a checkpoint now"),
        ("1-9", "focus one device"),
        ("← →", "previous / next device (past the 9th too)"),
        ("0, Esc", "all devices; after the run: its summary"),
        (
            "Tab, S-Tab",
            "next / previous view (overview, training, events)",
        ),
        (
            "↑↓ j k PgUp/Dn",
            "events view: scroll (Home: newest, End: oldest)",
        ),
        ("w", "history window: 1 min, 10 min, whole run"),
        ("t", "next theme"),
        ("?, h", "this help"),
        ("r, Ctrl-L", "redraw"),
        ("Ctrl-Z", suspend),
        ("q, Ctrl-C", quit),
    ];
    let keys: &[(&str, &str)] = if compact { &short } else { &full };
    let mut lines: Vec<Line> = keys
        .iter()
        .map(|(k, v)| {
            Line::from(vec![
                Span::styled(format!(" {k:<14} "), theme.badge(theme.accent)),
                Span::raw(format!(" {v}")),
            ])
        })
        .collect();
    if app.state.ended() && !app.watching_file() {
        lines.push(Line::styled(
            "run ended: p ] [ s are off; Esc: its summary; q leaves",
            theme.badge(theme.warn),
        ));
    } else if app.watching_file() {
        lines.push(Line::styled(
            "viewing a metrics file: p ] [ s are disabled; q leaves",
            theme.badge(theme.warn),
        ));
    } else if app.mode == Mode::Attached && app.readonly {
        lines.push(Line::styled(
            "attached read-only: p ] [ s are disabled; q detaches",
            theme.badge(theme.warn),
        ));
    } else if app.mode == Mode::Attached {
        lines.push(Line::raw(match compact {
            true => "attached: q offers detach; r reconnects",
            false => "attached: keys steer the run over its socket; q offers detach; r reconnects a lost connection",
        }));
    } else if app.readonly {
        lines.push(Line::styled(
            "read-only: p ] [ s q are disabled",
            theme.badge(theme.warn),
        ));
    }
    let title = match compact {
        true => "keys · any key closes",
        false => {
            lines.push(Line::styled("any key closes this", theme.muted()));
            "keys"
        }
    };
    let h = lines.len() as u16 + 2;
    popup(frame, area, 70, h, title, lines, theme);
}

/// The quit popup. An attached screen also offers to detach (leave the run as it is: `detach`
/// says what that leaves), which is then what `q` or Ctrl-C again does; a local one stops with
/// a checkpoint. A paused run stops where it is (no step is under way).
pub fn render_quit(
    frame: &mut Frame,
    area: Rect,
    theme: &Theme,
    detach: Option<&str>,
    paused: bool,
    stops: &str,
) {
    let attached = detach.is_some();
    let when = match paused {
        true => "where it is paused",
        false => stops,
    };
    let option = |key: &str, color, text: &str| {
        Line::from(vec![
            Span::styled(format!(" {key} "), theme.badge(color)),
            Span::raw(format!(" {text}")),
        ])
    };
    let mut lines = vec![
        Line::raw(if attached {
            "Detach, or stop training?"
        } else {
            "Stop training?"
        }),
        Line::raw(""),
    ];
    if let Some(leaves) = detach {
        lines.push(option("d", theme.accent, &format!("detach: {leaves}")));
    }
    lines.extend([
        option("s", theme.good, &format!("stop {when}, with a checkpoint")),
        option("k", theme.error, &format!("stop {when}, no checkpoint")),
        option("c", theme.accent, "cancel (Esc)"),
        Line::styled(
            if attached {
                " q or Ctrl-C again: detach"
            } else {
                " q or Ctrl-C again: stop with a checkpoint"
            },
            theme.muted(),
        ),
    ]);
    let h = lines.len() as u16 + 2;
    popup(frame, area, 50, h, "quit", lines, theme);
}

pub fn render_summary(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let Some(s) = &app.summary else {
        return;
    };
    let (head, head_style) = match &s.failed {
        Some(f) => (format!("failed: {f}"), theme.badge(theme.error)),
        // (a resumed run's steps are counted from its checkpoint's: "finished: 400 steps" of a
        // run that trained 272 of them would misread)
        None => (
            match (app.info.start_step, s.ending) {
                (start, Ending::Completed) if start > 0 => format!(
                    "finished at step {}: {} since the resume",
                    s.steps,
                    crate::text::counted(s.steps.saturating_sub(start) as usize, "step")
                ),
                _ => crate::front::words::ended(s.steps, s.ending),
            },
            ratatui::style::Style::default(),
        ),
    };
    let no_accuracy = match app.info.val_samples {
        0 => "n/a (no validation set)",
        _ => "n/a (nothing validated)",
    };
    let mut fields = Vec::new();
    // a resumed run's figures are of its own steps, from the checkpoint's on
    if let Some(p) = &app.info.resumed_from {
        let from = format!("step {} of {}", app.info.start_step, p.display());
        fields.push(("resumed from", from));
    }
    fields.extend([
        (
            "best val accuracy",
            s.best_val(&app.info).unwrap_or(no_accuracy.into()),
        ),
        ("wall time", took(s.wall)),
        (
            "train samples/s",
            s.mean_samples_per_sec.map_or("n/a".into(), si),
        ),
    ]);
    if let (Some(r), Some(b)) = (s.mean_samples_per_sec, app.info.baseline) {
        let (speedup, eff) = crate::engine::calibrate::scaling(r, b, app.info.ranks());
        fields.push((
            "scaling",
            format!("{speedup:.2}x one device ({:.0}% efficiency)", eff * 100.0),
        ));
    }
    fields.push(("step time", step_time(s)));
    if let Some(l) = s.loader_share.filter(|_| app.info.loaders_said()) {
        fields.push(("loaders busy", format!("{:.0}%", l * 100.0)));
    }
    if s.grad_spikes.count > 0 {
        fields.push((
            "gradient spikes",
            format!("{} (their warnings in the events)", s.grad_spikes.count),
        ));
    }
    if let Some(f) = s.flags.text() {
        fields.push(("flagged", f));
    }
    if let Some(p) = &s.last_checkpoint {
        // (a run stopped past its checkpoint: what a resume from it leaves out)
        let saved = crate::engine::checkpoint::step_of(p).filter(|_| s.ending != Ending::Completed);
        let lost = saved.map_or(String::new(), |c| {
            crate::engine::checkpoint::steps_lost(c, s.steps)
        });
        fields.push(("checkpoint", format!("{}{lost}", p.display())));
    }
    if let Some((p, a)) = &s.best_checkpoint {
        let at = crate::front::words::best_checkpoint(p, *a);
        fields.push(("best checkpoint", at));
    }
    let foot = "q quits · Esc shows the panels · Tab other views";
    // as wide as its longest line (the checkpoint path is the one people copy), wrapped
    // where the screen is narrower: values beside their names, a path after a folder
    let widest = (fields.iter().map(|(_, v)| KEY_W + v.chars().count()))
        .chain([head.chars().count(), foot.chars().count()])
        .max()
        .unwrap_or(0) as u16
        + 2;
    let w = widest.clamp(74, area.width.max(74));
    let inner = (w.min(area.width).saturating_sub(2)).max(1) as usize;
    let mut lines: Vec<Line> = wrap_text(&head, inner)
        .into_iter()
        .map(|l| Line::styled(l, head_style))
        .collect();
    for (k, v) in fields {
        lines.extend(field_lines(k, &v, inner, theme));
    }
    lines.extend(
        wrap_text(foot, inner)
            .into_iter()
            .map(|l| Line::styled(l, theme.muted())),
    );
    let h = lines.len() as u16 + 2;
    popup(frame, area, w, h, "run summary", lines, theme);
}

/// Where the ranks' step time went, named as the panels name it.
fn step_time(s: &crate::front::tui::app::Summary) -> String {
    let names = ["compute", "data", "all-reduce", "waiting"];
    crate::front::units::time_shares(s.time_shares, names, " · ")
}

/// The width of the summary's names column.
const KEY_W: usize = 18;

/// A summary field in lines of `inner`: the value beside its name, its continuation lines under
/// it; where the value's column would be too narrow, the value on lines of its own.
fn field_lines(k: &str, v: &str, inner: usize, theme: &Theme) -> Vec<Line<'static>> {
    let key = |k: &str| Span::styled(format!("{k:<KEY_W$}"), theme.muted());
    let beside = inner.saturating_sub(KEY_W);
    if v.chars().count() <= beside || beside >= 24 {
        wrap_parts(v, beside.max(1))
            .into_iter()
            .enumerate()
            .map(|(i, l)| Line::from(vec![key(if i == 0 { k } else { "" }), Span::raw(l)]))
            .collect()
    } else {
        std::iter::once(Line::from(key(k)))
            .chain(wrap_parts(v, inner).into_iter().map(Line::raw))
            .collect()
    }
}

/// `v` in lines of `w`, its ` · `-separated parts kept whole where they fit and the separator
/// left out where a line breaks.
fn wrap_parts(v: &str, w: usize) -> Vec<String> {
    const GLUE: char = '\u{a0}';
    let glued: Vec<String> = (v.split(" · "))
        .map(|p| match p.chars().count() < w {
            true => p.replace(' ', &GLUE.to_string()),
            false => p.to_string(),
        })
        .collect();
    // (the space before a separator glued too: a line never begins with one)
    let lines = wrap_text(&glued.join(&format!("{GLUE}· ")), w);
    let last = lines.len() - 1;
    let parts: Vec<String> = (lines.into_iter().enumerate())
        .map(|(i, l)| {
            let l = l.replace(GLUE, " ");
            let l = match i > 0 {
                true => l.trim_start_matches('·').trim_start(),
                false => &l,
            };
            match i < last {
                true => l.trim_end_matches('·').trim_end().to_string(),
                false => l.to_string(),
            }
        })
        .filter(|l| !l.is_empty())
        .collect();
    match parts.is_empty() {
        true => vec![String::new()],
        false => parts,
    }
}

/// Below the minimum size: the size wanted, and (the quit popup cannot be drawn) its question
/// in one line when it is open.
pub fn render_too_small(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    // (the run's state first: a run that ended says so, and that q now leaves)
    let mut text = vec![
        Line::from(vec![
            super::header::state_span(app, theme),
            Span::styled(
                format!(" terminal too small: need {MIN_WIDTH}x{MIN_HEIGHT}"),
                theme.badge(theme.warn),
            ),
        ]),
        Line::raw(match app.state.ended() {
            true => format!(
                "have {}x{}; enlarge it for the summary, or q leaves",
                area.width, area.height
            ),
            false => format!("have {}x{}; enlarge it or press q", area.width, area.height),
        }),
    ];
    if app.popup == Some(Popup::Quit) {
        text.push(Line::styled(
            if app.mode == Mode::Attached {
                "detach? d or q: detach, s: stop the run, c: cancel"
            } else {
                "stop training? s or q: with a checkpoint, k: without, c: cancel"
            },
            theme.badge(theme.accent),
        ));
    } else if let Some(f) = &app.flash {
        // (the keys still act: the answer to the last one, as the footer would say it)
        text.push(Line::styled(f.clone(), theme.badge(theme.warn)));
    }
    frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
}

#[cfg(test)]
mod tests {
    use super::wrap_parts;

    #[test]
    fn parts_break_whole_without_a_separator_at_either_end_of_a_line() {
        let v = "compute 54% · data 1% · all-reduce 17% · waiting 27%";
        assert_eq!(
            wrap_parts(v, 40),
            ["compute 54% · data 1% · all-reduce 17%", "waiting 27%"]
        );
        assert_eq!(wrap_parts(v, 80), [v]);
        for w in 12..60 {
            for l in wrap_parts(v, w) {
                assert!(l.chars().count() <= w, "{l:?} at {w}");
                assert!(!l.starts_with('·') && !l.ends_with('·'), "{l:?} at {w}");
            }
        }
    }
}
