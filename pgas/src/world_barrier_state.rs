//! The world barrier's hierarchical form's state (`world_barrier.rs`):
//! what the barrier handlers record (`Shared`, in `State`) and this
//! rank's side (`WorldHier`, in the context), with rank 0's decision.

use crate::coll::Coll;
use crate::shm_barrier::ShmBarrier;
use crate::team_hosts::{plan, Layout, Report};
use parking_lot::Mutex;
use splitrt_runtime::config::{self, RmaPath};
use splitrt_runtime::fabric::SegmentRef;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// "Unwilling" (or no report) in a report's key word.
const UNWILLING: u64 = u64::MAX;

/// What the barrier handlers record (kept in `State`): the host reports
/// of epoch 1 (rank 0) and the decision (every rank).
#[derive(Default)]
pub(crate) struct Shared {
    /// `[key, count]` of every rank's epoch-1 arrival (rank 0 only).
    reports: Mutex<Vec<[u64; 2]>>,
    /// Rank 0 decided the hierarchical form (set before the release of
    /// epoch 1 is published).
    hier: AtomicBool,
    /// On a host's leader: its host's barrier, which the release handler
    /// releases (`released_to_host`; set by `WorldHier::hand_host_to`).
    host: OnceLock<ShmBarrier>,
}

impl Shared {
    /// Rank `src` arrived in barrier `epoch` with report `key`, `count`
    /// (a peer's words: data; only epoch 1's are kept, bounded by `size`).
    pub(crate) fn report(&self, epoch: u64, src: usize, size: usize, key: u64, count: u64) {
        if epoch != 1 || src >= size {
            return;
        }
        let mut r = self.reports.lock();
        if r.len() != size {
            *r = vec![[UNWILLING, 0]; size];
        }
        r[src] = [key, count];
    }

    /// Rank 0's release said the form (`on`: hierarchical).
    pub(crate) fn set_hier(&self, on: bool) {
        if on {
            self.hier.store(true, Ordering::Release);
        }
    }

    pub(crate) fn hier(&self) -> bool {
        self.hier.load(Ordering::Acquire)
    }

    /// The release handler's part (a release of `epoch` in `form` from
    /// `src`): on a host's leader, rank 0's release of a hierarchical
    /// barrier (epoch 2 on) is published to the host at once, so its ranks
    /// leave without waiting for the leader to call its own wait (the
    /// host's arrivals are complete: its last arrival's message is what
    /// rank 0 counted). The leader's wait publishes it again (idempotent).
    pub(crate) fn released_to_host(&self, src: usize, epoch: u64, form: u64) {
        if src == 0 && form == 1 && epoch >= 2 {
            if let Some(g) = self.host.get() {
                g.release(epoch);
            }
        }
    }
}

/// This rank's side of the hierarchical world barrier.
pub(crate) struct WorldHier {
    /// The barrier of the ranks whose segments are mapped here (this
    /// host's), if this rank may take part.
    pub(crate) group: Option<ShmBarrier>,
    /// Its report: `[key, count]` (key [`UNWILLING`] if it may not).
    report: [u64; 2],
    /// The layout rank 0 decided (rank 0 only).
    pub(crate) layout: OnceLock<Layout>,
    /// World barrier messages sent to ranks whose segment is not mapped
    /// here (`Pgas::barrier_off_host_messages`).
    pub(crate) off_host: AtomicU64,
    /// The epoch whose host arrival this rank counted last but could not
    /// send to rank 0 (0: none): a retry sends it rather than arriving
    /// again in shared memory.
    pub(crate) unsent: AtomicU64,
    /// Test double: the rank whose next release send fails
    /// (`usize::MAX`: none; `Pgas::fail_next_barrier_release_to`).
    #[cfg(feature = "test-doubles")]
    pub(crate) fail_release_to: std::sync::atomic::AtomicUsize,
    /// The release this rank still owes (set on rank 0 only: a host's
    /// leader passes rank 0's release on to its host through shared
    /// memory, which cannot fail partway): a send that failed partway
    /// leaves here the ranks it did not reach, and the retried wait sends
    /// to them (`Pgas::send_releases`, `Pgas::resume_release`).
    pub(crate) owed: Mutex<Option<Owed>>,
}

/// A world barrier release that could not be sent to every rank.
pub(crate) struct Owed {
    /// Its barrier.
    pub(crate) epoch: u64,
    /// Its words (`[epoch, form]`).
    pub(crate) words: [u64; 2],
    /// The ranks it has not reached.
    pub(crate) to: Vec<usize>,
}

impl WorldHier {
    /// This rank's side, from the segments mapped here (`segs`, by rank).
    pub(crate) fn new(segs: &[Option<SegmentRef>], rank: usize, path: RmaPath) -> WorldHier {
        let enabled = config::env_switch(config::ENV_TEAM_HIER, true).unwrap_or(false);
        let names: Vec<usize> = (0..segs.len()).filter(|&r| segs[r].is_some()).collect();
        let group = match (path, enabled) {
            (RmaPath::Native, true) => names.iter().position(|&r| r == rank).and_then(|me| {
                let s = names.iter().filter_map(|&r| segs[r]).collect();
                ShmBarrier::over(s, names.clone(), me)
            }),
            _ => None,
        };
        let report = match &group {
            Some(g) => [names[0] as u64, g.len() as u64],
            None => [UNWILLING, 0],
        };
        WorldHier {
            group,
            report,
            layout: OnceLock::new(),
            off_host: AtomicU64::new(0),
            unsent: AtomicU64::new(0),
            #[cfg(feature = "test-doubles")]
            fail_release_to: std::sync::atomic::AtomicUsize::new(usize::MAX),
            owed: Mutex::new(None),
        }
    }

    /// On a host's leader, give the release handler (`shared`) this
    /// host's barrier, so it publishes rank 0's releases to the host
    /// (`Shared::released_to_host`).
    pub(crate) fn hand_host_to(&self, shared: &Shared, rank: usize) {
        if let Some(g) = self.group.as_ref().filter(|g| g.first() == rank) {
            let _ = shared.host.set(g.clone());
        }
    }

    /// The arrival message's words for barrier `epoch` of `kind`.
    pub(crate) fn arrival(&self, epoch: u64, kind: Coll) -> [u64; 4] {
        [epoch, kind as u64, self.report[0], self.report[1]]
    }

    /// Rank 0, releasing epoch 1: decide from every rank's report (its own
    /// included) whether later barriers run hierarchically.
    pub(crate) fn decide(&self, shared: &Shared, size: usize) -> bool {
        let mut words = shared.reports.lock().clone();
        words.resize(size, [UNWILLING, 0]);
        if let Some(w) = words.first_mut() {
            *w = self.report;
        }
        let reports: Vec<Report> = words
            .iter()
            .map(|w| Report {
                key: w[0],
                count: w[1],
                off: 0,
                willing: w[0] != UNWILLING,
            })
            .collect();
        match plan(&reports) {
            Some(l) => {
                let _ = self.layout.set(l);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(report: [u64; 2]) -> WorldHier {
        WorldHier {
            group: None,
            report,
            layout: OnceLock::new(),
            off_host: AtomicU64::new(0),
            unsent: AtomicU64::new(0),
            #[cfg(feature = "test-doubles")]
            fail_release_to: std::sync::atomic::AtomicUsize::new(usize::MAX),
            owed: Mutex::new(None),
        }
    }

    #[test]
    fn worldbar_rank_0_decides_from_consistent_reports_only() {
        // 0 1 | 2 3 | 4: hierarchical, three hosts
        let s = Shared::default();
        for (src, key, count) in [(1, 0, 2), (2, 2, 2), (3, 2, 2), (4, 4, 1)] {
            s.report(1, src, 5, key, count);
        }
        let w = side([0, 2]);
        assert!(w.decide(&s, 5));
        assert_eq!(w.layout.get().unwrap().leaders, vec![0, 2, 4]);
        // one unwilling rank (AM path, SPLITRT_TEAM_HIER=0): flat
        s.report(1, 4, 5, UNWILLING, 0);
        assert!(!side([0, 2]).decide(&s, 5));
        // a contradicting count: flat
        s.report(1, 4, 5, 4, 1);
        s.report(1, 3, 5, 2, 3);
        assert!(!side([0, 2]).decide(&s, 5));
        // a rank that never reported (or one host): flat
        let s = Shared::default();
        assert!(!side([0, 2]).decide(&s, 5));
    }

    #[test]
    fn worldbar_hostile_reports_are_data() {
        let s = Shared::default();
        // past the size, or after the first barrier: ignored
        s.report(1, 99, 3, 0, 1);
        s.report(2, 1, 3, 0, 1);
        assert!(s.reports.lock().iter().all(|r| r[0] == UNWILLING));
        // a key out of range, or naming a rank that is not its own key
        s.report(1, 1, 3, u64::MAX - 1, 7);
        s.report(1, 2, 3, 1, 2);
        assert!(!side([0, 1]).decide(&s, 3));
        assert!(!s.hier());
    }
}
