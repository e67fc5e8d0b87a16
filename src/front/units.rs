//! Numbers and times as the screen and the log write them: `01:15`, `1.8 s`, `41.2k`, `3.0 GiB`,
//! a gradient norm `0.862` or `2.44e13`.

use crate::observe::monitor::Shares;
use std::time::Duration;

/// `mm:ss`, or `h:mm:ss` from an hour on.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{:02}:{:02}", s / 60, s % 60)
    }
}

/// How long a whole run took: seconds under a minute (`0.84 s`, `12.3 s`: a short run is not
/// `00:00`), else as a clock.
pub fn took(d: Duration) -> String {
    match d.as_secs_f64() {
        s if s < 0.995 => format!("{s:.2} s"),
        s if s < 59.95 => format!("{s:.1} s"),
        // (as the header's clock counts: whole seconds gone)
        _ => clock(d),
    }
}

/// 0.72, 8.4, 950, 1.2k, 34.5k, 1.20M: three figures at most, two below 10 (a rate of a sample
/// every few seconds is not 1).
pub fn si(v: f64) -> String {
    match v.abs() {
        // (999.5k and up round to 1000k: those are millions)
        x if x >= 999_500.0 => format!("{:.2}M", v / 1e6),
        x if x >= 1e5 => format!("{:.0}k", v / 1e3),
        x if x >= 1e4 => format!("{:.1}k", v / 1e3),
        x if x >= 1e3 => format!("{:.2}k", v / 1e3),
        x if x >= 9.95 || x == 0.0 => format!("{v:.0}"),
        x if x >= 0.995 => format!("{v:.1}"),
        _ => format!("{v:.2}"),
    }
}

/// 512 MiB, 23.4 GiB.
pub fn bytes(b: u64) -> String {
    let g = b as f64 / (1u64 << 30) as f64;
    if g >= 1.0 {
        format!("{g:.1} GiB")
    } else {
        format!("{} MiB", b >> 20)
    }
}

/// A gradient's norm as the log and the screen write it: 3 decimals from 0.001 to 99999, else
/// in scientific notation (`6.10e-4`, `2.44e13`); `-` where not recorded, `inf` past float32.
pub fn grad_norm(n: f32) -> String {
    match n.abs() {
        // (not recorded: a file from before norms were)
        a if a.is_nan() => "-".into(),
        // (past float32: gradients overflowing, the loss soon to follow)
        a if a.is_infinite() => "inf".into(),
        a if a == 0.0 || (1e-3..1e5).contains(&a) => format!("{n:.3}"),
        _ => format!("{n:.2e}"),
    }
}

/// A bound as given (`--clip-grad-norm 0.3`): as written from 0.001 to 99999, else in
/// scientific notation (`1e30`, `1e-7`).
pub fn bound_value(c: f32) -> String {
    match (1e-3..1e5).contains(&c.abs()) {
        true => format!("{c}"),
        false => format!("{c:e}"),
    }
}

/// A loss with `dp` decimals, or in scientific notation where those would show only zeros or
/// run to more than five whole digits (a diverged run's 9.70e25).
pub fn loss_value(l: f64, dp: usize) -> String {
    let small = l != 0.0 && l.abs() < 10f64.powi(-(dp as i32));
    if small || (l.is_finite() && l.abs() >= 1e5) {
        let p = dp.saturating_sub(2);
        format!("{l:.p$e}")
    } else {
        format!("{l:.dp$}")
    }
}

/// A step's time in the devices' column (8 wide): `3.31ms`, `123.45ms`, from a second `8.89s`.
pub fn step_secs(s: f64) -> String {
    match s {
        s if s < 0.999995 => format!("{:.2}ms", s * 1e3),
        s if s < 99.995 => format!("{s:.2}s"),
        s => format!("{s:.0}s"),
    }
}

/// Where the ranks' step time went (`Totals::shares`) in whole percents that add up to 100:
/// the four parts as `names` says them, then host transfers (central storage, local SGD) as
/// `transfer` and what the parts leave of the step as `other`, each where it makes a percent;
/// each part `n/a` before any step.
pub fn time_shares(shares: Option<Shares>, names: [&str; 4], sep: &str) -> String {
    let parts: Vec<String> = match shares {
        None => names.iter().map(|n| format!("{n} n/a")).collect(),
        Some(shares) => (names.iter().chain(&["transfer", "other"]))
            .zip(crate::text::whole_percents(&shares))
            .enumerate()
            .filter(|&(i, (_, p))| i < 4 || p > 0)
            .map(|(_, (n, p))| format!("{n} {p}%"))
            .collect(),
    };
    parts.join(sep)
}

/// `time_shares` as the step lines and the summaries name the parts: `compute 72%, data 20%,
/// comm 0%, wait 0%, other 8%`.
pub fn ranks_time(shares: Option<Shares>) -> String {
    time_shares(shares, ["compute", "data", "comm", "wait"], ", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_read_well() {
        assert_eq!(clock(Duration::from_secs(75)), "01:15");
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
        assert_eq!(took(Duration::from_millis(40)), "0.04 s");
        assert_eq!(took(Duration::from_millis(1840)), "1.8 s");
        assert_eq!(took(Duration::from_millis(59_960)), "00:59");
        assert_eq!(took(Duration::from_secs(75)), "01:15");
        assert_eq!(si(950.0), "950");
        assert_eq!(si(12.4), "12");
        assert_eq!(si(8.44), "8.4");
        assert_eq!(si(0.7), "0.70");
        assert_eq!(si(0.0), "0");
        assert_eq!(si(41_234.0), "41.2k");
        assert_eq!(si(614_800.0), "615k");
        assert_eq!(si(999_700.0), "1.00M");
        assert_eq!(si(2_500_000.0), "2.50M");
        assert_eq!(bytes(45 << 20), "45 MiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn norms_and_bounds_read_well_at_any_size() {
        assert_eq!(grad_norm(0.8623), "0.862");
        assert_eq!(grad_norm(0.0), "0.000");
        assert_eq!(grad_norm(6.1e-4), "6.10e-4");
        assert_eq!(grad_norm(2.437e13), "2.44e13");
        assert_eq!(grad_norm(f32::NAN), "-");
        assert_eq!(bound_value(0.3), "0.3");
        assert_eq!(bound_value(1000.0), "1000");
        assert_eq!(bound_value(1e30), "1e30");
        assert_eq!(bound_value(1e-7), "1e-7");
    }

    #[test]
    fn step_times_fit_their_column() {
        assert_eq!(step_secs(0.00331), "3.31ms");
        assert_eq!(step_secs(0.12345), "123.45ms");
        assert_eq!(step_secs(0.999996), "1.00s");
        assert_eq!(step_secs(8.8945), "8.89s");
        assert_eq!(step_secs(1234.5), "1234s");
        assert!([0.5, 9.0, 99.0, 9999.0]
            .iter()
            .all(|&s| step_secs(s).len() <= 8));
    }

    #[test]
    fn time_shares_are_parts_before_any_step() {
        let names = ["compute", "data", "comm", "wait"];
        assert_eq!(
            time_shares(None, names, " · "),
            "compute n/a · data n/a · comm n/a · wait n/a"
        );
        assert_eq!(
            time_shares(Some([0.5, 0.25, 0.25, 0.0, 0.0, 0.0]), names, ", "),
            "compute 50%, data 25%, comm 25%, wait 0%"
        );
        // (central storage's transfers named apart from what the parts leave)
        assert_eq!(
            time_shares(Some([0.5, 0.1, 0.0, 0.0, 0.3, 0.1]), names, ", "),
            "compute 50%, data 10%, comm 0%, wait 0%, transfer 30%, other 10%"
        );
    }
}
