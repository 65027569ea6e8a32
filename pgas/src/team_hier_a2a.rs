//! Hierarchical alltoall and reduce_scatter (`team_hier.rs` decides and
//! sets up; this module runs them): for a team spanning hosts, each
//! host's members publish their blocks in their host group's
//! shared-memory area, the group's **leader** (its lowest team rank)
//! aggregates what goes to each other host into **one message per leader
//! pair**, and fans what it received out through the area again. Blocks
//! between members of one host never leave it.
//!
//! | collective | step A (every member publishes its n blocks) | leaders | step B (the leader publishes) |
//! |---|---|---|---|
//! | alltoall | members copy the blocks of their host's members for them; the leader copies every member's blocks for other hosts | leader a sends leader b the g_a · g_b blocks from a's members to b's (source-major) | each member's n - g blocks from other hosts |
//! | reduce_scatter | the leader combines its members' n blocks in team-rank order | leader a sends leader b the g_b partial results for b's members | each member's result: the hosts' partial results combined in host (leader) order |
//!
//! A step carries ⌊32 KiB / (w · element size)⌋ elements of each block
//! (w: `Layout::alltoall_width` for alltoall, n for reduce_scatter; the
//! same on every member, so the leaders' messages of step c match);
//! larger elements go flat, and so does an alltoall that one step does
//! not hold (`hier_call`: large exchanges stream faster pairwise than
//! through the leaders' lock-step rounds; a member passing another
//! length is then named by the leaders, which receive its flat message
//! of the same collective number). Messages across hosts per step: L (L - 1),
//! instead of Σ g_a (n - g_a) flat.
//!
//! Reduction order (reduce_scatter): each host's members in increasing
//! team rank at its leader, then the hosts' partial results in increasing
//! leader rank, a fixed order; integers give the flat result, floating
//! point may differ from the flat form's (a left fold in team-rank order)
//! in the last bit.

use crate::reduce::{Op, Reduce};
use crate::team_hier::{combine, tag, HierCall, FANOUT_LATER};
use crate::team_hosts::Layout;
use crate::team_shm::steps;
use bytemuck::Pod;
use splitrt_am::Result;
use std::ops::Range;

/// The team ranks on hosts other than group `g`'s, in increasing order:
/// the order of a member's blocks from other hosts in its leader's
/// fan-out (here and in `team_hier_nb_a2a.rs`).
pub(crate) fn off_host(lay: &Layout, g: usize) -> Vec<usize> {
    (0..lay.group_of.len())
        .filter(|&t| lay.group_of[t] != g)
        .collect()
}

/// The blocks of a leader's message from a host group of `from` members
/// to one of `to` members, in message order: (index in the sending
/// group, index in the receiving group), source-major. Every
/// hierarchical alltoall form packs and unpacks the leaders' messages by
/// it (here and in `team_hier_nb_a2a.rs`).
pub(crate) fn lead_blocks(from: usize, to: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..from).flat_map(move |q| (0..to).map(move |x| (q, x)))
}

impl HierCall<'_> {
    /// Team size.
    fn n(&self) -> usize {
        self.g.layout.group_of.len()
    }

    /// Elements of each block a step carries for a step `wide` blocks
    /// wide (`hier_call` checked that one element of each fits).
    fn per_block<T>(wide: usize) -> usize {
        (crate::team_area::TEAM_HALF / (std::mem::size_of::<T>().max(1) * wide.max(1))).max(1)
    }

    /// Step A: publish elements `r` of each of the n blocks of `send`
    /// (kk elements each; block j at j * m of the half). Calls `read`
    /// with those elements (block j's at j * m) and the area and step (if
    /// the group has more than one member) before finishing the step.
    fn post<T: Pod>(
        &self,
        send: &[T],
        kk: usize,
        r: &Range<usize>,
        read: impl FnOnce(Vec<T>, Option<(&crate::team_area::TeamArea, u64)>),
    ) -> Result<()> {
        let m = r.len();
        let mut blocks = vec![T::zeroed(); self.n() * m];
        for j in 0..self.n() {
            blocks[j * m..(j + 1) * m].copy_from_slice(&send[j * kk + r.start..j * kk + r.end]);
        }
        match self.step(0, Some(bytemuck::cast_slice(&blocks)))? {
            Some((a, k)) => {
                read(blocks, Some((a, k)));
                a.finish(k);
            }
            None => read(blocks, None),
        }
        Ok(())
    }

    /// `send` holds n blocks of kk elements (block j for team rank j);
    /// member j's block for this member lands at `recv[j * kk..]`.
    pub(crate) fn alltoall<T: Pod>(self, send: &[T], recv: &mut [T]) -> Result<()> {
        let g = self.g.clone();
        let lay = &g.layout;
        let n = self.n();
        let kk = send.len() / n.max(1);
        let (nl, mine, me, gme) = (self.nl(), g.my_group(), g.group[g.gme], g.gme);
        let ga = g.group.len();
        let es = std::mem::size_of::<T>();
        // team ranks on other hosts, in increasing order
        let off = off_host(lay, mine);
        let groups: Vec<Vec<usize>> = (0..nl).map(|b| lay.members_of(b)).collect();
        let per = Self::per_block::<T>(lay.alltoall_width());
        for (c, r) in steps(kk, per).enumerate() {
            let m = r.len();
            // the leader's view of its members' published blocks:
            // member q's block for team rank t at (q * n + t) * m
            let mut local = vec![T::zeroed(); if gme == 0 { ga * n * m } else { 0 }];
            self.post(send, kk, &r, |blocks, area| {
                for (q, &t) in g.group.iter().enumerate() {
                    let to = &mut recv[t * kk + r.start..t * kk + r.end];
                    if q == gme {
                        to.copy_from_slice(&send[me * kk + r.start..me * kk + r.end]);
                    } else if let Some((a, k)) = area {
                        a.read(q, k, me * m * es, bytemuck::cast_slice_mut(to));
                    }
                }
                if gme == 0 {
                    for (q, _) in g.group.iter().enumerate() {
                        let to = &mut local[q * n * m..(q + 1) * n * m];
                        if q == 0 {
                            to.copy_from_slice(&blocks);
                        } else if let Some((a, k)) = area {
                            a.read(q, k, 0, bytemuck::cast_slice_mut(to));
                        }
                    }
                }
            })?;
            // among the leaders: one message per pair
            let mut fan = Vec::new();
            if let Some(li) = g.leader_index() {
                for s in 1..nl {
                    let b = (li + s) % nl;
                    let mut msg = Vec::with_capacity(ga * groups[b].len() * m);
                    for (q, x) in lead_blocks(ga, groups[b].len()) {
                        let t = groups[b][x];
                        msg.extend_from_slice(&local[(q * n + t) * m..(q * n + t + 1) * m]);
                    }
                    self.lsend(tag(c, 1), b, &msg)?;
                }
                // member q's blocks from other hosts, in `off` order, at
                // (q * (n - ga) + i) * m
                fan = vec![T::zeroed(); ga * off.len() * m];
                let at = |t: usize| off.binary_search(&t).unwrap_or(0);
                for s in 1..nl {
                    let b = (li + nl - s) % nl;
                    let mut msg = vec![T::zeroed(); groups[b].len() * ga * m];
                    self.lrecv(tag(c, 1), b, &mut msg, 0)?;
                    for (p, (x, q)) in lead_blocks(groups[b].len(), ga).enumerate() {
                        let (src, part) = (groups[b][x], &msg[p * m..(p + 1) * m]);
                        if q == 0 {
                            recv[src * kk + r.start..src * kk + r.end].copy_from_slice(part);
                        } else {
                            let i = (q * off.len() + at(src)) * m;
                            fan[i..i + m].copy_from_slice(part);
                        }
                    }
                }
            }
            // out to the members
            let out = (gme == 0).then(|| bytemuck::cast_slice(&fan[..]));
            if let Some((a, k)) = self.step(FANOUT_LATER, out)? {
                if gme != 0 {
                    let mut mine = vec![T::zeroed(); off.len() * m];
                    let at = gme * off.len() * m * es;
                    a.read(0, k, at, bytemuck::cast_slice_mut(&mut mine));
                    for (i, &src) in off.iter().enumerate() {
                        recv[src * kk + r.start..src * kk + r.end]
                            .copy_from_slice(&mine[i * m..(i + 1) * m]);
                    }
                }
                a.finish(k);
            }
        }
        Ok(())
    }

    /// `send` holds n blocks of kk elements (block j for team rank j):
    /// every member's block for this member combined with `op` (see the
    /// module docs for the order) into `recv` (kk elements).
    pub(crate) fn reduce_scatter<T: Reduce>(
        self,
        send: &[T],
        recv: &mut [T],
        op: Op,
    ) -> Result<()> {
        let g = self.g.clone();
        let lay = &g.layout;
        let n = self.n();
        let kk = recv.len();
        let (nl, gme) = (self.nl(), g.gme);
        let ga = g.group.len();
        let es = std::mem::size_of::<T>();
        let groups: Vec<Vec<usize>> = (0..nl).map(|b| lay.members_of(b)).collect();
        let per = Self::per_block::<T>(n);
        for (c, r) in steps(kk, per).enumerate() {
            let m = r.len();
            // the leader: its members' blocks combined, team rank t's at t * m
            let mut acc = Vec::new();
            self.post(send, kk, &r, |blocks, area| {
                if gme != 0 {
                    return;
                }
                acc = blocks;
                if let Some((a, k)) = area {
                    let mut tmp = vec![T::zeroed(); n * m];
                    for q in 1..ga {
                        a.read(q, k, 0, bytemuck::cast_slice_mut(&mut tmp));
                        combine(op, &mut acc, &tmp);
                    }
                }
            })?;
            // among the leaders: each host's partial results for b's members
            let mut res = Vec::new();
            if let Some(li) = g.leader_index() {
                let part = |b: usize| -> Vec<T> {
                    let mut v = Vec::with_capacity(groups[b].len() * m);
                    for &t in &groups[b] {
                        v.extend_from_slice(&acc[t * m..(t + 1) * m]);
                    }
                    v
                };
                for s in 1..nl {
                    let b = (li + s) % nl;
                    self.lsend(tag(c, 1), b, &part(b))?;
                }
                let mut parts: Vec<Vec<T>> = vec![Vec::new(); nl];
                for s in 1..nl {
                    let b = (li + nl - s) % nl;
                    let mut msg = vec![T::zeroed(); ga * m];
                    self.lrecv(tag(c, 1), b, &mut msg, 0)?;
                    parts[b] = msg;
                }
                parts[li] = part(li);
                // hosts in leader order
                res = parts[0].clone();
                for p in &parts[1..] {
                    combine(op, &mut res, p);
                }
                recv[r.clone()].copy_from_slice(&res[..m]);
            }
            let out = (gme == 0).then(|| bytemuck::cast_slice(&res[..]));
            if let Some((a, k)) = self.step(FANOUT_LATER, out)? {
                if gme != 0 {
                    a.read(0, k, gme * m * es, bytemuck::cast_slice_mut(&mut recv[r]));
                }
                a.finish(k);
            }
        }
        Ok(())
    }
}
