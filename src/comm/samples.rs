//! Each rank's newest device sample, as words (opaque here), passed from the other processes
//! of a run to process 0 beside the exchanges: process 0 reads the GPUs of its own machine,
//! the other machines' processes read theirs and send what they read.
//!
//! A message is `[width, rank, width words, rank, width words, ...]`: the newest samples of a
//! process's ranks. Only the newest counts; one not sent before a newer one comes is dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most words a sample may be.
const MOST_WIDTH: usize = 64;

pub struct Samples {
    /// The run's ranks: a message of another rank is malformed.
    ranks: usize,
    /// This process's newest, not yet sent.
    fresh: Mutex<Option<Vec<u64>>>,
    /// The other processes' ranks' newest, and when each came.
    heard: Mutex<HashMap<usize, (Vec<u64>, Instant)>>,
}

impl Samples {
    /// Samples of a run of `ranks` ranks.
    pub fn new(ranks: usize) -> Samples {
        Samples {
            ranks,
            fresh: Mutex::default(),
            heard: Mutex::default(),
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
        let mut message = vec![width as u64];
        for (rank, words) in samples {
            message.push(*rank as u64);
            message.extend_from_slice(words);
        }
        if let Ok(mut f) = self.fresh.lock() {
            *f = Some(message);
        }
    }

    /// The message to send, where a sample was posted since the last call.
    pub fn take_fresh(&self) -> Option<Vec<u64>> {
        self.fresh.lock().ok()?.take()
    }

    /// Another process's message (as `post` made it; a malformed one, of a width past
    /// `MOST_WIDTH` or a rank past the run's, is dropped whole): at most a sample a rank is kept.
    pub fn heard(&self, message: &[u64]) {
        let Some((&width, rest)) = message.split_first() else {
            return;
        };
        let Some(chunk) = usize::try_from(width)
            .ok()
            .filter(|w| (1..=MOST_WIDTH).contains(w))
            .map(|w| w + 1)
        else {
            return;
        };
        let chunks = rest.chunks_exact(chunk);
        let ranks_ok =
            (chunks.clone()).all(|c| usize::try_from(c[0]).is_ok_and(|r| r < self.ranks));
        if !chunks.remainder().is_empty() || !ranks_ok {
            return;
        }
        let now = Instant::now();
        let Ok(mut heard) = self.heard.lock() else {
            return;
        };
        for c in chunks {
            heard.insert(c[0] as usize, (c[1..].to_vec(), now));
        }
    }

    /// Rank `rank`'s newest sample from its process, where one came within `within`.
    pub fn of(&self, rank: usize, within: Duration) -> Option<Vec<u64>> {
        let heard = self.heard.lock().ok()?;
        let (words, at) = heard.get(&rank)?;
        (at.elapsed() <= within).then(|| words.clone())
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
    fn a_malformed_message_changes_nothing() {
        let here = Samples::new(2);
        here.heard(&[2, 1, 10, 11]);
        let too_wide = [&[65][..], &[65; 67]].concat();
        let bad: [&[u64]; 8] = [
            &[],
            &[0, 1],
            &[2, 1, 10],
            &[3, 1, 10, 11],
            &[u64::MAX],
            &[u64::MAX, 1, 2],
            &[2, 1, 12, 13, 2, 14, 15],
            &too_wide,
        ];
        for b in bad {
            here.heard(b);
        }
        let long = Duration::from_secs(60);
        assert_eq!(here.of(1, long), Some(vec![10, 11]));
        assert_eq!(here.of(2, long), None);
        // samples of different lengths are not posted
        let there = Samples::new(2);
        there.post(&[(0, vec![1]), (1, vec![1, 2])]);
        assert_eq!(there.take_fresh(), None);
    }
}
