//! Where a sender places Mediums larger than a cell in its landing zone in
//! the receiver's file: a byte ring, allocated in send order and freed in
//! that order (a Medium's bytes are free once the ring cell announcing it
//! is released, and cells are released in order). No I/O: the caller says
//! which cells were released.
//!
//! A Medium of `n` bytes cycles through the first [`WINDOW`] x `n` bytes
//! of the zone (a page more for one placed in phase, see [`PAGE`]), which
//! stay in the two cores' caches. Until 2026-11-26 Mediums of 32 KiB and
//! more rotated through the whole zone (8 x 64 KiB with two ranks), so
//! that a receiver would read a payload that had left the sender's private
//! cache: measured so on a CPU with a 1 MiB L2, before large Mediums were
//! placed in phase. On the EPYC of 2026-11-26 (L2 512 KiB) the rotation
//! made every 32-64 KiB row slower, in alternated builds of one job:
//! 64 KiB round trip 8.5-8.9 -> 4.7-4.9 us without it, 32 KiB 4.4-5.3 ->
//! 2.4-2.5, 64 KiB flood request + reply 6.4-6.6 -> 3.1-3.3, one-way
//! 1.6 -> 1.4-1.5.

use std::collections::VecDeque;

/// Mediums of at least this many bytes are placed in phase (see [`PAGE`]).
pub const PHASE_MIN: usize = 32 << 10;
/// A Medium of `n` bytes wraps to the zone's start after `WINDOW * n`
/// bytes (plus a page when placed in phase).
pub const WINDOW: usize = 2;

/// The period of the phase a large Medium is placed in. The sender asks
/// for a landing place whose offset in its page is half a page from its
/// source's: the copy's stores then never fall a few lines ahead of its
/// loads modulo 4 KiB, where a load waits on a store it does not depend
/// on ("4 KiB aliasing"). On this host's EPYC (L2 512 KiB), a flood of
/// 64 KiB Mediums from a source at page offset 16 took 6.5-7.2 us each
/// landing wherever the zone's head was, 1.7-2.1 placed in phase (1.9-2.4
/// with the offsets equal; alternated builds, same placement). Those runs
/// rotated Mediums through the whole zone; with the two-slot window the
/// difference shrank to the noise (64 KiB one-way flood from offset 16:
/// 1.43-1.56 us in phase, 1.57 not). It is kept because it costs a page
/// of the zone and one subtraction per large Medium. At most a page minus
/// one byte of the zone is skipped per large Medium.
pub const PAGE: usize = 4096;

/// The sender's books of one landing zone (see the module docs).
#[derive(Debug)]
pub struct ZoneAlloc {
    /// Zone length in bytes.
    len: usize,
    /// Where the next Medium goes if it fits (end of the last one placed).
    head: usize,
    /// Mediums not yet known to be released: (announcing cell, first byte),
    /// oldest first. At most one per ring cell.
    inflight: VecDeque<(u64, usize)>,
    /// Cells of the zone's ring: the bound on `inflight` (checked in
    /// debug builds by [`placed`](Self::placed)).
    cells: usize,
}

impl ZoneAlloc {
    /// Books for a zone of `len` bytes whose ring has `cells` cells (at
    /// most `cells` Mediums in flight, one per cell). The books take no
    /// heap until the first Medium is placed and grow with what is in
    /// flight: a rank keeps one per peer and channel, most of which may
    /// never carry a Medium (with the shared queue, none does).
    pub fn new(len: usize, cells: usize) -> Self {
        Self {
            len,
            head: 0,
            inflight: VecDeque::new(),
            cells,
        }
    }

    /// Zone length in bytes (a Medium larger than this cannot go here).
    pub fn capacity(&self) -> usize {
        self.len
    }

    /// Where `n` bytes (0 < n <= zone length) can go now, or `None` while
    /// the zone is full. `released(seq)` says whether the receiver has
    /// released cell `seq` (cells are released in order).
    ///
    /// ```
    /// # use splitrt_runtime::fabric::shm::zone::ZoneAlloc;
    /// let mut z = ZoneAlloc::new(100, 8);
    /// let at = z.place(60, |_| false).unwrap();
    /// z.placed(0, at, 60);
    /// assert_eq!(z.place(60, |_| false), None); // cell 0 still in use
    /// let at = z.place(60, |seq| seq == 0).unwrap(); // released: reuse
    /// assert_eq!(at, 0);
    /// ```
    pub fn place(&mut self, n: usize, released: impl FnMut(u64) -> bool) -> Option<usize> {
        self.place_in_phase(n, None, released)
    }

    /// [`place`](Self::place), preferring a start `at` with `at % PAGE ==
    /// phase` (see [`PAGE`]); a place out of phase when no place in phase
    /// is free, so an empty zone never refuses.
    pub fn place_in_phase(
        &mut self,
        n: usize,
        phase: Option<usize>,
        mut released: impl FnMut(u64) -> bool,
    ) -> Option<usize> {
        debug_assert!(n > 0 && n <= self.len);
        while let Some(&(seq, _)) = self.inflight.front() {
            if !released(seq) {
                break;
            }
            self.inflight.pop_front();
        }
        let phase = phase.map(|ph| ph % PAGE);
        // out of phase only if in phase found nothing
        self.free(n, phase)
            .or_else(|| phase.and_then(|_| self.free(n, None)))
    }

    /// A free place for `n` bytes starting in `phase` (if given).
    fn free(&self, n: usize, phase: Option<usize>) -> Option<usize> {
        // the first place at or after `x` in phase
        let at = |x: usize| match phase {
            Some(ph) => x + (ph + PAGE - x % PAGE) % PAGE,
            None => x,
        };
        let h = at(self.head);
        let zero = at(0);
        // where this Medium wraps to the start (safety needs only <= len)
        let slack = if phase.is_some() { PAGE } else { 0 };
        let limit = (n * WINDOW + slack).min(self.len);
        match self.inflight.front() {
            // empty zone: keep going round it
            None if h + n <= limit => Some(h),
            None => (zero + n <= self.len).then_some(zero),
            // in use: [oldest, head); free: [head, len) and [0, oldest)
            Some(&(_, oldest)) if self.head > oldest => {
                if h + n <= limit {
                    Some(h)
                } else if zero + n <= oldest {
                    Some(zero)
                } else {
                    None
                }
            }
            // wrapped: in use [oldest, len) and [0, head); free: [head, oldest)
            Some(&(_, oldest)) if self.head < oldest => (h + n <= oldest).then_some(h),
            // head == oldest with Mediums in flight: the zone is full
            Some(_) => None,
        }
    }

    /// Record that `n` bytes at `at` (from [`place`](Self::place)) were
    /// announced by cell `seq`. The caller holds a free ring cell, so at
    /// most `cells` Mediums are in flight (a debug assertion).
    pub fn placed(&mut self, seq: u64, at: usize, n: usize) {
        debug_assert!(
            self.inflight.len() < self.cells,
            "more Mediums in flight than the ring's {} cells",
            self.cells
        );
        self.inflight.push_back((seq, at));
        self.head = at + n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A rank keeps one `ZoneAlloc` per peer and channel (with the shared
    /// queue, a zone of 0 bytes that is never used): one that has placed
    /// nothing holds no heap, so a peer never sent a Medium costs none (it
    /// cost 1 KiB per peer and channel, 2 KiB of every rank's heap per rank
    /// of the host); one that has grows its books as it places.
    #[test]
    fn shmscale_an_unused_zone_holds_no_heap() {
        for len in [0, 2 << 16] {
            let z = ZoneAlloc::new(len, 64);
            assert_eq!(z.inflight.capacity(), 0, "zone of {len} B");
        }
        // a Medium in flight takes an entry
        let mut z = ZoneAlloc::new(1 << 20, 64);
        let at = z.place(100, |_| false).expect("room");
        z.placed(0, at, 100);
        assert_eq!(z.inflight.len(), 1);
        assert!(z.inflight.capacity() >= 1);
    }

    /// `cells` bounds what is in flight: a Medium placed while as many
    /// as the ring has cells are unreleased is the caller's bug, caught
    /// in debug builds (the parameter was ignored before).
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "more Mediums in flight")]
    fn scalefix_placed_beyond_the_cells_asserts() {
        let mut z = ZoneAlloc::new(1 << 20, 2);
        // growing sizes: the zone has room for a third, the ring has not
        for (seq, n) in [(0, 10), (1, 20), (2, 40)] {
            let at = z.place(n, |_| false).expect("room in the zone");
            z.placed(seq, at, n);
        }
    }

    /// Seeded model: a sender places Mediums of random sizes, a receiver
    /// releases their cells in order at random moments. Every placement
    /// must lie in the zone and overlap no Medium still in use, and the
    /// sender must never be refused when the zone is empty.
    #[test]
    fn placements_never_overlap_a_medium_in_use() {
        // seeds 20 and up ask for a phase most of the time, as large
        // Mediums do
        // (under Miri, which interprets every step: seeds 0 (not phased)
        // and 38 (phased), 600 steps each)
        let (every, steps, least) = if cfg!(miri) {
            (38, 600, 60)
        } else {
            (1, 100_000, 10_000)
        };
        for seed in (0..40u64).step_by(every) {
            let phased = seed >= 20;
            let mut in_phase = 0u64;
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let len = rng.gen_range(64..5000) * if seed % 2 == 0 { 1 } else { 64 };
            let cells = rng.gen_range(1..16);
            let mut z = ZoneAlloc::new(len, cells);
            // the receiver's view: (seq, start, end) not yet released
            let mut live: VecDeque<(u64, usize, usize)> = VecDeque::new();
            let (mut next_seq, mut released_below) = (0u64, 0u64);
            let mut placed_total = 0u64;
            for step in 0..steps {
                if rng.gen_bool(0.45) && !live.is_empty() {
                    live.pop_front();
                    released_below += 1;
                    continue;
                }
                if live.len() == cells {
                    continue; // no free cell: the ring refuses before the zone
                }
                let n = rng.gen_range(1..=len);
                let r = released_below;
                let phase = (phased && rng.gen_bool(0.7)).then(|| rng.gen_range(0..2 * PAGE));
                match z.place_in_phase(n, phase, |seq| seq < r) {
                    Some(at) => {
                        in_phase += u64::from(phase.is_some_and(|p| at % PAGE == p % PAGE));
                        assert!(at + n <= len, "seed {seed} step {step}: {at}+{n} > {len}");
                        for &(s, a, b) in &live {
                            assert!(
                                at + n <= a || at >= b,
                                "seed {seed} step {step}: [{at},{}) overlaps cell {s} [{a},{b})",
                                at + n
                            );
                        }
                        z.placed(next_seq, at, n);
                        live.push_back((next_seq, at, at + n));
                        next_seq += 1;
                        placed_total += 1;
                    }
                    None => assert!(!live.is_empty(), "seed {seed}: refused an empty zone"),
                }
            }
            assert!(
                placed_total > least,
                "seed {seed}: only {placed_total} placed"
            );
            if phased && len > 4 * PAGE {
                assert!(
                    in_phase > placed_total / 10,
                    "seed {seed}: {in_phase} of {placed_total} in phase"
                );
            }
        }
    }

    fn starts(zone: usize, n: usize, count: u64, phase: Option<usize>) -> Vec<usize> {
        let mut z = ZoneAlloc::new(zone, 4);
        (0..count)
            .map(|seq| {
                let at = z.place_in_phase(n, phase, |s| s < seq).unwrap();
                z.placed(seq, at, n);
                at
            })
            .collect()
    }

    /// Every Medium cycles through two of its sizes at the zone's start,
    /// however large the zone; one placed in phase keeps its phase.
    #[test]
    fn mediums_cycle_through_two_of_their_sizes() {
        let big = 64 << 10;
        assert_eq!(starts(10 * big, 4096, 5, None), [0, 4096, 0, 4096, 0]);
        assert_eq!(
            starts(10 * big, big, 5, Some(PAGE / 2)),
            [2048, 2048 + big, 2048, 2048 + big, 2048]
        );
    }
}
