//! The world barrier's hierarchical form, for jobs whose ranks share
//! hosts but not all one host (native path): the ranks of a host count
//! their arrivals in shared memory (a [`ShmBarrier`] over the host's
//! segments, its counter in the host leader's: the lowest rank there),
//! the last arrival sends ONE message to rank 0, rank 0 counts one
//! arrival per host and releases the other hosts' leaders with one
//! message each, and each leader releases its host through shared memory.
//! Across hosts a barrier costs 2 (L - 1) messages for L hosts, against
//! 2 (n - m) flat (n ranks, m on rank 0's host).
//!
//! **The decision.** The first world barrier (epoch 1, whatever
//! collective it belongs to) is always the flat one: every rank's arrival
//! carries its host report (the lowest rank whose segment it maps, and
//! how many it maps; or "unwilling" on the AM path, with
//! `SPLITRT_TEAM_HIER=off`, or without its own segment mapped). Rank 0
//! decides from those reports alone with the teams' [`plan`](crate::team_hosts::plan) (more than
//! one host, one with more than one rank, reports consistent), and its
//! release of epoch 1 carries the decision to every rank: from epoch 2 on
//! every rank runs the same form. A job whose ranks all share one host
//! uses the one shared-memory counter ([`crate::shm_barrier`]) instead,
//! and never gets here.
//!
//! Reports stay what the flat barrier gives: a rank in another collective
//! is named (by its host's last arrival through shared memory, or by rank
//! 0 among the hosts' messages, which carry the collective); a rank that
//! never arrives is named by its own host's ranks (the leader reports
//! first, the others 2 s later), rank 0 later names the ranks of the
//! hosts it has no message from.

use crate::coll::Coll;
use crate::context::Pgas;
use crate::shm_barrier::ShmBarrier;
use crate::world_barrier_state::Owed;
use splitrt_am::{Error, ErrorKind, Payload, Result};
use splitrt_runtime::hang::rank_list;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Pgas {
    fn world_group(&self) -> Option<&ShmBarrier> {
        let i = &self.inner;
        if i.st.world_bar.hier() {
            i.world_hier.group.as_ref()
        } else {
            None
        }
    }

    /// Whether the world barrier runs hierarchically (one message per
    /// host to rank 0 and back, shared memory within each host):
    /// `Some(true)` or `Some(false)` once the first world barrier
    /// (of any collective: `barrier`, `alloc_sym`, `freeze`, ...)
    /// completed across hosts and decided it, the same on every rank;
    /// `None` before that, and always when every rank shares this host
    /// (one shared-memory counter).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// pg.barrier()?;
    /// println!("world barrier hierarchical: {:?}", pg.barrier_is_hierarchical());
    /// # Ok(()) }
    /// ```
    pub fn barrier_is_hierarchical(&self) -> Option<bool> {
        let i = &self.inner;
        if i.shm_barrier.is_some() || i.waited.load(Ordering::Relaxed) == 0 {
            return None;
        }
        Some(i.st.world_bar.hier())
    }

    /// World barrier messages (arrivals and releases of `barrier`,
    /// `barrier_notify`/`barrier_wait` and the barriers inside
    /// `alloc_sym`, `freeze`, `finish`, ...) this rank has sent to ranks
    /// whose segment is not mapped here: ranks on other hosts (on the AM
    /// path, every rank). Read it before and after barriers and sum over
    /// the ranks to see what a barrier costs across hosts: 2 (L - 1) for
    /// L hosts hierarchically, 2 (n - m) flat (m ranks on rank 0's host).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// let before = pg.barrier_off_host_messages();
    /// pg.barrier()?;
    /// println!("{} sent across hosts", pg.barrier_off_host_messages() - before);
    /// # Ok(()) }
    /// ```
    pub fn barrier_off_host_messages(&self) -> u64 {
        self.inner.world_hier.off_host.load(Ordering::Relaxed)
    }

    /// Count a world barrier message to `to` if it leaves this host.
    pub(crate) fn count_barrier_message(&self, to: usize) {
        let i = &self.inner;
        if i.direct.get(to).is_none_or(|s| s.is_empty()) {
            i.world_hier.off_host.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Rank 0 releasing epoch `e` by messages: the flat release (for the
    /// first epoch, the one that carries the decision). Sends `[e, hier]`
    /// to every other rank.
    pub(crate) fn flat_release(&self, e: u64) -> Result<()> {
        let i = &self.inner;
        let hier = if e == 1 {
            let on = i.world_hier.decide(&i.st.world_bar, i.size);
            i.st.world_bar.set_hier(on);
            on
        } else {
            false
        };
        self.send_releases(e, [e, u64::from(hier)], 1..i.size)
    }

    /// Send the release `words` of barrier `e` to each rank of `to`, on
    /// past a rank it cannot reach. Those it did not reach are kept
    /// (`WorldHier::owed`) and named by the error, and the wait is marked
    /// failed, so the retry (the same collective called again, see
    /// `barrier_of`) sends it to them ([`resume_release`](Self::resume_release))
    /// instead of waiting for arrivals that were already counted.
    pub(crate) fn send_releases(
        &self,
        e: u64,
        words: [u64; 2],
        to: impl IntoIterator<Item = usize>,
    ) -> Result<()> {
        let i = &self.inner;
        let mut missed = Vec::new();
        let mut first = None;
        for r in to {
            if let Err(err) = self.send_release(r, words) {
                missed.push(r);
                first.get_or_insert(err);
            }
        }
        let Some(err) = first else {
            return Ok(());
        };
        let who = match missed.as_slice() {
            [r] => format!("rank {r}"),
            _ => format!("ranks {}", rank_list(&missed)),
        };
        let why = format!(
            "barrier #{e}: its release could not be sent to {who} (calling the \
             collective again sends it there)"
        );
        let peer = missed[0];
        *i.world_hier.owed.lock() = Some(Owed {
            epoch: e,
            words,
            to: missed,
        });
        i.wait_failed.store(true, Ordering::Relaxed);
        let kind = match err.kind() {
            ErrorKind::PeerFailed(m) => ErrorKind::PeerFailed(format!("{why}: {m}")),
            ErrorKind::Timeout(m) => ErrorKind::Timeout(format!("{why}: {m}")),
            _ => ErrorKind::Protocol(format!("{why}: {err}")),
        };
        Err(Error::new(kind).with_peer(peer).at_rank(i.rank))
    }

    /// In a retried wait of barrier `e`: the release this rank could not
    /// send to every rank (see [`send_releases`](Self::send_releases)), if
    /// any, sent to those it missed. `Ok(true)`: there was one, and the
    /// barrier is complete here once it is sent.
    pub(crate) fn resume_release(&self, e: u64) -> Result<bool> {
        let owed = {
            let mut o = self.inner.world_hier.owed.lock();
            match o.take() {
                Some(w) if w.epoch == e => w,
                other => {
                    *o = other;
                    return Ok(false);
                }
            }
        };
        self.send_releases(e, owed.words, owed.to)?;
        Ok(true)
    }

    /// Send the release `words` of a world barrier to rank `to`.
    fn send_release(&self, to: usize, words: [u64; 2]) -> Result<()> {
        let i = &self.inner;
        #[cfg(feature = "test-doubles")]
        if i.world_hier
            .fail_release_to
            .compare_exchange(to, usize::MAX, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            return Err(Error::protocol("test double: this send failed"));
        }
        i.ep.request(to, i.h.release, &words, Payload::None)?;
        self.count_barrier_message(to);
        Ok(())
    }

    /// Test double: make this rank's next world barrier release sent to
    /// `rank` fail (as a send to a peer that went away would), once.
    #[cfg(feature = "test-doubles")]
    #[doc(hidden)]
    pub fn fail_next_barrier_release_to(&self, rank: usize) {
        self.inner
            .world_hier
            .fail_release_to
            .store(rank, Ordering::Relaxed);
    }

    /// Arrive in barrier `e` of `kind` hierarchically, if the world
    /// barrier runs so: `Ok(false)` to go by the flat form.
    pub(crate) fn hier_notify(&self, e: u64, kind: Coll) -> Result<bool> {
        let Some(g) = self.world_group() else {
            return Ok(false);
        };
        let i = &self.inner;
        let wh = &i.world_hier;
        let counted = if wh.unsent.load(Ordering::Relaxed) == e {
            // a retry after this rank, the host's last arrival, failed to
            // tell rank 0: only the message is left to send
            Ok(true)
        } else {
            g.arrive_counted(e, kind)
        };
        match counted {
            Err(why) => {
                // every rank of this host is stuck or wrong: end the job
                i.ep.abort(&why);
                Err(Error::usage(why).at_rank(i.rank))
            }
            Ok(false) => Ok(true),
            Ok(true) if i.rank == 0 => {
                i.st.arrive(e, kind as u64, 0, i.size);
                Ok(true)
            }
            Ok(true) => {
                wh.unsent.store(e, Ordering::Relaxed);
                i.ep.request(0, i.h.arrive, &wh.arrival(e, kind), Payload::None)?;
                wh.unsent.store(0, Ordering::Relaxed);
                self.count_barrier_message(0);
                Ok(true)
            }
        }
    }

    /// Wait for barrier `e` of `kind` hierarchically, if the world barrier
    /// runs so: `Ok(false)` to go by the flat form.
    pub(crate) fn hier_wait(&self, e: u64, kind: Coll) -> Result<bool> {
        let Some(g) = self.world_group() else {
            return Ok(false);
        };
        let i = &self.inner;
        let st = &i.st;
        let leader = g.first() == i.rank;
        let local = |missing: Vec<usize>| {
            format!(
                "in {} #{e} for rank(s) {}, which have not arrived",
                kind.name(),
                rank_list(&missing)
            )
        };
        let failed = |err| {
            i.wait_failed.store(true, Ordering::Relaxed);
            err
        };
        let p = (e % 2) as usize;
        let layout = i.world_hier.layout.get();
        let hosts = layout.map_or(0, |l| l.leaders.len() as u64);
        if i.rank == 0 && layout.is_none() {
            return Ok(false);
        }
        if i.rank == 0 && self.resume_release(e)? {
            // a retry: every host arrived, the release reached some leaders
            // (and rank 0's own host) before a send failed
            return Ok(true);
        }
        let done = || {
            if i.rank == 0 {
                st.arrivals[p].load(Ordering::Acquire) == hosts || st.has_mismatch()
            } else if leader {
                st.released.load(Ordering::Acquire) >= e
            } else {
                g.released(e)
            }
        };
        // First this host's ranks: who is missing here is known to every
        // rank of it, so its leader reports first, the others 2 s later.
        let here = || local(g.missing(e));
        let extra = Duration::from_secs(if leader { 0 } else { 2 });
        i.ep.wait_reporting(&here, extra, || g.missing(e).is_empty() || done())
            .map_err(failed)?;
        // Then the other hosts: rank 0 names the hosts it has no message
        // from (3 s later), the others wait for it (8 s later).
        let what = || {
            if let (0, Some(layout)) = (i.rank, layout) {
                let arrived = st.missing(p, i.size);
                let missing: Vec<usize> = (0..layout.leaders.len())
                    .map(|h| layout.members_of(h))
                    .filter(|m| m.iter().all(|r| arrived.contains(r)))
                    .flatten()
                    .collect();
                format!(
                    "in {} #{e} for rank(s) {}, which have not arrived (or others on \
                     their host have not)",
                    kind.name(),
                    rank_list(&missing)
                )
            } else if leader {
                format!(
                    "in {} #{e}, waiting for rank 0 to release it (rank 0 counts one \
                     arrival per host)",
                    kind.name()
                )
            } else {
                format!(
                    "in {} #{e}, waiting for this host's leader (rank {}) to release it",
                    kind.name(),
                    g.first()
                )
            }
        };
        let extra = Duration::from_secs(if i.rank == 0 { 3 } else { 8 });
        i.ep.wait_reporting(&what, extra, done).map_err(failed)?;
        if let Some(layout) = layout {
            if let Some(why) = st.mismatch() {
                // every rank is stuck or wrong: end the job, naming both sides
                i.ep.abort(&why);
                return Err(Error::usage(why).at_rank(i.rank));
            }
            st.reset_arrivals(p);
            // this host first: a release that cannot reach another host's
            // leader holds up only that host (until the retry)
            g.release(e);
            self.send_releases(e, [e, 1], layout.leaders[1..].iter().copied())?;
        }
        if leader {
            g.release(e);
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::context::Pgas;
    use crate::world_barrier_state::WorldHier;
    use splitrt_am::Result;
    use splitrt_runtime::config::{Config, FabricKind, RmaPath};
    use splitrt_runtime::fabric::rdma::model::ModelNetwork;
    use splitrt_runtime::fabric::SegmentRef;
    use splitrt_runtime::job::{JobInfo, JobSource};
    use std::sync::atomic::AtomicU64;
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    /// Page-sized stand-ins for the ranks' segments, shared by the rank
    /// threads of a "host" (the barrier's counters only).
    struct Segs(Vec<Box<[AtomicU64; 512]>>);

    /// Four ranks as threads over the verbs model, each told that it
    /// shares a host with one other ({0, 1} and {2, 3}: the world
    /// barrier's host groups over `segs`, as the segments of a host's
    /// ranks would be mapped), so that the world barrier runs
    /// hierarchically; each runs `prog`, within `limit`.
    fn two_hosts_of_two(
        tag: &str,
        limit: Duration,
        prog: impl Fn(Pgas) -> Result<()> + Send + Sync + Clone + 'static,
    ) {
        let segs = Arc::new(Segs(
            (0..4)
                .map(|_| Box::new(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        ));
        let net = ModelNetwork::new(7);
        let id = format!("{tag}-{}", std::process::id());
        let (tx, rx) = mpsc::channel();
        for r in 0..4 {
            let (dev, tx, prog) = (net.device(&format!("model{r}")), tx.clone(), prog.clone());
            let (id, segs) = (id.clone(), segs.clone());
            std::thread::spawn(move || {
                let out = (|| {
                    let job = JobInfo {
                        rank: r,
                        size: 4,
                        local_rank: r,
                        local_size: 4,
                        node: 0,
                        job_id: id,
                        bootstrap: None,
                        key: None,
                        source: JobSource::Slurm,
                    };
                    let config = Config {
                        fabric: FabricKind::Ibverbs,
                        segment_size: 4 << 20,
                        ibv_buffers: 16,
                        rma: RmaPath::Native,
                        bootstrap_timeout: Duration::from_secs(30),
                        ..Config::default()
                    };
                    let b = splitrt_am::EndpointBuilder::new();
                    let mut pg = Pgas::attach_over_verbs_model(b, job, config, dev)?;
                    let host: Vec<Option<SegmentRef>> = (0..4)
                        .map(|p| {
                            (p / 2 == r / 2).then(|| {
                                // SAFETY: every rank thread holds `segs`
                                // (an `Arc`) while its `Pgas` lives (it
                                // is dropped at the end of this closure),
                                // and the barrier touches its words only
                                // atomically.
                                unsafe { SegmentRef::new(segs.0[p].as_ptr() as *mut u8, 4096) }
                            })
                        })
                        .collect();
                    let inner = Arc::get_mut(&mut pg.inner).expect("the only handle");
                    inner.world_hier = WorldHier::new(&host, r, RmaPath::Native);
                    inner.world_hier.hand_host_to(&inner.st.world_bar, r);
                    let out = prog(pg);
                    drop(segs);
                    out
                })();
                let _ = tx.send((r, out.map_err(|e| e.to_string())));
            });
        }
        drop(tx);
        let end = std::time::Instant::now() + limit;
        for _ in 0..4 {
            let left = end.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok((_, Ok(()))) => {}
                Ok((r, Err(e))) => panic!("rank {r}: {e}"),
                Err(_) => panic!("a rank did not finish within {limit:?}"),
            }
        }
    }

    /// `hier_wait`'s retry: rank 0's release of a hierarchical world
    /// barrier cannot be sent to the other host's leader (rank 2); the
    /// error names it, and rank 0's retry (`barrier()` again) sends the
    /// release still owed (`resume_release`), so ranks 2 and 3 leave that
    /// barrier and the next ones run in step. Without the retry, rank 0's
    /// second call waited for host arrivals that had been counted already
    /// and ranks 2 and 3 for the release, until the limit.
    #[test]
    #[cfg_attr(miri, ignore = "four rank threads over the verbs model")]
    fn hier_wait_a_failed_host_release_is_finished_by_the_retry() {
        two_hosts_of_two("hierretry", Duration::from_secs(30), |pg| {
            let fail = |why: String| splitrt_am::Error::usage(why);
            // the first barrier is flat and decides the form
            pg.barrier()?;
            if pg.barrier_is_hierarchical() != Some(true) {
                return Err(fail("the world barrier is not hierarchical".into()));
            }
            if pg.rank() == 0 {
                pg.fail_next_barrier_release_to(2);
                match pg.barrier() {
                    Err(e) if e.to_string().contains("rank 2") => {}
                    other => {
                        return Err(fail(format!(
                            "a release that could not reach rank 2 gave {other:?}"
                        )))
                    }
                }
                pg.barrier()
                    .map_err(|e| fail(format!("the retried barrier: {e}")))?;
            } else {
                pg.barrier()?;
            }
            for k in 0..3 {
                pg.barrier()
                    .map_err(|e| fail(format!("barrier {k} after the retry: {e}")))?;
            }
            pg.finish()
        });
    }
}
