//! Team collectives beside their closest references in the same job (both
//! ranks call every one the same number of times; rank 0 times them):
//!
//! * `Team::alltoall` of 4 KiB per pair (the world team) beside the same
//!   exchange by hand: a put of the block into the peer's symmetric
//!   array, `sync`, `barrier` (what NPB FT did before teams);
//! * `Team::allgather` of 8 B per rank beside `Pgas::allreduce` of 8 B
//!   (the world collective of the same size);
//! * `Team::scan_inclusive` of 8 B beside `Team::allreduce` of 8 B;
//! * `Team::allreduce` of 8 B beside `Pgas::allreduce` of 8 B;
//! * `Team::allreduce` of 8 B on a split team of every rank (through its
//!   own shared-memory area where the ranks share a host) beside
//!   `Pgas::allreduce` of 8 B (the world team's, through the scratch block).

use super::measure::Bench;
use super::plan::Plan;
use crate::harness::results::Results;
use crate::harness::stats::batch_means;
use splitrt::pgas::{Op, Pgas, SymArray, Team};
use splitrt::Result;

/// Bytes per pair of the all-to-all rows.
pub const A2A_BYTES: usize = 4096;
/// Elements (u64) per pair of the all-to-all rows.
const A2A_WORDS: usize = A2A_BYTES / 8;

/// Symmetric elements the by-hand all-to-all needs (two ranks, a block
/// from each).
pub const HAND_WORDS: usize = 2 * A2A_WORDS;

/// Time `op` on rank 0 (the other rank runs it as often) and record it.
fn row(
    pg: &Pgas,
    plan: &Plan,
    b: Bench,
    rep: usize,
    out: &mut Results<Bench>,
    op: impl FnMut() -> Result<()>,
) -> Result<()> {
    // fewer calls than a ping-pong: a collective is tens of microseconds
    let (batches, batch) = (plan.batches, (plan.batch / 10).max(1));
    pg.barrier()?;
    let means = batch_means((batches * batch / 10).max(1), batches, batch, op)?;
    if pg.rank() == 0 {
        out.push_latency(b, 0, rep, &means);
    }
    Ok(())
}

/// Every collective row of one repetition (both ranks call it).
pub fn run(
    pg: &Pgas,
    plan: &Plan,
    hand: &SymArray<u64>,
    rep: usize,
    out: &mut Results<Bench>,
) -> Result<()> {
    let world: Team = pg.world();
    let (me, n) = (pg.rank(), pg.size());
    let send = vec![me as u64; A2A_WORDS * n];
    let mut recv = vec![0u64; A2A_WORDS * n];
    row(pg, plan, Bench::TeamAlltoall, rep, out, || {
        world.alltoall(&send, &mut recv)
    })?;
    row(pg, plan, Bench::HandAlltoall, rep, out, || {
        for j in (0..n).filter(|&j| j != me) {
            pg.put(
                hand.at(j, me * A2A_WORDS),
                &send[j * A2A_WORDS..(j + 1) * A2A_WORDS],
            )?;
        }
        pg.sync()?;
        pg.barrier()?;
        hand.local().copy_to(&mut recv);
        Ok(())
    })?;
    let mut one = [me as u64 + 1];
    let mut all = vec![0u64; n];
    row(pg, plan, Bench::TeamAllgather, rep, out, || {
        world.allgather(&one, &mut all)
    })?;
    row(pg, plan, Bench::PgasAllreduce, rep, out, || {
        one[0] = me as u64 + 1;
        pg.allreduce(&mut one, Op::Sum)
    })?;
    row(pg, plan, Bench::TeamAllreduce, rep, out, || {
        one[0] = me as u64 + 1;
        world.allreduce(&mut one, Op::Sum)
    })?;
    row(pg, plan, Bench::TeamScan, rep, out, || {
        one[0] = me as u64 + 1;
        world.scan_inclusive(&mut one, Op::Sum)
    })?;
    let split = world.split(Some(0), me as u64)?;
    row(pg, plan, Bench::SplitTeamAllreduce, rep, out, || {
        one[0] = me as u64 + 1;
        split.allreduce(&mut one, Op::Sum)
    })?;
    pg.barrier()
}
