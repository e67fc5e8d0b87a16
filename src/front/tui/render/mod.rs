//! Pure drawing: `render(frame, &app, &theme)` lays the screen out and each panel's
//! `render_x(frame, area, &app, &theme)` draws one part of it from the state alone.

mod charts;
mod device_view;
mod devices;
mod grad;
mod header;
mod log;
mod loss;
mod overlay;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::widgets::Block;
use ratatui::Frame;

use super::app::{App, RunState, View};
use super::theme::Theme;

pub use charts::render_history;
pub use device_view::render_device_detail;
pub use devices::render_devices;
pub use header::render_header;
pub use log::{render_footer, render_log};
pub use loss::render_loss;
pub use overlay::{render_help, render_quit, render_summary, render_too_small};

/// Below this the screen says "terminal too small" instead of drawing garbage.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 16;

/// The whole screen.
pub fn render(frame: &mut Frame, app: &App, theme: &Theme) {
    let area = frame.area();
    frame.render_widget(Block::default().style(theme.base()), area);
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        render_too_small(frame, area, app, theme);
        return;
    }
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    render_header(frame, head, app, theme);
    render_footer(frame, foot, app, theme);
    match (app.view, app.focus) {
        (View::Overview, Some(i)) => render_device_detail(frame, body, app, theme, i),
        (View::Overview, None) => overview(frame, body, app, theme),
        (View::Training, _) => training(frame, body, app, theme),
        (View::Log, _) => {
            app.log_fit
                .set(render_log(frame, body, app, theme, Some(app.log_scroll)))
        }
    }
    match app.popup {
        Some(super::app::Popup::Help) => render_help(frame, area, app, theme),
        Some(super::app::Popup::Quit) => {
            let attached = app.mode == super::app::Mode::Attached;
            let paused = app.state == RunState::Paused;
            render_quit(
                frame,
                area,
                theme,
                attached.then(|| app.detach_leaves().0),
                paused,
                match app.info.stops_at_average() {
                    Some(_) => "at the next average",
                    None => "after this step",
                },
            )
        }
        None if app.summary.is_some()
            && !app.summary_hidden
            && app.view == View::Overview
            && app.focus.is_none() =>
        {
            render_summary(frame, body, app, theme)
        }
        None => {}
    }
}

/// Rows the history and loss charts need to be worth drawing in the overview.
const CHARTS_MIN: u16 = 8;

/// How the overview's body of `height` rows is shared among `devices` device rows, the charts
/// and the events: (devices table, charts, events). Devices come first: the charts shrink to
/// make room for them and are left out when even a few devices would not fit beside them.
fn overview_rows(height: u16, devices: usize) -> (u16, u16, u16) {
    let n = devices.min(u16::MAX as usize / 2) as u16;
    let log_h = match height {
        0..=22 => 4,
        23..=40 => 6,
        _ => 9,
    };
    // borders + column header + one row per device
    let all = n + 3;
    // at least three devices, and the "… more devices" line under them
    let some = 3 + n.min(3) + u16::from(n > 3);
    if height >= all + log_h + CHARTS_MIN {
        (all, height - all - log_h, log_h)
    } else if height >= some + log_h + CHARTS_MIN {
        let dev = height - log_h - CHARTS_MIN;
        (dev, CHARTS_MIN, log_h)
    } else {
        // no room for charts worth reading: the devices, and the events under them
        let dev = all.min(height.saturating_sub(3));
        (dev, 0, height - dev)
    }
}

/// Devices on top, history and loss side by side, events below.
fn overview(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let (dev_h, charts_h, log_h) = overview_rows(area.height, app.devices.len());
    let [devs, charts, log] = Layout::vertical([
        Constraint::Length(dev_h),
        Constraint::Length(charts_h),
        Constraint::Length(log_h),
    ])
    .areas(area);
    render_devices(frame, devs, app, theme);
    if charts_h > 0 {
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                .areas(charts);
        render_history(frame, left, app, theme, None);
        render_loss(frame, right, app, theme, false);
    }
    render_log(frame, log, app, theme, None);
}

/// Loss and accuracy in full, with the per-epoch table.
fn training(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    render_loss(frame, area, app, theme, true);
}

/// Cuts `s` to `w` characters, marking the cut with an ellipsis.
pub fn fit(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        s.to_string()
    } else if w == 0 {
        String::new()
    } else {
        let mut t: String = s.chars().take(w - 1).collect();
        t.push('…');
        t
    }
}

/// `s` in `w` characters, its end kept where cut (`…ode17/gpu3`: the names of devices on other
/// machines differ in their host's last characters and their device).
pub fn fit_end(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        s.to_string()
    } else if w == 0 {
        String::new()
    } else {
        std::iter::once('…')
            .chain(s.chars().skip(n + 1 - w))
            .collect()
    }
}

/// `s` broken into lines of at most `w` characters at spaces (a word longer than `w`, such as
/// a path, is broken after its last `/` that leaves at least half a line, else where the line
/// ends).
pub fn wrap_text(s: &str, w: usize) -> Vec<String> {
    let w = w.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut len = 0;
    for word in s.split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        if len > 0 && len + 1 + word.len() <= w {
            line.push(' ');
            line.extend(&word);
            len += 1 + word.len();
            continue;
        }
        if len > 0 {
            lines.push(std::mem::take(&mut line));
        }
        while word.len() > w {
            let cut = (word[..w].iter().rposition(|&c| c == '/'))
                .map(|i| i + 1)
                .filter(|&at| at >= w.div_ceil(2))
                .unwrap_or(w);
            lines.push(word.drain(..cut).collect());
        }
        len = word.len();
        line = word.into_iter().collect();
    }
    lines.push(line);
    lines
}

/// `n/a` for a metric the device does not report.
pub fn pct(v: Option<f32>) -> String {
    v.map_or("n/a".into(), |v| format!("{:.0}%", v * 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::tui::app::{App, RunState};

    /// The header's state badge, as words.
    fn label(app: &App) -> String {
        let theme = crate::front::tui::theme::Theme::choose(Some("mono"), false).unwrap();
        header::state_span(app, &theme).content.trim().to_string()
    }

    /// A run of two ranks, running.
    fn running() -> App {
        let mut app = App::new(crate::engine::RunInfo::example(2), false);
        app.state = RunState::Running;
        app
    }

    #[test]
    fn a_run_this_screen_no_longer_reaches_is_not_shown_running() {
        use crate::front::tui::app::Silent;
        let mut app = running();
        assert_eq!(label(&app), "RUNNING");
        app.silent = Some(Silent::NoEnd);
        assert_eq!(label(&app), "NO END");
        app.silent = Some(Silent::Killed);
        assert_eq!(label(&app), "KILLED");
        app.silent = Some(Silent::NotResponding);
        assert_eq!(label(&app), "NOT RESPONDING");
        app.silent = Some(Silent::Suspended);
        assert_eq!(label(&app), "SUSPENDED");
        app.silent = Some(Silent::Damaged);
        assert_eq!(label(&app), "DAMAGED");
        app.disconnected = Some("the run closed the connection".into());
        assert_eq!(label(&app), "DISCONNECTED");
        // an end on record is what it is
        app.state = RunState::Failed;
        assert_eq!(label(&app), "FAILED");
    }

    /// A validation begun (as the metrics file and the socket carry it) is said in the header
    /// until its figures come, or a later step does.
    #[test]
    fn a_validation_under_way_is_said_in_the_header() {
        use crate::engine::events::Event;
        use crate::front::tui::app::AppEvent;
        use crate::observe::metrics::{record_line, Record};
        use std::time::Duration;
        let mut app = running();
        let begun = Event::Validating {
            step: 0,
            samples: 50000,
        };
        let line = crate::observe::metrics::records::event(&begun, Duration::from_secs(3)).unwrap();
        let read = record_line(line.to_string().as_bytes(), 2).unwrap();
        let Some(Record::Event { event, .. }) = read else {
            panic!("{line}")
        };
        assert_eq!(event, begun);
        app.apply(AppEvent::Engine(event));
        // (a quick one, as a small set's every epoch, is not said: the header would flicker)
        assert_eq!(label(&app), "RUNNING");
        app.apply(AppEvent::Tick(Duration::from_millis(1500)));
        assert_eq!(label(&app), "VALIDATING");
        assert!(app.log.is_empty(), "no line of its own: {:?}", app.log);
        app.apply(AppEvent::Engine(Event::Validated {
            step: 0,
            epochs: 0.5,
            val_loss: 0.3,
            val_accuracy: 0.9,
            elapsed: Duration::from_secs(9),
        }));
        assert_eq!(label(&app), "RUNNING");
    }

    /// On a narrow screen the model's shapes give way to the devices and the data; a wide one
    /// shows them.
    #[test]
    fn a_narrow_header_keeps_the_devices_and_data_over_the_models_shapes() {
        let theme = crate::front::tui::theme::Theme::embedded("dark").unwrap();
        let first = |width: u16| {
            let mut info = crate::engine::RunInfo::example(2);
            info.name = "pets-resnet20".into();
            info.model = "resnet20 (3x32x32-16x32x32-32x16x16-64x8x8-64-10)".into();
            info.data = "images pets: 400 images".into();
            let app = App::new(info, false);
            let mut t =
                ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, 24)).unwrap();
            t.draw(|f| render(f, &app, &theme)).unwrap();
            let screen = t.backend().to_string();
            screen.lines().next().unwrap().to_string()
        };
        let narrow = first(80);
        assert!(
            narrow.contains("resnet20 │") && narrow.contains("images pets"),
            "{narrow}"
        );
        let wide = first(160);
        assert!(wide.contains("resnet20 (3x32x32-16x32x32"), "{wide}");
    }

    #[test]
    fn devices_of_several_machines_are_told_apart_on_an_80_column_screen() {
        let theme = crate::front::tui::theme::Theme::embedded("dark").unwrap();
        let draw = |hosts: &[&str]| {
            let mut info = crate::engine::RunInfo::example(hosts.len());
            info.hosts = hosts.iter().map(|h| h.to_string()).collect();
            let app = App::new(info, false);
            let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 24)).unwrap();
            t.draw(|f| render(f, &app, &theme)).unwrap();
            t.backend().to_string()
        };
        let screen = draw(&["vm", "vm"]);
        for name in ["vm/cpu0", "vm/cpu1"] {
            assert!(screen.contains(name), "{name}: {screen}");
        }
        // (a name past the column keeps its end: the host's last characters and the device)
        let screen = draw(&["worker-node-17", "worker-node-18"]);
        for name in ["…de-17/cpu0", "…de-18/cpu1"] {
            assert!(screen.contains(name), "{name}: {screen}");
        }
    }

    #[test]
    fn formats_read_well() {
        assert_eq!(fit_end("nodeA/gpu0", 8), "…eA/gpu0");
        assert_eq!(fit_end("vm/cpu0", 7), "vm/cpu0");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("ab", 4), "ab");
        assert_eq!(pct(None), "n/a");
        assert_eq!(pct(Some(0.871)), "87%");
    }

    #[test]
    fn wrapping_breaks_at_spaces_and_only_long_words_inside() {
        assert_eq!(wrap_text("short", 10), ["short"]);
        assert_eq!(
            wrap_text("one two three four", 9),
            ["one two", "three", "four"]
        );
        assert_eq!(
            wrap_text("at checkpoints/step-00000060", 10),
            ["at", "checkpoint", "s/step-000", "00060"]
        );
        // a path breaks after a folder where that fills half a line or more
        assert_eq!(
            wrap_text(
                "checkpoint: /tmp/runs/a/20261202-011222/checkpoints/step-00000069",
                40
            ),
            [
                "checkpoint:",
                "/tmp/runs/a/20261202-011222/checkpoints/",
                "step-00000069"
            ]
        );
        assert_eq!(wrap_text("", 5), [""]);
        for l in wrap_text("epoch 6/30 done at step 138 | train loss 0.0833", 12) {
            assert!(l.chars().count() <= 12, "{l}");
        }
    }

    #[test]
    fn devices_get_the_overview_first_at_small_sizes() {
        // 80x24 (a 20-row body): every device of a small run, charts and events as before
        assert_eq!(overview_rows(20, 3), (6, 10, 4));
        // the minimum size (a 12-row body): no charts, every device of a 2-device run
        assert_eq!(overview_rows(12, 2), (5, 0, 7));
        // 8 devices at the minimum: as many rows as leave one events line
        assert_eq!(overview_rows(12, 8), (9, 0, 3));
        // many devices at 80x24: the charts shrink before the devices go
        assert_eq!(overview_rows(20, 12), (8, 8, 4));
        for h in 0..80 {
            for n in 1..40 {
                let (d, c, l) = overview_rows(h, n);
                assert_eq!(d + c + l, h, "{h} rows, {n} devices");
            }
        }
    }
}
