//! A time series that keeps a whole run in bounded memory: when it fills up, neighbouring
//! points are averaged in pairs and new points are averaged in buckets of the same width, so
//! the series stays evenly spaced and only gets coarser as the run gets longer. A series of
//! peaks (`History::peaks`) keeps each bucket's largest value instead: a spike is never
//! averaged away.

#[derive(Clone, Debug)]
pub struct History {
    points: Vec<(f64, f64)>,
    cap: usize,
    /// Raw points per stored point.
    stride: usize,
    /// The bucket being filled: sums of x and y, and how many raw points.
    acc: (f64, f64, usize),
    /// The first and the newest raw point.
    first: Option<(f64, f64)>,
    last: Option<(f64, f64)>,
    /// Buckets keep their largest value, not their mean.
    peaks: bool,
}

impl History {
    /// Keeps at most `cap` points (rounded up to an even number, at least 2).
    pub fn new(cap: usize) -> History {
        let cap = cap.max(2).next_multiple_of(2);
        History {
            points: Vec::with_capacity(cap),
            cap,
            stride: 1,
            acc: (0.0, 0.0, 0),
            first: None,
            last: None,
            peaks: false,
        }
    }

    /// `new`, its buckets keeping their largest value (at their mean x).
    pub fn peaks(cap: usize) -> History {
        History {
            peaks: true,
            ..History::new(cap)
        }
    }

    pub fn push(&mut self, x: f64, y: f64) {
        self.first.get_or_insert((x, y));
        self.last = Some((x, y));
        let sy = match (self.peaks, self.acc.2) {
            (true, 0) => y,
            (true, _) => self.acc.1.max(y),
            (false, _) => self.acc.1 + y,
        };
        self.acc = (self.acc.0 + x, sy, self.acc.2 + 1);
        if self.acc.2 < self.stride {
            return;
        }
        let (sx, sy, n) = self.acc;
        self.acc = (0.0, 0.0, 0);
        let y = if self.peaks { sy } else { sy / n as f64 };
        self.points.push((sx / n as f64, y));
        if self.points.len() >= self.cap {
            let peaks = self.peaks;
            let merged: Vec<(f64, f64)> = self
                .points
                .chunks(2)
                .map(|c| {
                    let n = c.len() as f64;
                    let ys = c.iter().map(|p| p.1);
                    let y = match peaks {
                        true => ys.fold(f64::NEG_INFINITY, f64::max),
                        false => ys.sum::<f64>() / n,
                    };
                    (c.iter().map(|p| p.0).sum::<f64>() / n, y)
                })
                .collect();
            self.points = merged;
            self.stride *= 2;
        }
    }

    /// The first raw point (stored points are averages: the first of them moves as the series
    /// gets coarser; a chart's axis starts here).
    pub fn first(&self) -> Option<(f64, f64)> {
        self.first
    }

    /// The newest raw point.
    pub fn last(&self) -> Option<(f64, f64)> {
        self.last
    }

    pub fn is_empty(&self) -> bool {
        self.last.is_none()
    }

    /// Stored points with x >= `from`, oldest first, ending with the newest raw point so the
    /// series always reaches "now".
    pub fn since(&self, from: f64) -> Vec<(f64, f64)> {
        let start = self.points.partition_point(|p| p.0 < from);
        let mut v = self.points[start..].to_vec();
        if let Some(l) = self.last.filter(|l| l.0 >= from) {
            if v.last().is_none_or(|p| p.0 < l.0) {
                v.push(l);
            }
        }
        v
    }

    pub fn all(&self) -> Vec<(f64, f64)> {
        self.since(f64::NEG_INFINITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_run_stays_bounded_evenly_spaced_and_keeps_its_shape() {
        let mut h = History::new(64);
        for i in 0..10_000 {
            h.push(i as f64, i as f64 * 2.0);
        }
        let all = h.all();
        assert!(all.len() <= 65, "{}", all.len());
        assert!(all.len() >= 32);
        // averaged buckets of a line stay on the line, and span the whole run
        for p in &all {
            assert!((p.1 - 2.0 * p.0).abs() < 1e-6, "{p:?}");
        }
        assert!(all[0].0 < 200.0);
        assert_eq!(*all.last().unwrap(), (9999.0, 19998.0));
        assert_eq!(h.first(), Some((0.0, 0.0)));
        let gaps: Vec<f64> = all.windows(2).map(|w| w[1].0 - w[0].0).collect();
        let g = gaps[0];
        assert!(
            gaps[..gaps.len() - 1].iter().all(|d| (d - g).abs() < 1e-9),
            "{gaps:?}"
        );
    }

    #[test]
    fn a_series_of_peaks_keeps_one_spike_of_a_long_run() {
        let (mut mean, mut peak) = (History::new(64), History::peaks(64));
        for i in 0..10_000 {
            let y = if i == 4321 { 50.0 } else { 1.0 };
            mean.push(i as f64, y);
            peak.push(i as f64, y);
        }
        let top = |h: &History| h.all().iter().map(|p| p.1).fold(0.0, f64::max);
        assert_eq!(top(&peak), 50.0);
        assert!(top(&mean) < 2.0, "averaged away: {}", top(&mean));
        assert!(peak.all().len() <= 65);
    }

    #[test]
    fn since_returns_the_window_and_the_newest_point() {
        let mut h = History::new(16);
        assert!(h.since(0.0).is_empty());
        for i in 0..10 {
            h.push(i as f64, 1.0);
        }
        let w = h.since(7.0);
        assert_eq!(
            w.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![7.0, 8.0, 9.0]
        );
        assert!(h.since(100.0).is_empty());
    }
}
