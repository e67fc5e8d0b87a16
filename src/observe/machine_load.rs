//! What else keeps the cores this run may run on here busy while it trains: another run, a
//! build, the hypervisor (steal time). Read from /proc between two telemetry samples: those
//! cores' busy time (/proc/stat's lines of the CPUs in the affinity of this process and of its
//! siblings, the run's other processes on this machine, which a launcher may bind to cores of
//! their own) less these processes' own. Linux only; elsewhere nothing is said.

use std::collections::HashMap;

/// The machine's CPU time over a span, in cores (time busy over the span's length).
#[derive(Clone, Debug, PartialEq)]
pub struct Load {
    /// The cores the machine has.
    pub cores: usize,
    /// Cores' worth of time this run's processes here took.
    pub ours: f64,
    /// Cores' worth of time everything else took (steal time included).
    pub others: f64,
    /// The other process that took the most, with its cores' worth (`steal`: the hypervisor).
    pub top: Option<(String, f64)>,
}

/// The most bytes of the top process's name a load sent to process 0 keeps.
const NAME_BYTES: usize = 64;
/// The least share of the other work's cores (and of one core) a process took to be named as
/// what took them.
const NAMED_LEAST: f64 = 0.2;

/// The most cores a machine's load may say it has.
const MOST_CORES: u64 = 1 << 20;

impl Load {
    /// As words, for process 0 (`comm::samples`): cores, ours, others, the top process's cores
    /// (`u64::MAX`: none) and its name (`comm::words`, cut to `NAME_BYTES`).
    pub fn to_words(&self) -> Vec<u64> {
        let (name, top) = match &self.top {
            Some((n, c)) => (n.as_str(), c.to_bits()),
            None => ("", u64::MAX),
        };
        let cut = (0..=name.len().min(NAME_BYTES))
            .rev()
            .find(|&i| name.is_char_boundary(i));
        let mut words = vec![
            self.cores as u64,
            self.ours.to_bits(),
            self.others.to_bits(),
            top,
        ];
        words.extend(crate::comm::words::text_words(&name[..cut.unwrap_or(0)]));
        words
    }

    /// The load `to_words` made; `None` where the words are no load (another version's, or
    /// damaged: a count of cores or a time no machine has).
    pub fn from_words(words: &[u64]) -> Option<Load> {
        let [cores, ours, others, top, ref rest @ ..] = *words else {
            return None;
        };
        let time = |bits: u64| Some(f64::from_bits(bits)).filter(|t| t.is_finite() && *t >= 0.0);
        // (the name whole, and nothing after it)
        let whole = (rest.first())
            .is_some_and(|&n| n <= NAME_BYTES as u64 && rest.len() as u64 == 1 + n.div_ceil(8));
        let ok = (1..=MOST_CORES).contains(&cores) && whole;
        let name = crate::comm::words::text_of(rest).0;
        let top = match top {
            u64::MAX => None,
            c => Some((name, time(c)?)),
        };
        ok.then_some(Load {
            cores: cores as usize,
            ours: time(ours)?,
            others: time(others)?,
            top,
        })
    }

    /// Whether the others' time left this run short of cores: they take half a core or more,
    /// and with ours the machine was nearly full.
    pub fn contended(&self) -> bool {
        self.others >= 0.5 && self.ours + self.others >= 0.9 * self.cores as f64
    }
}

/// One process's figures from /proc/PID/stat.
struct Proc {
    comm: String,
    ticks: u64,
}

/// Reads the machine's and the processes' CPU time at each `sample`, for the span since the
/// one before.
#[derive(Default)]
pub struct LoadMeter {
    /// The process ids of the run's other processes on this machine.
    pub siblings: Vec<u32>,
    /// The machine's (busy, total, steal) ticks and this process's, at the last sample.
    last: Option<(Ticks, u64)>,
    /// The siblings' ticks at the last sample (those that could be read).
    siblings_last: HashMap<u32, u64>,
    /// Every process's ticks at the last scan (a scan is made only where others took time).
    scanned: HashMap<u32, u64>,
}

#[derive(Clone, Copy)]
struct Ticks {
    busy: u64,
    total: u64,
    steal: u64,
    cores: usize,
}

impl LoadMeter {
    /// The load since the last call (`None` the first time, and where /proc cannot tell).
    pub fn sample(&mut self) -> Option<Load> {
        let me = std::process::id();
        let mut cpus = allowed_cpus();
        if !cpus.is_empty() {
            for &pid in &self.siblings {
                cpus.extend(sibling_cpus(pid));
            }
            cpus.sort_unstable();
            cpus.dedup();
        }
        let now = machine_ticks(&cpus)?;
        let siblings: HashMap<u32, u64> = (self.siblings.iter())
            .filter_map(|&pid| Some((pid, read_proc(pid)?.ticks)))
            .collect();
        let siblings_took = grown(&self.siblings_last, &siblings);
        self.siblings_last = siblings;
        let mine = read_proc(me)?.ticks;
        let Some((before, mine_before)) = self.last.replace((now, mine)) else {
            // (every process's ticks at the start too: a first span others took can name
            // the top one, as `scale`'s single span over a point's timed steps must)
            self.scanned = (scan().into_iter())
                .map(|(pid, p)| (pid, p.ticks))
                .collect();
            return None;
        };
        let total = now.total.saturating_sub(before.total);
        if total == 0 || now.cores == 0 {
            return None;
        }
        // a core's ticks over the span
        let span = total as f64 / now.cores as f64;
        let cores = |t: u64| t as f64 / span;
        let busy = now.busy.saturating_sub(before.busy);
        let own = mine.saturating_sub(mine_before) + siblings_took;
        let mut load = Load {
            cores: now.cores,
            ours: cores(own),
            others: cores(busy.saturating_sub(own)),
            top: None,
        };
        // (only where others took time: the scan reads every process's stat)
        if load.others < 0.5 {
            self.scanned.clear();
            return Some(load);
        }
        let procs = scan();
        let mut top: Option<(String, u64)> = None;
        for (pid, p) in &procs {
            let Some(was) = self.scanned.get(pid) else {
                continue;
            };
            if *pid == me || self.siblings.contains(pid) {
                continue;
            }
            let took = p.ticks.saturating_sub(*was);
            if top.as_ref().is_none_or(|(_, t)| took > *t) {
                top = Some((format!("{} (pid {pid})", p.comm), took));
            }
        }
        let steal = now.steal.saturating_sub(before.steal);
        if top.as_ref().is_none_or(|(_, t)| steal > *t) && cores(steal) >= 0.25 {
            top = Some(("the hypervisor (steal time)".into(), steal));
        }
        self.scanned = procs.into_iter().map(|(pid, p)| (pid, p.ticks)).collect();
        // (ticks are counted apart: one process's never more than all the others'; one named
        // only where it stands out: short-lived ones, as a build's, leave none that does)
        let others = load.others;
        let stands_out = |c: f64| c >= NAMED_LEAST * others.max(1.0);
        load.top = (top.map(|(n, t)| (n, cores(t).min(others)))).filter(|(_, c)| stands_out(*c));
        Some(load)
    }
}

/// The CPUs this process may run on (its affinity; empty where it cannot be read).
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, filled in by sched_getaffinity
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a cpu_set_t of `size` bytes; pid 0 is this thread
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET reads the set, each index under its size in bits
    (0..size * 8)
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect()
}

/// The ticks processes took between two readings of theirs (`before`, `now`): those read both
/// times only (one that ended or began between them took what cannot be told).
fn grown(before: &HashMap<u32, u64>, now: &HashMap<u32, u64>) -> u64 {
    (now.iter())
        .filter_map(|(pid, t)| Some(t.saturating_sub(*before.get(pid)?)))
        .sum()
}

/// The CPUs process `pid` may run on (/proc/PID/status's `Cpus_allowed_list`; none where it
/// cannot be read).
fn sibling_cpus(pid: u32) -> Vec<usize> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    (text.lines())
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map_or(Vec::new(), cpu_list)
}

/// A list of CPUs as the kernel writes one (`0-3,8,10-11`).
fn cpu_list(text: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(lo), Ok(hi)) = (lo.trim().parse::<usize>(), hi.trim().parse::<usize>()) {
            // (a list past any machine's CPUs is not one)
            if hi >= lo && hi < 1 << 16 {
                cpus.extend(lo..=hi);
            }
        }
    }
    cpus
}

/// The ticks of the CPUs `allowed` (all where empty) from /proc/stat's `cpuN` lines (busy: all
/// but idle and iowait), and how many of them there are.
fn machine_ticks(allowed: &[usize]) -> Option<Ticks> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    stat_ticks(&text, allowed)
}

fn stat_ticks(text: &str, allowed: &[usize]) -> Option<Ticks> {
    let mut sum = Ticks {
        busy: 0,
        total: 0,
        steal: 0,
        cores: 0,
    };
    for line in text.lines().skip(1).take_while(|l| l.starts_with("cpu")) {
        let mut fields = line.split_whitespace();
        let Some(cpu) = fields.next().and_then(|c| c[3..].parse::<usize>().ok()) else {
            continue;
        };
        if !allowed.is_empty() && !allowed.contains(&cpu) {
            continue;
        }
        let v: Vec<u64> = fields.filter_map(|f| f.parse().ok()).collect();
        if v.len() < 8 {
            return None;
        }
        // user nice system idle iowait irq softirq steal (guest time is within user already)
        let total: u64 = v[..8].iter().sum();
        sum.busy += total - v[3] - v[4];
        sum.total += total;
        sum.steal += v[7];
        sum.cores += 1;
    }
    (sum.cores > 0).then_some(sum)
}

/// A process's name and CPU ticks (user + system) from /proc/PID/stat.
fn read_proc(pid: u32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<Proc> {
    // (the name is in parentheses and may hold spaces or parentheses itself)
    let (open, close) = (text.find('(')?, text.rfind(')')?);
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // after the name: state ppid ... utime (the 12th) stime (the 13th)
    let field = |i: usize| rest.get(i).and_then(|f| f.parse::<u64>().ok());
    Some(Proc {
        comm,
        ticks: field(11)? + field(12)?,
    })
}

/// Every process's figures.
fn scan() -> HashMap<u32, Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, read_proc(pid)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_s_stat_is_read_whatever_its_name_holds() {
        let p = parse_stat(
            "4242 (cc1 (plus) x) R 77 4242 1 0 -1 4194304 500 0 0 0 1234 56 0 0 20 0 1 0 9 1 1",
        )
        .unwrap();
        assert_eq!((p.comm.as_str(), p.ticks), ("cc1 (plus) x", 1290));
        assert!(parse_stat("4242 (x) R").is_none());
    }

    #[test]
    fn only_the_cores_this_process_may_use_are_counted() {
        let stat = "cpu  30 0 30 140 0 0 0 0 0 0\ncpu0 10 0 10 0 0 0 0 0 0 0\ncpu1 20 0 20 40 0 0 0 0 0 0\ncpu2 0 0 0 100 0 0 0 0 0 0\nintr 1\n";
        let all = stat_ticks(stat, &[]).unwrap();
        assert_eq!((all.cores, all.busy, all.total), (3, 60, 200));
        // bound to cpu2 (idle): the busy others elsewhere are not this run's to share
        let bound = stat_ticks(stat, &[2]).unwrap();
        assert_eq!((bound.cores, bound.busy, bound.total), (1, 0, 100));
        assert!(stat_ticks(stat, &[7]).is_none());
    }

    #[test]
    fn siblings_count_what_they_took_between_two_readings_only() {
        let map = |v: &[(u32, u64)]| v.iter().copied().collect::<HashMap<u32, u64>>();
        let before = map(&[(10, 500), (11, 900)]);
        // 10 took 40 ticks; 11 ended (nothing counted, not its whole history); 12 began
        // (its ticks so far are not this span's)
        assert_eq!(grown(&before, &map(&[(10, 540), (12, 7000)])), 40);
        assert_eq!(grown(&HashMap::new(), &before), 0);
    }

    #[test]
    fn a_sibling_s_cores_are_read_from_the_kernel_s_list() {
        assert_eq!(cpu_list("0-3,8,10-11\n"), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(cpu_list("1"), [1]);
        // nothing readable: none (the process's own affinity stands alone)
        assert!(cpu_list("").is_empty() && cpu_list("x-y,3-1").is_empty());
        // this process's own list, as a sibling's would be read
        let mine = sibling_cpus(std::process::id());
        assert!(!mine.is_empty(), "Linux /proc/PID/status");
        assert_eq!(mine, allowed_cpus());
    }

    #[test]
    fn a_load_goes_to_process_0_as_words_and_damaged_words_are_no_load() {
        let load = Load {
            cores: 16,
            ours: 12.5,
            others: 3.25,
            top: Some(("cc1plus (pid 9)".into(), 2.0)),
        };
        assert_eq!(Load::from_words(&load.to_words()), Some(load.clone()));
        let none = Load {
            top: None,
            ..load.clone()
        };
        assert_eq!(Load::from_words(&none.to_words()), Some(none));
        // a long name is cut (on a character's boundary)
        let long = Load {
            top: Some(("é".repeat(40), 1.0)),
            ..load.clone()
        };
        let read = Load::from_words(&long.to_words()).unwrap();
        assert_eq!(read.top.unwrap().0, "é".repeat(32));
        let good = load.to_words();
        let mut bad = vec![good[..3].to_vec(), good[..good.len() - 1].to_vec()];
        for (i, w) in [
            (0, 0),
            (0, u64::MAX),
            (1, f64::NAN.to_bits()),
            (2, (-1.0f64).to_bits()),
        ] {
            let mut b = good.clone();
            b[i] = w;
            bad.push(b);
        }
        bad.push([&good[..], &[1]].concat());
        for b in bad {
            assert_eq!(Load::from_words(&b), None, "{b:?}");
        }
    }

    #[test]
    fn contention_needs_others_and_a_full_machine() {
        let load = |ours, others| Load {
            cores: 2,
            ours,
            others,
            top: None,
        };
        // a build beside a run on 2 cores: both short of cores
        assert!(load(1.2, 0.8).contended());
        // the run alone, with the odd daemon
        assert!(!load(1.9, 0.1).contended());
        // others busy but cores to spare
        assert!(!(Load {
            cores: 64,
            ..load(8.0, 16.0)
        })
        .contended());
    }

    #[test]
    fn the_machine_and_this_process_are_read_here() {
        let mut m = LoadMeter::default();
        assert!(m.sample().is_none(), "the first sample has no span");
        // some work of this process's own, so the span has ticks
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(60) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        assert!(x != 1);
        let load = m.sample().expect("Linux /proc");
        assert!(
            load.cores >= 1 && load.ours >= 0.0 && load.others >= 0.0,
            "{load:?}"
        );
    }
}
