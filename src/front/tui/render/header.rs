//! The three header lines: what runs where, how far it is, and how fast.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::fit;
use crate::config::Budget;
use crate::engine::events::Ending;
use crate::engine::{Device, RunInfo};
use crate::front::tui::app::{App, RunState, Silent};
use crate::front::tui::theme::Theme;
use crate::front::units::{bytes, clock, si};

pub fn state_span<'a>(app: &App, theme: &Theme) -> Span<'a> {
    // a run not ended that this screen no longer reaches
    let lost = match () {
        _ if app.state.ended() => None,
        _ if app.disconnected.is_some() => Some("DISCONNECTED"),
        _ => app.silent.map(|s| match s {
            Silent::Killed => "KILLED",
            Silent::NoEnd => "NO END",
            Silent::NotResponding => "NOT RESPONDING",
            Silent::Suspended => "SUSPENDED",
            Silent::Damaged => "DAMAGED",
        }),
    };
    if let Some(label) = lost {
        return Span::styled(format!(" {label} "), theme.badge(theme.error));
    }
    let label = match (app.state, app.pending_pause) {
        (RunState::Running, Some(true)) => "PAUSING",
        (RunState::Paused, Some(false)) => "RESUMING",
        // (a validation begun after the newest step shown: its rows stop meanwhile)
        (RunState::Running, None) if app.validating_a_while() => "VALIDATING",
        // ended before its budget: by a stop (a key, a signal, a socket's control)
        (RunState::Done, _) => match app.summary.as_ref().map(|s| s.ending) {
            Some(Ending::Stopped) => "STOPPED",
            Some(Ending::Quit) => "QUIT",
            _ => "DONE",
        },
        (state, _) => state.label(),
    };
    let color = match app.state {
        RunState::Starting => theme.muted,
        RunState::Running if app.pending_pause != Some(true) => theme.good,
        RunState::Running | RunState::Paused | RunState::Stopping => theme.warn,
        RunState::Done => theme.accent,
        RunState::Failed => theme.error,
    };
    Span::styled(format!(" {label} "), theme.badge(color))
}

/// "cpu0", "cpu0 cpu1", "8 CPU workers", or with GPUs what they compute in: "gpu0 (tf32)",
/// "8 GPUs on 2 hosts (tf32)".
fn device_summary(info: &RunInfo) -> String {
    let devices = &info.devices;
    let cpus = devices
        .iter()
        .filter(|d| matches!(d, Device::Cpu { .. }))
        .count();
    let precision = match cpus < devices.len() {
        true => format!(" ({})", info.precision),
        false => String::new(),
    };
    if devices.len() <= 2 {
        let labels: Vec<String> = (0..devices.len()).map(|r| info.rank_label(r)).collect();
        return labels.join(" ") + &precision;
    }
    let hosts = match info.host_count() {
        1 => String::new(),
        h => format!(" on {h} hosts"),
    };
    let what = match (cpus, devices.len() - cpus) {
        (c, 0) => format!("{c} CPU workers{hosts}"),
        (0, g) => format!("{g} GPUs{hosts}"),
        (c, g) => format!("{g} GPUs + {c} CPU workers{hosts}"),
    };
    what + &precision
}

/// The characters of the data's description the first header line keeps room for, before the
/// model's shapes (`images pets: 4…`).
const DATA_SEEN: usize = 12;

/// The characters of the model the first header line keeps however narrow the screen.
const MODEL_SEEN: usize = 16;

fn sep<'a>(theme: &Theme) -> Span<'a> {
    Span::styled(" │ ", theme.muted())
}

pub fn render_header(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let w = area.width as usize;
    let info = &app.info;
    let devs = device_summary(info);
    // (a long --name is cut so that the run's state always shows beside it)
    let state = state_span(app, theme);
    // (and to a third of the line where longer: a default name, data and model, may be a
    // whole layer list, and the model, devices and data follow it)
    let room = (w.saturating_sub(state.content.chars().count() + 2).max(1)).min((w / 3).max(16));
    // (the model's shapes, `resnet20 (3x32x32-16x32x32-...)`, give way where they would
    // leave the data's name no room on a narrow screen: the --model alone then)
    let name = super::fit(&crate::text::printable(&info.name), room);
    let before_data = [name.as_str(), &state.content, &info.model, &devs]
        .iter()
        .map(|s| s.chars().count())
        .sum::<usize>()
        + 2
        + 3 * 3;
    let data_room = info.data.chars().count().min(DATA_SEEN);
    let model = match info.model.split_once(" (") {
        Some((alone, _)) if before_data + data_room > w => alone.to_string(),
        _ => info.model.clone(),
    };
    // (a long layer list, `conv16k3p1,bn,relu,...`, is cut to leave the devices and the
    // data's name their room: the outline (Tab) and the log say it whole)
    let others = before_data - info.model.chars().count() + data_room;
    let model = super::fit(&model, w.saturating_sub(others).max(MODEL_SEEN));
    let line1 = Line::from(vec![
        // (a file's or a socket's name: shown, never obeyed)
        Span::styled(format!(" {name} "), theme.title()),
        state,
        sep(theme),
        Span::raw(model),
        sep(theme),
        Span::raw(devs),
        sep(theme),
        Span::styled(info.data.clone(), theme.muted()),
    ]);

    let row = app.last_row.as_ref();
    let step = app.step();
    // the step row's, or the one after the newest epoch done where it is newer (a file's step
    // rows are every --log-every steps: the last one can be an epoch behind)
    let after_done = (app.epochs.last()).map(|e| e.epoch + u64::from(step > e.step));
    let epoch = row
        .map_or(info.start_epoch + 1, |r| r.epoch)
        .max(after_done.unwrap_or(0));
    let position = match info.budget {
        Budget::Epochs(e) => format!(" epoch {epoch}/{e} · step {step} "),
        Budget::Steps(s) => format!(" step {step}/{s} · epoch {epoch} "),
    };
    let progress = if app.state == RunState::Done
        && app.summary.as_ref().is_some_and(|s| !s.ending.early())
    {
        1.0
    } else {
        // (the newest step row, or the steps and epochs done since: a run that logs few
        // steps has its epochs and checkpoints in between)
        let since = match info.budget {
            Budget::Steps(s) => step as f64 / s.max(1) as f64,
            Budget::Epochs(e) => app.epochs.last().map_or(0, |d| d.epoch) as f64 / e.max(1) as f64,
        };
        row.map_or(0.0, |r| r.progress).max(since).clamp(0.0, 1.0)
    };
    let eta = match app.eta {
        Some(e) if app.heard_running() => format!(" · ETA {}", clock(e)),
        _ => String::new(),
    };
    let tail = format!(" {:>3.0}% · {}{eta}", progress * 100.0, clock(app.now));
    // a run not ended keeps room for its ETA, known or not: the bar does not jump when it comes
    // or goes with a pause
    let eta_room = match app.state.ended() {
        true => 0,
        false => " · ETA 00:00"
            .chars()
            .count()
            .saturating_sub(eta.chars().count()),
    };
    let bar_w = w
        .saturating_sub(position.chars().count() + tail.chars().count() + eta_room + 2)
        .min(40);
    let filled = (progress * bar_w as f64).round() as usize;
    let line2 = Line::from(vec![
        Span::raw(position),
        Span::styled("━".repeat(filled), theme.fg(theme.accent)),
        Span::styled("─".repeat(bar_w - filled), theme.muted()),
        Span::raw(tail),
    ]);

    let ranks = info.ranks();
    let accum = if info.grad_accum > 1 {
        format!("×{}", info.grad_accum)
    } else {
        String::new()
    };
    let per_rank = match &app.split {
        Some(sizes) => crate::front::words::per_rank(sizes),
        None => format!("{}×{ranks}", app.per_replica),
    };
    // (a batch cut to a small split takes all of it, not the product)
    let global =
        crate::config::step_samples(app.per_replica, ranks, info.grad_accum, info.train_samples);
    let mut l3 = vec![Span::raw(format!(" batch {per_rank}{accum} = {global}"))];
    if let Some((from, to)) = app.pending_batch {
        l3.push(Span::styled(
            format!(" ({from}→{to} next step)"),
            theme.badge(theme.warn),
        ));
    }
    let lr = app.lr();
    l3.push(sep(theme));
    l3.push(Span::raw(format!("lr {lr:.2e}")));
    l3.push(sep(theme));
    l3.push(Span::raw(match app.samples_per_sec {
        Some(r) if app.heard_running() => match app.info.baseline {
            Some(b) => {
                let (speedup, eff) = crate::engine::calibrate::scaling(r, b, ranks);
                format!(
                    "{} samples/s ({speedup:.2}x, {:.0}% eff)",
                    si(r),
                    eff * 100.0
                )
            }
            None => format!("{} samples/s", si(r)),
        },
        _ => "– samples/s".into(),
    }));
    // the run's limits while it runs
    for limit in app.limits.iter().filter(|_| app.heard_running()) {
        l3.push(Span::raw(" "));
        l3.push(Span::styled(
            format!(" {} ", limit.name().to_uppercase()),
            theme.badge(theme.warn),
        ));
    }
    // then, each in the longest form that fits (the strategy's before the memory's): the
    // strategy and where its replicas stand, the process's memory
    let mut strategy: Vec<String> = Vec::new();
    if info.strategy != Default::default() {
        use crate::front::sync::{Ahead, Ends, SyncAhead};
        let ahead = match (app.state.ended(), row) {
            (true, _) => Ahead {
                run_end: Some(step),
                ..Ahead::default()
            },
            (false, r) => Ends::of(info).ahead(step, r.and_then(|r| r.ends_at)),
        };
        let name = info.strategy.to_string();
        // (a failed run never made its replicas one)
        let failed = app.state == RunState::Failed;
        if let Some(s) = SyncAhead::of(&info.strategy, step, ahead).filter(|_| !failed) {
            strategy.push(format!("{name}: {}", s.full()));
            strategy.push(format!("{name}: {}", s.brief()));
        }
        strategy.push(name);
    }
    let mut memory: Vec<String> = Vec::new();
    if let Some((rss, total)) = app.process_memory {
        memory.push(format!("RSS {} of {}", bytes(rss), bytes(total)));
        memory.push(format!("RSS {}", bytes(rss)));
    }
    let used: usize = l3.iter().map(|s| s.content.chars().count()).sum();
    let width = |t: Option<&String>| t.map_or(0, |t| t.chars().count() + 3);
    let options = |v: &[String]| -> Vec<Option<usize>> {
        (0..v.len())
            .map(Some)
            .chain(std::iter::once(None))
            .collect()
    };
    // the first pair that fits, the strategy's forms first; else the shortest
    let (si, mi) = (options(&strategy).into_iter())
        .flat_map(|a| options(&memory).into_iter().map(move |b| (a, b)))
        .find(|&(a, b)| used + width(a.map(|i| &strategy[i])) + width(b.map(|i| &memory[i])) <= w)
        .unwrap_or((strategy.len().checked_sub(1), None));
    if let Some(i) = si {
        l3.push(sep(theme));
        l3.push(Span::styled(strategy[i].clone(), theme.fg(theme.accent)));
    }
    if let Some(i) = mi {
        l3.push(sep(theme));
        l3.push(Span::styled(memory[i].clone(), theme.muted()));
    }
    let lines: Vec<Line> = [line1, line2, Line::from(l3)]
        .into_iter()
        .map(|l| clip(l, w))
        .collect();
    frame.render_widget(Paragraph::new(lines), area);
}

/// Cuts a line of spans to `w` characters.
pub fn clip(line: Line<'_>, w: usize) -> Line<'_> {
    let mut left = w;
    let mut spans = Vec::new();
    for s in line.spans {
        if left == 0 {
            break;
        }
        let n = s.content.chars().count();
        if n <= left {
            left -= n;
            spans.push(s);
        } else {
            spans.push(Span::styled(fit(&s.content, left), s.style));
            left = 0;
        }
    }
    Line::from(spans)
}
