//! Collectives over the PGAS layer: barrier (also split-phase
//! notify/wait), broadcast, reduce and allreduce. Data moves with the
//! job's one-sided path (native or AM) through a symmetric scratch block
//! whose two halves alternate, so each step of a broadcast or reduction
//! costs one barrier; reductions combine in rank order, so every rank gets
//! bit-identical floating-point results.
//!
//! The barrier goes through shared memory when every rank's segment is
//! mapped here on the native path ([`crate::shm_barrier`]), else through
//! AMs counted at rank 0.

use crate::coll::Coll;
use crate::context::Pgas;
use crate::heap::SCRATCH;

/// Bytes of one scratch half: the data of one collective step.
const HALF: u64 = SCRATCH / 2;
use crate::one_collective::Entered;
use crate::reduce::{Op, Reduce};
use bytemuck::Pod;
use splitrt_am::{Error, Payload, Result};
use splitrt_runtime::hang::rank_list;
use std::sync::atomic::Ordering;

/// Held while this thread is inside a collective: the rank's collective
/// slot and, with the `tracing` feature, the `pgas.collective` span.
pub(crate) struct InCollective<'a> {
    _slot: Entered<'a>,
    _span: splitrt_am::spans::Entered,
}

impl Pgas {
    /// Enter collective `what` on this thread: refused while another thread
    /// of this rank is inside a collective (they would mix their steps);
    /// the thread already inside one may nest. Held until the returned
    /// guard drops.
    pub(crate) fn enter_collective(&self, what: &'static str) -> Result<InCollective<'_>> {
        let slot = self.inner.one_collective.enter().map_err(|()| {
            Error::usage(format!(
                "{what} called while another thread of this rank is inside a collective: \
                 a rank's collectives (barriers, broadcast, reductions, alloc_sym / free_sym, \
                 freeze / thaw, all_store_sync) must be called from one thread at a time"
            ))
            .at_rank(self.inner.rank)
        })?;
        Ok(InCollective {
            _slot: slot,
            _span: splitrt_am::spans::enter_collective(self.inner.rank, what),
        })
    }

    /// **Test double.** Whether a thread of this rank is inside a
    /// collective now: a test orders a second thread's collective after
    /// the first thread has entered one by waiting for this, not by
    /// sleeping. Only with the cargo feature `test-doubles`.
    #[cfg(feature = "test-doubles")]
    pub fn collective_in_progress(&self) -> bool {
        self.inner.one_collective.is_held()
    }

    /// Wait until every rank has entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        self.barrier_of(Coll::Barrier)
    }

    /// A barrier that is part of collective `kind`. If the last barrier
    /// of the same kind returned an error before it completed (its wait met
    /// an error), this call completes that barrier instead of starting
    /// another: calling again is how a caller retries.
    pub(crate) fn barrier_of(&self, kind: Coll) -> Result<()> {
        let _one = self.enter_collective(kind.name())?;
        let i = &self.inner;
        if i.wait_failed.load(Ordering::Relaxed)
            && i.notified.load(Ordering::Relaxed) != i.waited.load(Ordering::Relaxed)
            && i.notified_kind.load(Ordering::Relaxed) == kind as u64
        {
            return self.barrier_wait();
        }
        self.notify_of(kind)?;
        self.barrier_wait()
    }

    /// Split-phase barrier, first half: announce arrival and return.
    pub fn barrier_notify(&self) -> Result<()> {
        let _one = self.enter_collective("Pgas::barrier_notify")?;
        self.notify_of(Coll::Barrier)
    }

    fn notify_of(&self, kind: Coll) -> Result<()> {
        let i = &self.inner;
        if i.notified.load(Ordering::Relaxed) != i.waited.load(Ordering::Relaxed)
            && i.wait_failed.load(Ordering::Relaxed)
        {
            // the last wait returned an error before its barrier completed:
            // complete that barrier first, so this rank stays in step
            self.barrier_wait()?;
        }
        if i.notified.load(Ordering::Relaxed) != i.waited.load(Ordering::Relaxed) {
            return Err(Error::usage("barrier_notify twice without barrier_wait").at_rank(i.rank));
        }
        let e = i.notified.load(Ordering::Relaxed) + 1;
        if let Some(b) = &i.shm_barrier {
            if let Err(why) = b.arrive(e, kind) {
                // every rank is stuck or wrong: end the job, naming both sides
                i.ep.abort(&why);
                return Err(Error::usage(why).at_rank(i.rank));
            }
        } else if i.rank == 0 {
            i.st.arrive(e, kind as u64, 0, i.size);
        } else {
            i.ep.request(0, i.h.arrive, &[e, kind as u64], Payload::None)?;
        }
        // counted only once the arrival went out: a failed send leaves the
        // barrier state as it was
        i.notified.store(e, Ordering::Relaxed);
        i.notified_kind.store(kind as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Split-phase barrier, second half: wait until every rank notified.
    pub fn barrier_wait(&self) -> Result<()> {
        let _one = self.enter_collective("Pgas::barrier_wait")?;
        let i = &self.inner;
        let e = i.notified.load(Ordering::Relaxed);
        if e == i.waited.load(Ordering::Relaxed) {
            return Err(Error::usage("barrier_wait without barrier_notify").at_rank(i.rank));
        }
        let kind =
            Coll::from_code(i.notified_kind.load(Ordering::Relaxed)).unwrap_or(Coll::Barrier);
        let st = &i.st;
        if let Some(b) = &i.shm_barrier {
            let what = || {
                let missing = b.missing(e);
                if missing.is_empty() {
                    format!(
                        "in {} #{e}: every rank arrived, none released it",
                        kind.name()
                    )
                } else {
                    format!(
                        "in {} #{e} for rank(s) {}, which have not arrived",
                        kind.name(),
                        rank_list(&missing)
                    )
                }
            };
            // every rank knows who is missing: rank 0 reports, the others
            // only if it cannot
            let extra = std::time::Duration::from_secs(if i.rank == 0 { 0 } else { 2 });
            i.ep.wait_reporting(&what, extra, || b.released(e))
                .inspect_err(|_| i.wait_failed.store(true, Ordering::Relaxed))?;
        } else if i.rank == 0 {
            let p = (e % 2) as usize;
            let a = &st.arrivals[p];
            let what = || {
                format!(
                    "in {} #{e} for rank(s) {}, which have not arrived",
                    kind.name(),
                    rank_list(&st.missing(p, i.size))
                )
            };
            i.ep.wait_until_described(&what, || {
                a.load(Ordering::Acquire) == i.size as u64 || st.has_mismatch()
            })
            .inspect_err(|_| i.wait_failed.store(true, Ordering::Relaxed))?;
            if let Some(why) = st.mismatch() {
                // every rank is stuck or wrong: end the job, naming both sides
                i.ep.abort(&why);
                return Err(Error::usage(why).at_rank(i.rank));
            }
            st.reset_arrivals(p);
            for r in 1..i.size {
                i.ep.request(r, i.h.release, &[e], Payload::None)?;
            }
        } else {
            let what = || {
                format!(
                    "in {} #{e}, waiting for rank 0 to release it (rank 0 counts the arrivals)",
                    kind.name()
                )
            };
            // rank 0 knows who is missing: let it report first
            i.ep.wait_reporting(&what, std::time::Duration::from_secs(2), || {
                st.released.load(Ordering::Acquire) >= e
            })
            .inspect_err(|_| i.wait_failed.store(true, Ordering::Relaxed))?;
        }
        i.wait_failed.store(false, Ordering::Relaxed);
        i.waited.store(e, Ordering::Relaxed);
        Ok(())
    }

    /// Copy `data` from `root` to every rank.
    pub fn broadcast<T: Pod>(&self, root: usize, data: &mut [T]) -> Result<()> {
        let _one = self.enter_collective("Pgas::broadcast")?;
        let i = &self.inner;
        if root >= i.size {
            return Err(
                Error::usage(format!("broadcast root {root} does not exist")).at_rank(i.rank),
            );
        }
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(data);
        for chunk in bytes.chunks_mut(HALF as usize) {
            let half = self.next_half();
            if i.rank == root {
                self.write_scratch(half, chunk);
            }
            self.barrier_of(Coll::Broadcast)?;
            if i.rank != root {
                i.get_blocking(root, half, chunk)?;
            }
        }
        Ok(())
    }

    /// Combine every rank's `data` element-wise with `op`; every rank gets
    /// the result.
    pub fn allreduce<T: Reduce>(&self, data: &mut [T], op: Op) -> Result<()> {
        self.reduce_to(None, data, op)
    }

    /// Combine every rank's `data` with `op` into `root`'s `data` (other
    /// ranks' `data` is left unchanged).
    pub fn reduce<T: Reduce>(&self, root: usize, data: &mut [T], op: Op) -> Result<()> {
        if root >= self.size() {
            return Err(
                Error::usage(format!("reduce root {root} does not exist")).at_rank(self.rank())
            );
        }
        self.reduce_to(Some(root), data, op)
    }

    fn reduce_to<T: Reduce>(&self, root: Option<usize>, data: &mut [T], op: Op) -> Result<()> {
        let _one = self.enter_collective(if root.is_some() {
            "Pgas::reduce"
        } else {
            "Pgas::allreduce"
        })?;
        let i = &self.inner;
        if T::combine(op, T::zeroed(), T::zeroed()).is_none() {
            return Err(Error::usage(format!(
                "{op:?} does not apply to {}",
                std::any::type_name::<T>()
            ))
            .at_rank(i.rank));
        }
        let kind = if root.is_some() {
            Coll::Reduce
        } else {
            Coll::Allreduce
        };
        let per = (HALF as usize / std::mem::size_of::<T>().max(1)).max(1);
        let mut acc = vec![T::zeroed(); per.min(data.len())];
        let mut tmp = vec![T::zeroed(); per.min(data.len())];
        for chunk in data.chunks_mut(per) {
            let half = self.next_half();
            self.write_scratch(half, bytemuck::cast_slice(chunk));
            self.barrier_of(kind)?;
            if root.is_none_or(|r| r == i.rank) {
                let n = chunk.len();
                for r in 0..i.size {
                    let dst = if r == 0 { &mut acc[..n] } else { &mut tmp[..n] };
                    i.get_blocking(r, half, bytemuck::cast_slice_mut(dst))?;
                    if r > 0 {
                        for (a, b) in acc[..n].iter_mut().zip(&tmp[..n]) {
                            *a = T::combine(op, *a, *b).expect("op checked above");
                        }
                    }
                }
                chunk.copy_from_slice(&acc[..n]);
            }
        }
        Ok(())
    }

    /// The scratch half (its segment offset) of the next collective step.
    ///
    /// Steps alternate between the two halves, so one barrier per step is
    /// enough: a rank writes a half again two steps later, after passing
    /// the barrier of the step between, which every rank entered only once
    /// it had read what it needed of this step.
    fn next_half(&self) -> u64 {
        let i = &self.inner;
        let step = i.coll_steps.fetch_add(1, Ordering::Relaxed);
        i.scratch + (step % 2) * HALF
    }

    /// Copy bytes into this rank's own scratch half at offset `half`.
    fn write_scratch(&self, half: u64, bytes: &[u8]) {
        let i = &self.inner;
        let seg = i.st.seg();
        debug_assert!(bytes.len() as u64 <= HALF);
        debug_assert!(half == i.scratch || half == i.scratch + HALF);
        // SAFETY: the scratch block is a symmetric allocation of SCRATCH
        // bytes in our own segment and `half` one of its halves: an
        // in-bounds offset.
        let to = unsafe { seg.base().add(half as usize) };
        // SAFETY: chunks never exceed a half, so to..to + bytes.len() lies
        // in the scratch block, which only the collective in progress
        // writes (user puts, stores, atomics, Longs and `write_segment`
        // are refused below `USER_BASE`, and a rank runs one collective at
        // a time: `enter_collective`); `bytes` is the caller's buffer.
        unsafe { std::ptr::copy(bytes.as_ptr(), to, bytes.len()) };
    }
}
