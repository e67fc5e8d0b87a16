//! The devices table (one row per device) and what it shares with the device view
//! (`device_view.rs`): the sparkline, the memory figure, the busy column's name.

use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

use super::header::clip;
use super::{fit, fit_end, pct};
use crate::engine::Device;
use crate::front::tui::app::{App, DeviceState, Split};
use crate::front::tui::theme::Theme;
use crate::front::units::bytes;
use crate::observe::monitor::LOADERS_FULL;
use crate::observe::sample::DeviceSample;

const SPARK: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
/// The step-time bar: a block character per part, so it reads without colour too.
const PARTS: [(char, &str); 6] = [
    ('█', "compute"),
    ('▒', "data"),
    ('▓', "comm"),
    ('░', "wait"),
    ('▚', "transfer"),
    ('·', "other"),
];
/// `PARTS`' host transfers (central storage, local SGD): in the legend only where a device
/// has some.
const TRANSFER: usize = 4;

/// The split bar's styles, as `PARTS`: host transfers in the all-reduce's colour (moving the
/// model's numbers too), what the named parts leave muted.
fn part_styles(theme: &Theme) -> [Style; 6] {
    let [compute, data, comm, wait] =
        [theme.compute, theme.data, theme.comm, theme.wait].map(|c| theme.fg(c));
    [compute, data, comm, wait, comm, theme.muted()]
}

/// The name of the utilization column: CPU workers report busy time, GPUs utilization.
pub fn util_name(app: &App) -> &'static str {
    if app
        .info
        .devices
        .iter()
        .all(|d| matches!(d, Device::Cpu { .. }))
    {
        "busy"
    } else {
        "util"
    }
}

/// The last `w` values as a one-line sparkline between their minimum and maximum, the range
/// widened to at least 20% of the maximum so that steady values draw as a steady line and
/// jitter stays small; a spike stands out.
pub fn sparkline(values: &[f64], w: usize) -> String {
    let v = &values[values.len().saturating_sub(w)..];
    let hi = v.iter().cloned().fold(0.0, f64::max);
    let lo = v
        .iter()
        .cloned()
        .fold(f64::INFINITY, f64::min)
        .min(hi * 0.8);
    v.iter()
        .map(|x| {
            if hi <= lo {
                SPARK[0]
            } else {
                SPARK[(((x - lo) / (hi - lo)) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

fn split_bar<'a>(s: Option<Split>, w: usize, theme: &Theme) -> Vec<Span<'a>> {
    let Some(s) = s.filter(|s| s.total() > 0.0) else {
        return vec![Span::styled("·".repeat(w), theme.muted())];
    };
    let parts = [s.compute, s.data, s.comm, s.wait, s.transfer, s.other];
    let styles = part_styles(theme);
    // largest-remainder rounding so the parts always fill exactly w cells
    let exact: Vec<f64> = parts.iter().map(|p| p / s.total() * w as f64).collect();
    let mut cells: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    for &i in order.iter().take(w - cells.iter().sum::<usize>()) {
        cells[i] += 1;
    }
    (0..parts.len())
        .filter(|&i| cells[i] > 0)
        .map(|i| Span::styled(PARTS[i].0.to_string().repeat(cells[i]), styles[i]))
        .collect()
}

/// "25.3/80GiB": the total in whole GiB from 10 GiB, so a GPU's figure fits its 11 columns.
pub(super) fn mem(s: &DeviceSample) -> String {
    match (s.mem_used, s.mem_total) {
        (Some(u), Some(t)) => {
            let total = t as f64 / (1u64 << 30) as f64;
            let total = if total >= 10.0 {
                format!("{total:.0}GiB")
            } else {
                bytes(t).replace(' ', "")
            };
            format!("{}/{total}", bytes(u).replace(" GiB", ""))
        }
        (Some(u), None) => bytes(u),
        _ => "n/a".into(),
    }
}

fn row_style(app: &App, i: usize, d: &DeviceState, theme: &Theme) -> Style {
    if d.alert.is_some() || !d.warnings.is_empty() || app.focus == Some(i) {
        theme.highlight()
    } else {
        Style::default()
    }
}

pub fn render_devices(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let transfers = (app.devices.iter()).any(|d| d.split().is_some_and(|s| s.transfer > 0.0));
    let legend: Vec<Span> = (PARTS.iter().zip(part_styles(theme)).enumerate())
        .filter(|&(i, _)| i != TRANSFER || transfers)
        .map(|(_, p)| p)
        .flat_map(|((c, name), style)| {
            [
                Span::styled(format!(" {c}"), style),
                Span::styled(name.to_string(), theme.muted()),
            ]
        })
        .collect();
    let mut title = vec![
        Span::styled(" devices ", theme.title()),
        Span::styled("step time:", theme.muted()),
    ];
    title.extend(legend);
    title.push(Span::raw(" "));
    let block = Block::bordered()
        .border_style(theme.border())
        .title(Line::from(title));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let w = inner.width as usize;
    // temperature and power from a 110-column panel (as the README says), where a GPU has them
    // (a CPU worker has neither: its step bar keeps the room)
    let roomy = area.width >= 110;
    let gpus = (app.info.devices.iter()).any(|d| matches!(d, Device::Gpu { .. }));
    let wide = roomy && gpus;
    // fixed columns: name (6, or the longest `host/cpuN` and a flag's `!` up to 18 where there
    // is room, else up to 12; a longer one keeps its end: `…ode17/gpu3`), util 6, [mfu 6 for GPUs whose peak is known], mem-access 6, mem 13, [temp 6,
    // power 11], step ms 9
    let longest = app.devices.iter().map(|d| d.label.chars().count()).max();
    let name_w = match longest.unwrap_or(0) {
        l if l > 4 => (l + 2).min(if roomy { 18 } else { 12 }),
        _ => 6,
    };
    let mfu = app.mfu.any();
    // how busy each rank's loader threads are, where they decode pictures batch by batch
    let loader = app.info.loaders_said();
    let fixed = name_w
        + 6
        + 6
        + 13
        + 9
        + if wide { 17 } else { 0 }
        + if mfu { 6 } else { 0 }
        + if loader { 7 } else { 0 };
    let rest = w.saturating_sub(fixed);
    let bar_w = (rest / 2).clamp(8, 32).min(rest);
    let spark_w = rest.saturating_sub(bar_w + 1);
    let mut head = format!("{:<name_w$}{:>5} ", "dev", util_name(app));
    if mfu {
        head += &format!("{:>5} ", "mfu");
    }
    head += &format!("{:>6} {:>11} ", "memacc", "memory");
    if wide {
        head += &format!("{:>5} {:>10} ", "temp", "power");
    }
    if loader {
        head += &format!("{:>6} ", "loader");
    }
    // (the bar's name as its width takes it, so the columns after it keep their places)
    let bar_name = match bar_w {
        15.. => "step time split",
        10.. => "time split",
        _ => "split",
    };
    head += &format!("{bar_name:<bar_w$} {:>8}", "step");
    if spark_w > 0 {
        head += &format!(" {}", fit("recent steps", spark_w));
    }
    let mut lines = vec![Line::styled(fit(&head, w), theme.muted())];
    let shown = (inner.height as usize).saturating_sub(1);
    let n = app.devices.len();
    let cap = if n > shown {
        shown.saturating_sub(1)
    } else {
        n
    };
    for (i, d) in app.devices.iter().enumerate().take(cap) {
        let split = d.split();
        let s = &d.sample;
        // (before the first telemetry sample a counter is not known yet, as samples/s's `–`)
        let sampled = |v: String| if d.sampled { v } else { "–".into() };
        let marked = |colour| {
            Span::styled(
                format!("{:<name_w$}", format!("{}!", fit_end(&d.label, name_w - 2))),
                theme.badge(colour),
            )
        };
        let mut spans = vec![
            match (&d.alert, d.warnings.is_empty()) {
                // a failed worker: marked here, its error in place of its step times
                (Some(_), _) => marked(theme.error),
                // a device with a warning: marked here, the warning itself in the events panel
                (None, false) => marked(theme.warn),
                (None, true) => Span::styled(
                    format!("{:<name_w$}", fit_end(&d.label, name_w - 1)),
                    theme.fg(theme.series(i)),
                ),
            },
            Span::raw(format!("{:>5} ", sampled(pct(s.util)))),
        ];
        if mfu {
            spans.push(Span::raw(format!(
                "{:>5} ",
                crate::front::words::mfu_text(app.device_mfu(i))
            )));
        }
        spans.push(Span::raw(format!(
            "{:>6} {:>11} ",
            sampled(pct(s.mem_access)),
            sampled(mem(s))
        )));
        if wide {
            let temp = s.temp_c.map_or("n/a".into(), |t| format!("{t:.0}C"));
            let power = match (s.power_w, s.power_limit_w) {
                (Some(p), Some(l)) => format!("{p:.0}/{l:.0}W"),
                (Some(p), None) => format!("{p:.0}W"),
                _ => "n/a".into(),
            };
            // a GPU clocked down by power, heat or hardware: its temperature and power in the
            // warning colour (the reasons are in the detail view)
            let throttled = s
                .throttle_reasons
                .is_some_and(|r| !crate::observe::nvml::throttle_names(r).is_empty());
            let style = if throttled {
                theme.fg(theme.warn)
            } else {
                Style::default()
            };
            spans.push(Span::styled(format!("{temp:>5} {power:>10}"), style));
            spans.push(Span::raw(" "));
        }
        if loader {
            let share = split.and_then(|s| s.loader_share());
            // loaders at their limit: the rank waits for its input, or soon will
            let style = match share {
                Some(s) if s >= LOADERS_FULL => theme.fg(theme.warn),
                _ => Style::default(),
            };
            let text = share.map_or("-".into(), |s| format!("{:.0}%", s * 100.0));
            spans.push(Span::styled(format!("{text:>6}"), style));
            spans.push(Span::raw(" "));
        }
        if let Some(a) = &d.alert {
            let used: usize = spans.iter().map(|s| s.width()).sum();
            let room = w.saturating_sub(used);
            spans.push(Span::styled(fit(a, room), theme.badge(theme.error)));
        } else {
            spans.extend(split_bar(split, bar_w, theme));
            let ms = split.map_or("-".into(), |s| crate::front::units::step_secs(s.total()));
            spans.push(Span::raw(format!(" {ms:>8}")));
            if spark_w > 0 {
                let v: Vec<f64> = d.step_ms().collect();
                spans.push(Span::raw(" "));
                spans.push(Span::styled(
                    sparkline(&v, spark_w),
                    theme.fg(theme.series(i)),
                ));
            }
        }
        lines.push(clip(Line::from(spans), w).style(row_style(app, i, d, theme)));
    }
    if cap < n {
        let more = format!(
            "… {} more devices: 1-9 or ← → shows each, or enlarge the terminal",
            n - cap
        );
        let more = if more.chars().count() > w {
            format!("… {} more devices: ← → shows each", n - cap)
        } else {
            more
        };
        lines.push(Line::styled(fit(&more, w), theme.muted()));
    }
    frame.render_widget(Paragraph::new(lines), inner);
}

#[cfg(test)]
mod tests {
    use super::{sparkline, split_bar};
    use crate::front::tui::app::Split;
    use crate::front::tui::theme::Theme;

    #[test]
    fn host_transfers_have_their_own_part_of_the_bar() {
        let s = Split {
            compute: 0.5,
            transfer: 0.3,
            other: 0.2,
            ..Split::default()
        };
        let theme = Theme::embedded("mono").unwrap();
        let bar: String = (split_bar(Some(s), 10, &theme).iter())
            .map(|span| span.content.to_string())
            .collect();
        assert_eq!(bar, "█████▚▚▚··");
    }

    #[test]
    fn a_spike_stands_out_and_steady_steps_draw_flat() {
        assert_eq!(sparkline(&[10.0, 10.0, 10.0, 20.0, 10.0], 5), "▁▁▁█▁");
        // 1% jitter on a 10 ms step stays low on a 20% range
        let s = sparkline(&[10.0, 10.1, 9.9, 10.0], 4);
        assert!(s.chars().all(|c| "▅▆▇█".contains(c)), "{s}");
        assert_eq!(
            sparkline(&[1.0, 2.0, 3.0], 2),
            "▁█",
            "only the last w values"
        );
        assert_eq!(sparkline(&[0.0, 0.0], 2), "▁▁");
    }
}
