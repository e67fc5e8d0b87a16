//! History charts (utilization and memory-access time, one line per device) and the loss /
//! accuracy charts.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph};
use ratatui::Frame;

use super::{clock, fit};
use crate::engine::Device;
use crate::front::tui::app::App;
use crate::front::tui::theme::Theme;
use crate::observe::history::History;

fn block<'a>(title: Vec<Span<'a>>, theme: &Theme) -> Block<'a> {
    Block::bordered()
        .border_style(theme.border())
        .title(Line::from(title))
}

fn message(frame: &mut Frame, area: Rect, b: Block, text: &str, theme: &Theme) {
    let w = b.inner(area).width as usize;
    frame.render_widget(
        Paragraph::new(Line::styled(fit(text, w), theme.muted())).block(b),
        area,
    );
}

/// One chart of a per-device percentage history.
fn percent_chart(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    theme: &Theme,
    title: &str,
    series: &[(usize, &History)],
    missing: &str,
) {
    let now = app.now.as_secs_f64();
    let from = app
        .window
        .span()
        .map_or(0.0, |s| (now - s.as_secs_f64()).max(0.0));
    let head = vec![
        Span::styled(format!(" {title} "), theme.title()),
        Span::styled(format!("{} · w ", app.window.label()), theme.muted()),
    ];
    let data: Vec<(usize, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(i, h)| (*i, thin(h.since(from), 2 * area.width as usize)))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    if data.is_empty() {
        let text = if series.iter().all(|(_, h)| h.is_empty()) && app.now.as_secs() >= 2 {
            missing
        } else {
            "waiting for the first sample…"
        };
        message(frame, area, block(head, theme), text, theme);
        return;
    }
    let datasets: Vec<Dataset> = data
        .iter()
        .map(|(i, v)| {
            Dataset::default()
                .name(app.devices[*i].label.clone())
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(theme.fg(theme.series(*i)))
                .data(v)
        })
        .collect();
    let x = (
        [from, now.max(from + 1.0)],
        vec![clock_s(from), clock_s(now)],
    );
    let y = ([0.0, 100.0], vec!["0".into(), "50".into(), "100".into()]);
    draw_chart(frame, area, head, theme, datasets, x, y);
}

/// An axis: its bounds and its labels, spread evenly from the low end to the high end.
type AxisSpec = ([f64; 2], Vec<String>);

/// A chart in the house style: bordered with `head`, no legend, muted axes.
fn draw_chart(
    frame: &mut Frame,
    area: Rect,
    head: Vec<Span>,
    theme: &Theme,
    datasets: Vec<Dataset>,
    x: AxisSpec,
    y: AxisSpec,
) {
    let axis = |(bounds, labels): AxisSpec| {
        Axis::default()
            .bounds(bounds)
            .labels(labels)
            .style(theme.muted())
    };
    let chart = Chart::new(datasets)
        .block(block(head, theme))
        .style(theme.base())
        .legend_position(None)
        .x_axis(axis(x))
        .y_axis(axis(y));
    frame.render_widget(chart, area);
}

/// At most `n` evenly spaced points of `v` (always the last): a braille chart cannot show more
/// than two per column, and drawing fewer keeps a frame cheap.
fn thin(v: Vec<(f64, f64)>, n: usize) -> Vec<(f64, f64)> {
    if v.len() <= n || n < 2 {
        return v;
    }
    let step = (v.len() - 1) as f64 / (n - 1) as f64;
    (0..n)
        .map(|i| v[((i as f64 * step).round() as usize).min(v.len() - 1)])
        .collect()
}

fn clock_s(s: f64) -> String {
    clock(std::time::Duration::from_secs_f64(s.max(0.0)))
}

/// Utilization history (and memory-access time where there is room), for every device or
/// only device `only`.
pub fn render_history(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    theme: &Theme,
    only: Option<usize>,
) {
    let pick = |f: fn(&crate::front::tui::app::DeviceState) -> &History| -> Vec<(usize, &History)> {
        app.devices
            .iter()
            .enumerate()
            .filter(|(i, _)| only.is_none_or(|o| o == *i))
            .map(|(i, d)| (i, f(d)))
            .collect()
    };
    let util = pick(|d| &d.util);
    let macc = pick(|d| &d.mem_access);
    let util_title = format!("{} % per device", super::devices::util_name(app));
    let no_util = "utilization: n/a on these devices";
    // CPU workers have no memory-access counter: say so in one line instead of a chart
    let cpu_only = app
        .info
        .devices
        .iter()
        .enumerate()
        .filter(|(i, _)| only.is_none_or(|o| o == *i))
        .all(|(_, d)| matches!(d, Device::Cpu { .. }));
    let macc_title = "memory-access time %";
    if cpu_only && area.height >= 10 {
        let [a, b] = Layout::vertical([Constraint::Min(6), Constraint::Length(3)]).areas(area);
        percent_chart(frame, a, app, theme, &util_title, &util, no_util);
        let head = vec![Span::styled(format!(" {macc_title} "), theme.title())];
        let text = "n/a: CPU workers have no memory-access counter (GPUs report it via NVML)";
        message(frame, b, block(head, theme), text, theme);
    } else if !cpu_only && area.height >= 14 {
        let [a, b] =
            Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
        let no_macc = "memory-access time: n/a on these devices";
        percent_chart(frame, a, app, theme, &util_title, &util, no_util);
        percent_chart(frame, b, app, theme, macc_title, &macc, no_macc);
    } else {
        percent_chart(frame, area, app, theme, &util_title, &util, no_util);
    }
}

fn bounds(points: &[&[(f64, f64)]]) -> ([f64; 2], [f64; 2]) {
    let mut x = [f64::INFINITY, f64::NEG_INFINITY];
    let mut y_max = f64::NEG_INFINITY;
    for p in points.iter().flat_map(|s| s.iter()) {
        x = [x[0].min(p.0), x[1].max(p.0)];
        y_max = y_max.max(p.1);
    }
    if !x[0].is_finite() {
        return ([0.0, 1.0], [0.0, 1.0]);
    }
    if x[1] <= x[0] {
        x[1] = x[0] + 1.0;
    }
    ([x[0], x[1]], [0.0, (y_max * 1.05).max(1e-3)])
}

/// Train loss (raw and smoothed) with validation loss; `full` adds the accuracy chart and the
/// per-epoch table below.
pub fn render_loss(frame: &mut Frame, area: Rect, app: &App, theme: &Theme, full: bool) {
    let n = 2 * area.width as usize;
    let raw = thin(app.loss.all(), n);
    let smooth = thin(app.loss_smooth.all(), n);
    let val: Vec<(f64, f64)> = app
        .epochs
        .iter()
        .filter_map(|e| e.val_loss.map(|l| (e.step as f64, l as f64)))
        .collect();
    let mut head = vec![Span::styled(" loss (log) ", theme.title())];
    if let Some((_, l)) = smooth.last() {
        head.push(Span::styled(
            format!("train {l:.4} "),
            theme.fg(theme.accent),
        ));
    }
    if let Some((_, l)) = val.last() {
        head.push(Span::styled(format!("val {l:.4} "), theme.fg(theme.warn)));
    }
    let (last_acc, best_acc) = app.val_accuracy();
    if let (Some(a), Some(b)) = (last_acc, best_acc) {
        head.push(Span::styled(
            format!("acc {:.1}% (best {:.1}%) ", a * 100.0, b * 100.0),
            theme.fg(theme.good),
        ));
    }
    let (chart_area, rest) = if full {
        let [a, b] =
            Layout::vertical([Constraint::Percentage(60), Constraint::Percentage(40)]).areas(area);
        (a, Some(b))
    } else {
        (area, None)
    };
    if raw.is_empty() {
        message(
            frame,
            chart_area,
            block(head, theme),
            "waiting for the first step…",
            theme,
        );
    } else {
        // losses span decades (2.3 at the start, 0.01 later): plot them on a log scale
        let log = |v: &[(f64, f64)]| -> Vec<(f64, f64)> {
            v.iter().map(|p| (p.0, p.1.max(1e-6).log10())).collect()
        };
        let (raw, smooth, val) = (log(&raw), log(&smooth), log(&val));
        let xb = bounds(&[&raw, &val]).0;
        let (lo, hi) = raw
            .iter()
            .chain(&val)
            .fold((f64::MAX, f64::MIN), |(l, h), p| (l.min(p.1), h.max(p.1)));
        let (lo, hi) = (lo.floor(), hi.ceil().max(lo.floor() + 1.0));
        // few epochs: a dot each; many: a line, so they do not hide the train curve
        let val_marker = if val.len() * 3 <= chart_area.width as usize {
            Marker::Dot
        } else {
            Marker::Braille
        };
        let datasets = vec![
            Dataset::default()
                .name("train")
                .marker(Marker::Braille)
                .graph_type(GraphType::Scatter)
                .style(theme.muted())
                .data(&raw),
            Dataset::default()
                .name("smoothed")
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(theme.fg(theme.accent))
                .data(&smooth),
            Dataset::default()
                .name("val")
                .marker(val_marker)
                .graph_type(GraphType::Scatter)
                .style(theme.fg(theme.warn))
                .data(&val),
        ];
        let decade = |e: f64| {
            let v = 10f64.powf(e);
            if v >= 1.0 {
                format!("{v:.0}")
            } else {
                format!("{v}")
            }
        };
        let x = (
            xb,
            vec![format!("step {:.0}", xb[0]), format!("{:.0}", xb[1])],
        );
        let y = ([lo, hi], vec![decade(lo), decade(hi)]);
        draw_chart(frame, chart_area, head, theme, datasets, x, y);
    }
    if let Some(rest) = rest {
        let [acc, table] =
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                .areas(rest);
        render_accuracy(frame, acc, app, theme);
        render_epochs(frame, table, app, theme);
    }
}

fn render_accuracy(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let acc: Vec<(f64, f64)> = app
        .epochs
        .iter()
        .filter_map(|e| e.val_accuracy.map(|a| (e.epoch as f64, a as f64 * 100.0)))
        .collect();
    let head = vec![Span::styled(
        " validation accuracy % by epoch ",
        theme.title(),
    )];
    if acc.is_empty() {
        message(
            frame,
            area,
            block(head, theme),
            "after the first epoch",
            theme,
        );
        return;
    }
    let lo = acc
        .iter()
        .map(|p| p.1)
        .fold(100.0, f64::min)
        .floor()
        .min(99.0);
    let x1 = acc.last().map_or(1.0, |p| p.0).max(acc[0].0 + 1.0);
    let datasets = vec![Dataset::default()
        .marker(Marker::Braille)
        .graph_type(GraphType::Line)
        .style(theme.fg(theme.good))
        .data(&acc)];
    let x = (
        [acc[0].0, x1],
        vec![format!("{:.0}", acc[0].0), format!("{x1:.0}")],
    );
    let y = ([lo, 100.0], vec![format!("{lo:.0}"), "100".into()]);
    draw_chart(frame, area, head, theme, datasets, x, y);
}

fn render_epochs(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let b = block(vec![Span::styled(" epochs ", theme.title())], theme);
    let rows = b.inner(area).height as usize;
    let mut lines = vec![Line::styled(
        format!(
            "{:>5} {:>6} {:>7} {:>7} {:>7}",
            "epoch", "step", "train", "val", "acc"
        ),
        theme.muted(),
    )];
    let opt = |v: Option<f32>, f: fn(f32) -> String| v.map_or("-".into(), f);
    for e in app.epochs.iter().rev().take(rows.saturating_sub(1)) {
        lines.push(Line::styled(
            format!(
                "{:>5} {:>6} {:>7.4} {:>7} {:>7}",
                e.epoch,
                e.step,
                e.train_loss,
                opt(e.val_loss, |l| format!("{l:.4}")),
                opt(e.val_accuracy, |a| format!("{:.2}%", a * 100.0))
            ),
            Style::default(),
        ));
    }
    frame.render_widget(Paragraph::new(lines).block(b), area);
}

#[cfg(test)]
mod tests {
    use super::thin;

    #[test]
    fn thinning_keeps_the_ends_and_the_spacing() {
        let v: Vec<(f64, f64)> = (0..1001).map(|i| (i as f64, 0.0)).collect();
        let t = thin(v.clone(), 11);
        assert_eq!(t.len(), 11);
        assert_eq!((t[0].0, t[1].0, t[10].0), (0.0, 100.0, 1000.0));
        assert_eq!(thin(v[..5].to_vec(), 11).len(), 5);
    }
}
