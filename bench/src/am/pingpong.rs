//! The hardware baseline: a raw cache-line ping-pong between the two ranks,
//! both flags on ONE 64-byte line at offset 0 of rank 0's segment (mode
//! `proc1line` of `shared/anchors/shm_pingpong.c`). Side A (rank 0) stores
//! `ping = i` (release) and spins until `pong == i`; side B (rank 1) spins
//! until `ping == i` and stores `pong = i`. No splitrt code runs in between,
//! so this is the floor any shared-memory AM round trip sits on.

use super::plan::RAW_BATCH;
use splitrt::{Endpoint, Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The two flags, borrowed from the endpoint's mapping of rank 0's segment.
pub struct Line<'a> {
    ping: &'a AtomicU64,
    pong: &'a AtomicU64,
}

impl<'a> Line<'a> {
    /// The line at offset 0 of rank 0's segment as mapped in this process.
    pub fn of(ep: &'a Endpoint) -> Result<Line<'a>> {
        Self::at(ep, 0)
    }

    /// The 64-byte line at `offset` (a multiple of 64) of rank 0's segment
    /// as mapped in this process.
    pub fn at(ep: &'a Endpoint, offset: usize) -> Result<Line<'a>> {
        let seg = ep
            .rma()
            .peer_segment(0)
            .ok_or_else(|| Error::usage("rank 0's segment is not mapped here"))?;
        if !offset.is_multiple_of(64) || seg.len() < offset + 64 || seg.base().align_offset(64) != 0
        {
            return Err(Error::usage(format!(
                "rank 0's segment ({} B at {:p}) has no 64-byte aligned line at offset 0",
                seg.len(),
                seg.base()
            )));
        }
        // Bytes offset..offset+64 of rank 0's segment are mapped in both
        // processes for as long as the fabric lives, which `'a` (a borrow of
        // the endpoint) guarantees; the line is 64-byte aligned (checked
        // above), so both words are aligned for AtomicU64; nothing else in
        // this benchmark touches that line of rank 0's segment, and the
        // two processes only access the words atomically.
        // SAFETY: offset + 64 <= the segment's length (checked above): an
        // in-bounds offset.
        let ping_at = unsafe { seg.base().add(offset) } as *const AtomicU64;
        // SAFETY: offset + 8 < offset + 64: in bounds, as above.
        let pong_at = unsafe { seg.base().add(offset + 8) } as *const AtomicU64;
        // SAFETY: the line's first word: aligned, mapped for `'a`, and only
        // ever accessed atomically (as said above).
        let ping = unsafe { &*ping_at };
        // SAFETY: the line's second word, likewise.
        let pong = unsafe { &*pong_at };
        Ok(Line { ping, pong })
    }

    /// Side A: `warm` untimed round trips, then `batches` timed batches of
    /// [`RAW_BATCH`]; returns the mean round-trip time of each batch (ns).
    /// Flag values continue from `base` (so repetitions need no reset).
    pub fn side_a(&self, base: u64, warm: usize, batches: usize) -> Vec<f64> {
        let mut i = base;
        let mut round_trip = || {
            i += 1;
            self.ping.store(i, Ordering::Release);
            while self.pong.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
        };
        for _ in 0..warm {
            round_trip();
        }
        let mut means = Vec::with_capacity(batches);
        let mut t = Instant::now();
        for _ in 0..batches {
            for _ in 0..RAW_BATCH {
                round_trip();
            }
            let now = Instant::now();
            means.push((now - t).as_nanos() as f64 / RAW_BATCH as f64);
            t = now;
        }
        means
    }

    /// Side B: answer the round trips `base + 1 ..= base + count`.
    pub fn side_b(&self, base: u64, count: u64) {
        for i in base + 1..=base + count {
            while self.ping.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
            self.pong.store(i, Ordering::Release);
        }
    }
}
