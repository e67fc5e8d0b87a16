//! One call for a job of many independent items on several threads: the items claimed in
//! blocks, the results in the items' order, a thread's panic raised again in the caller.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// `f` of every item, in the items' order, on `threads` threads claiming `block` items at a
/// time; `waiting` is called every 20 ms meanwhile with how many are done (progress lines). A
/// panic in `f` is raised again here (never a result list shifted by a missing block).
pub fn map_in_order<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    block: usize,
    f: impl Fn(&T) -> R + Sync,
    mut waiting: impl FnMut(usize),
) -> Vec<R> {
    let block = block.max(1);
    let threads = threads.min(items.len().div_ceil(block)).max(1);
    let (next, done) = (AtomicUsize::new(0), AtomicUsize::new(0));
    std::thread::scope(|s| {
        let jobs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let from = next.fetch_add(block, Ordering::Relaxed);
                        if from >= items.len() {
                            return mine;
                        }
                        let part = &items[from..(from + block).min(items.len())];
                        mine.push((from, part.iter().map(&f).collect::<Vec<R>>()));
                        done.fetch_add(part.len(), Ordering::Relaxed);
                    }
                })
            })
            .collect();
        while !jobs.iter().all(|j| j.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            waiting(done.load(Ordering::Relaxed));
        }
        let mut parts: Vec<(usize, Vec<R>)> = jobs
            .into_iter()
            .flat_map(|j| j.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect();
        parts.sort_by_key(|p| p.0);
        parts.into_iter().flat_map(|p| p.1).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_the_items_order_whatever_thread_made_them() {
        let items: Vec<u64> = (0..1000).collect();
        let slow_first = |&i: &u64| {
            if i < 10 {
                std::thread::sleep(Duration::from_millis(30));
            }
            i * i
        };
        let mut seen = 0;
        let out = map_in_order(&items, 4, 7, slow_first, |d| seen = d);
        assert_eq!(out, items.iter().map(|i| i * i).collect::<Vec<_>>());
        assert!(seen <= 1000);
        assert!(map_in_order(&[] as &[u8], 8, 64, |&b| b, |_| {}).is_empty());
    }

    #[test]
    #[should_panic(expected = "item 500")]
    fn a_panic_on_a_thread_is_the_callers() {
        let items: Vec<u32> = (0..1000).collect();
        map_in_order(&items, 3, 10, |&i| assert!(i != 500, "item {i}"), |_| {});
    }
}
