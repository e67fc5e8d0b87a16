//! The loss chart (train, smoothed and validation loss on a log scale) and, in the training
//! view, the validation accuracy chart and the per-epoch table.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Dataset, GraphType, Paragraph};
use ratatui::Frame;

use super::charts::{block, draw_chart, message, thin};
use super::fit;
use crate::front::tui::app::{App, EpochPoint, ValPoint};
use crate::front::tui::theme::Theme;
use crate::front::units::{grad_norm, loss_value};

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

/// The loss chart's title in `w` columns: the full one where it fits, else the same with the
/// least important parts dropped first (the gradient's norm, which the training view charts,
/// best accuracy, "(log)", a decimal of each loss, the train loss), so the latest accuracy
/// stays in view on an 80-column screen.
fn loss_title<'a>(
    app: &App,
    train: Option<f64>,
    val: Option<f64>,
    w: usize,
    theme: &Theme,
) -> Vec<Span<'a>> {
    let (last_acc, best_acc) = app.val_accuracy();
    let grad = app.grad_norm.last().map(|p| p.1);
    // (show "(log)", decimals, show train, show best, show the gradient's norm)
    let levels = [
        (true, 4, true, true, true),
        (true, 4, true, true, false),
        (true, 4, true, false, false),
        (false, 4, true, false, false),
        (false, 3, true, false, false),
        (false, 3, false, false, false),
    ];
    let build = |(log, dp, with_train, with_best, with_grad): (bool, usize, bool, bool, bool)| {
        let name = if log { " loss (log) " } else { " loss " };
        let mut head = vec![Span::styled(name, theme.title())];
        if let Some(l) = train.filter(|_| with_train) {
            head.push(Span::styled(
                format!("smoothed train {} ", loss_value(l, dp)),
                theme.fg(theme.accent),
            ));
        }
        if let Some(l) = val {
            head.push(Span::styled(
                format!("val {} ", loss_value(l, dp)),
                theme.fg(theme.warn),
            ));
        }
        if let (Some(a), Some(b)) = (last_acc, best_acc) {
            let best = if with_best {
                format!(" (best {:.1}%)", b * 100.0)
            } else {
                String::new()
            };
            head.push(Span::styled(
                format!("acc {:.1}%{best} ", a * 100.0),
                theme.fg(theme.good),
            ));
        }
        if let Some(g) = grad.filter(|_| with_grad) {
            head.push(Span::styled(
                format!("grad norm {} ", grad_norm(g as f32)),
                theme.muted(),
            ));
        }
        head
    };
    let width = |h: &[Span]| h.iter().map(|s| s.content.chars().count()).sum::<usize>();
    let mut last = Vec::new();
    for l in levels {
        last = build(l);
        // (its closing space keeps it off the corner)
        if width(&last) <= w {
            break;
        }
    }
    last
}

/// The least loss of `series` above 0, the log scale's floor (1e-6 where none is).
fn log_floor(series: &[&[(f64, f64)]]) -> f64 {
    let least = (series.iter().flat_map(|s| s.iter()))
        .map(|p| p.1)
        .filter(|&l| l > 0.0)
        .fold(f64::INFINITY, f64::min);
    if least.is_finite() {
        least
    } else {
        1e-6
    }
}

/// Train loss (raw and smoothed) with validation loss; `full` adds the accuracy chart and the
/// per-epoch table below.
pub fn render_loss(frame: &mut Frame, area: Rect, app: &App, theme: &Theme, full: bool) {
    let n = 2 * area.width as usize;
    let raw = thin(app.loss.all(), n);
    let smooth = thin(app.loss_smooth.all(), n);
    let val: Vec<(f64, f64)> = (app.validations.iter())
        .filter(|v| v.loss.is_finite())
        .map(|v| (v.step as f64, v.loss as f64))
        .collect();
    let head = loss_title(
        app,
        smooth.last().map(|p| p.1),
        val.last().map(|p| p.1),
        area.width.saturating_sub(2) as usize,
        theme,
    );
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
        // losses span decades (2.3 at the start, 0.01 later, 1e-9 on a set learned by heart):
        // plot them on a log scale down to the least of them; a loss of 0 (a softmax that
        // rounded to certainty) on that floor
        let floor = log_floor(&[&raw, &val]);
        let log = |v: &[(f64, f64)]| -> Vec<(f64, f64)> {
            v.iter().map(|p| (p.0, p.1.max(floor).log10())).collect()
        };
        let (raw, smooth, val) = (log(&raw), log(&smooth), log(&val));
        // from the run's first step (the first stored point is an average that moves)
        let mut xb = bounds(&[&raw, &val]).0;
        if let Some((first, _)) = app.loss.first() {
            xb[0] = xb[0].min(first);
        }
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
        // (short from a thousandth down and from 10000 up, so the axis keeps its width as its
        // ends move)
        let decade = |e: f64| match e as i32 {
            e @ 0..=3 => format!("{:.0}", 10f64.powi(e)),
            e @ -2..=-1 => format!("{}", 10f64.powi(e)),
            e => format!("1e{e}"),
        };
        let x = (
            xb,
            vec![format!("step {:.0}", xb[0]), format!("{:.0}", xb[1])],
        );
        let y = ([lo, hi], vec![decade(lo), decade(hi)]);
        draw_chart(frame, chart_area, head, theme, datasets, x, y);
    }
    if let Some(rest) = rest {
        // the gradient's chart where the row has room for three panels (the table's five
        // columns in full); else its newest value is in the loss chart's title
        if rest.width >= WITH_GRAD_CHART {
            let [acc, grad, table] = Layout::horizontal([
                Constraint::Fill(1),
                Constraint::Fill(1),
                Constraint::Length(EPOCHS_WIDTH),
            ])
            .areas(rest);
            render_accuracy(frame, acc, app, theme);
            super::grad::render_grad_norm(frame, grad, app, theme);
            render_epochs(frame, table, app, theme);
        } else {
            let [acc, table] =
                Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                    .areas(rest);
            render_accuracy(frame, acc, app, theme);
            render_epochs(frame, table, app, theme);
        }
    }
}

fn render_accuracy(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let acc: Vec<(f64, f64)> = (app.validations.iter())
        .map(|v| (v.epochs, v.accuracy as f64 * 100.0))
        .collect();
    // (the longest of its names that fits, then cut)
    let room = area.width.saturating_sub(2) as usize;
    let names = [
        " validation accuracy % by epoch ",
        " val accuracy % by epoch ",
        " val acc % by epoch ",
        " val acc % ",
    ];
    let name = (names.iter()).find(|n| n.chars().count() <= room);
    let title = fit(name.unwrap_or(&names[names.len() - 1]), room);
    let head = vec![Span::styled(title, theme.title())];
    if acc.is_empty() {
        message(
            frame,
            area,
            block(head, theme),
            match (app.info.val_samples, app.info.val_every) {
                (0, _) => "none: the run has no validation set",
                (_, Some(_)) => "after the first validation",
                (_, None) => "after the first epoch",
            },
            theme,
        );
        return;
    }
    // too few rows for a chart to read (one row draws every point beside its top label): words
    if area.height < 7 {
        let vals = &app.validations;
        let last = vals[vals.len() - 1];
        let best = vals
            .iter()
            .fold(vals[0], |b, v| match v.accuracy > b.accuracy {
                true => *v,
                false => b,
            });
        let lines = vec![
            Line::raw(format!(
                "{}: {:.1}%",
                at_epochs(&last),
                last.accuracy * 100.0
            )),
            Line::styled(
                format!("best {:.1}% ({})", best.accuracy * 100.0, at_epochs(&best)),
                theme.muted(),
            ),
        ];
        frame.render_widget(Paragraph::new(lines).block(block(head, theme)), area);
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
        vec![epochs_label(acc[0].0), epochs_label(x1)],
    );
    let y = ([lo, 100.0], vec![format!("{lo:.0}"), "100".into()]);
    draw_chart(frame, area, head, theme, datasets, x, y);
}

/// Where a validation was, in epochs trained: `epoch 3` at an epoch's end, `1.40 epochs` within
/// one (`--val-every`).
fn at_epochs(v: &ValPoint) -> String {
    match v.epoch_end {
        true => format!("epoch {:.0}", v.epochs),
        false => format!("{:.2} epochs", v.epochs),
    }
}

/// An epochs axis label: whole epochs as such, a point within one to a tenth.
fn epochs_label(x: f64) -> String {
    match x.fract() == 0.0 {
        true => format!("{x:.0}"),
        false => format!("{x:.1}"),
    }
}

/// Columns the per-epoch table takes in full.
const EPOCHS_WIDTH: u16 = 38;
/// The narrowest row the training view charts the gradient's norm in (two charts of 26).
const WITH_GRAD_CHART: u16 = EPOCHS_WIDTH + 2 * 26;

fn render_epochs(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let b = block(vec![Span::styled(" epochs ", theme.title())], theme);
    let inner = b.inner(area);
    let table = epochs_table(
        &app.epochs,
        inner.width as usize,
        (inner.height as usize).saturating_sub(1),
    );
    let lines: Vec<Line> = (table.into_iter().enumerate())
        .map(|(i, l)| match i {
            0 => Line::styled(l, theme.muted()),
            _ => Line::styled(l, Style::default()),
        })
        .collect();
    frame.render_widget(Paragraph::new(lines).block(b), area);
}

/// The per-epoch table in `w` columns: a header, then the newest `rows` epochs. Every cell in
/// its column's width (the step's as wide as its largest); where the row does not fit, the step column goes first, then the train
/// loss, then the validation loss (the accuracy stays).
fn epochs_table(epochs: &[EpochPoint], w: usize, rows: usize) -> Vec<String> {
    // (name, width, cell)
    type Cell = fn(&EpochPoint) -> String;
    fn opt(v: Option<f32>, f: fn(f32) -> String) -> String {
        v.map_or("-".into(), f)
    }
    let shown = &epochs[epochs.len().saturating_sub(rows)..];
    let step_w = (shown.iter().map(|e| e.step.to_string().len())).fold(6, usize::max);
    let columns: [(&str, usize, Cell); 5] = [
        ("epoch", 5, |e| e.epoch.to_string()),
        ("step", step_w, |e| e.step.to_string()),
        ("train", 7, |e| loss_cell(e.train_loss)),
        ("val", 7, |e| opt(e.val_loss, loss_cell)),
        ("acc", 7, |e| {
            opt(e.val_accuracy, |a| format!("{:.2}%", a * 100.0))
        }),
    ];
    // the columns kept, least needed dropped first
    let keep = [
        [0, 1, 2, 3, 4].as_slice(),
        &[0, 2, 3, 4],
        &[0, 3, 4],
        &[0, 4],
    ]
    .into_iter()
    .find(|k| k.iter().map(|&c| columns[c].1 + 1).sum::<usize>() <= w + 1)
    .unwrap_or(&[0, 4]);
    let line = |cells: &mut dyn Iterator<Item = (usize, String)>| {
        let parts: Vec<String> = cells.map(|(wd, s)| format!("{s:>wd$}")).collect();
        parts.join(" ")
    };
    let mut out = vec![line(
        &mut keep
            .iter()
            .map(|&c| (columns[c].1, columns[c].0.to_string())),
    )];
    for e in shown.iter().rev() {
        out.push(line(
            &mut keep.iter().map(|&c| (columns[c].1, (columns[c].2)(e))),
        ));
    }
    out
}

/// A loss in the table's 7 columns: 4 decimals, one from 100 up, and in scientific notation
/// with fewer digits where that would be wider (`9.9e-10`, `9.7e100`).
fn loss_cell(l: f32) -> String {
    let l = f64::from(l);
    let tries = [
        loss_value(l, 4),
        loss_value(l, if l.abs() >= 100.0 { 1 } else { 4 }),
        format!("{l:.1e}"),
        format!("{l:.0e}"),
    ];
    let fits = tries.iter().find(|s| s.chars().count() <= 7);
    fits.unwrap_or(&tries[3]).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_scale_goes_down_to_the_least_loss() {
        let raw = [(1.0, 2.3), (2.0, 2.3e-9), (3.0, 0.0)];
        let val = [(2.0, 1e-3)];
        assert_eq!(log_floor(&[&raw, &val]), 2.3e-9);
        assert_eq!(log_floor(&[&[(1.0, 0.0)]]), 1e-6);
        assert_eq!(log_floor(&[]), 1e-6);
    }

    #[test]
    fn the_epochs_table_keeps_its_columns_at_any_loss_and_width() {
        let e = |epoch, train, val: Option<f32>, acc| EpochPoint {
            epoch,
            step: epoch * 18,
            train_loss: train,
            val_loss: val,
            val_accuracy: acc,
        };
        let epochs = [
            e(1, 2.3125, Some(0.0437), Some(0.9944)),
            e(1091, 9.95e-10, Some(1.16e-9), Some(1.0)),
            e(1092, 4.2e25, Some(f32::NAN), None),
            e(1093, 123.456, None, Some(0.5)),
        ];
        let full = epochs_table(&epochs, 38, 10);
        assert_eq!(full[0], "epoch   step   train     val     acc");
        for l in &full {
            assert_eq!(l.chars().count(), 36, "{l:?}");
        }
        assert_eq!(full[1], " 1093  19674   123.5       -  50.00%");
        assert_eq!(full[2], " 1092  19656 4.20e25     NaN       -");
        assert_eq!(full[3], " 1091  19638 9.9e-10 1.16e-9 100.00%");
        // a step of more digits widens its column
        let long = [e(1, 0.5, None, None), e(2, 0.5, None, None)].map(|mut p| {
            p.step *= 100_000;
            p
        });
        let long = epochs_table(&long, 40, 10);
        assert_eq!(long[0], "epoch    step   train     val     acc");
        assert_eq!(long[1], "    2 3600000  0.5000       -       -");
        // narrower: the step column goes, then the train loss, then the validation loss;
        // every kept cell whole
        let narrow = epochs_table(&epochs, 30, 10);
        assert_eq!(narrow[0], "epoch   train     val     acc");
        let narrower = epochs_table(&epochs, 22, 10);
        assert_eq!(narrower[0], "epoch     val     acc");
        assert!(narrower[3].ends_with("100.00%"), "{:?}", narrower[3]);
        let least = epochs_table(&epochs, 14, 2);
        assert_eq!(least, ["epoch     acc", " 1093  50.00%", " 1092       -"]);
    }
}
