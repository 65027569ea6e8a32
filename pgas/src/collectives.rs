//! Collectives over the PGAS layer: barrier (also split-phase
//! notify/wait), broadcast, reduce and allreduce. `Pgas::barrier`,
//! `broadcast`, `reduce` and `allreduce` are the world team's (one
//! sequence, one implementation: `team_coll.rs`, through shared memory in
//! `team_shm.rs` where every segment is mapped on the native path); the
//! world team's barrier is the barrier here, which every internal
//! collective (`alloc_sym`, `freeze`, `finish`, ...) also uses.
//!
//! The barrier goes through shared memory when every rank's segment is
//! mapped here on the native path ([`crate::shm_barrier`]), else through
//! AMs counted at rank 0, or hierarchically when ranks share hosts
//! ([`crate::world_barrier`]: shared memory within each host, one message
//! per host).

use crate::coll::Coll;
use crate::context::Pgas;
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

    /// Wait until every rank has entered the barrier: the world team's
    /// [`Team::barrier`](crate::Team::barrier) (one sequence with
    /// `pg.world()`'s collectives, so the two may be mixed across ranks).
    pub fn barrier(&self) -> Result<()> {
        self.world_for_pgas().barrier()
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
        self.notify_of(Coll::Barrier)?;
        // a split-phase barrier is one collective of the world team, as
        // `barrier()` is: ranks may mix the two
        self.inner
            .team_mail
            .world
            .seq
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
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
        } else if self.hier_notify(e, kind)? {
            // one host's ranks in shared memory, one message per host
            // (`world_barrier.rs`)
        } else if i.rank == 0 {
            let [_, _, key, count] = i.world_hier.arrival(e, kind);
            i.st.world_bar.report(e, 0, i.size, key, count);
            i.st.arrive(e, kind as u64, 0, i.size);
        } else {
            i.ep.request(0, i.h.arrive, &i.world_hier.arrival(e, kind), Payload::None)?;
            self.count_barrier_message(0);
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
        } else if self.hier_wait(e, kind)? {
            // released through this host's leader (`world_barrier.rs`)
        } else if i.rank == 0 && self.resume_release(e)? {
            // a retry: every rank arrived, the release reached some of them
            // before a send failed (`world_barrier.rs`)
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
            self.flat_release(e)?;
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

    /// Copy `data` from `root` to every rank: the world team's
    /// [`Team::broadcast`](crate::Team::broadcast) (one sequence with
    /// `pg.world()`'s collectives).
    pub fn broadcast<T: Pod>(&self, root: usize, data: &mut [T]) -> Result<()> {
        if root >= self.inner.size {
            return Err(
                Error::usage(format!("broadcast root {root} does not exist")).at_rank(self.rank()),
            );
        }
        self.world_for_pgas().broadcast(root, data)
    }

    /// Combine every rank's `data` element-wise with `op`; every rank gets
    /// the result (the same bits everywhere): the world team's
    /// [`Team::allreduce`](crate::Team::allreduce).
    pub fn allreduce<T: Reduce>(&self, data: &mut [T], op: Op) -> Result<()> {
        self.world_for_pgas().allreduce(data, op)
    }

    /// Combine every rank's `data` with `op` into `root`'s `data` (other
    /// ranks' `data` is left unchanged): the world team's
    /// [`Team::reduce`](crate::Team::reduce).
    pub fn reduce<T: Reduce>(&self, root: usize, data: &mut [T], op: Op) -> Result<()> {
        if root >= self.size() {
            return Err(
                Error::usage(format!("reduce root {root} does not exist")).at_rank(self.rank())
            );
        }
        self.world_for_pgas().reduce(root, data, op)
    }
}
