//! Rank 0's side of a step boundary: the controls drained and decided, and every rank's
//! agreement on that decision.

use crossbeam_channel::Receiver;

use super::{Ask, Control};
use crate::comm::{Collective, CollectiveError};

/// What every rank does at the next step boundary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    pub batch: Option<usize>,
    pub checkpoint: bool,
    pub stop: Option<bool>,
    /// The run was paused and resumed before this step.
    pub was_paused: bool,
    /// The run is paused: every rank meets again (a paused run's processes keep answering
    /// each other, so that none takes the pause for a lost peer); with `checkpoint`, after
    /// writing one.
    pub hold: bool,
}

impl Decision {
    pub(super) fn encode(&self) -> [u64; 4] {
        [
            self.batch.map_or(0, |b| b as u64),
            self.checkpoint as u64,
            self.stop.map_or(0, |c| 1 + c as u64),
            self.was_paused as u64 | (self.hold as u64) << 1,
        ]
    }

    pub(super) fn decode(w: [u64; 4]) -> Decision {
        Decision {
            batch: (w[0] != 0).then_some(w[0] as usize),
            checkpoint: w[1] != 0,
            stop: (w[2] != 0).then_some(w[2] == 2),
            was_paused: w[3] & 1 != 0,
            hold: w[3] & 2 != 0,
        }
    }
}

/// How long rank 0 waits for a control while paused before the ranks meet again.
pub const HOLD: std::time::Duration = std::time::Duration::from_millis(500);

/// Rank 0's side: drains the control queue at a step boundary and decides. While paused it
/// waits here up to `HOLD` at a time (the other ranks wait in the exchange), so a paused run
/// uses almost no CPU.
pub struct Decider {
    rx: Receiver<Ask>,
    paused: bool,
    /// What was asked while paused, kept until the run resumes (or stops).
    held: Decision,
    /// Dropped with the decider: its controllers then refuse every ask as the run's end.
    open: Option<super::Open>,
}

/// What rank 0's decider tells the run as it happens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heard {
    /// The run paused (`true`) or resumed.
    Paused(bool),
    /// A control taken, and who asked for it (where the sender named someone).
    Asked(Control, String),
}

impl Decider {
    pub fn new(rx: Receiver<Ask>) -> Self {
        Decider {
            rx,
            paused: false,
            held: Decision::default(),
            open: None,
        }
    }

    /// The decider of the run `open` is of (`Controller::open`).
    pub(crate) fn while_open(self, open: super::Open) -> Self {
        Decider {
            open: Some(open),
            ..self
        }
    }

    /// The run has trained its last step (no boundary follows): asks are refused as such.
    pub(crate) fn finishing(&self) {
        if let Some(open) = &self.open {
            open.finishing();
        }
    }

    /// `heard` is told of each control named for someone as it is taken, and of the run
    /// pausing and resuming.
    pub fn decide(&mut self, heard: &mut dyn FnMut(Heard)) -> Decision {
        let mut d = std::mem::take(&mut self.held);
        loop {
            let next = if self.paused && d.stop.is_none() {
                match self.rx.recv_timeout(HOLD) {
                    Ok(a) => Some(a),
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                        // the ranks meet again; what was asked waits for the resume
                        self.held = d;
                        return Decision {
                            hold: true,
                            ..Decision::default()
                        };
                    }
                    // nobody can resume us
                    Err(_) => Some(Control::Stop { checkpoint: true }.into()),
                }
            } else {
                self.rx.try_recv().ok()
            };
            let Some(Ask { control: c, by }) = next else {
                break;
            };
            if let Some(by) = by {
                heard(Heard::Asked(c, by));
            }
            match c {
                Control::Pause if !self.paused => {
                    self.paused = true;
                    heard(Heard::Paused(true));
                }
                Control::Resume if self.paused => {
                    self.paused = false;
                    d.was_paused = true;
                    heard(Heard::Paused(false));
                }
                Control::SetBatch(b) => d.batch = Some(b),
                Control::Checkpoint => {
                    d.checkpoint = true;
                    if let Some(open) = &self.open {
                        open.checkpoint_taken();
                    }
                }
                Control::Stop { checkpoint } => d.stop = Some(checkpoint || d.stop == Some(true)),
                Control::Pause | Control::Resume => {}
            }
            // a checkpoint asked while paused is written now: the ranks meet, write it and
            // stay paused (the rest waits for the resume)
            if self.paused && d.checkpoint && d.stop.is_none() {
                d.checkpoint = false;
                self.held = d;
                return Decision {
                    hold: true,
                    checkpoint: true,
                    ..Decision::default()
                };
            }
        }
        d
    }
}

/// Every rank calls this at every step boundary: rank 0 decides, everybody gets the same answer.
/// With `report` (a run over several processes), every rank's report words also go to every
/// rank, in rank order, into `reports`.
pub fn agree(
    coll: &mut dyn Collective,
    decider: Option<&mut Decider>,
    heard: &mut dyn FnMut(Heard),
    report: Option<(&[u64], &mut Vec<u64>)>,
) -> Result<Decision, CollectiveError> {
    let mut words = match decider {
        Some(d) => d.decide(heard).encode(),
        None => [0; 4],
    };
    let Some((mine, reports)) = report else {
        coll.broadcast_u64(&mut words, 0)?;
        return Ok(Decision::decode(words));
    };
    let width = words.len() + mine.len();
    let record: Vec<u64> = words.iter().chain(mine).copied().collect();
    let mut all = vec![0u64; width * coll.world_size()];
    coll.all_gather_u64(&record, &mut all)?;
    reports.clear();
    for r in all.chunks(width) {
        reports.extend_from_slice(&r[words.len()..]);
    }
    let decision = |r: &[u64]| Decision::decode(r[..4].try_into().expect("four words"));
    let mut d = decision(&all);
    // a stop asked in another process (a signal there) stops the run as one asked here does,
    // a pause or not; rank 0 tells who asked (the first rank of the process that did)
    let theirs = all.chunks(width).enumerate().skip(1);
    for (rank, checkpoint) in theirs.filter_map(|(r, w)| Some((r, decision(w).stop?))) {
        if coll.rank() == 0 && d.stop.is_none() {
            heard(Heard::Asked(
                Control::Stop { checkpoint },
                // (a signal there: its own, or the whole job's, which reached it first)
                format!("a signal to the process of rank {rank} (or to the whole job: mpirun passes one on to every process)"),
            ));
        }
        d.stop = Some(d.stop.unwrap_or(false) || checkpoint);
        d.hold = false;
    }
    Ok(d)
}
