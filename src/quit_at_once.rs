//! What a process that quits at once (a second signal) still does before it exits: the parts
//! of a run that would otherwise be left half done arm a task here for as long as they are
//! under way (a checkpoint being written removes its temporary directory, the metrics files
//! get their end record, the live socket goes), and the signal handler runs them all, then
//! exits. Nothing here waits long: a task finds what it needs busy, it gives up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

type Task = Box<dyn FnOnce() + Send>;

/// Tasks armed and not yet disarmed, by the number `arm` gave them.
pub struct Tasks {
    armed: Mutex<Vec<(u64, Task)>>,
    next: AtomicU64,
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
        armed.retain(|(id, _)| *id != self.id);
    }
}

impl Tasks {
    pub const fn new() -> Tasks {
        Tasks {
            armed: Mutex::new(Vec::new()),
            next: AtomicU64::new(0),
        }
    }

    /// Runs `task` if the process quits at once before the returned guard is dropped.
    pub fn arm(&'static self, task: impl FnOnce() + Send + 'static) -> Armed {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        armed.push((id, Box::new(task)));
        Armed { tasks: self, id }
    }

    /// Runs every armed task, the newest first (a checkpoint half written is removed before
    /// the end record that follows its run's last line), and disarms them.
    pub fn run(&self) {
        // taken out first: a task never runs under the lock a guard's drop takes
        let tasks = std::mem::take(&mut *self.armed.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, task) in tasks.into_iter().rev() {
            task();
        }
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
}
