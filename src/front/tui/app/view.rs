//! How the run and the screen stand: run state, views, history windows, popups.

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    Starting,
    Running,
    Paused,
    Stopping,
    Done,
    Failed,
}

impl RunState {
    pub fn label(self) -> &'static str {
        match self {
            RunState::Starting => "STARTING",
            RunState::Running => "RUNNING",
            RunState::Paused => "PAUSED",
            RunState::Stopping => "STOPPING",
            RunState::Done => "DONE",
            RunState::Failed => "FAILED",
        }
    }
    pub fn ended(self) -> bool {
        matches!(self, RunState::Done | RunState::Failed)
    }
}

/// Where the run on screen is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Training in this process.
    Local,
    /// In another process, attached over its live socket: controls go over the socket, and
    /// `q` can also detach (leave the run going).
    Attached,
    /// Recorded in a metrics file (`view`): nothing can change it, `q` leaves at once.
    File,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Overview,
    Training,
    Log,
}

impl View {
    const ALL: [View; 3] = [View::Overview, View::Training, View::Log];
    pub fn label(self) -> &'static str {
        match self {
            View::Overview => "overview",
            View::Training => "training",
            View::Log => "events",
        }
    }
    pub(super) fn step(self, by: isize) -> View {
        let i = View::ALL.iter().position(|v| *v == self).unwrap_or(0) as isize;
        View::ALL[(i + by).rem_euclid(View::ALL.len() as isize) as usize]
    }
}

/// How much history the device charts show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    OneMinute,
    TenMinutes,
    Whole,
}

impl Window {
    pub fn label(self) -> &'static str {
        match self {
            Window::OneMinute => "1 min",
            Window::TenMinutes => "10 min",
            Window::Whole => "whole run",
        }
    }
    pub fn span(self) -> Option<Duration> {
        match self {
            Window::OneMinute => Some(Duration::from_secs(60)),
            Window::TenMinutes => Some(Duration::from_secs(600)),
            Window::Whole => None,
        }
    }
    pub(super) fn next(self) -> Window {
        match self {
            Window::OneMinute => Window::TenMinutes,
            Window::TenMinutes => Window::Whole,
            Window::Whole => Window::OneMinute,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Popup {
    /// "Stop training?", opened by `q` or Ctrl-C; either again takes the safe answer.
    Quit,
    Help,
}
