//! Local SGD (PyTorch's PostLocalSGD): between averages each rank steps alone on its shard; at a
//! sync point the ranks' parameters (and, by choice, optimizer moments) are replaced by their
//! mean, one all-reduce through the `Collective` (so it works across processes unchanged).

use std::time::Instant;

use super::Moved;
use crate::backend::Replica;
use crate::comm::{Collective, CollectiveError};

/// `v` = the sum over ranks / ranks, in place (the sum in fixed rank order).
pub(super) fn mean_across(
    v: &mut Vec<f32>,
    coll: &mut dyn Collective,
    moved: &mut Moved,
) -> Result<(), CollectiveError> {
    let r = coll.all_reduce_sum(v)?;
    let t = Instant::now();
    let world = coll.world_size() as f32;
    v.iter_mut().for_each(|x| *x /= world);
    moved.wait += r.wait;
    moved.comm += r.transfer + t.elapsed();
    Ok(())
}

/// Replaces every rank's parameters (and moments) by the ranks' mean.
pub(super) fn average(
    replica: &mut dyn Replica,
    coll: &mut dyn Collective,
    moments: bool,
    buf: &mut Vec<f32>,
) -> Result<Moved, CollectiveError> {
    let mut moved = Moved::default();
    // (the mean of one rank is itself: a 1-device point of `scale` copied its parameters out
    // and back for nothing, which lowered the baseline of local SGD's speedups)
    if coll.world_size() == 1 {
        return Ok(moved);
    }
    let t = Instant::now();
    if moments {
        let mut s = replica.export();
        moved.transfer += t.elapsed();
        mean_across(&mut s.params, coll, &mut moved)?;
        for m in [&mut s.opt.m, &mut s.opt.v] {
            // every rank has the same optimizer, so skips the same buffers
            if !m.is_empty() {
                mean_across(m, coll, &mut moved)?;
            }
        }
        let t = Instant::now();
        replica.import(&s);
        moved.transfer += t.elapsed();
    } else {
        replica.params_to_host(buf);
        moved.transfer += t.elapsed();
        mean_across(buf, coll, &mut moved)?;
        let t = Instant::now();
        replica.params_from_host(buf);
        moved.transfer += t.elapsed();
    }
    Ok(moved)
}
