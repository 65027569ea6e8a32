//! Put and get bandwidth from rank 0 to rank 1, and the memcpy baseline,
//! measured by rank 0 while rank 1 waits in a barrier (serving AM-path
//! requests from there).
//!
//! A measurement at size S runs rounds of `per_round` operations
//! ([`Rounds`]) and one completion per round. Operation j moves slot j (S
//! bytes at offset j * S) of one buffer to slot j of another; slots cycle
//! through buffers of the landing area's size, so every operation moves
//! different bytes to a different place:
//!
//! * put: `pg.put` from rank 0's private source buffer to rank 1's landing
//!   area, then `pg.sync()`;
//! * get: `pg.scope` issuing one `s.get` per slot from rank 1's landing
//!   area into rank 0's private destination buffer, then rank 0 reads 1 byte
//!   per 64 B line of what arrived. Before the gets, rank 1 rewrites its
//!   whole landing area, so they read data the target wrote last;
//! * memcpy: the put rounds as plain `copy_from_slice` from the same source
//!   into rank 0's own landing area.
//!
//! MB/s = bytes of the timed rounds / their time / 1e6.

use super::measure::Bench;
use super::plan::{Plan, Rounds, MAX_SIZE};
use crate::harness::results::{Results, Value};
use crate::touch::touch;
use splitrt::pgas::{Pgas, SymArray};
use splitrt::Result;
use std::hint::black_box;
use std::time::Instant;

/// Rank 0's private buffers, each the landing area's size (empty on rank
/// 1).
pub struct Buffers {
    /// Source of puts, stores and copies.
    pub src: Vec<u8>,
    /// Destination of gets.
    pub dst: Vec<u8>,
}

impl Buffers {
    /// Buffers for `rank`, written once so their pages are mapped.
    pub fn new(plan: &Plan, rank: usize) -> Buffers {
        if rank != 0 {
            return Buffers {
                src: Vec::new(),
                dst: Vec::new(),
            };
        }
        Buffers {
            src: (0..plan.area).map(|i| i as u8).collect(),
            dst: vec![0x5a; plan.area],
        }
    }
}

/// Rank 0: touch every page the measurements will use once (rank 1's
/// landing area through this rank's mapping, the get buffer and this rank's
/// own landing area), so no page fault lands in a timed round. Both ranks
/// call it.
pub fn prefault(pg: &Pgas, area: &mut SymArray<u8>, bufs: &mut Buffers) -> Result<()> {
    if pg.rank() == 0 {
        for at in (0..area.len()).step_by(MAX_SIZE) {
            let n = MAX_SIZE.min(area.len() - at);
            pg.put(area.at(1, at), &bufs.src[at..at + n])?;
            pg.sync()?;
        }
        pg.read_slice(area.ptr(1), &mut bufs.dst)?;
        area.local().fill(1);
    }
    pg.barrier()
}

/// Time `r.timed` calls of `round(first_slot)` after `r.warm` untimed ones,
/// the first slot advancing by `r.per_round` modulo `r.slots`; returns MB/s
/// for operations of `size` bytes.
fn timed_rounds(r: Rounds, size: usize, mut round: impl FnMut(usize) -> Result<()>) -> Result<f64> {
    let mut slot = 0;
    let mut next = || {
        let s = slot;
        slot = (slot + r.per_round) % r.slots;
        s
    };
    for _ in 0..r.warm {
        round(next())?;
    }
    let t = Instant::now();
    for _ in 0..r.timed {
        round(next())?;
    }
    let bytes = (r.timed * r.per_round * size) as f64;
    Ok(bytes / t.elapsed().as_secs_f64() / 1e6)
}

/// Every size: memcpy and put (rank 1 waits in a barrier), rank 1
/// rewrites its landing area (rank 0 waits), get (rank 1 waits). Both ranks
/// call it.
pub fn run(
    pg: &Pgas,
    plan: &Plan,
    area: &mut SymArray<u8>,
    bufs: &mut Buffers,
    rep: usize,
    out: &mut Results<Bench>,
) -> Result<()> {
    for (n, &size) in plan.sizes.iter().enumerate() {
        let r = plan.rounds(size);
        let k = r.per_round;
        let slots = |first: usize| first * size..(first + k) * size;
        let remote = area.ptr(1);
        if pg.rank() == 0 {
            // SAFETY: rank 0's area is its own in this test: rank 1 only
            // fills its own area, every remote access targets rank 1's, and
            // this slice is the only access to it while it lives.
            let (src, own) = (&bufs.src, unsafe { area.local().as_mut_slice() });
            let mbs = timed_rounds(r, size, |first| {
                for j in first..first + k {
                    let slot = j * size..(j + 1) * size;
                    own[slot.clone()].copy_from_slice(&src[slot]);
                }
                black_box(own.as_mut_ptr());
                Ok(())
            })?;
            out.push(Bench::Memcpy, size, rep, Value::Rate(mbs));

            let mbs = timed_rounds(r, size, |first| {
                for j in first..first + k {
                    pg.put(remote.add(j * size), &src[j * size..(j + 1) * size])?;
                }
                pg.sync()
            })?;
            out.push(Bench::PutBw, size, rep, Value::Rate(mbs));
        }
        pg.barrier()?;
        if pg.rank() == 1 {
            area.local().fill((rep + n) as u8);
        }
        pg.barrier()?;
        if pg.rank() == 0 {
            let dst = &mut bufs.dst;
            let mbs = timed_rounds(r, size, |first| {
                let region = &mut dst[slots(first)];
                pg.scope(|s| {
                    for (j, part) in region.chunks_mut(size).enumerate() {
                        s.get(remote.add((first + j) * size), part)?;
                    }
                    Ok(())
                })?;
                touch(&dst[slots(first)]);
                Ok(())
            })?;
            out.push(Bench::GetBw, size, rep, Value::Rate(mbs));
        }
        pg.barrier()?;
    }
    Ok(())
}
