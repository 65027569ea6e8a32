//! Which members of a team share a host, as every member agreed at the
//! team's hierarchical set-up (`team_hier.rs`): the host groups, their
//! leaders, and this member's group's shared-memory area.
//!
//! Each member tells the others (one exchange by team messages) its
//! [`Report`]: the lowest team rank whose segment it maps here (its
//! host's **key**: itself if it maps no other), how many members it maps
//! (itself included), where its area block is, and whether it may take
//! part (native path, not disabled, a block where it needs one). From
//! those reports alone [`plan`] decides, the same on every member, whether
//! the team runs hierarchically and how it is grouped: a pure function,
//! so every member that got the same reports decides alike.

use crate::team_area::TeamArea;
use std::sync::{Arc, OnceLock};

/// "No block" in a report.
pub(crate) const NO_BLOCK: u64 = u64::MAX;

/// What one member reports at the set-up (four words on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Report {
    /// The lowest team rank whose segment this member maps (its own if
    /// none other).
    pub key: u64,
    /// Members whose segments it maps, itself included.
    pub count: u64,
    /// Offset of its area block in its segment, or [`NO_BLOCK`].
    pub off: u64,
    /// Whether it may take part (native path, not disabled by
    /// `SPLITRT_TEAM_HIER=0`).
    pub willing: bool,
}

impl Report {
    /// The report as words.
    pub(crate) fn words(&self) -> [u64; 4] {
        [self.key, self.count, self.off, u64::from(self.willing)]
    }

    /// The report of words `w` (a peer's: data, checked by [`plan`]).
    pub(crate) fn from_words(w: &[u64]) -> Report {
        Report {
            key: w.first().copied().unwrap_or(u64::MAX),
            count: w.get(1).copied().unwrap_or(0),
            off: w.get(2).copied().unwrap_or(NO_BLOCK),
            willing: w.get(3) == Some(&1),
        }
    }
}

/// How a team is grouped by host, as [`plan`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The group (index into `leaders`) of every team rank.
    pub group_of: Vec<usize>,
    /// Every group's leader (its lowest team rank), in increasing order.
    pub leaders: Vec<usize>,
    /// The number of members of the largest group, counted once by
    /// [`new`](Self::new) ([`largest_group`](Self::largest_group)).
    largest: usize,
}

impl Layout {
    /// The layout of these groups and leaders (see the fields), with its
    /// largest group counted once here rather than at every
    /// [`largest_group`](Self::largest_group).
    pub(crate) fn new(group_of: Vec<usize>, leaders: Vec<usize>) -> Layout {
        let largest = count_largest(&group_of, leaders.len());
        Layout {
            group_of,
            leaders,
            largest,
        }
    }

    /// The team ranks of group `g`, in increasing order.
    pub(crate) fn members_of(&self, g: usize) -> Vec<usize> {
        (0..self.group_of.len())
            .filter(|&j| self.group_of[j] == g)
            .collect()
    }

    /// The number of members of the largest group (0 with no groups):
    /// counted once, when the layout was built ([`new`](Self::new)), so a
    /// call allocates nothing and reads one word.
    #[inline]
    pub(crate) fn largest_group(&self) -> usize {
        self.largest
    }

    /// Elements per element of a step a hierarchical alltoall moves
    /// through one member's half: the n blocks a member publishes, or the
    /// blocks from other hosts a leader publishes for its g members
    /// (g (n - g)), whichever is more.
    pub(crate) fn alltoall_width(&self) -> usize {
        let n = self.group_of.len();
        (0..self.leaders.len())
            .map(|g| {
                let s = self.group_of.iter().filter(|&&x| x == g).count();
                s * (n - s)
            })
            .fold(n, usize::max)
    }

    /// Whether every group is a run of consecutive team ranks (the
    /// hierarchical scans need it: a host's prefix is then one piece of
    /// the team's).
    pub(crate) fn contiguous(&self) -> bool {
        self.group_of
            .windows(2)
            .all(|w| w[1] == w[0] || w[1] == w[0] + 1)
    }
}

/// The number of members of the largest of `groups` groups, where
/// `group_of[j]` is member j's group, in one pass over the members: O(n),
/// not one pass per group. A group index past `groups` counts toward no
/// group.
fn count_largest(group_of: &[usize], groups: usize) -> usize {
    let mut sizes = vec![0usize; groups];
    for &b in group_of {
        if let Some(c) = sizes.get_mut(b) {
            *c += 1;
        }
    }
    sizes.into_iter().max().unwrap_or(0)
}

/// Decide from every member's report (team order) whether the team runs
/// hierarchically: every member willing; every member's key a member
/// whose own key is itself, and the members with one key exactly as many
/// as each of them maps; more than one group, and one with more than one
/// member; a block for every member of a group of more than one. Anything
/// else (including reports that contradict each other) is `None`: the
/// flat message algorithms.
pub(crate) fn plan(reports: &[Report]) -> Option<Layout> {
    let n = reports.len();
    if n < 3 || reports.iter().any(|r| !r.willing) {
        return None;
    }
    let mut leaders: Vec<usize> = Vec::new();
    for (j, r) in reports.iter().enumerate() {
        let key = usize::try_from(r.key).ok().filter(|&k| k < n)?;
        if key > j || reports[key].key != key as u64 {
            return None;
        }
        if key == j {
            leaders.push(j);
        }
    }
    let group_of: Vec<usize> = reports
        .iter()
        .map(|r| leaders.binary_search(&(r.key as usize)).ok())
        .collect::<Option<_>>()?;
    let mut sizes = vec![0u64; leaders.len()];
    for &g in &group_of {
        sizes[g] += 1;
    }
    for (j, r) in reports.iter().enumerate() {
        let size = sizes[group_of[j]];
        if r.count != size || (size > 1 && r.off == NO_BLOCK) {
            return None;
        }
    }
    if leaders.len() < 2 || sizes.iter().all(|&s| s < 2) {
        return None;
    }
    Some(Layout::new(group_of, leaders))
}

/// A team's host groups on this member (see the module docs).
#[derive(Debug)]
pub(crate) struct HostGroups {
    /// The grouping every member agreed on.
    pub layout: Layout,
    /// This member's group: its team ranks, in increasing order.
    pub group: Vec<usize>,
    /// This member's index in `group` (0: the leader).
    pub gme: usize,
    /// The group's shared-memory area (member i = `group[i]`), if the
    /// group has more than one member.
    pub area: Option<Arc<TeamArea>>,
}

impl HostGroups {
    /// This member's index among the leaders, if it leads its group.
    pub(crate) fn leader_index(&self) -> Option<usize> {
        (self.gme == 0).then(|| self.layout.group_of[self.group[0]])
    }

    /// This member's group's index among the leaders.
    pub(crate) fn my_group(&self) -> usize {
        self.layout.group_of[self.group[self.gme]]
    }
}

/// The lazily set-up host groups of a team handle and its clones: `None`
/// once the members agreed on the flat message algorithms.
pub(crate) type HierSlot = OnceLock<Option<Arc<HostGroups>>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(key: u64, count: u64, off: u64) -> Report {
        Report {
            key,
            count,
            off,
            willing: true,
        }
    }

    #[test]
    fn hier_plan_groups_by_host_and_leads_by_the_lowest_rank() {
        // hosts {0, 1} {2, 3} {4}
        let r = [
            rep(0, 2, 64),
            rep(0, 2, 64),
            rep(2, 2, 128),
            rep(2, 2, 64),
            rep(4, 1, NO_BLOCK),
        ];
        let l = plan(&r).unwrap();
        assert_eq!(l.leaders, vec![0, 2, 4]);
        assert_eq!(l.group_of, vec![0, 0, 1, 1, 2]);
        assert_eq!(l.members_of(1), vec![2, 3]);
        // interleaved hosts: {0, 2, 4} {1, 3}
        let r = [
            rep(0, 3, 64),
            rep(1, 2, 64),
            rep(0, 3, 64),
            rep(1, 2, 64),
            rep(0, 3, 64),
        ];
        let l = plan(&r).unwrap();
        assert_eq!(l.leaders, vec![0, 1]);
        assert_eq!(l.group_of, vec![0, 1, 0, 1, 0]);
    }

    #[test]
    fn hier2_layout_width_and_contiguity() {
        let l = Layout::new;
        // 2 + 2 + 1: a member's 5 blocks, a leader of 2 gets 2 * 3
        let a = l(vec![0, 0, 1, 1, 2], vec![0, 2, 4]);
        assert_eq!(a.alltoall_width(), 6);
        assert!(a.contiguous());
        // 3 + 3: 3 * 3 = 9 > 6
        assert_eq!(l(vec![0, 0, 0, 1, 1, 1], vec![0, 3]).alltoall_width(), 9);
        // 1 + 1 + 1 + 3: the 3-member host's 3 * 3 = 9 > the members' 6 blocks
        assert_eq!(
            l(vec![0, 1, 2, 3, 3, 3], vec![0, 1, 2, 3]).alltoall_width(),
            9
        );
        assert_eq!(l(vec![0, 1, 1], vec![0, 1]).alltoall_width(), 3);
        // interleaved hosts: no hierarchical scan
        assert!(!l(vec![0, 1, 0, 1, 0], vec![0, 1]).contiguous());
        assert!(!l(vec![0, 0, 1, 0], vec![0, 2]).contiguous());
    }

    #[test]
    fn hier_plan_is_flat_unless_every_report_agrees() {
        let good = [rep(0, 2, 64), rep(0, 2, 64), rep(2, 2, 64), rep(2, 2, 64)];
        assert!(plan(&good).is_some());
        // one host, or every member alone: nothing to gain
        assert!(plan(&[rep(0, 3, 64), rep(0, 3, 64), rep(0, 3, 64)]).is_none());
        assert!(plan(&[rep(0, 1, 64), rep(1, 1, 64), rep(2, 1, 64)]).is_none());
        // an unwilling member (the AM path, SPLITRT_TEAM_HIER=0)
        let mut r = good;
        r[3].willing = false;
        assert!(plan(&r).is_none());
        // a member of a group of two without a block
        let mut r = good;
        r[1].off = NO_BLOCK;
        assert!(plan(&r).is_none());
        // counts that contradict the keys (a one-sided mapping)
        let mut r = good;
        r[0].count = 3;
        assert!(plan(&r).is_none());
        // a key that is no member, a key above the member, a key whose
        // own key differs (peer data: never an index out of range)
        for bad in [u64::MAX, 4, 3] {
            let mut r = good;
            r[2].key = bad;
            assert!(plan(&r).is_none(), "{bad}");
        }
        let mut r = good;
        r[0].key = 1;
        assert!(plan(&r).is_none());
        assert_eq!(
            Report::from_words(&good[2].words()),
            good[2],
            "words round-trip"
        );
        assert!(!Report::from_words(&[]).willing);
    }
}
