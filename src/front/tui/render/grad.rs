//! The training view's chart of the mean gradient's norm per step (log scale), with
//! `--clip-grad-norm`'s bound drawn across: a norm that climbs for decades is a run about to
//! diverge, one pinned at the bound a run the clipping trains.

use ratatui::layout::Rect;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Dataset, GraphType, Paragraph};
use ratatui::Frame;

use super::charts::{block, draw_chart, message, thin_peaks};
use crate::front::tui::app::App;
use crate::front::tui::theme::Theme;
use crate::front::units::{bound_value, grad_norm};

pub(super) fn render_grad_norm(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    // (each point the largest of the steps it stands for: a spike shows at any width)
    let all = app.grad_norm.all();
    // (the chart spans the whole series: a thinned point stands at its largest step's x)
    let span = all.first().zip(all.last()).map(|(a, b)| (a.0, b.0));
    let points = thin_peaks(all, 2 * area.width as usize);
    let clip = app.info.clip_grad_norm;
    let newest = app.grad_norm.last().map(|p| p.1);
    let head = title(app, newest, area.width.saturating_sub(2), theme);
    if points.is_empty() {
        let why = match app.last_row {
            Some(_) => "not recorded in this file",
            None => "waiting for the first step…",
        };
        message(frame, area, block(head, theme), why, theme);
        return;
    }
    let peak = points
        .iter()
        .copied()
        .fold(points[0], |m, p| if p.1 > m.1 { p } else { m });
    // too few rows for a chart to read: in words
    if area.height < 7 {
        let mut lines = vec![Line::raw(format!(
            "peak {} at step {:.0}",
            grad_norm(peak.1 as f32),
            peak.0
        ))];
        if let (Some(c), (seen, over)) = (clip, app.clipped) {
            lines.push(Line::styled(
                format!("clipped at {}: {over} of {seen} steps", bound_value(c)),
                theme.muted(),
            ));
        }
        frame.render_widget(Paragraph::new(lines).block(block(head, theme)), area);
        return;
    }
    // a norm of 0 (nothing trained yet) has no place on a log scale
    let data: Vec<(f64, f64)> = (points.iter())
        .filter(|p| p.1 > 0.0)
        .map(|p| (p.0, p.1.log10()))
        .collect();
    let (x0, x1) = span.unwrap_or((points[0].0, points[points.len() - 1].0));
    let x1 = x1.max(x0 + 1.0);
    let bound: Vec<(f64, f64)> = clip.map_or(Vec::new(), |c| {
        let y = f64::from(c).log10();
        vec![(x0, y), (x1, y)]
    });
    let (lo, hi) = (data.iter().chain(&bound))
        .fold((f64::MAX, f64::MIN), |(l, h), p| (l.min(p.1), h.max(p.1)));
    let (lo, hi) = match lo <= hi {
        true => (lo.floor(), hi.ceil().max(lo.floor() + 1.0)),
        false => (-1.0, 1.0),
    };
    let datasets = vec![
        Dataset::default()
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme.fg(theme.accent))
            .data(&data),
        Dataset::default()
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme.fg(theme.warn))
            .data(&bound),
    ];
    let x = ([x0, x1], vec![format!("step {x0:.0}"), format!("{x1:.0}")]);
    let y = ([lo, hi], vec![decade(lo), decade(hi)]);
    draw_chart(frame, area, head, theme, datasets, x, y);
}

/// 10^e as an axis label: `0.001` to `1000` written out, `1e-7` and `1e14` beyond.
fn decade(e: f64) -> String {
    match e.round() as i32 {
        e @ -3..=3 => format!("{}", 10f64.powi(e)),
        e => format!("1e{e}"),
    }
}

/// The chart's title in `w` columns: the newest norm and, under `--clip-grad-norm`, the bound
/// and how many of the steps this screen was told of it clipped (a live screen: every step; a
/// file: its logged steps; an attached screen: those it was sent), shorter where narrow.
fn title<'a>(app: &App, newest: Option<f64>, w: u16, theme: &Theme) -> Vec<Span<'a>> {
    let (seen, over) = app.clipped;
    let clip = |level: usize| {
        let c = bound_value(app.info.clip_grad_norm?);
        Some(match (level, seen) {
            (0, 1..) => format!("· clipped at {c} in {over} of {seen} steps "),
            (1, 1..) => format!(
                "· clip {c}: {:.0}% of {seen} ",
                over as f64 / seen as f64 * 100.0
            ),
            (0..=2, _) => format!("· clip {c} "),
            _ => return None,
        })
    };
    let build = |level: usize| {
        let name = if level == 0 {
            " grad norm (log) "
        } else {
            " grad norm "
        };
        let mut head = vec![Span::styled(name, theme.title())];
        if let Some(g) = newest {
            head.push(Span::styled(
                format!("{} ", grad_norm(g as f32)),
                theme.fg(theme.accent),
            ));
        }
        if let Some(c) = clip(level) {
            head.push(Span::styled(c, theme.fg(theme.warn)));
        }
        head
    };
    let width = |h: &[Span]| h.iter().map(|s| s.content.chars().count()).sum::<usize>();
    (0..4)
        .map(build)
        .find(|h| width(h) <= w as usize + 1)
        .unwrap_or_else(|| build(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_labels_stay_short_at_any_decade() {
        assert_eq!(decade(-3.0), "0.001");
        assert_eq!(decade(0.0), "1");
        assert_eq!(decade(3.0), "1000");
        assert_eq!(decade(14.0), "1e14");
        assert_eq!(decade(-12.0), "1e-12");
    }
}
