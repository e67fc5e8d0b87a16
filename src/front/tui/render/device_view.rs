//! The device view (`1`-`9`): one device's counters, its warnings and errors first, beside
//! its busy chart and its recent step times.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

use super::devices::{mem, sparkline, util_name};
use super::{fit, pct};
use crate::engine::Device;
use crate::front::tui::app::{App, DeviceState};
use crate::front::tui::theme::Theme;

/// Width of the name column in the detail view's list.
const KEY_W: usize = 22;

/// One "name value" line of the detail view in `w` columns, never more: the value in its
/// column where it fits, else right after the name, else after the name cut short (`step (mean
/// of…  10.920 ms`), so that a value stays whole on its name's line rather than breaking in the
/// middle (and the panel's lines are as many as its rows).
fn kv_line<'a>(k: String, v: String, w: usize, theme: &Theme) -> Line<'a> {
    let (kn, vn) = (k.chars().count(), v.chars().count());
    let (k, pad) = match () {
        _ if KEY_W + vn <= w => (k, KEY_W),
        _ if kn + 1 + vn <= w => (k, kn + 1),
        _ if vn + 2 < w => (fit(&k, w - vn - 1), w - vn),
        _ => (String::new(), 0),
    };
    Line::from(vec![
        Span::styled(format!("{k:<pad$}"), theme.muted()),
        Span::raw(fit(&v, w)),
    ])
}

/// A flagged device's recent pace, under the flag's words (which keep its onset's figures, a
/// CPU worker's in CPU time): a straggler's work per step by the clock against the other
/// ranks' median, a degraded device's step.
fn now_beside_flag(app: &App, i: usize, kind: &str) -> Option<String> {
    let work = |d: &DeviceState| d.split().map(|s| s.work() * 1e3);
    let mine = work(app.devices.get(i)?)?;
    match kind {
        "straggler" => {
            let mut others: Vec<f64> = (app.devices.iter().enumerate())
                .filter(|&(r, _)| r != i)
                .filter_map(|(_, d)| work(d))
                .collect();
            others.sort_by(f64::total_cmp);
            let median = *others.get(others.len() / 2)?;
            Some(format!(
                "now, by the clock: work {mine:.1} ms per step, the others' median {median:.1} ms ({:.2}x)",
                mine / median.max(1e-9)
            ))
        }
        "degraded" => Some(format!("now: {mine:.1} ms of work per step")),
        _ => None,
    }
}

/// The narrowest the detail view's charts are drawn: their titles whole.
const CHARTS_W: u16 = 28;

/// Everything known about one device: a metrics list beside its charts.
pub fn render_device_detail(frame: &mut Frame, area: Rect, app: &App, theme: &Theme, i: usize) {
    let Some(d) = app.devices.get(i) else {
        return;
    };
    // the list's room, unless the charts would be left less than their titles need
    let list_w = match area.width {
        w if w >= 42 + CHARTS_W => 42,
        w => w.saturating_sub(CHARTS_W).max(24),
    };
    let [left, right] =
        Layout::horizontal([Constraint::Length(list_w), Constraint::Min(10)]).areas(area);
    let s = &d.sample;
    let ms = |v: f64| format!("{:.3} ms", v * 1e3);
    let mut rows: Vec<(String, String)> = vec![(util_name(app).into(), pct(s.util))];
    if let Some(peak) = app.mfu.peaks.get(i).copied().flatten() {
        rows.push((
            format!("MFU ({})", app.info.precision),
            format!(
                "{} of {:.1} TF",
                crate::front::words::mfu_text(app.device_mfu(i)),
                peak / 1e12
            ),
        ));
    }
    let gpu = matches!(app.info.devices.get(i), Some(Device::Gpu { .. }));
    let counters = [
        ("memory access".into(), pct(s.mem_access)),
        ("memory".into(), mem(s)),
        (
            "temperature".into(),
            s.temp_c.map_or("n/a".into(), |t| format!("{t:.0} C")),
        ),
        (
            "power".into(),
            match (s.power_w, s.power_limit_w) {
                (Some(p), Some(l)) => format!("{p:.0} W of {l:.0} W"),
                (Some(p), None) => format!("{p:.0} W"),
                _ => "n/a".into(),
            },
        ),
    ];
    // (a CPU worker reports none of these: an `n/a` row would take a row of its step times')
    rows.extend((counters.into_iter()).filter(|(_, v): &(String, String)| gpu || v != "n/a"));
    if gpu {
        rows.extend([
            (
                "SM clock".into(),
                match (s.sm_clock_mhz, s.sm_clock_max_mhz) {
                    (Some(c), Some(m)) => format!("{c} of {m} MHz"),
                    (Some(c), None) => format!("{c} MHz"),
                    _ => "n/a".into(),
                },
            ),
            (
                "throttled".into(),
                s.throttle_reasons.map_or("n/a".into(), |r| {
                    let names = crate::observe::nvml::throttle_names(r);
                    if names.is_empty() {
                        "no".into()
                    } else {
                        names.join(", ")
                    }
                }),
            ),
            (
                "PCIe rx / tx".into(),
                match (s.pcie_rx_kbs, s.pcie_tx_kbs) {
                    (Some(rx), Some(tx)) => {
                        format!("{:.2} / {:.2} GB/s", rx as f64 / 1e6, tx as f64 / 1e6)
                    }
                    _ => "n/a".into(),
                },
            ),
            ("SM active".into(), pct(s.sm_active)),
            ("tensor pipes active".into(), pct(s.tensor_active)),
        ]);
    }
    match d.split() {
        Some(sp) => {
            rows.push(("step (recent mean)".into(), ms(sp.total())));
            rows.push(("  compute + optimizer".into(), ms(sp.compute)));
            rows.push(("  waiting for data".into(), ms(sp.data)));
            rows.push(("  all-reduce".into(), ms(sp.comm)));
            rows.push(("  waiting for ranks".into(), ms(sp.wait)));
            if sp.transfer > 0.0 {
                rows.push(("  host transfer".into(), ms(sp.transfer)));
            }
            rows.push(("  other".into(), ms(sp.other)));
            if let Some(l) = sp.loader_share().filter(|_| app.info.loaders_said()) {
                rows.push(("loaders busy".into(), format!("{:.0}%", l * 100.0)));
            }
        }
        None => rows.push(("step".into(), "no steps yet".into())),
    }
    if let Some(l) = &d.last {
        rows.push((
            "last step".into(),
            format!("{} ({} samples)", l.step, l.samples),
        ));
    }
    // what is wrong with the device first, broken into the panel's lines here (so they are
    // counted as drawn): a short screen cuts the counters before these
    let inner_w = left.width.saturating_sub(2).max(1) as usize;
    let mut lines: Vec<Line> = Vec::new();
    let mut say = |text: &str, style| {
        let broken = super::wrap_text(text, inner_w).into_iter();
        lines.extend(broken.map(|l| Line::styled(l, style)));
    };
    if let Some(a) = &d.alert {
        say(a, theme.badge(theme.error));
    }
    for w in &d.warnings {
        say(&w.message, theme.badge(theme.warn));
        // the warning's numbers are those of when it was raised; these are of now
        if let Some(now) = now_beside_flag(app, i, &w.kind) {
            say(&now, theme.muted());
        }
    }
    // lines past the panel's height are cut, the last line left saying how many
    let height = left.height.saturating_sub(2) as usize;
    let hidden = (lines.len() + rows.len() > height && height > 0).then(|| {
        let kept = lines.len().min(height - 1);
        let hidden = lines.len() - kept + rows.len() - (height - 1 - kept);
        lines.truncate(kept);
        rows.truncate(height - 1 - kept);
        hidden
    });
    lines.extend(rows.into_iter().map(|(k, v)| kv_line(k, v, inner_w, theme)));
    if let Some(n) = hidden {
        let text = match format!("… {n} more rows: enlarge the terminal") {
            t if t.chars().count() <= inner_w => t,
            _ => format!("… {n} more rows"),
        };
        lines.push(Line::styled(fit(&text, inner_w), theme.muted()));
    }
    let block = Block::bordered()
        .border_style(theme.border())
        .title(Line::from(vec![
            Span::styled(format!(" {} ", d.label), theme.title()),
            Span::styled(
                format!("device {} of {} ", i + 1, app.devices.len()),
                theme.muted(),
            ),
        ]));
    frame.render_widget(Paragraph::new(lines).block(block), left);
    let [hist, spark] = Layout::vertical([Constraint::Min(6), Constraint::Length(4)]).areas(right);
    super::render_history(frame, hist, app, theme, Some(i));
    let block = Block::bordered()
        .border_style(theme.border())
        .title(Span::styled(" step time, recent steps ", theme.title()));
    let inner = block.inner(spark);
    let v: Vec<f64> = d.step_ms().collect();
    let max = v.iter().cloned().fold(0.0, f64::max);
    let min = v.iter().cloned().fold(f64::INFINITY, f64::min).min(max);
    // (in the narrowest view, the range alone: a unit cut off would misread)
    let range = [
        format!("min {min:.2} ms, max {max:.2} ms"),
        format!("{min:.2}-{max:.2} ms"),
        format!("{min:.0}-{max:.0} ms"),
    ];
    let range = (range.iter())
        .find(|r| r.chars().count() <= inner.width as usize)
        .unwrap_or(&range[2]);
    let text = vec![
        Line::styled(
            sparkline(&v, inner.width as usize),
            theme.fg(theme.series(i)),
        ),
        Line::styled(range.clone(), theme.muted()),
    ];
    frame.render_widget(Paragraph::new(text).block(block), spark);
}
