//! Blocking 8-byte one-sided operations from rank 0 to rank 1 and the cost
//! of `sync`: per-batch mean times (ns), p50/p99 taken over the batches.
//!
//! * [`solo`]: rank 0 alone (rank 1 serves from a barrier): put + sync and
//!   read of one word, `sync` with nothing outstanding and right after one
//!   put, and the cost of reading the clock twice.
//! * [`peer_written_reads`]: rank 1 writes a set of lines, then rank 0 reads
//!   each once, so every read has to fetch a line from rank 1's cache.
//! * [`ping_pong`]: one-sided round trips: rank 0 puts a word to rank 1,
//!   which polls for it and puts it back.

use super::measure::Bench;
use super::plan::{Plan, DIRTY_STRIDE};
use crate::harness::results::Results;
use crate::harness::stats::p50_p99;
use splitrt::pgas::{GlobalPtr, Pgas, SymArray};
use splitrt::{Error, Result};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Index (in `u64`s) of the word put and read by [`solo`].
pub const TARGET: usize = 0;
/// Index of the ping word (used on rank 1) of [`ping_pong`].
pub const PING: usize = 8;
/// Index of the pong word (used on rank 0) of [`ping_pong`].
pub const PONG: usize = 16;
/// Words of the symmetric block holding the three above, one line each.
pub const WORDS: usize = 24;

/// Run `plan.warm()` untimed calls of `op`, then `plan.batches` batches of
/// `plan.batch`; returns each batch's mean time per call (ns).
fn batched(plan: &Plan, op: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    crate::harness::stats::batch_means(plan.warm(), plan.batches, plan.batch, op)
}

/// Like [`batched`], but `op` returns the part of its time that counts.
fn batched_parts(plan: &Plan, mut op: impl FnMut() -> Result<Duration>) -> Result<Vec<f64>> {
    for _ in 0..plan.warm() {
        op()?;
    }
    let mut means = Vec::with_capacity(plan.batches);
    for _ in 0..plan.batches {
        let mut sum = Duration::ZERO;
        for _ in 0..plan.batch {
            sum += op()?;
        }
        means.push(sum.as_nanos() as f64 / plan.batch as f64);
    }
    Ok(means)
}

/// Measurements rank 0 makes alone while rank 1 waits in a barrier (and
/// serves AM-path requests from there).
pub fn solo(
    pg: &Pgas,
    plan: &Plan,
    words: &SymArray<u64>,
    rep: usize,
    out: &mut Results<Bench>,
) -> Result<()> {
    if pg.rank() == 0 {
        let p = words.at(1, TARGET);
        let mut x = 0u64;
        let put_sync = batched(plan, || {
            x += 1;
            pg.put(p, &[x])?;
            pg.sync()
        })?;
        out.push_latency(Bench::PutSync, 0, rep, &put_sync);
        let read = batched(plan, || {
            black_box(pg.read(p)?);
            Ok(())
        })?;
        out.push_latency(Bench::Read, 0, rep, &read);
        let empty = batched(plan, || pg.sync())?;
        out.push_latency(Bench::SyncEmpty, 0, rep, &empty);
        let clock = batched_parts(plan, || Ok(black_box(Instant::now()).elapsed()))?;
        out.push_latency(Bench::ClockPair, 0, rep, &clock);
        let after_put = batched_parts(plan, || {
            x += 1;
            pg.put(p, &[x])?;
            let t = Instant::now();
            pg.sync()?;
            Ok(t.elapsed())
        })?;
        let clock_p50 = p50_p99(&clock).0;
        let net: Vec<f64> = after_put.iter().map(|m| m - clock_p50).collect();
        out.push_latency(Bench::SyncAfterPut, 0, rep, &net);
    }
    pg.barrier()
}

/// Reads of lines the peer has just written: per batch, rank 1 writes
/// `plan.dirty_lines` lines ([`DIRTY_STRIDE`] apart), both ranks pass a
/// barrier, rank 0 reads 8 B of each line once (timed), both pass a
/// barrier. Line `i` holds the index of the next line to read, so each
/// read waits for the previous one (a pointer chase: misses cannot
/// overlap). The first batch is not recorded.
pub fn peer_written_reads(
    pg: &Pgas,
    plan: &Plan,
    lines: &mut SymArray<u64>,
    rep: usize,
    out: &mut Results<Bench>,
) -> Result<()> {
    let (stride, n) = (DIRTY_STRIDE / 8, plan.dirty_lines);
    let mut means = Vec::with_capacity(plan.batches);
    for b in 0..plan.dirty_batches() {
        if pg.rank() == 1 {
            let l = lines.local();
            for i in 0..n {
                l.set(i * stride, ((i + 1) % n) as u64);
            }
            pg.barrier()?;
        } else {
            pg.barrier()?;
            let t = Instant::now();
            let mut i = 0;
            for _ in 0..n {
                i = pg.read(lines.at(1, i * stride))? as usize % n;
            }
            black_box(i);
            if b > 0 {
                means.push(t.elapsed().as_nanos() as f64 / n as f64);
            }
        }
        pg.barrier()?;
    }
    if pg.rank() == 0 {
        out.push_latency(Bench::ReadDirty, 0, rep, &means);
    }
    Ok(())
}

/// `p` (a word of this rank's segment) as an atomic, through this rank's
/// own mapping, for polling while peers write it.
fn local_word(pg: &Pgas, p: GlobalPtr<u64>) -> Result<&AtomicU64> {
    let seg = pg.endpoint().rma().local_segment();
    let off = p.offset() as usize;
    if p.rank() != pg.rank() || !off.is_multiple_of(8) || off.saturating_add(8) > seg.len() {
        return Err(Error::usage(format!(
            "{p:?} is not a word of this rank's segment"
        )));
    }
    // SAFETY: off + 8 <= the segment's length (checked above): an in-bounds
    // offset.
    let at = unsafe { seg.base().add(off) } as *const AtomicU64;
    // SAFETY: the word lies inside this rank's segment and is 8-byte
    // aligned (checked above; segments are page aligned); the mapping lives
    // as long as the endpoint, which the returned borrow of `pg` keeps
    // alive; the benchmark accesses this word only atomically here and
    // through one-sided puts of whole aligned words.
    Ok(unsafe { &*at })
}

/// One-sided round trips: rank 0 puts `i` into rank 1's ping word and
/// syncs, rank 1 polls the word (`wait_until`, which also serves AM-path
/// traffic), then puts `i` into rank 0's pong word and syncs; rank 0 polls
/// its pong word. Values continue across repetitions.
pub fn ping_pong(
    pg: &Pgas,
    plan: &Plan,
    words: &SymArray<u64>,
    rep: usize,
    out: &mut Results<Bench>,
) -> Result<()> {
    let ops = plan.latency_ops();
    let mut i = rep as u64 * ops;
    let ep = pg.endpoint();
    pg.barrier()?;
    if pg.rank() == 0 {
        let (ping, pong) = (words.at(1, PING), local_word(pg, words.at(0, PONG))?);
        let means = batched(plan, || {
            i += 1;
            pg.put(ping, &[i])?;
            pg.sync()?;
            ep.wait_until(|| pong.load(Ordering::Acquire) == i)
        })?;
        out.push_latency(Bench::PutPingPong, 0, rep, &means);
    } else {
        let (ping, pong) = (local_word(pg, words.at(1, PING))?, words.at(0, PONG));
        for _ in 0..ops {
            i += 1;
            ep.wait_until(|| ping.load(Ordering::Acquire) == i)?;
            pg.put(pong, &[i])?;
            pg.sync()?;
        }
    }
    pg.barrier()
}
