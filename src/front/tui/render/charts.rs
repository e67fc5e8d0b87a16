//! History charts (utilization and memory-access time, one line per device), and the chart
//! helpers the loss charts share.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::symbols::Marker;

/// Each device's mark where colours do not tell devices apart, and how the legend shows it.
const MARKS: [(Marker, &str); 3] = [
    (Marker::Braille, "⠒"),
    (Marker::Dot, "•"),
    (Marker::Block, "█"),
];
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph};
use ratatui::Frame;

use super::{fit, wrap_text};
use crate::engine::Device;
use crate::front::tui::app::App;
use crate::front::tui::theme::Theme;
use crate::front::units::clock;
use crate::observe::history::History;

pub(super) fn block<'a>(title: Vec<Span<'a>>, theme: &Theme) -> Block<'a> {
    Block::bordered()
        .border_style(theme.border())
        .title(Line::from(title))
}

pub(super) fn message(frame: &mut Frame, area: Rect, b: Block, text: &str, theme: &Theme) {
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
    let head_of = |title: String| {
        vec![
            Span::styled(format!(" {title} "), theme.title()),
            Span::styled(format!("{} · w ", app.window.label()), theme.muted()),
        ]
    };
    let mut head = head_of(match series.len() {
        1 => title.to_string(),
        _ => format!("{title} per device"),
    });
    // which line is which device, in their colours (where the theme has one colour, `mono`:
    // in their own marks), where the title has the room (the legend says "per device" by itself)
    let marks = !theme.series_apart();
    if series.len() > 1 {
        let legend: Vec<Span> = series
            .iter()
            .map(|(i, _)| {
                let mark = match marks {
                    true => format!(" {}", MARKS[*i % MARKS.len()].1),
                    false => String::new(),
                };
                Span::styled(
                    format!("{}{mark} ", app.devices[*i].label),
                    theme.fg(theme.series(*i)),
                )
            })
            .collect();
        let width = |spans: &[Span]| {
            spans
                .iter()
                .map(|s| s.content.chars().count())
                .sum::<usize>()
        };
        let fits = |head: &[Span]| width(head) + width(&legend) + 2 <= area.width as usize;
        let short = head_of(title.to_string());
        if fits(&head) {
            head.extend(legend);
        } else if fits(&short) {
            head = short;
            head.extend(legend);
        }
    }
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
                .marker(match marks {
                    true => MARKS[*i % MARKS.len()].0,
                    false => Marker::Braille,
                })
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
pub(super) type AxisSpec = ([f64; 2], Vec<String>);

/// A chart in the house style: bordered with `head`, no legend, muted axes.
pub(super) fn draw_chart(
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
/// `v` in at most `n` points, each the largest of its run of neighbours: a spike stays in
/// whatever the chart's width.
pub(super) fn thin_peaks(v: Vec<(f64, f64)>, n: usize) -> Vec<(f64, f64)> {
    if v.len() <= n || n < 2 {
        return v;
    }
    let per = v.len().div_ceil(n);
    v.chunks(per)
        .map(|c| {
            c.iter()
                .copied()
                .fold(c[0], |m, p| if p.1 > m.1 { p } else { m })
        })
        .collect()
}

pub(super) fn thin(v: Vec<(f64, f64)>, n: usize) -> Vec<(f64, f64)> {
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
    let util_title = format!("{} %", super::devices::util_name(app));
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
    // one device's view has the room to say it in full; the overview says it short, on a line
    let text = match only {
        Some(_) => "n/a: CPU workers have no memory-access counter (GPUs report it via NVML)",
        None => "n/a: CPU workers have no such counter",
    };
    let wrapped = wrap_text(text, area.width.saturating_sub(2) as usize);
    let text_h = if only.is_some() {
        wrapped.len() as u16
    } else {
        1
    };
    if cpu_only && area.height >= 9 + text_h {
        let [a, b] =
            Layout::vertical([Constraint::Min(6), Constraint::Length(2 + text_h)]).areas(area);
        percent_chart(frame, a, app, theme, &util_title, &util, no_util);
        let head = vec![Span::styled(format!(" {macc_title} "), theme.title())];
        if text_h > 1 {
            let lines: Vec<Line> = wrapped
                .into_iter()
                .map(|l| Line::styled(l, theme.muted()))
                .collect();
            frame.render_widget(Paragraph::new(lines).block(block(head, theme)), b);
        } else {
            message(frame, b, block(head, theme), text, theme);
        }
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

#[cfg(test)]
mod tests {
    use super::{thin, thin_peaks};

    #[test]
    fn thinning_by_peaks_keeps_a_spike_at_any_width() {
        let v: Vec<(f64, f64)> = (0..1001)
            .map(|i| (i as f64, if i == 517 { 9.0 } else { 1.0 }))
            .collect();
        for n in [7, 40, 333] {
            let t = thin_peaks(v.clone(), n);
            assert!(t.len() <= n, "{n}: {}", t.len());
            assert!(t.contains(&(517.0, 9.0)), "{n}");
        }
        assert_eq!(thin_peaks(v[..5].to_vec(), 11).len(), 5);
    }

    #[test]
    fn thinning_keeps_the_ends_and_the_spacing() {
        let v: Vec<(f64, f64)> = (0..1001).map(|i| (i as f64, 0.0)).collect();
        let t = thin(v.clone(), 11);
        assert_eq!(t.len(), 11);
        assert_eq!((t[0].0, t[1].0, t[10].0), (0.0, 100.0, 1000.0));
        assert_eq!(thin(v[..5].to_vec(), 11).len(), 5);
    }
}
