//! Hierarchical `reduce_scatter_nb`, `scan_inclusive_nb` and
//! `scan_exclusive_nb` as schedules (`team_sched.rs`), on a team whose
//! non-blocking collectives run hierarchically (`team_hier_nb.rs`: the
//! host groups an earlier blocking collective agreed). Within a host the
//! stages are team messages (over the host's shared-memory fabric). In
//! reduce_scatter only leaders (each host's lowest team rank) send across
//! hosts; in the scans the hosts' last members send the doubling and
//! offset messages across hosts, and the leaders receive the offsets.
//!
//! **reduce_scatter**: every member sends its n blocks to its leader in
//! one message, host-major (its own host's members first, then the
//! other hosts in leader order, each host's members in team-rank order:
//! the same on every member of a host); the leader combines them in
//! team-rank order, sends each other leader the partial results for that
//! host's members in one message (L (L - 1) across hosts, as the
//! blocking form), combines what it received in leader order and sends
//! each member its block. It goes flat (on every member alike: the
//! decision depends on n, k, the element size and the host sizes only)
//! when the blocking form would (`hier_fits`) or when the busiest leader
//! would buffer more than [`RS_HIER_MAX_BYTES`] (its members' n blocks
//! each and the other leaders' results for its members), far under the
//! team mailbox's 1 GiB bounds on one message and on buffered bytes.
//!
//! **scans** (when each host's members are consecutive team ranks,
//! `Layout::contiguous`; otherwise flat, as the blocking forms): every
//! message goes from a lower team rank to a higher one, as in the flat
//! scan, so no member ever waits for a higher one and back-to-back scans
//! pipeline (call k + 1's first hosts run while call k's later ones
//! finish; a member waiting for its result from its leader, which waits
//! for the member's next call, made the scans lock-step):
//!
//! 1. within a host, each member passes its host-local prefix (its own
//!    data on the right of what it received) to the host's next member;
//!    the host's last member has the host's total;
//! 2. the last members of all hosts but the last exclusive-scan the
//!    totals by recursive doubling (≤ ⌈log2 (L - 1)⌉ messages each), and
//!    the last member of host i sends what hosts 0..=i add up to (the
//!    offset of host i + 1) to host i + 1's leader: at most
//!    L - 1 + (L - 1) ⌈log2 (L - 1)⌉ messages across hosts;
//! 3. each leader sends that offset to its host's other members, and
//!    every member puts it on the left of its host-local result.
//!
//! reduce_scatter_nb combines in the blocking hierarchical form's order
//! (its bits); the blocking hierarchical scans run the scans' schedule
//! (`team_hier_scan.rs`, with tags of their own), so blocking and
//! non-blocking scans give the same bits. Integers give the flat
//! results.

use crate::reduce::{Op, Reduce};
use crate::team::Team;
use crate::team_hier::{hier_fits, FANOUT_LATER, HIER, LEADER_LATER};
use crate::team_hosts::{HostGroups, Layout};
use crate::team_mail::{CollKind, Header, MAX_BYTES};
use crate::team_mates::Mates;
use crate::team_nb::{bytes_of, TeamRequest};
use crate::team_sched::{combine_bytes, Buf, Fold, Sched, Step};
use std::sync::Arc;

/// Tags of the non-blocking forms' messages (`team_hier_nb.rs`'s range:
/// never a flat schedule's nor a blocking form's).
pub(crate) const NB_TAGS: u64 = 1 << 60;
/// Tags of the blocking hierarchical scans' messages (in the blocking
/// hierarchical forms' range, above any chunk's `team_hier::tag`).
pub(crate) const BLOCKING_TAGS: u64 = HIER | 1 << 48;
/// A member's part, to its leader.
const UP: u64 = 1;
/// Round `t` among leaders (`| t`).
const LEAD: u64 = 0x100;
/// A member's result (reduce_scatter), or what the hosts before its
/// own add up to (scans), from its leader.
const DOWN: u64 = 0x300;
/// A scan's host-local prefix, to the host's next member.
const CHAIN: u64 = 0x400;
/// What hosts 0..=i add up to, from host i's last member to host
/// i + 1's leader.
const OFFSET: u64 = 0x500;

/// A schedule under construction (tags offset by `base`).
struct Plan {
    s: Sched,
    base: u64,
}

impl Plan {
    fn send(&mut self, to: usize, tag: u64, (src, at, len): (Buf, usize, usize)) {
        self.s.steps.push_back(Step::Send {
            to,
            tag: self.base | tag,
            src,
            at,
            len,
        });
    }

    fn recv(
        &mut self,
        from: usize,
        tag: u64,
        (dst, at, len): (Buf, usize, usize),
        fold: Fold,
        hops: u32,
    ) {
        self.s.steps.push_back(Step::Recv {
            fold,
            from,
            tag: self.base | tag,
            dst,
            at,
            len,
            hops,
        });
    }

    /// `dst` at `at` gets `len` bytes of `src` (at 0) by `fold`.
    fn apply(&mut self, src: Buf, (dst, at, len): (Buf, usize, usize), fold: Fold) {
        self.s.steps.push_back(Step::Apply {
            src,
            dst,
            at,
            len,
            fold,
        });
    }

    /// `Out` at `at` gets a copy of `Work`'s first `len` bytes.
    fn keep(&mut self, at: usize, len: usize) {
        self.s.steps.push_back(Step::Place {
            src: Buf::Work,
            from: 0,
            dst: Buf::Out,
            at,
            len,
        });
    }
}

/// Seconds a reduce_scatter member's wait for its result from its leader
/// adds to the hang report's delay: after its leader's report of a
/// member of theirs that never calls (0) and after the leaders' reports
/// of each other (`LEADER_LATER + 1`), so a missing leader is named by
/// the other leaders, not by the other hosts' members naming their own
/// (as the other non-blocking forms' fan-out waits).
const RESULT_LATER: u32 = FANOUT_LATER as u32 + 2;

/// Most bytes a hierarchical `reduce_scatter_nb` may leave at one leader
/// (its members' messages of n blocks each, its own, and the other
/// leaders' partial results for its members): above it every member
/// goes flat. An eighth of the team mailbox's bounds (1 GiB on one
/// message and on buffered bytes), leaving room for other collectives'
/// messages buffered beside it.
pub(crate) const RS_HIER_MAX_BYTES: usize = MAX_BYTES / 8;

/// Bytes the hierarchical `reduce_scatter_nb` of `kw` bytes per block
/// leaves at the busiest leader of `lay` (see [`RS_HIER_MAX_BYTES`]):
/// g n kw from its g members (its own blocks counted too) and
/// (L - 1) g kw from the other leaders. Saturating. The bytes grow with
/// g, so the busiest leader is the largest host's: O(n)
/// ([`Layout::largest_group`]; one count per host, O(L n), before
/// session 13).
fn rs_leader_bytes(lay: &Layout, kw: usize) -> usize {
    let (n, nl) = (lay.group_of.len(), lay.leaders.len());
    let g = lay.largest_group();
    g.saturating_mul(n)
        .saturating_add(g.saturating_mul(nl.saturating_sub(1)))
        .saturating_mul(kw)
}

/// Whether `reduce_scatter_nb` of `k` elements of `T` per block runs
/// hierarchically on a team grouped as `lay`: when the blocking form
/// would and the busiest leader buffers at most `max` bytes (the same
/// answer on every member).
pub(crate) fn reduce_scatter_nb_fits<T>(k: usize, lay: &Layout, max: usize) -> bool {
    let kw = k.saturating_mul(std::mem::size_of::<T>());
    hier_fits::<T>(CollKind::ReduceScatter, k, lay) && rs_leader_bytes(lay, kw) <= max
}

/// Seconds the scans' waits add to the hang report's delay, from the
/// layout (the same on every member): `c`, the largest host's size less
/// one, bounds a host's chain waits (member j waits j - 1); the
/// doubling round t waits `c + t`, a leader's wait for its offset
/// `c + r` (r = ⌈log2 (L - 1)⌉ rounds) and its members' wait for it one
/// more. So whoever waits for a member stuck behind the real culprit
/// reports after the member waiting for the culprit: a host's missing
/// last member is named by its doubling partner or the next host's
/// leader, not the next host's leader naming a host-mate of the culprit.
/// (Not `LEADER_LATER` more: the members below a missing one finish the
/// scan and wait in their next collective, whose leaders' waits report
/// `LEADER_LATER` + hops late; `noscan 3` on `-N3 -n6` was named there.)
struct ScanLater {
    /// `c`.
    lead: u32,
    /// `⌈log2 (L - 1)⌉`.
    rounds: u32,
}

impl ScanLater {
    /// The delays of layout `lay`: O(n) ([`Layout::largest_group`]).
    fn of(lay: &Layout) -> ScanLater {
        let nl = lay.leaders.len();
        let c = lay.largest_group().saturating_sub(1);
        let m = nl.saturating_sub(1);
        let rounds = if m <= 1 {
            0
        } else {
            usize::BITS - (m - 1).leading_zeros()
        };
        ScanLater {
            lead: c as u32,
            rounds,
        }
    }

    /// The doubling round `t`'s wait.
    fn round(&self, t: u32) -> u32 {
        self.lead + t
    }

    /// A leader's wait for its host's offset.
    fn offset(&self) -> u32 {
        self.lead + self.rounds
    }

    /// A member's wait for the offset from its leader.
    fn down(&self) -> u32 {
        self.offset() + 1
    }
}

impl Team {
    /// `reduce_scatter_nb` hierarchically (see the module docs): `send`
    /// holds n blocks of `recv.len()` elements.
    pub(crate) fn reduce_scatter_nb_hier<'a, T: Reduce>(
        &self,
        (seq, h, g): (u64, Header, Arc<HostGroups>),
        send: &[T],
        recv: &'a mut [T],
        op: Op,
    ) -> TeamRequest<'a> {
        let (k, kw) = (recv.len(), std::mem::size_of_val(recv));
        let lay = &g.layout;
        let (nl, mine, ga) = (lay.leaders.len(), g.my_group(), g.group.len());
        let n = lay.group_of.len();
        // host-major, this host first; group b's blocks at `at[b]`
        let mut at = vec![0usize; nl];
        let mut out = Vec::with_capacity(n * kw);
        for b in std::iter::once(mine).chain((0..nl).filter(|&b| b != mine)) {
            at[b] = out.len();
            for t in lay.members_of(b) {
                out.extend_from_slice(bytemuck::cast_slice(&send[t * k..][..k]));
            }
        }
        let mut p = Plan {
            s: Sched::new(self, seq, h),
            base: NB_TAGS,
        };
        p.s.out = out;
        p.s.combine = Some((combine_bytes::<T>, op));
        p.s.copy_out = true;
        let later = LEADER_LATER + 1;
        match g.leader_index() {
            None => {
                p.send(g.group[0], UP, (Buf::Out, 0, n * kw));
                p.recv(
                    g.group[0],
                    DOWN,
                    (Buf::Out, 0, kw),
                    Fold::Copy,
                    RESULT_LATER,
                );
            }
            Some(li) => {
                // the host's members in team-rank order
                for &t in &g.group[1..] {
                    p.recv(t, UP, (Buf::Out, 0, n * kw), Fold::After, 0);
                }
                for s in 1..nl {
                    let b = (li + s) % nl;
                    let len = lay.members_of(b).len() * kw;
                    p.send(lay.leaders[b], LEAD, (Buf::Out, at[b], len));
                }
                // the hosts' partial results for this host in leader order
                let gl = ga * kw;
                if li == 0 {
                    for &l in &lay.leaders[1..] {
                        p.recv(l, LEAD, (Buf::Out, 0, gl), Fold::After, later);
                    }
                } else {
                    p.s.work = vec![0; gl];
                    for (b, &l) in lay.leaders.iter().enumerate() {
                        let fold = if b == 0 { Fold::Copy } else { Fold::After };
                        if b == li {
                            p.apply(Buf::Out, (Buf::Work, 0, gl), fold);
                        } else {
                            p.recv(l, LEAD, (Buf::Work, 0, gl), fold, later);
                        }
                    }
                    p.apply(Buf::Work, (Buf::Out, 0, gl), Fold::Copy);
                }
                for (j, &t) in g.group.iter().enumerate().skip(1) {
                    p.send(t, DOWN, (Buf::Out, j * kw, kw));
                }
            }
        }
        TeamRequest::start(p.s, bytemuck::cast_slice_mut(recv))
    }

    /// The schedule of a hierarchical scan of `data` (see the module
    /// docs; `base`: [`NB_TAGS`] or [`BLOCKING_TAGS`]). The caller's
    /// request copies the result out. Every message goes from a lower
    /// team rank to a higher one.
    pub(crate) fn scan_hier_sched<T: Reduce>(
        &self,
        (seq, h, g): (u64, Header, Arc<HostGroups>),
        base: u64,
        inclusive: bool,
        data: &[T],
        op: Op,
    ) -> Sched {
        let len = std::mem::size_of_val(data);
        let lay = &g.layout;
        let (nl, hi, gme, ga) = (lay.leaders.len(), g.my_group(), g.gme, g.group.len());
        let n = lay.group_of.len();
        let later = ScanLater::of(lay);
        // host i's last member (the groups are runs of team ranks)
        let last = |i: usize| lay.leaders.get(i + 1).map_or(n - 1, |&l| l - 1);
        let mut p = Plan {
            s: Sched::new(self, seq, h),
            base,
        };
        p.s.combine = Some((combine_bytes::<T>, op));
        p.s.copy_out = true;
        // a host-mate calling another collective as this one publishes
        // its step in the host's area, never a message to this member
        p.s.mates = Mates::of(&g);
        // `Out`: this member's result at 0 (its host-local part first:
        // zeros for the exclusive scan's host leader), the hosts' partial
        // result at `len`; `Work`: the host-local prefix
        p.s.out = vec![0; 2 * len];
        p.s.work = bytes_of(data);
        if gme > 0 {
            // the prefix of the host's members before this one, on the left
            let hops = gme as u32 - 1;
            p.recv(
                g.group[gme - 1],
                CHAIN,
                (Buf::Work, 0, len),
                Fold::Before,
                hops,
            );
            if !inclusive {
                p.apply(Buf::Scratch, (Buf::Out, 0, len), Fold::Copy);
            }
        }
        if inclusive {
            p.keep(0, len);
        }
        if gme + 1 < ga {
            p.send(g.group[gme + 1], CHAIN, (Buf::Work, 0, len));
        }
        // the hosts' last members but the last host's: recursive doubling
        // of the host totals, then what hosts 0..=hi add up to goes to the
        // next host's leader
        let m = nl - 1;
        if gme + 1 == ga && hi < m {
            let x = len;
            p.keep(x, len);
            let (mut d, mut t) = (1usize, 0u32);
            while d < m {
                if hi + d < m {
                    p.send(last(hi + d), LEAD | u64::from(t), (Buf::Out, x, len));
                }
                if hi >= d {
                    let tag = LEAD | u64::from(t);
                    let hops = later.round(t);
                    p.recv(last(hi - d), tag, (Buf::Out, x, len), Fold::Before, hops);
                }
                d <<= 1;
                t += 1;
            }
            p.send(lay.leaders[hi + 1], OFFSET, (Buf::Out, x, len));
        }
        // what the hosts before this one add up to, on the left
        if hi > 0 {
            let fold = if inclusive || gme > 0 {
                Fold::Before
            } else {
                Fold::Copy
            };
            if gme == 0 {
                // after every chain and doubling wait (`ScanLater`): a
                // host's last member that never calls is named by its
                // doubling partner or here, and one stuck behind the
                // real culprit is not named first
                let hops = later.offset();
                p.recv(last(hi - 1), OFFSET, (Buf::Out, 0, len), fold, hops);
                let src = if fold == Fold::Copy {
                    (Buf::Out, 0, len)
                } else {
                    (Buf::Scratch, 0, len)
                };
                for &t in &g.group[1..] {
                    p.send(t, DOWN, src);
                }
            } else {
                p.recv(g.group[0], DOWN, (Buf::Out, 0, len), fold, later.down());
            }
        }
        p.s
    }

    /// `scan_inclusive_nb` / `scan_exclusive_nb` hierarchically.
    pub(crate) fn scan_nb_hier<'a, T: Reduce>(
        &self,
        call: (u64, Header, Arc<HostGroups>),
        inclusive: bool,
        data: &'a mut [T],
        op: Op,
    ) -> TeamRequest<'a> {
        let s = self.scan_hier_sched(call, NB_TAGS, inclusive, data, op);
        TeamRequest::start(s, bytemuck::cast_slice_mut(data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `group_of` for hosts of these sizes, in blocks.
    fn layout(sizes: &[usize]) -> Layout {
        let mut group_of = Vec::new();
        let mut leaders = Vec::new();
        for (b, &g) in sizes.iter().enumerate() {
            leaders.push(group_of.len());
            group_of.extend(std::iter::repeat_n(b, g));
        }
        Layout::new(group_of, leaders)
    }

    /// reduce_scatter_nb goes flat above the leader's byte bound: -N3 -n6
    /// with 192 MiB blocks (the review's failing case: 3 GiB at a leader)
    /// goes flat, small blocks hierarchical, and the decision flips right
    /// above the bound.
    #[test]
    fn scanfix_reduce_scatter_nb_bound() {
        let lay = layout(&[2, 2, 2]);
        let mib = 1 << 20;
        assert!(reduce_scatter_nb_fits::<u64>(1, &lay, RS_HIER_MAX_BYTES));
        assert!(!reduce_scatter_nb_fits::<u64>(
            192 * mib / 8,
            &lay,
            RS_HIER_MAX_BYTES
        ));
        // the busiest leader: (2 * 6 + 2 * 2) blocks of 8 k bytes
        let at = 16 * 8 * 100;
        assert!(reduce_scatter_nb_fits::<u64>(100, &lay, at));
        assert!(!reduce_scatter_nb_fits::<u64>(101, &lay, at));
        // uneven hosts: the largest one's leader counts
        let lay = layout(&[5, 1, 1]);
        assert_eq!(rs_leader_bytes(&lay, 1), 5 * 7 + 2 * 5);
        // saturating: a huge call never wraps round to a small size
        assert!(!reduce_scatter_nb_fits::<u64>(
            usize::MAX / 4,
            &lay,
            usize::MAX - 1
        ));
    }

    /// `rs_leader_bytes` as it was before session 13 (one count per
    /// host: O(L n)), the oracle of the test below.
    #[inline(never)]
    fn rs_leader_bytes_old(lay: &Layout, kw: usize) -> usize {
        let (n, nl) = (lay.group_of.len(), lay.leaders.len());
        (0..nl)
            .map(|b| {
                let g = lay.group_of.iter().filter(|&&x| x == b).count();
                g.saturating_mul(n)
                    .saturating_add(g.saturating_mul(nl - 1))
                    .saturating_mul(kw)
            })
            .max()
            .unwrap_or(0)
    }

    /// `ScanLater::of`'s `lead` as it was before session 13 (O(L n)).
    #[inline(never)]
    fn scan_lead_old(lay: &Layout) -> u32 {
        let nl = lay.leaders.len();
        (0..nl)
            .map(|b| lay.group_of.iter().filter(|&&x| x == b).count())
            .max()
            .unwrap_or(1)
            .saturating_sub(1) as u32
    }

    /// The O(n) `rs_leader_bytes` and `ScanLater::of` give what the
    /// O(L n) ones gave, on every layout of up to 7 hosts of up to 5
    /// members (every one up to 4 hosts, every seventh past that; 2 hosts
    /// under Miri), contiguous and with the members dealt round-robin over
    /// the hosts, a few element sizes, saturating ones included, and no
    /// host at all. With `SPLITRT_LAYOUT_ROUNDS=N`, each
    /// form also runs N times on 64 hosts of 16, in a function of its own,
    /// for callgrind (see ARCHITECTURE.md).
    #[test]
    fn scanfix_the_linear_counts_match_the_old_ones() {
        // fewer under Miri, which runs this test too
        let most_hosts = if cfg!(miri) { 2 } else { 7 };
        let mut shapes: Vec<Vec<usize>> = vec![vec![]];
        for hosts in 1..=most_hosts {
            let mut sizes = vec![1usize; hosts];
            for k in 0.. {
                // past 4 hosts, every seventh shape (still thousands)
                if hosts <= 4 || k % 7 == 0 {
                    shapes.push(sizes.clone());
                }
                // the next size vector (an odometer over 1..=5)
                let Some(i) = sizes.iter().position(|&g| g < 5) else {
                    break;
                };
                sizes[i] += 1;
                sizes[..i].iter_mut().for_each(|g| *g = 1);
            }
        }
        let dealt = |sizes: &[usize]| {
            // member j of host b at b + j * hosts, squeezed to 0..n
            let mut at: Vec<(usize, usize)> = Vec::new();
            for (b, &g) in sizes.iter().enumerate() {
                at.extend((0..g).map(|j| (b + j * sizes.len(), b)));
            }
            at.sort();
            let group_of: Vec<usize> = at.iter().map(|&(_, b)| b).collect();
            let leaders = (0..sizes.len())
                .map(|b| group_of.iter().position(|&x| x == b).unwrap())
                .collect();
            Layout::new(group_of, leaders)
        };
        let mut checked = 0;
        for sizes in &shapes {
            for lay in [layout(sizes), dealt(sizes)] {
                for kw in [0, 1, 8, 4096, usize::MAX / 3, usize::MAX] {
                    assert_eq!(
                        rs_leader_bytes(&lay, kw),
                        rs_leader_bytes_old(&lay, kw),
                        "{sizes:?} {lay:?} kw {kw}"
                    );
                }
                assert_eq!(ScanLater::of(&lay).lead, scan_lead_old(&lay), "{lay:?}");
                checked += 1;
            }
        }
        assert!(
            checked > if cfg!(miri) { 50 } else { 10_000 },
            "{checked} layouts"
        );
        let rounds: usize = std::env::var("SPLITRT_LAYOUT_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if rounds > 0 {
            let big = layout(&[16; 64]);
            let (mut a, mut b) = (0, 0);
            for _ in 0..rounds {
                a ^= new_counts(&big);
            }
            for _ in 0..rounds {
                b ^= old_counts(&big);
            }
            assert_eq!(a, b);
        }
    }

    /// Both counts now, for callgrind.
    #[inline(never)]
    fn new_counts(lay: &Layout) -> usize {
        rs_leader_bytes(std::hint::black_box(lay), 8) ^ ScanLater::of(lay).lead as usize
    }

    /// Both counts before session 13, for callgrind.
    #[inline(never)]
    fn old_counts(lay: &Layout) -> usize {
        rs_leader_bytes_old(std::hint::black_box(lay), 8) ^ scan_lead_old(lay) as usize
    }

    /// The scans' waits: a leader's offset wait after every chain and
    /// doubling wait, its members' after it.
    #[test]
    fn scanfix_scan_waits_ordered() {
        for sizes in [&[2, 2, 2][..], &[3, 2], &[2, 2, 1], &[1, 1, 1, 1, 1, 1]] {
            let lay = layout(sizes);
            let l = ScanLater::of(&lay);
            let c = *sizes.iter().max().unwrap() as u32 - 1;
            let m = sizes.len() - 1;
            let rounds = (0..).take_while(|&t| 1usize << t < m).count() as u32;
            assert_eq!(l.rounds, rounds, "{sizes:?}");
            // chain waits are at most c - 1 (none with one member a host)
            if c > 0 {
                assert!(l.round(0) > c - 1);
            }
            assert!(l.offset() >= l.round(rounds.saturating_sub(1)));
            if rounds > 0 {
                assert!(l.offset() > l.round(rounds - 1));
            }
            assert_eq!(l.down(), l.offset() + 1);
        }
    }
}
