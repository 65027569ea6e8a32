//! The barrier of a job whose ranks all share one host's memory (native
//! RMA on the shm fabric): a counter in rank 0's segment and a release
//! word beside it, in splitrt's reserved first page of each segment.
//!
//! A rank arrives by writing `epoch << 8 | kind` into its own arrival word
//! and adding one to rank 0's counter; whoever adds the last arrival checks
//! that every rank is in the same collective, zeroes the counter, publishes
//! the epoch as released and rings every rank's doorbell. Nobody waits for
//! a rank to be scheduled just to count (the AM barrier's rank 0 must run
//! once per arrival wave and once more to release): on a host with more
//! ranks than cores that hop was most of a barrier's time.
//!
//! Only ranks of the same job (which share its key, and may write each
//! other's segments anyway) can touch these words. A broken peer's values
//! are read as data: an unknown kind or a counter past the job size is a
//! collective mismatch, never an index.

use crate::coll::Coll;
use splitrt_runtime::fabric::SegmentRef;
use std::sync::atomic::{AtomicU64, Ordering};

/// Each rank's own arrival word: `epoch << 8 | kind` of its last arrival.
const ARRIVAL_OFF: usize = 64;
/// Rank 0's counter of arrivals in the current epoch.
const COUNT_OFF: usize = 128;
/// Rank 0's highest released epoch.
const RELEASED_OFF: usize = 192;

/// Bytes of the reserved area the barrier uses (all below this).
pub(crate) const SHM_BARRIER_END: usize = 256;
static_assertions::const_assert!(SHM_BARRIER_END as u64 <= crate::heap::RESERVED_BYTES);

/// The shared-memory barrier of one rank (see the module docs).
#[derive(Clone)]
pub(crate) struct ShmBarrier {
    /// Every rank's segment as mapped here (index = rank).
    segs: Vec<SegmentRef>,
    rank: usize,
    /// The world rank of every index of `segs` (their names in reports).
    names: Vec<usize>,
}

// SAFETY: the segment pointers refer to mappings the endpoint keeps for the
// life of the job (it outlives the Pgas context that owns this), and every
// access through them is atomic.
unsafe impl Send for ShmBarrier {}
// SAFETY: as above; all shared words are atomics.
unsafe impl Sync for ShmBarrier {}

fn word(seg: &SegmentRef, off: usize) -> &AtomicU64 {
    debug_assert!(off + 8 <= seg.len() && off.is_multiple_of(8));
    // SAFETY: every segment is page aligned and at least a page long; the
    // reserved first page belongs to splitrt (user accesses there are
    // refused), and only atomics touch these words. The mapping outlives
    // `seg`'s borrow (see the Send impl).
    let p = unsafe { seg.base().add(off) };
    // SAFETY: as above: p is 8-byte aligned inside the reserved page, and
    // only atomics touch this word.
    unsafe { &*(p as *const AtomicU64) }
}

fn pack(epoch: u64, kind: Coll) -> u64 {
    epoch << 8 | kind as u64
}

impl ShmBarrier {
    /// The barrier over `segs` (every rank's segment, mapped), as `rank`.
    /// `None` unless every segment is mapped here.
    pub fn new(segs: &[Option<SegmentRef>], rank: usize) -> Option<ShmBarrier> {
        let segs: Vec<SegmentRef> = segs.iter().copied().collect::<Option<_>>()?;
        let names = (0..segs.len()).collect();
        Self::over(segs, names, rank)
    }

    /// The barrier of the ranks `names` (world ranks, the first one's
    /// segment holds the counter) over their segments `segs`, as index
    /// `me`: one host's ranks in the world barrier's hierarchical form.
    pub fn over(segs: Vec<SegmentRef>, names: Vec<usize>, me: usize) -> Option<ShmBarrier> {
        if me >= segs.len()
            || names.len() != segs.len()
            || segs.iter().any(|s| s.len() < SHM_BARRIER_END)
        {
            return None;
        }
        Some(ShmBarrier {
            segs,
            rank: me,
            names,
        })
    }

    /// Ranks in this barrier.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// The world rank whose segment holds the counter (the first).
    pub fn first(&self) -> usize {
        self.names[0]
    }

    fn root(&self) -> &SegmentRef {
        &self.segs[0]
    }

    /// Enter barrier `epoch` of collective `kind`. The last rank to arrive
    /// releases it; an `Err` names a collective mismatch it found (the
    /// barrier is then never released: the caller ends the job).
    pub fn arrive(&self, epoch: u64, kind: Coll) -> Result<(), String> {
        if self.arrive_counted(epoch, kind)? {
            self.release(epoch);
        }
        Ok(())
    }

    /// Enter barrier `epoch` of collective `kind` without releasing it:
    /// `Ok(true)` for the last arrival, which has checked that every rank
    /// here is in the same collective and reset the counter, and must see
    /// that [`release`](Self::release) is called (the world barrier's
    /// hierarchical form first tells rank 0, `world_barrier.rs`).
    pub fn arrive_counted(&self, epoch: u64, kind: Coll) -> Result<bool, String> {
        let n = self.segs.len() as u64;
        word(&self.segs[self.rank], ARRIVAL_OFF).store(pack(epoch, kind), Ordering::Release);
        // Compare with rank 0 at once when it is already in: most
        // mismatches show before the last arrival.
        if self.rank != 0 {
            if let Some(why) = self.compare(0, epoch, kind) {
                return Err(why);
            }
        }
        let count = word(self.root(), COUNT_OFF)
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1);
        if count > n || count == 0 {
            return Err(format!(
                "collective mismatch: {count} arrivals counted in barrier #{epoch} of {n} ranks \
                 (a rank arrived twice or its shared memory was overwritten)"
            ));
        }
        if count < n {
            return Ok(false);
        }
        // Last: every arrival word was written before its fetch_add, which
        // our AcqRel fetch_add read.
        for r in 0..self.segs.len() {
            if let Some(why) = self.compare(r, epoch, kind) {
                return Err(why);
            }
        }
        word(self.root(), COUNT_OFF).store(0, Ordering::Relaxed);
        Ok(true)
    }

    /// Publish barrier `epoch` as released and ring every rank's doorbell
    /// (after the last [`arrive_counted`](Self::arrive_counted)).
    pub fn release(&self, epoch: u64) {
        word(self.root(), RELEASED_OFF).fetch_max(epoch, Ordering::AcqRel);
        // Dekker with the sleepers (they announce, then look at the
        // release): a ring is never missed for one fence per barrier.
        crate::full_fence::full_fence();
        for s in &self.segs {
            // SAFETY: the segments come from the endpoint's fabric, which
            // outlives this barrier (see the Send impl).
            unsafe { s.wake_owner() };
        }
    }

    /// A mismatch between rank `r`'s arrival and ours, if `r` is in this
    /// epoch (or one it cannot be in).
    fn compare(&self, r: usize, epoch: u64, kind: Coll) -> Option<String> {
        let w = word(&self.segs[r], ARRIVAL_OFF).load(Ordering::Acquire);
        let (e, k) = (w >> 8, w & 0xff);
        if e < epoch || (e == epoch && k == kind as u64) {
            return None;
        }
        let name = |k: u64| Coll::from_code(k).map_or("an unknown collective", Coll::name);
        Some(format!(
            "collective mismatch: rank {} is in {} #{epoch} while rank {} is in {} #{e} \
             (every rank must call the same collectives in the same order)",
            self.names[self.rank],
            kind.name(),
            self.names[r],
            name(k)
        ))
    }

    /// Whether barrier `epoch` was released.
    pub fn released(&self, epoch: u64) -> bool {
        word(self.root(), RELEASED_OFF).load(Ordering::Acquire) >= epoch
    }

    /// Ranks (world ranks) that have not arrived in barrier `epoch`.
    pub fn missing(&self, epoch: u64) -> Vec<usize> {
        (0..self.segs.len())
            .filter(|&r| word(&self.segs[r], ARRIVAL_OFF).load(Ordering::Acquire) >> 8 < epoch)
            .map(|r| self.names[r])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Page-sized, page-aligned stand-ins for the ranks' segments.
    struct Segs(Vec<Box<[AtomicU64; 512]>>);

    impl Segs {
        fn new(n: usize) -> Arc<Segs> {
            Arc::new(Segs(
                (0..n)
                    .map(|_| Box::new(std::array::from_fn(|_| AtomicU64::new(0))))
                    .collect(),
            ))
        }
        /// Every rank's barrier over these segments.
        fn barriers(&self) -> Vec<ShmBarrier> {
            (0..self.0.len())
                .map(|r| ShmBarrier::new(&self.refs(), r).unwrap())
                .collect()
        }
        fn refs(&self) -> Vec<Option<SegmentRef>> {
            self.0
                .iter()
                // SAFETY: the tests keep the `Arc<Segs>` alive while its
                // barriers are used, and touch the words only atomically.
                .map(|b| Some(unsafe { SegmentRef::new(b.as_ptr() as *mut u8, 4096) }))
                .collect()
        }
    }

    #[test]
    fn threads_pass_thousands_of_barriers_in_lockstep() {
        let n = 6;
        let segs = Segs::new(n);
        let phase = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..n)
            .map(|rank| {
                let (segs, phase) = (segs.clone(), phase.clone());
                std::thread::spawn(move || {
                    let b = ShmBarrier::new(&segs.refs(), rank).unwrap();
                    // (a few barriers under Miri, which interprets every step)
                    for e in 1..=if cfg!(miri) { 10 } else { 2000u64 } {
                        // everyone sees every other rank's pre-barrier work
                        phase.fetch_add(1, Ordering::Relaxed);
                        b.arrive(e, Coll::Barrier).unwrap();
                        let t = std::time::Instant::now();
                        while !b.released(e) {
                            assert!(t.elapsed().as_secs() < 30, "barrier {e} never released");
                            std::thread::yield_now();
                        }
                        assert!(phase.load(Ordering::Relaxed) >= e * n as u64);
                        assert!(b.missing(e).is_empty());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn the_last_arrival_names_a_rank_in_another_collective_and_never_releases() {
        let segs = Segs::new(3);
        let b = segs.barriers();
        b[1].arrive(1, Coll::Allreduce).unwrap();
        assert_eq!(b[0].missing(1), vec![0, 2]);
        b[2].arrive(1, Coll::Allreduce).unwrap();
        let why = b[0].arrive(1, Coll::Barrier).unwrap_err();
        assert!(
            why.contains("collective mismatch")
                && why.contains("rank 0 is in Pgas::barrier #1")
                && why.contains("rank 1 is in Pgas::allreduce #1"),
            "{why}"
        );
        assert!(!b[0].released(1));
    }

    #[test]
    fn an_arrival_after_rank_0_in_another_collective_fails_at_once() {
        let segs = Segs::new(3);
        let b = segs.barriers();
        b[0].arrive(1, Coll::Finish).unwrap();
        let why = b[2].arrive(1, Coll::Barrier).unwrap_err();
        assert!(why.contains("the exit barrier of Pgas::finish"), "{why}");
    }

    #[test]
    fn garbage_in_the_shared_words_is_a_mismatch_not_a_panic() {
        let segs = Segs::new(2);
        let b0 = ShmBarrier::new(&segs.refs(), 0).unwrap();
        let b1 = ShmBarrier::new(&segs.refs(), 1).unwrap();
        // a broken peer arrived with an unknown kind in a future epoch
        segs.0[1][ARRIVAL_OFF / 8].store(7 << 8 | 0xee, Ordering::Relaxed);
        segs.0[0][COUNT_OFF / 8].store(1, Ordering::Relaxed);
        let why = b0.arrive(1, Coll::Barrier).unwrap_err();
        assert!(why.contains("an unknown collective"), "{why}");
        // and a counter past the size, or about to wrap
        for c in [5, u64::MAX] {
            segs.0[0][COUNT_OFF / 8].store(c, Ordering::Relaxed);
            segs.0[1][ARRIVAL_OFF / 8].store(0, Ordering::Relaxed);
            assert!(b1.arrive(1, Coll::Barrier).is_err());
        }
        assert!(ShmBarrier::new(&[None, Some(SegmentRef::empty())], 0).is_none());
    }

    #[test]
    fn worldbar_a_host_group_names_world_ranks_and_releases_on_demand() {
        let segs = Segs::new(2);
        let refs: Vec<SegmentRef> = segs.refs().into_iter().flatten().collect();
        let b: Vec<ShmBarrier> = (0..2)
            .map(|me| ShmBarrier::over(refs.clone(), vec![4, 5], me).unwrap())
            .collect();
        assert_eq!(b[1].first(), 4);
        assert_eq!(b[0].arrive_counted(1, Coll::Barrier), Ok(false));
        assert_eq!(b[0].missing(1), vec![5]);
        // the last arrival is told so, and nothing is released yet
        assert_eq!(b[1].arrive_counted(1, Coll::Barrier), Ok(true));
        assert!(!b[0].released(1));
        b[1].release(1);
        assert!(b[0].released(1) && b[1].released(1));
        // a mismatch names the world ranks
        b[1].arrive_counted(2, Coll::FreeSym).unwrap();
        let why = b[0].arrive_counted(2, Coll::Barrier).unwrap_err();
        assert!(
            why.contains("rank 4 is in Pgas::barrier #2")
                && why.contains("rank 5 is in Pgas::free_sym #2"),
            "{why}"
        );
        assert!(ShmBarrier::over(refs.clone(), vec![4], 0).is_none());
    }
}
