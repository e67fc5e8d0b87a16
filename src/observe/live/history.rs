//! What a client gets on connect before the live lines, in bounded memory: step and telemetry
//! lines thinned as the run grows (when full, every other one goes and from then on only every
//! other new one is kept, so the history stays evenly spread over the run), and the lifecycle
//! lines (epochs, events, warnings, the end) all kept up to a cap, oldest dropped first.

use std::collections::VecDeque;

use crate::observe::metrics::Line;

/// Lines kept in order with the sequence number each was published under.
#[derive(Debug)]
pub struct Thinned {
    items: VecDeque<(u64, Line)>,
    cap: usize,
    max_bytes: usize,
    bytes: usize,
    /// Lines offered per line kept.
    stride: u64,
    offered: u64,
}

impl Thinned {
    /// Keeps at most `cap` lines (at least 2) and `max_bytes` bytes of them.
    pub fn new(cap: usize, max_bytes: usize) -> Thinned {
        Thinned {
            items: VecDeque::new(),
            cap: cap.max(2),
            max_bytes,
            bytes: 0,
            stride: 1,
            offered: 0,
        }
    }

    /// Whether the next line offered would be kept.
    pub fn keeps_next(&self) -> bool {
        self.offered.is_multiple_of(self.stride)
    }

    /// Counts a line that was not built because it would not have been kept.
    pub fn skip(&mut self) {
        self.offered += 1;
    }

    pub fn offer(&mut self, seq: u64, line: &Line) {
        let keep = self.keeps_next();
        self.offered += 1;
        if !keep {
            return;
        }
        self.bytes += line.as_bytes().len();
        self.items.push_back((seq, line.clone()));
        while self.items.len() > 1 && (self.items.len() > self.cap || self.bytes > self.max_bytes) {
            self.thin();
        }
    }

    /// Drops every other line, keeping the newest, and keeps half as many new ones from now.
    fn thin(&mut self) {
        let n = self.items.len();
        let mut i = 0;
        self.items.retain(|_| {
            i += 1;
            (n - i).is_multiple_of(2)
        });
        self.bytes = self.items.iter().map(|(_, l)| l.as_bytes().len()).sum();
        self.stride = self.stride.saturating_mul(2);
    }

    pub fn iter(&self) -> impl Iterator<Item = &(u64, Line)> {
        self.items.iter()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Lines all kept up to `cap`, the oldest dropped first beyond it.
#[derive(Debug)]
pub struct Capped {
    items: VecDeque<(u64, Line)>,
    cap: usize,
}

impl Capped {
    pub fn new(cap: usize) -> Capped {
        Capped {
            items: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    pub fn push(&mut self, seq: u64, line: &Line) {
        if self.items.len() == self.cap {
            self.items.pop_front();
        }
        self.items.push_back((seq, line.clone()));
    }

    pub fn iter(&self) -> impl Iterator<Item = &(u64, Line)> {
        self.items.iter()
    }
}

/// The lines of several histories in the order they were published.
pub fn merged<'a>(parts: impl IntoIterator<Item = &'a (u64, Line)>) -> Vec<Line> {
    let mut all: Vec<&(u64, Line)> = parts.into_iter().collect();
    all.sort_by_key(|(seq, _)| *seq);
    all.into_iter().map(|(_, l)| l.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(i: u64) -> Line {
        Line::new(&json!({ "i": i }))
    }

    fn kept(t: &Thinned) -> Vec<u64> {
        t.iter().map(|(s, _)| *s).collect()
    }

    #[test]
    fn a_full_history_keeps_every_other_line_and_then_every_other_new_one() {
        let mut t = Thinned::new(4, usize::MAX);
        for i in 0..5 {
            t.offer(i, &line(i));
        }
        // 0 1 2 3 4 -> thinned to 0 2 4 (the newest kept), stride 2
        assert_eq!(kept(&t), [0, 2, 4]);
        assert!(!t.keeps_next());
        for i in 5..9 {
            t.offer(i, &line(i));
        }
        // 5 dropped, 6 kept, 7 dropped, 8 kept: 0 2 4 6 8 -> 0 4 8, stride 4
        assert_eq!(kept(&t), [0, 4, 8]);
    }

    #[test]
    fn a_long_run_stays_bounded_and_spread_over_the_whole_run() {
        let mut t = Thinned::new(100, usize::MAX);
        for i in 0..100_000 {
            if t.keeps_next() {
                t.offer(i, &line(i));
            } else {
                t.skip();
            }
        }
        assert!(t.len() <= 100 && t.len() >= 50, "{}", t.len());
        let k = kept(&t);
        // evenly spaced: the first kept line is near the start, the gaps all alike
        assert!(k[0] < 100_000 / 40, "{k:?}");
        let gaps: Vec<u64> = k.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| *g == gaps[0]), "{gaps:?}");
    }

    #[test]
    fn the_byte_limit_thins_too_and_capped_drops_the_oldest() {
        let mut t = Thinned::new(1000, 10 * line(0).as_bytes().len());
        for i in 0..100 {
            t.offer(i, &line(i % 10));
        }
        assert!(t.len() <= 10, "{}", t.len());
        let mut c = Capped::new(3);
        for i in 0..5 {
            c.push(i, &line(i));
        }
        assert_eq!(c.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [2, 3, 4]);
    }
}
