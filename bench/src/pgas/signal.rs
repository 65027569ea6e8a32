//! put_signal + wait round trips, beside the put + sync ping-pong of
//! [`super::latency::ping_pong`] in the same job: rank 0 put_signals a word
//! to rank 1 with its signal set to the trip's number, rank 1 waits for the
//! signal (`Signals::wait_until`, which serves AM-path traffic too) and
//! put_signals the word back to rank 0's signal; no `sync` per trip (the
//! signal says the data is there). One `sync` per repetition.

use super::latency::PING;
use super::measure::Bench;
use super::plan::Plan;
use crate::harness::results::Results;
use splitrt::pgas::{Cmp, Pgas, SignalOp, Signals, SymArray};
use splitrt::Result;

/// Signal words: rank 1's ping signal and rank 0's pong signal.
pub const WORDS: usize = 2;
const PING_SIG: usize = 0;
const PONG_SIG: usize = 1;

/// Round trips of 8 B put_signals between ranks 0 and 1 (both call it).
/// `words` carries the data (the put ping-pong's ping word), `sigs` the
/// signals. Values continue across repetitions.
pub fn ping_pong(
    pg: &Pgas,
    plan: &Plan,
    words: &SymArray<u64>,
    sigs: &Signals,
    rep: usize,
    out: &mut Results<Bench>,
) -> Result<()> {
    let ops = plan.latency_ops();
    let mut i = rep as u64 * ops;
    pg.barrier()?;
    if pg.rank() == 0 {
        let (ping, ping_sig) = (words.at(1, PING), sigs.at(1, PING_SIG));
        let means =
            crate::harness::stats::batch_means(plan.warm(), plan.batches, plan.batch, || {
                i += 1;
                pg.put_signal(ping, &[i], ping_sig, SignalOp::Set, i)?;
                sigs.wait_until(PONG_SIG, Cmp::Eq, i).map(|_| ())
            })?;
        out.push_latency(Bench::PutSignalPingPong, 0, rep, &means);
    } else {
        let (pong, pong_sig) = (words.at(0, PING), sigs.at(0, PONG_SIG));
        for _ in 0..ops {
            i += 1;
            sigs.wait_until(PING_SIG, Cmp::Eq, i)?;
            pg.put_signal(pong, &[i], pong_sig, SignalOp::Set, i)?;
        }
    }
    pg.sync()?;
    pg.barrier()
}
