//! The screen as a user sees it, with fixed data, at 80x24 and 160x48 (ratatui TestBackend +
//! insta; the snapshots are committed under tests/snapshots/).

use mgtop::engine::events::{Applied, Ending, Event};
use mgtop::front::tui::app::{App, AppEvent};
use mgtop::front::tui::demo;
use mgtop::front::tui::render::{self, MIN_HEIGHT, MIN_WIDTH};
use mgtop::front::tui::theme::Theme;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::{Frame, Terminal};

fn draw(w: u16, h: u16, f: impl FnOnce(&mut Frame)) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(f).unwrap();
    t.backend().to_string()
}

fn screen(app: &App, w: u16, h: u16) -> String {
    let theme = Theme::embedded("dark").unwrap();
    draw(w, h, |f| render::render(f, app, &theme))
}

fn key(app: &mut App, code: KeyCode) {
    app.handle_key(KeyEvent::new(code, KeyModifiers::NONE));
}

fn dark() -> Theme {
    Theme::embedded("dark").unwrap()
}

#[test]
fn whole_screen_80x24() {
    let mut app = demo::app(3, 150);
    key(&mut app, KeyCode::Char(']'));
    let shown = screen(&app, 80, 24);
    insta::assert_snapshot!(shown);
    // the README's *Terminal UI* opens with this frame, as it is drawn today
    let rows: Vec<&str> = (shown.lines())
        .map(|l| l.trim_matches('"').trim_end())
        .collect();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let block = (readme.split("## Terminal UI\n\n```\n").nth(1))
        .and_then(|rest| rest.split("\n```").next())
        .expect("the README's Terminal UI section opens with a frame");
    let block: Vec<&str> = block.lines().map(str::trim_end).collect();
    assert_eq!(
        block, rows,
        "README.md's frame is not the screen drawn: copy it from the snapshot"
    );
}

#[test]
fn whole_screen_160x48() {
    let mut app = demo::app(4, 150);
    key(&mut app, KeyCode::Char(']'));
    insta::assert_snapshot!(screen(&app, 160, 48));
}

#[test]
fn gpu_run_80x24_and_160x48() {
    let app = demo::gpu_app(4, 150);
    insta::assert_snapshot!("gpu_run_80x24", screen(&app, 80, 24));
    insta::assert_snapshot!("gpu_run_160x48", screen(&app, 160, 48));
    // the power-capped GPU's detail view says why it is slow
    let mut app = app;
    key(&mut app, KeyCode::Char('2'));
    let detail = screen(&app, 160, 48);
    assert!(
        detail.contains("1245 of 1980 MHz") && detail.contains("power cap"),
        "{detail}"
    );
    insta::assert_snapshot!("gpu_detail_160x48", detail);
}

#[test]
fn paused_run_with_many_devices_80x24() {
    let mut app = demo::app(12, 40);
    app.apply(AppEvent::Engine(Event::Control {
        step: 40,
        applied: Applied::Paused,
    }));
    insta::assert_snapshot!(screen(&app, 80, 24));
}

#[test]
fn a_straggler_is_marked_in_its_row_and_said_in_the_events() {
    let mut app = demo::app_with_straggler(3, 0, 150, 1);
    let s = screen(&app, 80, 24);
    assert!(
        s.contains("cpu1!") && s.contains("straggler: rank 1"),
        "{s}"
    );
    insta::assert_snapshot!("straggler_80x24", s);
    key(&mut app, KeyCode::Char('2'));
    insta::assert_snapshot!("straggler_detail_160x48", screen(&app, 160, 48));
    // on the smallest screen the warning fills the panel: its last line says what is cut, and
    // no value breaks from its name onto a line of its own
    let small = screen(&app, MIN_WIDTH, MIN_HEIGHT);
    assert!(small.contains("straggler: rank 1"), "{small}");
    assert!(small.contains("more rows"), "{small}");
    let tall = screen(&app, MIN_WIDTH, 24);
    assert!(
        !(tall.lines()).any(|l| l.split('│').nth(1).map(str::trim) == Some("ms")),
        "{tall}"
    );
}

#[test]
fn device_detail_view() {
    let mut app = demo::app(3, 150);
    key(&mut app, KeyCode::Char('3'));
    insta::assert_snapshot!("device_detail_80x24", screen(&app, 80, 24));
    insta::assert_snapshot!("device_detail_160x48", screen(&app, 160, 48));
}

#[test]
fn training_and_events_views() {
    let mut app = demo::app(2, 150);
    key(&mut app, KeyCode::Tab);
    insta::assert_snapshot!("training_80x24", screen(&app, 80, 24));
    insta::assert_snapshot!("training_160x48", screen(&app, 160, 48));
    key(&mut app, KeyCode::Tab);
    insta::assert_snapshot!("events_80x24", screen(&app, 80, 24));
    // before the first epoch's validation it is awaited; a run without a validation set
    // awaits none
    let mut early = demo::app(2, 10);
    key(&mut early, KeyCode::Tab);
    assert!(screen(&early, 160, 48).contains("after the first epoch"));
    early.info.val_samples = 0;
    let s = screen(&early, 160, 48);
    assert!(s.contains("none: the run has no validation set"), "{s}");
}

#[test]
fn popups_and_summary() {
    let mut app = demo::app(2, 150);
    key(&mut app, KeyCode::Char('?'));
    insta::assert_snapshot!("help_80x24", screen(&app, 80, 24));
    // the smallest screen still shows every key, quit last
    let small = screen(&app, 60, 16);
    for k in ["p, space", "] [ + -", "Tab, S-Tab", "PgUp/Dn", "q, Ctrl-C"] {
        assert!(small.contains(k), "{k}: {small}");
    }
    key(&mut app, KeyCode::Esc);
    key(&mut app, KeyCode::Char('q'));
    insta::assert_snapshot!("quit_80x24", screen(&app, 80, 24));
    key(&mut app, KeyCode::Esc);
    app.apply(AppEvent::Engine(Event::Finished {
        step: 150,
        ending: Ending::Completed,
    }));
    insta::assert_snapshot!("summary_80x24", screen(&app, 80, 24));
    insta::assert_snapshot!("summary_160x48", screen(&app, 160, 48));
}

#[test]
fn a_run_stopped_before_its_budget_says_stopped_not_done() {
    let header = |ending| {
        let mut app = demo::app(2, 150);
        app.apply(AppEvent::Engine(Event::Finished { step: 150, ending }));
        let t = dark();
        draw(80, 3, |f| {
            render::render_header(f, Rect::new(0, 0, 80, 3), &app, &t)
        })
    };
    let stopped = header(Ending::Stopped);
    assert!(stopped.contains(" STOPPED "), "{stopped}");
    let done = header(Ending::Completed);
    assert!(done.contains(" DONE "), "{done}");
    // (read from the metrics file of a process that quit at once)
    let quit = header(Ending::Quit);
    assert!(quit.contains(" QUIT "), "{quit}");
}

#[test]
fn readonly_footer() {
    let mut app = App::new(mgtop::engine::RunInfo::example(2), true);
    app.apply(AppEvent::Tick(std::time::Duration::from_secs(3)));
    key(&mut app, KeyCode::Char('p'));
    insta::assert_snapshot!(screen(&app, 80, 24));
}

#[test]
fn each_panel_alone() {
    let app = demo::app(3, 150);
    let t = dark();
    let a = |w, h| Rect::new(0, 0, w, h);
    insta::assert_snapshot!(
        "panel_header",
        draw(80, 3, |f| render::render_header(f, a(80, 3), &app, &t))
    );
    insta::assert_snapshot!(
        "panel_devices",
        draw(80, 6, |f| render::render_devices(f, a(80, 6), &app, &t))
    );
    insta::assert_snapshot!(
        "panel_devices_wide",
        draw(160, 6, |f| render::render_devices(f, a(160, 6), &app, &t))
    );
    insta::assert_snapshot!(
        "panel_history",
        draw(60, 16, |f| render::render_history(
            f,
            a(60, 16),
            &app,
            &t,
            None
        ))
    );
    insta::assert_snapshot!(
        "panel_loss",
        draw(60, 12, |f| render::render_loss(
            f,
            a(60, 12),
            &app,
            &t,
            false
        ))
    );
    insta::assert_snapshot!(
        "panel_events",
        draw(80, 6, |f| {
            render::render_log(f, a(80, 6), &app, &t, None);
        })
    );
    insta::assert_snapshot!(
        "panel_footer",
        draw(80, 1, |f| render::render_footer(f, a(80, 1), &app, &t))
    );
}

#[test]
fn a_terminal_below_the_minimum_says_so() {
    let mut app = demo::app(2, 10);
    let s = screen(&app, MIN_WIDTH - 1, MIN_HEIGHT + 2);
    assert!(s.contains("terminal too small"), "{s}");
    assert!(s.contains(&format!("need {MIN_WIDTH}x{MIN_HEIGHT}")), "{s}");
    // the quit question, which has no room for its popup, in words
    key(&mut app, KeyCode::Char('q'));
    let s = screen(&app, 40, 10);
    assert!(s.contains("s or q: with a"), "{s}");
    let s = screen(&app, MIN_WIDTH, MIN_HEIGHT);
    assert!(!s.contains("too small") && s.contains("devices"), "{s}");
    // the keys still act, and the answer to the last one is said there too
    key(&mut app, KeyCode::Char('c'));
    key(&mut app, KeyCode::Char('s'));
    let flash = app.flash.clone().expect("s answers");
    let s = screen(&app, 40, 10);
    let start: String = flash.chars().take(20).collect();
    assert!(s.replace('\n', " ").contains(&start), "{flash}: {s}");
}

#[test]
fn a_failed_device_s_row_says_its_error() {
    let mut app = demo::app(2, 150);
    app.apply(AppEvent::Engine(Event::Failed {
        rank: 1,
        step: 151,
        message: "worker for rank 1 panicked at step 151: out of luck".into(),
    }));
    key(&mut app, KeyCode::Esc);
    for w in [80, 120, 200] {
        let s = screen(&app, w, 30);
        let row = (s.lines())
            .find(|l| l.contains("│cpu1"))
            .unwrap_or_default();
        assert!(
            row.contains("cpu1!") && row.contains("worker for rank 1 panicked"),
            "{w} columns: {s}"
        );
    }
    // below the minimum size, the run's state and that q leaves
    let s = screen(&app, 40, 10);
    assert!(s.contains("FAILED") && s.contains("q leaves"), "{s}");
}

#[test]
fn every_size_and_state_draws_without_panicking() {
    let themes: Vec<Theme> = Theme::embedded_names()
        .map(|n| Theme::embedded(n).unwrap())
        .collect();
    let mut apps = vec![
        App::new(mgtop::engine::RunInfo::example(1), false),
        demo::app(1, 3),
        demo::app(16, 30),
    ];
    let mut focused = demo::app(3, 30);
    key(&mut focused, KeyCode::Char('2'));
    apps.push(focused);
    for (i, app) in apps.iter().enumerate() {
        for (w, h) in [
            (1, 1),
            (20, 5),
            (59, 15),
            (60, 16),
            (80, 24),
            (97, 31),
            (200, 60),
            (250, 70),
        ] {
            let s = screen(app, w, h);
            assert!(!s.is_empty());
            let t = &themes[i % themes.len()];
            draw(w, h, |f| render::render(f, app, t));
        }
    }
}

#[test]
fn the_loss_title_keeps_the_accuracy_at_80_columns() {
    let s = screen(&demo::app(3, 150), 80, 24);
    let title = s.lines().find(|l| l.contains(" loss ")).unwrap();
    assert!(
        title.contains("acc 97.0%") && title.contains("val 0.085"),
        "{s}"
    );
    // the full title where there is room
    let s = screen(&demo::app(3, 150), 160, 48);
    assert!(
        s.contains("loss (log) smoothed train 0.1294 val 0.0850 acc 97.0% (best 97.0%)"),
        "{s}"
    );
}

#[test]
fn a_long_layer_list_leaves_the_header_its_devices_and_data() {
    let mut app = demo::app(2, 150);
    let layers = "conv16k3p1,bn,relu,pool2,conv32k3p1,bn,relu,dwconv3p1,bn,relu6,pool2,dense64";
    app.info.model = layers.into();
    app.info.name = format!("synthetic-images-{layers}");
    for w in [80, 120] {
        let s = screen(&app, w, 24);
        let header = s.lines().next().unwrap();
        assert!(
            header.contains("│ conv16k3p1,bn,r") && header.contains("cpu0 cpu1"),
            "{w}: {header}"
        );
    }
}

/// The lines of `s` (as TestBackend prints them: quoted) that show device `label`'s row.
fn device_rows(s: &str, label: &str) -> usize {
    s.lines()
        .filter(|l| l.starts_with(&format!("\"│{label} ")))
        .count()
}

#[test]
fn devices_show_at_the_minimum_size() {
    let s = screen(&demo::app(2, 150), MIN_WIDTH, MIN_HEIGHT);
    assert!(
        device_rows(&s, "cpu0") == 1 && device_rows(&s, "cpu1") == 1,
        "{s}"
    );
    insta::assert_snapshot!("minimum_2_devices", s);
    let s = screen(&demo::app(8, 150), MIN_WIDTH, MIN_HEIGHT);
    for d in 0..5 {
        assert_eq!(device_rows(&s, &format!("cpu{d}")), 1, "cpu{d}: {s}");
    }
    assert!(s.contains("… 3 more devices"), "{s}");
    insta::assert_snapshot!("minimum_8_devices", s);
}

#[test]
fn the_detail_view_keeps_the_last_step_on_one_line() {
    let mut run = demo::run(3, 150);
    for r in 0..3 {
        let mut s = demo::step(r, 3, 123_456);
        s.samples = 15;
        run.step(s);
    }
    let mut app = run.app;
    key(&mut app, KeyCode::Char('3'));
    let s = screen(&app, 80, 24);
    assert!(s.contains("│last step 123456 (15 samples)"), "{s}");
}

#[test]
fn the_theme_key_says_which_theme_is_on() {
    let mut app = demo::app(2, 150);
    key(&mut app, KeyCode::Char('t'));
    app.apply(AppEvent::Theme("light".into()));
    let s = screen(&app, 80, 24);
    assert!(s.lines().last().unwrap().contains("theme: light"), "{s}");
    // the next key takes the answer away
    key(&mut app, KeyCode::Char('w'));
    assert!(!screen(&app, 80, 24).contains("theme: light"));
}

#[test]
fn the_dark_and_light_themes_paint_their_background_everywhere() {
    for name in ["dark", "light"] {
        paints_its_background_everywhere(&Theme::embedded(name).unwrap());
    }
}

fn paints_its_background_everywhere(theme: &Theme) {
    assert_ne!(theme.background, ratatui::style::Color::Reset);
    let mut app = demo::app(3, 150);
    for keys in [
        &[][..],
        &[KeyCode::Char('q')],
        &[KeyCode::Esc, KeyCode::Tab],
    ] {
        for k in keys {
            key(&mut app, *k);
        }
        let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
        t.draw(|f| render::render(f, &app, theme)).unwrap();
        let buf = t.backend().buffer();
        for (i, c) in buf.content().iter().enumerate() {
            assert!(
                c.bg == theme.background || c.bg == theme.highlight_bg,
                "cell {i} ({:?}) has background {:?}",
                c.symbol(),
                c.bg
            );
        }
    }
}

#[test]
fn ctrl_c_opens_the_quit_popup_q_opens() {
    let mut app = demo::app(2, 150);
    key(&mut app, KeyCode::Char('q'));
    let by_q = screen(&app, 80, 24);
    assert!(
        by_q.contains("q or Ctrl-C again: stop with a checkpoint"),
        "{by_q}"
    );
    key(&mut app, KeyCode::Esc);
    assert!(!screen(&app, 80, 24).contains("Stop training?"));
    app.handle_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    assert_eq!(screen(&app, 80, 24), by_q);
}

#[test]
fn long_events_wrap_instead_of_being_cut() {
    let mut app = demo::app(2, 150);
    key(&mut app, KeyCode::Tab);
    key(&mut app, KeyCode::Tab);
    let s = screen(&app, 80, 24);
    // the panel's text without its borders, its lines joined
    let text: Vec<&str> = s
        .lines()
        .filter(|l| l.starts_with("\"│"))
        .map(|l| l.trim_matches('"').trim_matches('│').trim())
        .collect();
    let text = text.join(" ");
    for e in app.log.iter().take(5) {
        let words = e.text.split(' ').collect::<Vec<_>>().join(" ");
        assert!(text.contains(&words), "{:?} cut:\n{s}", e.text);
    }
    assert!(!text.contains('…'), "{s}");
}

#[test]
fn an_attached_client_is_marked_and_its_quit_popup_offers_detach() {
    let mut app = demo::app(2, 150);
    app.mode = mgtop::front::tui::app::Mode::Attached;
    key(&mut app, KeyCode::Char('q'));
    let s = screen(&app, 80, 24);
    assert!(
        s.contains(" ATTACHED ") && s.contains("detach: the run goes on"),
        "{s}"
    );
    insta::assert_snapshot!("attached_quit_80x24", s);
    // detaching from a paused run leaves it paused: said so, not "goes on"
    let mut paused = demo::app(2, 150);
    paused.mode = mgtop::front::tui::app::Mode::Attached;
    paused.state = mgtop::front::tui::app::RunState::Paused;
    key(&mut paused, KeyCode::Char('q'));
    let p = screen(&paused, 80, 24);
    assert!(
        p.contains("detach: the run stays paused") && !p.contains("goes on"),
        "{p}"
    );
    key(&mut app, KeyCode::Esc);
    assert!(s.contains("samples/s") && s.contains("ETA"), "{s}");
    app.disconnected = Some("the run closed the connection".into());
    let s = screen(&app, 80, 24);
    let footer = s.lines().last().unwrap();
    assert!(
        footer.contains("DISCONNECTED") && footer.contains("r reconnect"),
        "{footer}"
    );
    // the rate and the ETA of a run no longer heard are not shown as current
    let header: String = s.lines().take(4).collect();
    assert!(
        !header.contains("ETA") && !header.contains("k samples/s"),
        "{s}"
    );
}

#[test]
fn a_long_answer_in_the_footer_leaves_help_and_quit_on_screen() {
    let mut app = demo::app(2, 150);
    app.flash = Some(format!(
        "a batch of 2048 per replica is more than {}",
        "x ".repeat(40)
    ));
    for w in [60u16, 80] {
        let s = screen(&app, w, 24);
        let footer = s.lines().last().unwrap();
        assert!(
            footer.contains("? help") && footer.contains("q quit"),
            "{w}: {footer}"
        );
        assert!(footer.contains("a batch of 2048 per"), "{w}: {footer}");
    }
    // one that fits without the other keys is whole
    app.flash = Some(mgtop::front::tui::app::VIEW_ONLY.into());
    let s = screen(&app, 80, 24);
    let footer = s.lines().last().unwrap();
    assert!(
        footer.contains(mgtop::front::tui::app::VIEW_ONLY),
        "{footer}"
    );
    assert!(footer.contains("? help"), "{footer}");
}

/// The header's progress bar: its filled and empty cells on the second line.
fn bar_cells(s: &str) -> usize {
    let line = s.lines().nth(1).unwrap();
    line.chars().filter(|&c| c == '━' || c == '─').count()
}

#[test]
fn the_progress_bar_keeps_its_width_when_the_eta_comes_and_goes() {
    let mut app = demo::app(2, 150);
    for w in [70u16, 80] {
        app.eta = Some(std::time::Duration::from_secs(95));
        let with = screen(&app, w, 24);
        assert!(with.lines().nth(1).unwrap().contains("ETA 01:35"), "{with}");
        app.eta = None;
        let without = screen(&app, w, 24);
        assert_eq!(
            bar_cells(&with),
            bar_cells(&without),
            "{w}:\n{with}\n{without}"
        );
        assert!(bar_cells(&with) > 0, "{with}");
    }
}

#[test]
fn the_busy_chart_names_its_devices_at_80_columns() {
    let app = demo::app(3, 150);
    let s = screen(&app, 80, 24);
    let title = s.lines().find(|l| l.contains("busy %")).unwrap();
    assert!(title.contains("cpu0 cpu1 cpu2"), "{s}");
}

#[test]
fn the_detail_view_at_60_columns_keeps_its_titles_and_figures_whole() {
    let mut app = demo::app(2, 150);
    key(&mut app, KeyCode::Char('1'));
    let s = screen(&app, 60, 16);
    for whole in [
        "cpu0 device 1 of 2",
        "busy % 1 min",
        "step time, recent steps",
        "step (recent mean)",
    ] {
        assert!(s.contains(whole), "{whole}:\n{s}");
    }
    let min_max = s.lines().find(|l| l.contains("ms, max")).unwrap();
    assert!(
        min_max.trim_end_matches(['"', '│', ' ']).ends_with(" ms"),
        "{s}"
    );
}

#[test]
fn mono_tells_the_busy_chart_s_devices_apart_by_their_marks() {
    let app = demo::app(3, 150);
    let mono = Theme::embedded("mono").unwrap();
    let s = draw(100, 30, |f| render::render(f, &app, &mono));
    let title = s.lines().find(|l| l.contains("busy %")).unwrap();
    assert!(title.contains("cpu0 ⠒ cpu1 • cpu2 █"), "{s}");
    assert!(s.contains('•') && s.contains('█'), "{s}");
    // the colour themes keep one kind of line, told apart by colour
    let dark = screen(&app, 100, 30);
    let title = dark.lines().find(|l| l.contains("busy %")).unwrap();
    assert!(title.contains("cpu0 cpu1 cpu2"), "{dark}");
}

#[test]
fn a_long_name_is_cut_before_the_run_s_state() {
    let mut app = demo::app(2, 150);
    app.info.name = "n".repeat(200);
    let s = screen(&app, 80, 24);
    let header = s.lines().next().unwrap();
    assert!(header.contains("nnn…") && header.contains("RUNNING"), "{s}");
}

#[test]
fn a_resumed_run_says_where_it_started_in_its_summary() {
    let mut app = demo::app(2, 150);
    app.info.resumed_from = Some("/runs/a/checkpoints/step-00000100".into());
    app.info.start_step = 100;
    app.apply(AppEvent::Engine(Event::Finished {
        step: 150,
        ending: Ending::Completed,
    }));
    let s = screen(&app, 100, 30);
    let line = s.lines().find(|l| l.contains("resumed from")).expect(&s);
    assert!(
        line.contains("step 100 of /runs/a/checkpoints/step-00000100"),
        "{s}"
    );
    // its own steps, not the checkpoint's with them ("finished: 150 steps")
    assert!(
        s.contains("finished at step 150: 50 steps since the resume"),
        "{s}"
    );
}

#[test]
fn the_summary_says_what_the_step_time_parts_leave_over() {
    let mut app = demo::app(2, 150);
    app.apply(AppEvent::Engine(Event::Finished {
        step: 150,
        ending: Ending::Completed,
    }));
    let set = |app: &mut App, [c, d, a, w]: [f64; 4]| {
        let s = app.summary.as_mut().unwrap();
        s.time_shares = Some([c, d, a, w, 0.0, 1.0 - (c + d + a + w)]);
    };
    set(&mut app, [0.6, 0.05, 0.1, 0.1]);
    let s = screen(&app, 100, 30);
    assert!(s.contains("waiting 10% · other 15%"), "{s}");
    set(&mut app, [0.7, 0.05, 0.15, 0.098]);
    let s = screen(&app, 100, 30);
    assert!(s.contains("waiting 10%") && !s.contains("· other"), "{s}");
}

#[test]
fn validation_accuracy_too_short_for_a_chart_is_said_in_words() {
    let mut app = demo::app(2, 150);
    key(&mut app, KeyCode::Tab);
    let s = screen(&app, 60, 16);
    let (last, best) = app.val_accuracy();
    let (last, best) = (last.unwrap() * 100.0, best.unwrap() * 100.0);
    assert!(
        s.contains(&format!(": {last:.1}%")) && s.contains(&format!("best {best:.1}% (epoch ")),
        "{s}"
    );
    // with the rows for one, a chart
    let s = screen(&app, 80, 30);
    assert!(!s.contains(&format!("best {best:.1}% (epoch ")), "{s}");
    // a validation within an epoch (--val-every) is placed in epochs trained
    app.apply(AppEvent::Engine(Event::Validated {
        step: app.step(),
        epochs: 4.4,
        val_loss: 0.01,
        val_accuracy: 0.999,
        elapsed: std::time::Duration::from_secs(9),
    }));
    let s = screen(&app, 60, 16);
    assert!(
        s.contains("4.40 epochs: 99.9%") && s.contains("best 99.9% (4.40 epochs)"),
        "{s}"
    );
}

#[test]
fn temperature_and_power_show_from_110_columns() {
    let app = demo::gpu_app(2, 150);
    let header = |w: u16| {
        let s = screen(&app, w, 30);
        s.lines()
            .find(|l| l.contains("busy") || l.contains("util"))
            .unwrap()
            .to_string()
    };
    assert!(
        header(110).contains("temp") && header(110).contains("power"),
        "{}",
        header(110)
    );
    assert!(!header(109).contains("temp"), "{}", header(109));
}

#[test]
fn the_header_s_epoch_follows_the_newest_epoch_done() {
    // a metrics file's step rows come every --log-every steps: the epoch record is newer
    let mut app = demo::app(2, 150);
    let row_epoch = app.last_row.as_ref().unwrap().epoch;
    app.apply(AppEvent::Engine(Event::EpochDone {
        epoch: row_epoch + 1,
        step: 150,
        train_loss: 0.5,
        val_loss: None,
        val_accuracy: None,
        elapsed: std::time::Duration::from_secs(1),
    }));
    let s = screen(&app, 80, 24);
    let line = s.lines().nth(1).unwrap();
    assert!(
        line.contains(&format!("epoch {}/30 ", row_epoch + 1)),
        "{s}"
    );
}
