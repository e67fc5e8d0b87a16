//! Each rank's newest device sample and each machine's newest load, as words (opaque here),
//! passed from the other processes of a run to process 0 beside the exchanges: process 0 reads
//! the GPUs and the cores of its own machine, the other machines' processes read theirs and
//! send what they read.
//!
//! A message is parts, each `[kind, length, length words]`: `DEVICES`, the newest samples of a
//! process's ranks (`[width, rank, width words, rank, width words, ...]`), and `LOAD`, the
//! newest load of its machine (`[rank, words...]`, by the process's first rank). Only the
//! newest counts; one not sent before a newer one comes is dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most words a sample or a load may be.
const MOST_WIDTH: usize = 64;

/// The kinds of a message's parts.
const DEVICES: u64 = 1;
const LOAD: u64 = 2;

pub struct Samples {
    /// The run's ranks: a message of another rank is malformed.
    ranks: usize,
    /// This process's newest samples and load (each a part's words), not yet sent.
    fresh: Mutex<Fresh>,
    /// The other processes' ranks' newest, and when each came.
    heard: Mutex<HashMap<usize, (Vec<u64>, Instant)>>,
    /// The other processes' machines' loads heard since `loads` was last called, newest only,
    /// by the rank of the process that sent it.
    loads: Mutex<Vec<(usize, Vec<u64>)>>,
}

#[derive(Default)]
struct Fresh {
    devices: Option<Vec<u64>>,
    load: Option<Vec<u64>>,
}

impl Samples {
    /// Samples of a run of `ranks` ranks.
    pub fn new(ranks: usize) -> Samples {
        Samples {
            ranks,
            fresh: Mutex::default(),
            heard: Mutex::default(),
            loads: Mutex::default(),
        }
    }

    /// This process's ranks' newest samples (each `(rank, words)`, every one as long), to be
    /// sent; replaces any not sent yet.
    pub fn post(&self, samples: &[(usize, Vec<u64>)]) {
        let Some(width) = samples.first().map(|(_, w)| w.len()) else {
            return;
        };
        if samples.iter().any(|(_, w)| w.len() != width) {
            return;
        }
        let mut part = vec![width as u64];
        for (rank, words) in samples {
            part.push(*rank as u64);
            part.extend_from_slice(words);
        }
        if let Ok(mut f) = self.fresh.lock() {
            f.devices = Some(part);
        }
    }

    /// This process's machine's newest load (`words`; this process's first rank `rank`), to
    /// be sent; replaces any not sent yet.
    pub fn post_load(&self, rank: usize, words: &[u64]) {
        if let Ok(mut f) = self.fresh.lock() {
            f.load = Some([&[rank as u64], words].concat());
        }
    }

    /// The message to send, where a sample or a load was posted since the last call.
    pub fn take_fresh(&self) -> Option<Vec<u64>> {
        let mut fresh = self.fresh.lock().ok()?;
        let parts = [(DEVICES, fresh.devices.take()), (LOAD, fresh.load.take())];
        let mut message = Vec::new();
        for (kind, part) in parts {
            if let Some(p) = part {
                message.extend([kind, p.len() as u64]);
                message.extend(p);
            }
        }
        (!message.is_empty()).then_some(message)
    }

    /// Another process's message (as `take_fresh` made it; a malformed one, with a part of
    /// an unknown kind, of a width past `MOST_WIDTH` or a rank past the run's, is dropped
    /// whole): at most a sample a rank is kept, and a load a process.
    pub fn heard(&self, message: &[u64]) {
        let Some(parts) = self.parts(message) else {
            return;
        };
        let now = Instant::now();
        for (kind, part) in parts {
            match kind {
                DEVICES => {
                    let Ok(mut heard) = self.heard.lock() else {
                        return;
                    };
                    let chunk = part[0] as usize + 1;
                    for c in part[1..].chunks_exact(chunk) {
                        heard.insert(c[0] as usize, (c[1..].to_vec(), now));
                    }
                }
                _ => {
                    let Ok(mut loads) = self.loads.lock() else {
                        return;
                    };
                    let rank = part[0] as usize;
                    loads.retain(|(r, _)| *r != rank);
                    loads.push((rank, part[1..].to_vec()));
                }
            }
        }
    }

    /// `message`'s parts, where each is well formed (`heard`).
    fn parts<'a>(&self, mut message: &'a [u64]) -> Option<Vec<(u64, &'a [u64])>> {
        let rank_ok = |r: u64| usize::try_from(r).is_ok_and(|r| r < self.ranks);
        let mut parts = Vec::new();
        while let [kind, len, ref rest @ ..] = *message {
            let len = usize::try_from(len).ok().filter(|&l| l <= rest.len())?;
            let (part, after) = rest.split_at(len);
            message = after;
            let ok = match kind {
                DEVICES => {
                    let width = part.first().and_then(|&w| usize::try_from(w).ok());
                    let chunk = width.filter(|w| (1..=MOST_WIDTH).contains(w))? + 1;
                    let chunks = part[1..].chunks_exact(chunk);
                    chunks.remainder().is_empty() && chunks.clone().all(|c| rank_ok(c[0]))
                }
                LOAD => part.first().is_some_and(|&r| rank_ok(r)) && len <= MOST_WIDTH + 1,
                _ => false,
            };
            if !ok {
                return None;
            }
            parts.push((kind, part));
        }
        message.is_empty().then_some(parts)
    }

    /// Rank `rank`'s newest sample from its process, where one came within `within`.
    pub fn of(&self, rank: usize, within: Duration) -> Option<Vec<u64>> {
        let heard = self.heard.lock().ok()?;
        let (words, at) = heard.get(&rank)?;
        (at.elapsed() <= within).then(|| words.clone())
    }

    /// The loads the other processes sent since the last call, the newest of each, by the
    /// first rank of the process that sent it.
    pub fn loads(&self) -> Vec<(usize, Vec<u64>)> {
        self.loads
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_posted_goes_once_and_is_heard_by_rank() {
        let (there, here) = (Samples::new(4), Samples::new(4));
        assert_eq!(there.take_fresh(), None);
        there.post(&[(2, vec![1, 2, 3]), (3, vec![4, 5, 6])]);
        // a newer post replaces one not sent
        there.post(&[(2, vec![7, 8, 9]), (3, vec![4, 5, 6])]);
        let message = there.take_fresh().expect("a message");
        assert_eq!(there.take_fresh(), None, "sent once");
        here.heard(&message);
        let long = Duration::from_secs(60);
        assert_eq!(here.of(2, long), Some(vec![7, 8, 9]));
        assert_eq!(here.of(3, long), Some(vec![4, 5, 6]));
        assert_eq!(here.of(0, long), None);
        // too old: not said
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(here.of(2, Duration::from_millis(1)), None);
    }

    #[test]
    fn a_machines_newest_load_is_heard_once_beside_the_samples() {
        let (there, here) = (Samples::new(4), Samples::new(4));
        there.post_load(2, &[1, 2]);
        there.post_load(2, &[3, 4, 5]);
        here.heard(&there.take_fresh().expect("a message"));
        assert_eq!(here.loads(), vec![(2, vec![3, 4, 5])]);
        assert_eq!(here.loads(), vec![], "taken once");
        // in one message with the samples; two heard before a look: the newer
        there.post(&[(2, vec![7]), (3, vec![8])]);
        there.post_load(2, &[6]);
        here.heard(&there.take_fresh().unwrap());
        there.post_load(2, &[9]);
        here.heard(&there.take_fresh().unwrap());
        assert_eq!(here.loads(), vec![(2, vec![9])]);
        assert_eq!(here.of(3, Duration::from_secs(60)), Some(vec![8]));
    }

    /// A message of one part of `kind`.
    fn part(kind: u64, words: &[u64]) -> Vec<u64> {
        [&[kind, words.len() as u64][..], words].concat()
    }

    #[test]
    fn a_malformed_message_changes_nothing() {
        let here = Samples::new(2);
        here.heard(&part(DEVICES, &[2, 1, 10, 11]));
        let too_wide = [&[65][..], &[65; 67]].concat();
        let devices: [&[u64]; 7] = [
            &[0, 1],
            &[2, 1, 10],
            &[3, 1, 10, 11],
            &[u64::MAX],
            &[u64::MAX, 1, 2],
            &[2, 1, 12, 13, 2, 14, 15],
            &too_wide,
        ];
        let mut bad: Vec<Vec<u64>> = devices.iter().map(|d| part(DEVICES, d)).collect();
        let load = part(LOAD, &[1, 5]);
        bad.extend([
            vec![DEVICES],
            vec![DEVICES, 4, 1, 1, 10],
            vec![DEVICES, u64::MAX, 1, 1, 10],
            part(3, &[1]),
            part(LOAD, &[]),
            part(LOAD, &[2, 5]),
            part(LOAD, &[1; 66]),
            // a good part beside a bad one: neither is taken
            [&load[..], &part(DEVICES, &[1, 2, 12])].concat(),
            [&part(DEVICES, &[2, 1, 12, 13]), &[9][..]].concat(),
        ]);
        for b in bad {
            here.heard(&b);
        }
        let long = Duration::from_secs(60);
        assert_eq!(here.of(1, long), Some(vec![10, 11]));
        assert_eq!(here.of(2, long), None);
        assert_eq!(here.loads(), vec![]);
        // samples of different lengths are not posted
        let there = Samples::new(2);
        there.post(&[(0, vec![1]), (1, vec![1, 2])]);
        assert_eq!(there.take_fresh(), None);
    }
}
