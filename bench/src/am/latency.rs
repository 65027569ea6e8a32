//! AM round-trip latency: send a ping request, wait (`Endpoint::wait_until`)
//! until its pong reply handler has run, repeat. One round trip is the full
//! request -> request handler -> reply -> reply handler cycle.

use splitrt::{Endpoint, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many round trips one measurement makes.
#[derive(Clone, Copy, Debug)]
pub struct Rounds {
    /// Untimed round trips first.
    pub warm: usize,
    /// Round trips per timed batch.
    pub batch: usize,
    /// Timed batches.
    pub batches: usize,
}

/// Run `rounds` round trips; `send(seq)` sends one ping carrying `seq`,
/// whose pong stores `seq` into `pong`. Sequence numbers continue from
/// `*seq`. Returns the mean round-trip time of each batch (ns).
pub fn round_trips(
    ep: &Endpoint,
    pong: &AtomicU64,
    seq: &mut u64,
    rounds: Rounds,
    mut send: impl FnMut(u64) -> Result<()>,
) -> Result<Vec<f64>> {
    let one = || -> Result<()> {
        *seq += 1;
        let s = *seq;
        send(s)?;
        ep.wait_until(|| pong.load(Ordering::Acquire) == s)
    };
    crate::harness::stats::batch_means(rounds.warm, rounds.batches, rounds.batch, one)
}
