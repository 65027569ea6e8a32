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
//! member sends its data to its leader, which folds its host's members'
//! data in team-rank order (each member's host-local prefix and the
//! host's total), the leaders exclusive-scan the hosts' totals by
//! recursive doubling (≤ ⌈log2 L⌉ messages per leader) and each leader
//! sends each member `offset op prefix`. No member waits for more than
//! its own result: a member leaves as soon as its leader has sent it,
//! and a leader as soon as it has sent its members theirs, so back-to-
//! back scans pipeline (call k + 1's host stage overlaps call k's
//! stages on later hosts).
//!
//! Both combine in the blocking hierarchical forms' order, so the
//! results are their bits; integers give the flat results.

use crate::reduce::{Op, Reduce};
use crate::team::Team;
use crate::team_hier::LEADER_LATER;
use crate::team_hosts::HostGroups;
use crate::team_mail::Header;
use crate::team_nb::{bytes_of, TeamRequest};
use crate::team_sched::{combine_bytes, Buf, Fold, Sched, Step};
use std::sync::Arc;

/// Tags of the non-blocking forms' messages (`team_hier_nb.rs`'s range:
/// never a flat schedule's nor a blocking form's).
pub(crate) const NB_TAGS: u64 = 1 << 60;
/// A member's part, to its leader.
const UP: u64 = 1;
/// Round `t` among leaders (`| t`).
const LEAD: u64 = 0x100;
/// A member's result, from its leader.
const DOWN: u64 = 0x300;

/// A schedule under construction (tags offset by `base`).
struct Plan {
    s: Sched,
    base: u64,
}

impl Plan {
    fn send(&mut self, to: usize, tag: u64, (src, at, len): (Buf, usize, usize)) {
        let tag = self.base | tag;
        self.s.steps.push_back(Step::Send {
            to,
            tag,
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
        let tag = self.base | tag;
        self.s.steps.push_back(Step::Recv {
            from,
            tag,
            dst,
            at,
            len,
            fold,
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
    /// docs; `base`: [`NB_TAGS`]). The caller's
    /// request copies the result out.
    pub(crate) fn scan_hier_sched<T: Reduce>(
        &self,
        (seq, h, g): (u64, Header, Arc<HostGroups>),
        base: u64,
        inclusive: bool,
        data: &[T],
        op: Op,
    ) -> Sched {
        let len = std::mem::size_of_val(data);
        let (lead, ga) = (&g.layout.leaders, g.group.len());
        let nl = lead.len();
        let mut p = Plan {
            s: Sched::new(self, seq, h),
            base,
        };
        p.s.combine = Some((combine_bytes::<T>, op));
        p.s.copy_out = true;
        let Some(li) = g.leader_index() else {
            p.s.out = bytes_of(data);
            p.send(g.group[0], UP, (Buf::Out, 0, len));
            p.recv(
                g.group[0],
                DOWN,
                (Buf::Out, 0, len),
                Fold::Copy,
                RESULT_LATER,
            );
            return p.s;
        };
        // `Out`: member j's host-local result at j * len (zeros for an
        // exclusive scan's first), then the leaders' partial result;
        // `Work`: the running host prefix, then what the hosts before
        // this one add up to
        p.s.work = bytes_of(data);
        p.s.out = vec![0; (ga + 1) * len];
        if inclusive {
            p.s.out[..len].copy_from_slice(bytemuck::cast_slice(data));
        }
        for (j, &t) in g.group.iter().enumerate().skip(1) {
            if !inclusive {
                p.keep(j * len, len);
            }
            p.recv(t, UP, (Buf::Work, 0, len), Fold::After, 0);
            if inclusive {
                p.keep(j * len, len);
            }
        }
        let x = ga * len;
        p.keep(x, len);
        let (mut d, mut t) = (1usize, 0u32);
        while d < nl {
            if li + d < nl {
                p.send(lead[li + d], LEAD | u64::from(t), (Buf::Out, x, len));
            }
            if li >= d {
                // what came from below goes on the left, of both
                let tag = LEAD | u64::from(t);
                p.recv(
                    lead[li - d],
                    tag,
                    (Buf::Out, x, len),
                    Fold::Before,
                    LEADER_LATER + t,
                );
                let fold = if d == 1 { Fold::Copy } else { Fold::Before };
                p.apply(Buf::Scratch, (Buf::Work, 0, len), fold);
            }
            d <<= 1;
            t += 1;
        }
        if li > 0 {
            for j in 0..ga {
                let fold = if j == 0 && !inclusive {
                    Fold::Copy
                } else {
                    Fold::Before
                };
                p.apply(Buf::Work, (Buf::Out, j * len, len), fold);
            }
        }
        for (j, &t) in g.group.iter().enumerate().skip(1) {
            p.send(t, DOWN, (Buf::Out, j * len, len));
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
