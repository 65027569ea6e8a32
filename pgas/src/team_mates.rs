//! A hierarchical scan's look at its host-mates' shared-memory steps.
//!
//! The hierarchical scans run by team messages only, each from a lower
//! team rank to a higher one (`team_hier_nb_scan.rs`); the other blocking
//! hierarchical collectives step their host group's shared-memory area
//! (`ShmCall::sync`), whose step headers every member of the group can
//! read. If a member calls a scan as collective #k while a host-mate
//! calls another collective as #k, the member waits for a scan message
//! the host-mate never sends, and the host-mate waits in its step for the
//! member, which never publishes one (and, being above it, sends it
//! nothing either). No message of another call reaches the member, so the
//! team mailbox cannot tell it of the mismatch: while a scan waits for a
//! message it also reads its host-mates' step headers. A host-mate that
//! published a step as collective #k with another header called another
//! collective (a scan never steps the area): the scan ends with the
//! mismatch error naming both ranks and both calls, which ends the job
//! (`Team::step_mismatch`, the words of the steps' own check).
//!
//! Cheap: a look is one load per host-mate; a host-mate's six header
//! words are read only when it published a step not looked at yet, at
//! most a couple of times per scan (a host-mate cannot publish past a
//! step this member has not published). A header is data from a peer:
//! only compared, never an index or a length.

use crate::team_area::{TeamArea, HDR_WORDS};
use crate::team_hosts::HostGroups;
use crate::team_mail::Header;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A member's host-mates in its group's area, and the last step of each
/// it looked at (see the module docs).
pub(crate) struct Mates {
    area: Arc<TeamArea>,
    /// The group's team ranks (area member j is team rank `ranks[j]`).
    ranks: Vec<usize>,
    /// This member's index in `ranks`.
    me: usize,
    /// Each member's step last looked at (`u64::MAX`: none yet, so the
    /// first look reads every header: a host-mate may have published
    /// its step before this member's scan began).
    seen: Vec<AtomicU64>,
}

impl Mates {
    /// The host-mates of this member of `g`: `None` for a group of one
    /// (no area).
    pub(crate) fn of(g: &HostGroups) -> Option<Arc<Mates>> {
        let area = g.area.clone()?;
        let n = area.size().min(g.group.len());
        Some(Arc::new(Mates {
            area,
            ranks: g.group[..n].to_vec(),
            me: g.gme,
            seen: (0..n).map(|_| AtomicU64::new(u64::MAX)).collect(),
        }))
    }

    /// Whether a host-mate published a step not looked at yet (a wait's
    /// condition: one load per host-mate).
    pub(crate) fn moved(&self) -> bool {
        (0..self.ranks.len())
            .filter(|&j| j != self.me)
            .any(|j| self.area.published(j) != self.seen[j].load(Ordering::Relaxed))
    }

    /// A host-mate whose latest step is of collective `seq` with another
    /// header than `h` (this member's call): its team rank and the step's
    /// header words. Marks the steps read as looked at (a step being
    /// rewritten as it is read is looked at again next time).
    pub(crate) fn mismatch(&self, seq: u64, h: &Header) -> Option<(usize, [u64; HDR_WORDS])> {
        let mine = [seq, h.kind, h.op, h.root, h.count, h.esize];
        for j in (0..self.ranks.len()).filter(|&j| j != self.me) {
            if self.area.published(j) == self.seen[j].load(Ordering::Relaxed) {
                continue;
            }
            let Some((k, w)) = self.area.latest(j) else {
                continue;
            };
            self.seen[j].store(k, Ordering::Relaxed);
            if w[0] == seq && w != mine {
                return Some((self.ranks[j], w));
            }
        }
        None
    }
}
