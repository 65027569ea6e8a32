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
use crate::team_hier_a2av::{buf_fits, offsets, GroupCounts};
use crate::team_hier_nb::Build;
use crate::team_hosts::HostGroups;
use crate::team_mail::{CollKind, Header};
use crate::team_nb::TeamRequest;
use crate::team_sched::{Buf, Sched, Step, Then};
use bytemuck::Pod;
use splitrt_am::Result;
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

impl Sched {
    /// Append a copy of `len` bytes of `src` at `from` into `dst` at `at`.
    fn place_part(&mut self, (src, from): (Buf, usize), (dst, at): (Buf, usize), len: usize) {
        self.steps.push_back(Step::Place {
            src,
            from,
            dst,
            at,
            len,
        });
    }
}

impl Build {
    /// Copy `len` bytes of `src` at `from` into `dst` at `at`.
    fn place(&mut self, src: (Buf, usize), dst: (Buf, usize), len: usize) {
        self.s.place_part(src, dst, len);
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
            b.s.send_part(t, PEER, (Buf::Work, peer + q * kw, kw));
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
            let len = seg[x + 1] - seg[x];
            b.s.send_part(lay.leaders[x], LEAD, (Buf::Work, seg[x], len));
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
            b.s.send_part(t, DOWN, (Buf::Work, fan(q), off.len() * kw));
        }
        TeamRequest::start(b.s, recv)
    }
}

/// Tags of `alltoallv_nb`'s messages (its flat fall-back's blocks use the
/// flat form's tag 0).
mod vtag {
    use super::A2A;
    /// A member's counts, to its leader.
    pub(super) const COUNTS: u64 = A2A | 0x11;
    /// A member's blocks for other hosts, to its leader.
    pub(super) const UP: u64 = A2A | 0x12;
    /// Leaders, round 1: fit flag and counts.
    pub(super) const LEAD_COUNTS: u64 = A2A | 0x13;
    /// The leader's decision, to its members.
    pub(super) const GO: u64 = A2A | 0x14;
    /// Leaders, round 2: the blocks between their hosts.
    pub(super) const LEAD: u64 = A2A | 0x15;
    /// A member's blocks from other hosts, from its leader.
    pub(super) const DOWN: u64 = A2A | 0x16;
    /// A block between two members of one host.
    pub(super) const PEER: u64 = A2A | 0x17;
}

/// What `alltoallv_nb`'s continuations need of the call.
struct V {
    g: Arc<HostGroups>,
    /// Team ranks on other hosts (increasing).
    off: Vec<usize>,
    /// Every host group's members.
    groups: Vec<Vec<usize>>,
    send_counts: Vec<usize>,
    recv_counts: Vec<usize>,
    /// Bytes of one member's counts (16 n).
    head: usize,
    /// Where the send buffer starts in `Work` (if it is there: `sent`).
    sb: usize,
    /// Where the decision (8 B) is in `Work`.
    flag_at: usize,
    /// Where this member's blocks for other hosts (packed) are in `Work`.
    up_at: usize,
    /// This member's blocks went out at the call (its send buffer does
    /// not fit a step, so the decision is flat): `Work` holds no copy.
    sent: bool,
}

impl V {
    /// Team size.
    fn n(&self) -> usize {
        self.send_counts.len()
    }

    /// (offset, length) in bytes of `counts[t]` in a buffer of `T`s laid
    /// out by `counts`.
    fn span<T>(counts: &[usize], t: usize) -> (usize, usize) {
        let es = std::mem::size_of::<T>();
        (counts[..t].iter().sum::<usize>() * es, counts[t] * es)
    }

    /// This member's blocks from its host's members (after the decision,
    /// so that a counts mismatch is named by the leader's check first).
    fn recv_peers<T>(&self, s: &mut Sched) {
        let me = self.g.group[self.g.gme];
        for &t in self.g.group.iter().filter(|&&t| t != me) {
            let (at, len) = Self::span::<T>(&self.recv_counts, t);
            s.recv_part(t, vtag::PEER, (Buf::Out, at, len), 0);
        }
    }

    /// The flat fall-back (some host does not fit, as the blocking form
    /// decides): this member's blocks to and from the other hosts' members
    /// pairwise, under the collective's number.
    fn flat<T>(&self, s: &mut Sched) {
        for &t in self.off.iter().filter(|_| !self.sent) {
            let (at, len) = Self::span::<T>(&self.send_counts, t);
            s.send_part(t, 0, (Buf::Work, self.sb + at, len));
        }
        for &t in &self.off {
            let (at, len) = Self::span::<T>(&self.recv_counts, t);
            s.recv_part(t, 0, (Buf::Out, at, len), 0);
        }
    }

    /// The decision in `Work`.
    fn go(&self, s: &Sched) -> bool {
        s.work[self.flag_at..][..8] == 1u64.to_ne_bytes()
    }
}

/// A member (not its host's leader) once its leader decided.
fn member_go<T>(s: &mut Sched, v: V) -> Result<()> {
    let es = std::mem::size_of::<T>();
    if v.go(s) {
        let fan: usize = v.off.iter().map(|&t| v.recv_counts[t]).sum();
        if fan > 0 {
            let leader = v.g.group[0];
            let hops = FANOUT_LATER as u32 + 3;
            s.recv_part(leader, vtag::DOWN, (Buf::Scratch, 0, fan * es), hops);
            let mut from = 0;
            for &t in &v.off {
                let (at, len) = V::span::<T>(&v.recv_counts, t);
                s.place_part((Buf::Scratch, from), (Buf::Out, at), len);
                from += len;
            }
        }
    } else {
        v.flat::<T>(s);
    }
    v.recv_peers::<T>(s);
    Ok(())
}

/// A leader once its members' counts are in: checks them, tells the
/// other leaders whether its host fits and the counts between their
/// hosts, takes its members' blocks for other hosts.
fn leader_counts<T: Pod>(s: &mut Sched, v: V) -> Result<()> {
    let (n, group) = (v.n(), &v.g.group);
    let (ga, nl) = (group.len(), v.groups.len());
    let counts = |q: usize| -> Vec<usize> {
        let w = &s.work[q * v.head..][..v.head];
        w.chunks_exact(8)
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])) as usize)
            .collect()
    };
    let all: Vec<Vec<usize>> = (0..ga).map(counts).collect();
    let gc = GroupCounts {
        send: all.iter().map(|c| c[..n].to_vec()).collect(),
        recv: all.iter().map(|c| c[n..].to_vec()).collect(),
    };
    for q in 0..ga {
        if let Some(m) = gc.check_host(group, q) {
            return Err(s.team.a2av_mismatch(s.seq, m));
        }
    }
    let fits = gc.fits::<T>(&v.off, n);
    let li = v.g.leader_index().unwrap_or(0);
    for d in 1..nl {
        let b = (li + d) % nl;
        let msg = gc.lead_counts(fits, &v.groups[b]);
        let at = s.work.len();
        s.work.extend(msg.iter().flat_map(|w| w.to_ne_bytes()));
        s.send_part(
            v.g.layout.leaders[b],
            vtag::LEAD_COUNTS,
            (Buf::Work, at, msg.len() * 8),
        );
    }
    // every member's blocks for other hosts, where they were sent: only
    // from a member whose send buffer fits a step (it sends them only
    // then; else its host does not fit, the decision is flat and they
    // are never read), so they take at most a step's bytes each
    let mut up = vec![v.up_at; ga];
    for (q, &t) in group.iter().enumerate().skip(1) {
        let Some(len) = gc.up_len::<T>(q, &v.off, n) else {
            continue;
        };
        up[q] = s.work.len();
        s.work.resize(up[q] + len, 0);
        if len > 0 {
            s.recv_part(t, vtag::UP, (Buf::Work, up[q], len), 0);
        }
    }
    let mut inbox = vec![0; nl];
    for d in 1..nl {
        let b = (li + nl - d) % nl;
        let len = 8 * (1 + v.groups[b].len() * ga);
        inbox[b] = s.work.len();
        s.work.resize(inbox[b] + len, 0);
        let from = v.g.layout.leaders[b];
        s.recv_part(
            from,
            vtag::LEAD_COUNTS,
            (Buf::Work, inbox[b], len),
            LEADER_LATER + 1,
        );
    }
    let then = move |s: &mut Sched| leader_decide::<T>(s, v, (gc, fits), (up, inbox));
    s.steps.push_back(Step::Then(Then(Box::new(then))));
    Ok(())
}

/// A leader once the other leaders' counts are in: checks them, tells
/// its members the decision, and moves the blocks between hosts (one
/// message per leader pair with data) or goes flat.
fn leader_decide<T>(
    s: &mut Sched,
    v: V,
    (gc, fits): (GroupCounts, bool),
    (up, inbox): (Vec<usize>, Vec<usize>),
) -> Result<()> {
    let (es, group, nl) = (std::mem::size_of::<T>(), &v.g.group, v.groups.len());
    let ga = group.len();
    let li = v.g.leader_index().unwrap_or(0);
    let mut go = fits;
    for d in 1..nl {
        let b = (li + nl - d) % nl;
        let len = 1 + v.groups[b].len() * ga;
        let msg: Vec<u64> = s.work[inbox[b]..][..8 * len]
            .chunks_exact(8)
            .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or([0; 8])))
            .collect();
        match gc.check_lead(&msg, &v.groups[b], group) {
            Ok(f) => go &= f,
            Err(m) => return Err(s.team.a2av_mismatch(s.seq, m)),
        }
    }
    s.work[v.flag_at..][..8].copy_from_slice(&u64::from(go).to_ne_bytes());
    for &t in group.iter().skip(1) {
        s.send_part(t, vtag::GO, (Buf::Work, v.flag_at, 8));
    }
    if !go {
        v.flat::<T>(s);
        v.recv_peers::<T>(s);
        return Ok(());
    }
    // member q's block for team rank t, within its packed blocks for
    // other hosts (`off` order)
    let before = |q: usize, t: usize| {
        let i = v.off.partition_point(|&x| x < t);
        gc.fan_of_send(q, &v.off[..i]) * es
    };
    for d in 1..nl {
        let b = (li + d) % nl;
        let at = s.work.len();
        for (q, x) in lead_blocks(ga, v.groups[b].len()) {
            let t = v.groups[b][x];
            let from = up[q] + before(q, t);
            s.work.extend_from_within(from..from + gc.send[q][t] * es);
        }
        let len = s.work.len() - at;
        if len > 0 {
            s.send_part(v.g.layout.leaders[b], vtag::LEAD, (Buf::Work, at, len));
        }
    }
    // member q's fan-out (its blocks from other hosts, `off` order)
    let mut fan = vec![0; ga];
    for (q, f) in fan.iter_mut().enumerate().skip(1) {
        *f = s.work.len();
        s.work.resize(*f + gc.fan_of(q, &v.off) * es, 0);
    }
    for d in 1..nl {
        let b = (li + nl - d) % nl;
        let parts = || lead_blocks(v.groups[b].len(), ga).map(|(x, q)| (q, v.groups[b][x]));
        let len: usize = parts().map(|(q, src)| gc.recv[q][src] * es).sum();
        if len == 0 {
            continue;
        }
        let from = v.g.layout.leaders[b];
        s.recv_part(from, vtag::LEAD, (Buf::Scratch, 0, len), LEADER_LATER + 2);
        let mut at = 0;
        for (q, src) in parts() {
            let c = gc.recv[q][src] * es;
            let to = if q == 0 {
                (Buf::Out, V::span::<T>(&v.recv_counts, src).0)
            } else {
                let i = v.off.partition_point(|&x| x < src);
                (Buf::Work, fan[q] + gc.fan_of(q, &v.off[..i]) * es)
            };
            s.place_part((Buf::Scratch, at), to, c);
            at += c;
        }
    }
    for (q, &t) in group.iter().enumerate().skip(1) {
        let len = gc.fan_of(q, &v.off) * es;
        if len > 0 {
            s.send_part(t, vtag::DOWN, (Buf::Work, fan[q], len));
        }
    }
    v.recv_peers::<T>(s);
    Ok(())
}

impl Team {
    /// The host groups if `alltoallv_nb` of `T` runs hierarchically:
    /// exactly when the blocking form would (its counts fit a step; see
    /// `team_hier_a2av.rs`), else `None`. Whether the blocks then go
    /// through the leaders or flat is decided, alike on every member,
    /// from the counts (`GroupCounts::fits`).
    pub(crate) fn alltoallv_nb_groups<T: Pod>(&self) -> Option<Arc<HostGroups>> {
        self.nb_hier()
            .filter(|g| hier_fits::<T>(CollKind::Alltoallv, 0, &g.layout))
    }

    /// `alltoallv_nb` hierarchically (the arguments as `alltoallv_nb`
    /// checked them): the blocking form's stages (`team_hier_a2av.rs`)
    /// by team messages. Every member sends its host's members their
    /// blocks and its leader its counts (and, if its send buffer fits a
    /// step, its blocks for other hosts); the leader checks its members'
    /// counts, sends each other leader whether its host fits and the
    /// counts between their hosts, checks theirs, tells its members
    /// whether every host fits, then either sends each other leader the
    /// blocks between their hosts in one message (none when empty) and
    /// each member its blocks from other hosts, or every member
    /// exchanges its blocks with the other hosts' members pairwise (the
    /// flat form's messages). A member whose send buffer does not fit
    /// (so the decision is flat) sends all its blocks at the call, as
    /// the flat form, and keeps no copy of them. A counts difference is
    /// named as by the blocking form, before any block is taken.
    pub(crate) fn alltoallv_nb_hier<'a, T: Pod>(
        &self,
        (seq, h, g): (u64, Header, Arc<HostGroups>),
        (send, send_counts): (&[T], &[usize]),
        (recv, recv_counts): (&'a mut [T], &[usize]),
    ) -> Result<TeamRequest<'a>> {
        let lay = &g.layout;
        let (n, gme, ga) = (lay.group_of.len(), g.gme, g.group.len());
        let me = g.group[gme];
        let off = off_host(lay, g.my_group());
        let head = 16 * n;
        let mut s = Sched::new(self, seq, h);
        s.out = vec![0; std::mem::size_of_val(recv)];
        let so = offsets(send_counts);
        let own = &send[so[me]..][..send_counts[me]];
        s.out[V::span::<T>(recv_counts, me).0..][..std::mem::size_of_val(own)]
            .copy_from_slice(bytemuck::cast_slice(own));
        s.copy_out = true;
        // `Work`: the counts (a leader's: every member's, group order), the
        // send buffer, the decision, the blocks for other hosts packed;
        // the send buffer and blocks only if the send buffer fits a step
        // (else the decision is flat and the blocks go out now)
        let fits = buf_fits::<T>(send.len(), n);
        let words = send_counts.iter().chain(recv_counts);
        s.work = words.flat_map(|&c| (c as u64).to_ne_bytes()).collect();
        s.work.resize(if gme == 0 { ga * head } else { head }, 0);
        let sb = s.work.len();
        if fits {
            s.work.extend_from_slice(bytemuck::cast_slice(send));
        }
        let flag_at = s.work.len();
        s.work.extend_from_slice(&[0; 8]);
        let up_at = s.work.len();
        for &t in off.iter().filter(|_| fits) {
            s.work
                .extend_from_slice(bytemuck::cast_slice(&send[so[t]..][..send_counts[t]]));
        }
        let up_len = s.work.len() - up_at;
        let v = V {
            g: g.clone(),
            off,
            groups: (0..lay.leaders.len()).map(|x| lay.members_of(x)).collect(),
            send_counts: send_counts.to_vec(),
            recv_counts: recv_counts.to_vec(),
            head,
            sb,
            flag_at,
            up_at,
            sent: !fits,
        };
        for &t in g.group.iter().filter(|&&t| t != me) {
            let (at, len) = V::span::<T>(send_counts, t);
            if fits {
                s.send_part(t, vtag::PEER, (Buf::Work, sb + at, len));
            } else {
                let b = bytemuck::cast_slice(&send[so[t]..][..send_counts[t]]);
                self.send(seq, vtag::PEER, &s.h, t, b)?;
            }
        }
        // the flat form's blocks, taken after the decision (`V::flat`)
        for &t in v.off.iter().filter(|_| !fits) {
            let b = &send[so[t]..][..send_counts[t]];
            self.send(seq, 0, &s.h, t, bytemuck::cast_slice(b))?;
        }
        if gme == 0 {
            for (q, &t) in g.group.iter().enumerate().skip(1) {
                s.recv_part(t, vtag::COUNTS, (Buf::Work, q * head, head), 0);
            }
            let then = move |s: &mut Sched| leader_counts::<T>(s, v);
            s.steps.push_back(Step::Then(Then(Box::new(then))));
        } else {
            let leader = g.group[0];
            s.send_part(leader, vtag::COUNTS, (Buf::Work, 0, head));
            if up_len > 0 {
                s.send_part(leader, vtag::UP, (Buf::Work, up_at, up_len));
            }
            let hops = FANOUT_LATER as u32 + 2;
            s.recv_part(leader, vtag::GO, (Buf::Work, flag_at, 8), hops);
            let then = move |s: &mut Sched| member_go::<T>(s, v);
            s.steps.push_back(Step::Then(Then(Box::new(then))));
        }
        Ok(TeamRequest::start(s, bytemuck::cast_slice_mut(recv)))
    }
}
