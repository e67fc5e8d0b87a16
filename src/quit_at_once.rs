//! What a process that quits at once (a second signal) still does before it exits: the parts
//! of a run that would otherwise be left half done arm a task here for as long as they are
//! under way (a checkpoint being written removes its temporary directory, the metrics files
//! get their end record, the live socket goes), and the signal handler runs them all, then
//! exits. Nothing here waits long: a task finds what it needs busy, it gives up.
//!
//! Once the tasks have begun to run, the process is quitting: a part that arms a task then
//! runs it itself (after the armed ones) and goes no further (its thread waits for the exit),
//! and `run` returns once those are done too (its caller exits right after); a second `run`
//! waits for the first to finish before it returns.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The longest `run` waits for tasks armed after it began (each is short: see above).
const LATE_WAIT: Duration = Duration::from_secs(2);

type Task = Box<dyn FnOnce() + Send>;

/// Tasks armed and not yet disarmed, by the number `arm` gave them.
pub struct Tasks {
    armed: Mutex<Registry>,
    next: AtomicU64,
    /// held while the tasks run
    running: Mutex<()>,
    /// told when a task armed late has run
    settled: Condvar,
}

/// The armed tasks, whether they have begun to run (the process is quitting), and how many
/// tasks armed since are still to run.
struct Registry {
    tasks: Vec<(u64, Task)>,
    quitting: bool,
    late: usize,
}

/// The process's tasks.
static PROCESS: Tasks = Tasks::new();

/// A task armed; dropping it disarms it (the work it would finish is finished).
#[must_use = "the task is disarmed when this is dropped"]
pub struct Armed {
    tasks: &'static Tasks,
    id: u64,
}

impl Drop for Armed {
    fn drop(&mut self) {
        let mut armed = self.tasks.armed.lock().unwrap_or_else(|e| e.into_inner());
        armed.tasks.retain(|(id, _)| *id != self.id);
    }
}

impl Tasks {
    pub const fn new() -> Tasks {
        Tasks {
            armed: Mutex::new(Registry {
                tasks: Vec::new(),
                quitting: false,
                late: 0,
            }),
            next: AtomicU64::new(0),
            running: Mutex::new(()),
            settled: Condvar::new(),
        }
    }

    /// Runs `task` if the process quits at once before the returned guard is dropped. Where
    /// it is quitting already, runs `task` now and never returns (the exit is coming).
    pub fn arm(&'static self, task: impl FnOnce() + Send + 'static) -> Armed {
        match self.try_arm(task) {
            Some(id) => Armed { tasks: self, id },
            None => loop {
                std::thread::park();
            },
        }
    }

    /// Arms `task` (its number), or runs it where the process is quitting already (None).
    fn try_arm(&self, task: impl FnOnce() + Send + 'static) -> Option<u64> {
        let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        if armed.quitting {
            if RUNNING_TASKS.get() {
                // armed by a task being run: this thread holds `running`, so run it here
                drop(armed);
                task();
                return None;
            }
            // counted before it waits its turn, so the `run` under way waits for it (and
            // uncounted however the task ends)
            armed.late += 1;
            drop(armed);
            let _counted = Late(self);
            let _running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            task();
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        armed.tasks.push((id, Box::new(task)));
        Some(id)
    }

    /// Runs every armed task, the newest first (a checkpoint half written is removed before
    /// the end record that follows its run's last line), and disarms them; then waits (a
    /// while at most) for the tasks armed meanwhile, which run at once. A second call returns
    /// once the first has finished.
    pub fn run(&self) {
        {
            let _running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            RUNNING_TASKS.set(true);
            // taken out first: a task never runs under the lock a guard's drop takes
            let tasks = {
                let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
                armed.quitting = true;
                std::mem::take(&mut armed.tasks)
            };
            for (_, task) in tasks.into_iter().rev() {
                task();
            }
            RUNNING_TASKS.set(false);
        }
        let armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        let waited = self
            .settled
            .wait_timeout_while(armed, LATE_WAIT, |r| r.late > 0);
        drop(waited.unwrap_or_else(|e| e.into_inner()));
    }
}

thread_local! {
    /// This thread is running the armed tasks (holding `running`).
    static RUNNING_TASKS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A task armed late, counted until it has run (or panicked).
struct Late<'a>(&'a Tasks);

impl Drop for Late<'_> {
    fn drop(&mut self) {
        self.0.armed.lock().unwrap_or_else(|e| e.into_inner()).late -= 1;
        self.0.settled.notify_all();
    }
}

impl Default for Tasks {
    fn default() -> Tasks {
        Tasks::new()
    }
}

/// Arms `task` for this process (see [`Tasks::arm`]).
pub fn arm(task: impl FnOnce() + Send + 'static) -> Armed {
    PROCESS.arm(task)
}

/// Runs this process's armed tasks: for the signal handler, right before it exits.
pub fn run() {
    PROCESS.run()
}

/// Whether this process is quitting at once (its armed tasks have begun to run): what fails
/// from now on (a checkpoint whose half-written folder its task removed) is no failure of the
/// run, which quit.
pub fn quitting() -> bool {
    (PROCESS.armed.lock().unwrap_or_else(|e| e.into_inner())).quitting
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn armed_tasks_run_newest_first_and_a_dropped_guard_s_never() {
        // (tasks of their own: the process's are shared by the tests beside)
        static TASKS: Tasks = Tasks::new();
        let ran = Arc::new(Mutex::new(Vec::new()));
        let task = |name: &'static str| {
            let ran = ran.clone();
            move || ran.lock().unwrap().push(name)
        };
        let _first = TASKS.arm(task("first"));
        let finished = TASKS.arm(task("finished"));
        let _last = TASKS.arm(task("last"));
        drop(finished);
        TASKS.run();
        assert_eq!(*ran.lock().unwrap(), ["last", "first"]);
        // run once: a second run finds nothing armed
        TASKS.run();
        assert_eq!(ran.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_task_armed_once_quitting_runs_at_once_and_its_part_goes_no_further() {
        static TASKS: Tasks = Tasks::new();
        TASKS.run();
        let ran = Arc::new(Mutex::new(Vec::new()));
        let part = std::thread::spawn({
            let ran = ran.clone();
            move || {
                let task_ran = ran.clone();
                let _armed = TASKS.arm(move || task_ran.lock().unwrap().push("task"));
                ran.lock().unwrap().push("went on");
            }
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while ran.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(*ran.lock().unwrap(), ["task"]);
        assert!(!part.is_finished(), "the part's thread waits for the exit");
    }

    #[test]
    fn a_task_armed_while_the_tasks_run_is_done_before_run_returns() {
        static TASKS: Tasks = Tasks::new();
        let done = Arc::new(Mutex::new(false));
        let late_armed = || TASKS.armed.lock().unwrap().late > 0;
        // the armed task lasts until the late one is armed
        let _first = TASKS.arm(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !late_armed() && std::time::Instant::now() < deadline {
                std::thread::yield_now();
            }
        });
        let run = std::thread::spawn(|| TASKS.run());
        while !TASKS.armed.lock().unwrap().quitting {
            std::thread::yield_now();
        }
        let _part = std::thread::spawn({
            let done = done.clone();
            move || {
                let _armed = TASKS.arm(move || {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    *done.lock().unwrap() = true;
                });
            }
        });
        run.join().unwrap();
        assert!(
            *done.lock().unwrap(),
            "run returned (and its caller would exit) before the late task ended"
        );
    }

    #[test]
    fn a_task_that_arms_another_runs_it_in_place() {
        static TASKS: Tasks = Tasks::new();
        let ran = Arc::new(Mutex::new(Vec::new()));
        let _outer = TASKS.arm({
            let ran = ran.clone();
            move || {
                let inner = ran.clone();
                // (quitting: it runs at once)
                let _ = TASKS.try_arm(move || inner.lock().unwrap().push("inner"));
                ran.lock().unwrap().push("outer");
            }
        });
        let run = std::thread::spawn(|| TASKS.run());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !run.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(run.is_finished(), "run() deadlocked on its own task's arm");
        assert_eq!(*ran.lock().unwrap(), ["inner", "outer"]);
    }

    #[test]
    fn a_second_run_returns_once_the_first_s_tasks_are_done() {
        static TASKS: Tasks = Tasks::new();
        let done = Arc::new(Mutex::new(false));
        let _slow = TASKS.arm({
            let done = done.clone();
            move || {
                std::thread::sleep(std::time::Duration::from_millis(200));
                *done.lock().unwrap() = true;
            }
        });
        let first = std::thread::spawn(|| TASKS.run());
        // the first has the tasks once it holds `running`; wait until it is under way
        while !TASKS.armed.lock().unwrap().quitting {
            std::thread::yield_now();
        }
        TASKS.run();
        assert!(
            *done.lock().unwrap(),
            "the second run returned before the first's task ended"
        );
        first.join().unwrap();
    }
}
