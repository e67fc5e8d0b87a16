//! A worker that fails: its panic in words, and the stop it makes every other rank take.

use super::{Worker, WorkerEnd};
use crate::engine::events::Event;
use crate::engine::EngineError;

/// Worker `w`'s panic (`payload`) as its failure, in its words.
pub(in crate::engine) fn panicked(
    w: &Worker,
    payload: Box<dyn std::any::Any + Send>,
) -> EngineError {
    use crate::backend::cuda::symbols;
    let message = symbols::panic_text(&*payload).unwrap_or("unknown panic");
    let message = symbols::explained(message.to_string());
    EngineError::WorkerPanic {
        rank: w.rank,
        step: w.step + 1,
        message,
    }
}

/// A rank that stops with `e`: the others are woken with the reason, and the failure is
/// reported once (not for ranks that only stopped because another did).
pub(in crate::engine) fn stop_all(w: Worker, e: EngineError) -> Result<WorkerEnd, EngineError> {
    // process 0 has every rank's position: a run that stopped answering names the ranks lost
    // (and its failure is theirs, the first's: not this rank's, which waited for them)
    let mut lost = None;
    let e = match e {
        EngineError::Collective(crate::comm::CollectiveError::Lost(why)) => {
            let who = (w.local.start == 0)
                .then(|| crate::engine::heartbeat::behind(&w.beats.read()))
                .flatten();
            lost = who.as_ref().map(|(ranks, _)| ranks[0]);
            let why = who.map_or(why.clone(), |(_, who)| format!("{why}; {who}"));
            // (the silence of a process stopped by a signal on this machine, explained: by
            // every process, process 0 among the ones that may be)
            let why = match crate::pids::Peer::suspended(&w.peers_here, |_| true) {
                // (process 0 records another's words as its failure: they name the machine)
                Some(p) => {
                    let machine = match w.local.start {
                        0 => "this machine".to_string(),
                        _ => crate::pids::hostname(),
                    };
                    format!("{why}; {}", p.suspended_words(&machine))
                }
                None => why,
            };
            EngineError::Collective(crate::comm::CollectiveError::Lost(why))
        }
        e => e,
    };
    let knock_on = matches!(
        e,
        EngineError::Collective(crate::comm::CollectiveError::Aborted(_))
    );
    // the step that failed: the one running, a diverged one reported late, or the last one
    // done for a checkpoint that could not be written after it
    let step = match e {
        EngineError::NonFinite { step, .. } => step,
        EngineError::Checkpoint(_) => w.step,
        _ => w.step + 1,
    };
    // every rank sees a non-finite loss at once; rank 0 speaks for them
    let shared =
        matches!(e, EngineError::NonFinite { .. }) && w.rank != 0 && w.strategy.shares_loss(step);
    // (another process's failure it told of is its rank's)
    let rank = match &e {
        EngineError::Collective(crate::comm::CollectiveError::PeerFailed {
            rank: Some(r), ..
        }) => *r,
        _ => lost.unwrap_or(w.rank),
    };
    w.coll.abort(&format!("rank {rank} failed: {e}"));
    // (a write the process's quitting at once cut short is no failure: the run quit)
    if !knock_on && !shared && !crate::quit_at_once::quitting() {
        let _ = w.events.send(Event::Failed {
            rank,
            step,
            message: e.to_string(),
        });
    }
    Err(e)
}
