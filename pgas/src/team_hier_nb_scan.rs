//! Hierarchical `reduce_scatter_nb`, `scan_inclusive_nb` and
//! `scan_exclusive_nb` as schedules (`team_sched.rs`), on a team whose
//! non-blocking collectives run hierarchically (`team_hier_nb.rs`: the
//! host groups an earlier blocking collective agreed). Within a host the
//! stages are team messages (over the host's shared-memory fabric); only
//! leaders (each host's lowest team rank) send across hosts.
//!
//! **reduce_scatter**: every member sends its n blocks to its leader in
//! one message, host-major (its own host's members first, then the
//! other hosts in leader order, each host's members in team-rank order:
//! the same on every member of a host); the leader combines them in
//! team-rank order, sends each other leader the partial results for that
//! host's members in one message (L (L - 1) across hosts, as the
//! blocking form), combines what it received in leader order and sends
//! each member its block.
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
use crate::team_hier::{HIER, LEADER_LATER};
use crate::team_hosts::HostGroups;
use crate::team_mail::Header;
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

/// Seconds a member's wait for its result from its leader adds to the
/// hang report's delay: after its leader's report of a member of theirs
/// that never calls (0), before the leaders' of each other.
const RESULT_LATER: u32 = LEADER_LATER - 1;

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
        // host i's last member (the groups are runs of team ranks)
        let last = |i: usize| lay.leaders.get(i + 1).map_or(n - 1, |&l| l - 1);
        let mut p = Plan {
            s: Sched::new(self, seq, h),
            base,
        };
        p.s.combine = Some((combine_bytes::<T>, op));
        p.s.copy_out = true;
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
                    let hops = LEADER_LATER + t;
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
                // 0 hops: a host's last member that never calls is named
                // in the scan by the next host's leader (the members of
                // its own host do not wait for it here; they may name it
                // at the same time in their next collective)
                p.recv(last(hi - 1), OFFSET, (Buf::Out, 0, len), fold, 0);
                let src = if fold == Fold::Copy {
                    (Buf::Out, 0, len)
                } else {
                    (Buf::Scratch, 0, len)
                };
                for &t in &g.group[1..] {
                    p.send(t, DOWN, src);
                }
            } else {
                p.recv(g.group[0], DOWN, (Buf::Out, 0, len), fold, RESULT_LATER);
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
