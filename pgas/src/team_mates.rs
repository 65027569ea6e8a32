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
//! only compared, never an index or a length. A host-mate's block stays
//! this team's while the scan reads it: a dropped team's block is freed
//! only once every member dropped the team (`TeamArea::all_dropped`), and
//! a member holds its area while it may call a scan.

use crate::team_area::{TeamArea, HDR_WORDS};
use crate::team_hosts::HostGroups;
use crate::team_mail::Header;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A member's host-mates in its group's area, and the last step of each
/// it looked at (see the module docs).
pub(crate) struct Mates {
    area: Arc<TeamArea>,
    /// The group's team ranks (area member j is team rank `ranks[j]`).
    ranks: Vec<usize>,
    /// This member's index in `ranks`.
    me: usize,
    /// Each member's step last looked at (its last step when the scan
    /// began: a wait wakes only for a newer one).
    seen: Vec<AtomicU64>,
    /// No look yet: the first reads every host-mate's header (one may
    /// have published its step before this member's scan began).
    first: AtomicBool,
}

impl Mates {
    /// The host-mates of this member of `g`: `None` for a group of one
    /// (no area).
    pub(crate) fn of(g: &HostGroups) -> Option<Arc<Mates>> {
        Some(Arc::new(Mates::new(g.area.clone()?, &g.group, g.gme)))
    }

    /// Member `me` of `area`, whose member j is team rank `ranks[j]`.
    pub(crate) fn new(area: Arc<TeamArea>, ranks: &[usize], me: usize) -> Mates {
        let n = area.size().min(ranks.len());
        let seen = (0..n).map(|j| AtomicU64::new(area.published(j))).collect();
        Mates {
            area,
            ranks: ranks[..n].to_vec(),
            me,
            seen,
            first: AtomicBool::new(true),
        }
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
        let first = self.first.swap(false, Ordering::Relaxed);
        for j in (0..self.ranks.len()).filter(|&j| j != self.me) {
            if !first && self.area.published(j) == self.seen[j].load(Ordering::Relaxed) {
                continue;
            }
            let Some((k, w)) = self.area.latest(j) else {
                // being rewritten: `moved` wakes the wait for the next look
                self.seen[j].store(u64::MAX, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::team_area::Retired;
    use crate::team_mail::CollKind;
    use splitrt_runtime::fabric::SegmentRef;

    /// Words of one small block (256 B of control words, two halves of
    /// 64 B), 64-byte aligned.
    #[repr(C, align(64))]
    struct Block([AtomicU64; 48]);

    fn h(kind: CollKind) -> Header {
        Header {
            kind: kind as u64,
            op: if kind == CollKind::Broadcast { 0 } else { 1 },
            root: if kind == CollKind::Broadcast {
                0
            } else {
                u64::MAX
            },
            count: 2,
            esize: 8,
        }
    }

    fn words(seq: u64, h: &Header) -> [u64; HDR_WORDS] {
        [seq, h.kind, h.op, h.root, h.count, h.esize]
    }

    /// A host-mate's step of another collective as the scan's number is
    /// found (with its team rank and header); earlier and later
    /// collectives' steps, and a header like the scan's own, are not; a
    /// look reads a host-mate's header once per new step (`moved`).
    #[test]
    fn scanmix_a_host_mates_step_as_this_call_is_a_mismatch() {
        let blocks: Vec<Block> = (0..2)
            .map(|_| Block(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect();
        let segs: Vec<SegmentRef> = blocks
            .iter()
            // SAFETY: `blocks` outlives both areas (dropped at the end of
            // the test, after them), and the areas touch its words only
            // atomically (no data half is written or read here).
            .map(|b| unsafe { SegmentRef::new(b.0.as_ptr() as *mut u8, 48 * 8) })
            .collect();
        let area = |me| Arc::new(TeamArea::new(segs.clone(), vec![0, 0], me, 64, 7, None).unwrap());
        // the host group is team ranks 4 and 5; this member is 4
        let (mine, theirs) = (area(0), area(1));
        let scan = h(CollKind::ScanInclusive);
        // a scan that began before its host-mate's steps
        let m = Mates::new(mine.clone(), &[4, 5], 0);
        assert!(!m.moved());
        assert_eq!(m.mismatch(3, &scan), None);
        // an earlier collective's step
        theirs.publish(theirs.begin(), words(2, &h(CollKind::Broadcast)));
        assert!(m.moved());
        assert_eq!(m.mismatch(3, &scan), None);
        assert!(!m.moved());
        // a broadcast as this scan's number: rank 5 and its call
        let bc = words(3, &h(CollKind::Broadcast));
        theirs.publish(theirs.begin(), bc);
        assert!(m.moved());
        assert_eq!(m.mismatch(3, &scan), Some((5, bc)));
        // looked at: not found again until another step
        assert!(!m.moved());
        assert_eq!(m.mismatch(3, &scan), None);
        // a scan that began after that step: its wait does not wake for
        // it, its first look finds it; the next collective's scan does not
        let m2 = Mates::new(mine.clone(), &[4, 5], 0);
        assert!(!m2.moved());
        assert_eq!(m2.mismatch(3, &scan), Some((5, bc)));
        let m2 = Mates::new(mine.clone(), &[4, 5], 0);
        assert_eq!(m2.mismatch(4, &scan), None);
        // a later collective's step, and one like this member's own call
        theirs.publish(theirs.begin(), words(4, &h(CollKind::Allreduce)));
        assert_eq!(m.mismatch(3, &scan), None);
        theirs.publish(theirs.begin(), words(3, &scan));
        assert_eq!(m.mismatch(3, &scan), None);
        // the member's own steps are never looked at
        let m = Mates::new(theirs.clone(), &[4, 5], 1);
        assert_eq!(m.mismatch(3, &scan), None);
        assert!(!m.moved());
    }

    /// Review of the scanmix change, finding 1: a host-mate that finished
    /// its part of a scan and dropped the team (the scan steps nothing, so
    /// every member finished the team's last step) keeps its block, not
    /// freed for another team's or the program's use, while this member
    /// still holds the team and may read it in the scan; freed once it
    /// dropped the team too.
    #[test]
    fn scanmix_a_dropped_host_mates_block_stays_while_a_member_may_scan() {
        let blocks: Vec<Block> = (0..2)
            .map(|_| Block(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect();
        let segs: Vec<SegmentRef> = blocks
            .iter()
            // SAFETY: as in the test above (the areas are dropped before
            // `blocks`, the retired list with them).
            .map(|b| unsafe { SegmentRef::new(b.0.as_ptr() as *mut u8, 48 * 8) })
            .collect();
        let reg = Arc::new(Retired::default());
        let area = |me| {
            let own = Some((me as u64, reg.clone()));
            Arc::new(TeamArea::new(segs.clone(), vec![0, 0], me, 64, 7, own).unwrap())
        };
        let (mine, theirs) = (area(0), area(1));
        mine.reset_own();
        theirs.reset_own();
        // collective #2 of team 7: an allreduce both members stepped
        let ar = words(2, &h(CollKind::Allreduce));
        for a in [&mine, &theirs] {
            a.publish(a.begin(), ar);
            a.finish(1);
        }
        // collective #3: both call a scan; this member's is still waiting
        let scan = h(CollKind::ScanInclusive);
        let m = Mates::new(mine.clone(), &[4, 5], 0);
        assert_eq!(m.mismatch(3, &scan), None);
        // the host-mate finished its scan and dropped team 7
        drop(theirs);
        let reclaimable = |off| {
            reg.list
                .lock()
                .iter_mut()
                .filter(|r| r.off == off)
                .all(|r| r.reclaimable())
        };
        assert!(
            !reclaimable(1),
            "a dropped host-mate's block reclaimable while a member's scan still reads it"
        );
        assert!(!m.moved());
        assert_eq!(m.mismatch(3, &scan), None);
        // this member's scan ended and it dropped the team: both blocks go
        drop(m);
        drop(mine);
        assert_eq!(reg.list.lock().len(), 2);
        assert!(reclaimable(0) && reclaimable(1));
    }
}
