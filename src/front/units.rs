//! Numbers and times as the screen and the log write them: `01:15`, `1.8 s`, `41.2k`, `3.0 GiB`.

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

/// 1.2k, 34.5k, 1.20M.
pub fn si(v: f64) -> String {
    match v.abs() {
        // (999.5k and up round to 1000k: those are millions)
        x if x >= 999_500.0 => format!("{:.2}M", v / 1e6),
        x if x >= 1e5 => format!("{:.0}k", v / 1e3),
        x if x >= 1e4 => format!("{:.1}k", v / 1e3),
        x if x >= 1e3 => format!("{:.2}k", v / 1e3),
        _ => format!("{v:.0}"),
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
        assert_eq!(si(41_234.0), "41.2k");
        assert_eq!(si(614_800.0), "615k");
        assert_eq!(si(999_700.0), "1.00M");
        assert_eq!(si(2_500_000.0), "2.50M");
        assert_eq!(bytes(45 << 20), "45 MiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
