//! The events panel (newest first) and the key footer.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

use super::header::clip;
use super::{clock, fit};
use crate::front::tui::app::{App, Level, RunState};
use crate::front::tui::theme::Theme;

pub fn render_log(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let block = Block::bordered()
        .border_style(theme.border())
        .title(Line::from(vec![
            Span::styled(" events ", theme.title()),
            Span::styled("newest first ", theme.muted()),
        ]));
    let inner = block.inner(area);
    let w = inner.width as usize;
    let lines: Vec<Line> = app
        .log
        .iter()
        .take(inner.height as usize)
        .map(|e| {
            let style = match e.level {
                Level::Info => theme.base(),
                Level::Warn => theme.badge(theme.warn),
                Level::Error => theme.badge(theme.error),
            };
            Line::from(vec![
                Span::styled(format!("{} ", clock(e.at)), theme.muted()),
                Span::styled(fit(&e.text, w.saturating_sub(6)), style),
            ])
        })
        .collect();
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

pub fn render_footer(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let keys: &[(&str, &str)] = if app.state.ended() {
        &[
            ("q", "quit"),
            ("Tab", "view"),
            ("1-9", "device"),
            ("?", "help"),
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
        let pause = if app.state == RunState::Paused {
            "resume"
        } else {
            "pause"
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
    let mut spans = Vec::new();
    if app.readonly {
        spans.push(Span::styled(" READ-ONLY ", theme.badge(theme.warn)));
    }
    // the answer to the last key comes first: the keys after it may be cut, it may not
    if let Some(f) = &app.flash {
        spans.push(Span::styled(format!(" {f} "), theme.badge(theme.warn)));
        spans.push(Span::styled(" │", theme.muted()));
    }
    for (k, v) in keys {
        spans.push(Span::styled(format!(" {k}"), theme.badge(theme.accent)));
        spans.push(Span::styled(format!(" {v}"), theme.muted()));
    }
    spans.push(Span::styled(
        format!("  [{}]", app.view.label()),
        theme.muted(),
    ));
    frame.render_widget(
        Paragraph::new(clip(Line::from(spans), area.width as usize)),
        area,
    );
}
