//! Hierarchical non-blocking alltoall: on a team whose blocking
//! collectives run hierarchically (`team_hier_nb.rs`: the members agreed
//! on host groups), `alltoall_nb` runs as a schedule (`team_sched.rs`)
//! with the blocking form's exchange (`team_hier_a2a.rs`) by team
//! messages instead of the host group's shared-memory area (whose steps
//! are taken in call order, which requests completed in any order cannot
//! keep):
//!
//! | stage | what |
//! |---|---|
//! | within a host | each member sends each other member of its host its block directly, and its leader (its host's lowest team rank) its blocks for the other hosts (one message, in increasing team rank) |
//! | leaders | leader a sends leader b the g_a · g_b blocks from a's members to b's, packed as the blocking form packs them (`team_hier_a2a::lead_blocks`): **one message per leader pair** |
//! | fan-out | each leader sends each of its members its blocks from the other hosts (one message, in increasing team rank) |
//!
//! Messages across hosts per call: L (L - 1), instead of Σ g_a (n - g_a)
//! flat. The form goes hierarchical exactly when the blocking form would
//! (`team_hier::hier_fits`: one shared-memory step holds the call;
//! larger calls go flat, where the pairwise messages stream), so every
//! member builds the same form. Tags are this module's own (never a flat
//! schedule's, another hierarchical schedule's or a blocking form's).

use crate::team::Team;
use crate::team_hier::{hier_fits, FANOUT_LATER, LEADER_LATER};
use crate::team_hier_a2a::{lead_blocks, off_host};
use crate::team_hier_nb::Build;
use crate::team_hosts::HostGroups;
use crate::team_mail::{CollKind, Header};
use crate::team_nb::TeamRequest;
use crate::team_sched::{Buf, Step};
use bytemuck::Pod;
use std::sync::Arc;

/// Tags of this module's messages (`team_hier_nb.rs` uses 2^60 | below
/// 0x400).
const A2A: u64 = (1 << 60) | 0x1000;
/// A block between two members of one host.
pub(crate) const PEER: u64 = A2A | 1;
/// A member's blocks for other hosts, to its leader.
pub(crate) const UP: u64 = A2A | 2;
/// Between leaders.
pub(crate) const LEAD: u64 = A2A | 3;
/// A member's blocks from other hosts, from its leader.
pub(crate) const DOWN: u64 = A2A | 4;

impl Build {
    /// Copy `len` bytes of `src` at `from` into `dst` at `at`.
    pub(crate) fn place(&mut self, (src, from): (Buf, usize), (dst, at): (Buf, usize), len: usize) {
        self.s.steps.push_back(Step::Place {
            src,
            from,
            dst,
            at,
            len,
        });
    }
}

impl Team {
    /// The host groups if `alltoall_nb` of `k` elements of `T` per block
    /// runs hierarchically: exactly when the blocking form would (see the
    /// module docs), else `None`.
    pub(crate) fn alltoall_nb_groups<T: Pod>(&self, k: usize) -> Option<Arc<HostGroups>> {
        self.nb_hier()
            .filter(|g| hier_fits::<T>(CollKind::Alltoall, k, &g.layout))
    }

    /// `alltoall_nb` hierarchically (see the module docs): `send` holds
    /// n blocks of `kw` bytes (block j for team rank j).
    pub(crate) fn alltoall_nb_hier<'a>(
        &self,
        (seq, h, g): (u64, Header, Arc<HostGroups>),
        send: &[u8],
        kw: usize,
        recv: &'a mut [u8],
    ) -> TeamRequest<'a> {
        let mut b = Build::new(self, seq, h, g.clone(), kw);
        let lay = &g.layout;
        let (n, nl, mine, gme) = (lay.group_of.len(), b.nl(), g.my_group(), g.gme);
        let (group, ga) = (&g.group, g.group.len());
        let me = group[gme];
        let off = off_host(lay, mine);
        let groups: Vec<Vec<usize>> = (0..nl).map(|x| lay.members_of(x)).collect();
        let block = |t: usize| &send[t * kw..][..kw];
        b.s.out = vec![0; n * kw];
        b.s.out[me * kw..][..kw].copy_from_slice(block(me));
        b.s.copy_out = true;
        // `Work`: a member's blocks for other hosts (`off` order), then
        // for its host's members (group order); a leader's instead its
        // message to each other leader (group order), then each member's
        // fan-out, then its blocks for its host's members
        let mut seg = vec![0usize; nl + 1];
        if gme == 0 {
            for x in 0..nl {
                let len = if x == mine {
                    0
                } else {
                    ga * groups[x].len() * kw
                };
                seg[x + 1] = seg[x] + len;
            }
        }
        let fan = |q: usize| seg[nl] + (q - 1) * off.len() * kw;
        let peer = if gme == 0 { fan(ga) } else { off.len() * kw };
        b.s.work = vec![0; peer + ga * kw];
        if gme == 0 {
            for (x, gx) in groups.iter().enumerate().filter(|&(x, _)| x != mine) {
                for (j, &t) in gx.iter().enumerate() {
                    b.s.work[seg[x] + j * kw..][..kw].copy_from_slice(block(t));
                }
            }
        } else {
            for (i, &t) in off.iter().enumerate() {
                b.s.work[i * kw..][..kw].copy_from_slice(block(t));
            }
        }
        for (q, &t) in group.iter().enumerate() {
            b.s.work[peer + q * kw..][..kw].copy_from_slice(block(t));
        }
        // within the host, directly
        for (q, &t) in group.iter().enumerate().filter(|&(q, _)| q != gme) {
            b.s.steps.push_back(Step::Send {
                to: t,
                tag: PEER,
                src: Buf::Work,
                at: peer + q * kw,
                len: kw,
            });
        }
        let Some(li) = g.leader_index() else {
            b.send_from(group[0], UP, Buf::Work, off.len() * kw);
            for &t in group.iter().filter(|&&t| t != me) {
                b.recv_into(t, PEER, (Buf::Out, t * kw, kw), 0);
            }
            let hops = FANOUT_LATER as u32 + 2;
            b.recv_into(group[0], DOWN, (Buf::Scratch, 0, off.len() * kw), hops);
            for (i, &t) in off.iter().enumerate() {
                b.place((Buf::Scratch, i * kw), (Buf::Out, t * kw), kw);
            }
            return TeamRequest::start(b.s, recv);
        };
        // a leader: its members' blocks for other hosts into its messages
        let at = |t: usize| off.binary_search(&t).unwrap_or(0);
        for (q, &t) in group.iter().enumerate().skip(1) {
            b.recv_into(t, UP, (Buf::Scratch, 0, off.len() * kw), 0);
            for (i, &d) in off.iter().enumerate() {
                let x = lay.group_of[d];
                let j = groups[x].binary_search(&d).unwrap_or(0);
                let to = seg[x] + (q * groups[x].len() + j) * kw;
                b.place((Buf::Scratch, i * kw), (Buf::Work, to), kw);
            }
        }
        for &t in group.iter().skip(1) {
            b.recv_into(t, PEER, (Buf::Out, t * kw, kw), 0);
        }
        for s in 1..nl {
            let x = (li + s) % nl;
            b.s.steps.push_back(Step::Send {
                to: lay.leaders[x],
                tag: LEAD,
                src: Buf::Work,
                at: seg[x],
                len: seg[x + 1] - seg[x],
            });
        }
        for s in 1..nl {
            let x = (li + nl - s) % nl;
            let len = groups[x].len() * ga * kw;
            b.recv_into(
                lay.leaders[x],
                LEAD,
                (Buf::Scratch, 0, len),
                LEADER_LATER + 1,
            );
            for (p, (j, q)) in lead_blocks(groups[x].len(), ga).enumerate() {
                let src = groups[x][j];
                let to = if q == 0 {
                    (Buf::Out, src * kw)
                } else {
                    (Buf::Work, fan(q) + at(src) * kw)
                };
                b.place((Buf::Scratch, p * kw), to, kw);
            }
        }
        for (q, &t) in group.iter().enumerate().skip(1) {
            b.s.steps.push_back(Step::Send {
                to: t,
                tag: DOWN,
                src: Buf::Work,
                at: fan(q),
                len: off.len() * kw,
            });
        }
        TeamRequest::start(b.s, recv)
    }
}
