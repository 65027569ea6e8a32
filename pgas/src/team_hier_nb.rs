//! Hierarchical non-blocking team collectives: on a team whose blocking
//! collectives run hierarchically (`team_hier.rs`: the members agreed on
//! host groups), `barrier_nb`, `broadcast_nb`, `reduce_nb`,
//! `allreduce_nb`, `gather_nb` and `allgather_nb` run the same three
//! stages as schedules (`team_sched.rs`, advanced by the rank's sweep:
//! nothing blocks inside
//! progress): the members of each host send their part to their host's
//! **leader** (its lowest team rank), the leaders run the message
//! algorithm among themselves, and each leader sends the result to its
//! host's members. Messages cross hosts only between leaders, the same
//! number as the blocking hierarchical forms (see the table in
//! `docs/teams.md`); within a host they are team messages over the
//! host's shared-memory fabric, not steps of the group's shared-memory
//! area, whose steps are numbered in call order and so cannot be taken
//! by requests that complete in any order.
//!
//! The grouping is the one the team's blocking collectives agreed on
//! (`Team::is_hierarchical() == Some(true)`): a non-blocking form never
//! waits for the set-up, so before the team's first blocking collective
//! across hosts (any that calls `Team::hier_call`: every one but `split`;
//! the set-up runs at the first whatever its kind) its non-blocking
//! forms go flat (`alltoall_nb` and `alltoallv_nb`: the same, in
//! `team_hier_nb_a2a.rs`). Every member knows the
//! same (members call the same collectives in the same order), so every
//! member builds the same form of each collective.
//!
//! Every message carries the collective's number and header like the
//! flat ones (a mismatched call is detected and named by whichever member
//! receives from the mismatched one), with tags of their own (never a
//! flat schedule's nor a blocking hierarchical form's, so a blocking
//! collective never matches a non-blocking one). Waits for a leader's
//! messages report a hang later than waits for a member's own part, so a
//! member that never calls is named by its leader first.
//!
//! Reductions combine in the blocking hierarchical forms' order (within a
//! host in increasing team rank, then the hosts' partial results along
//! the leaders' binomial tree, children in increasing distance): the
//! result does not depend on timing, and is bit-identical to the blocking
//! hierarchical form's.

use crate::reduce::{Op, Reduce};
use crate::team::Team;
use crate::team_coll::height;
use crate::team_hosts::HostGroups;
use crate::team_hosts::Layout;
use crate::team_mail::Header;
use crate::team_nb::{bytes_of, TeamRequest};
use crate::team_sched::{combine_bytes, Buf, Fold, Sched, Step};
use bytemuck::Pod;
use std::sync::Arc;

/// Tags of the hierarchical schedules' messages (the flat schedules use
/// tags below 2^33, the blocking hierarchical forms 2^61 and 2^62).
const NBH: u64 = 1 << 60;
/// A member's part, to its leader.
const UP: u64 = NBH | 1;
/// Round `s` among leaders (`| s`), first phase.
const LEAD: u64 = NBH | 0x100;
/// Round `s` among leaders (`| s`), second phase (allreduce's broadcast).
const LEAD2: u64 = NBH | 0x200;
/// The result, from a leader to its members.
const DOWN: u64 = NBH | 0x300;
/// Seconds a wait for a leader's message adds to the hang report's
/// delay (as `team_hier.rs`): a member that never calls is named by its
/// own leader first.
const LEADER_LATER: u32 = 3;
/// Seconds a wait for the fan-out adds (it waits for its leader, which
/// waits for the other leaders).
const FANOUT_LATER: u32 = 8;

/// Number of bits of `v` (0 for 0).
fn bitlen(v: usize) -> u32 {
    usize::BITS - v.leading_zeros()
}

/// The parent of relative position `v > 0` in a binomial tree.
fn parent(v: usize) -> usize {
    v & !(1usize << (bitlen(v) - 1))
}

/// The children of relative position `v` in a binomial tree of `n`, in
/// increasing distance.
fn children(v: usize, n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut k = bitlen(v);
    while k < usize::BITS && (v | 1 << k) < n {
        out.push(v | 1 << k);
        k += 1;
    }
    out
}

/// The rounds of a binomial tree of `n`: ⌈log2 n⌉.
fn rounds(n: usize) -> u32 {
    bitlen(n.max(1) - 1)
}

/// A schedule under construction for one member of a hierarchical
/// non-blocking collective.
pub(crate) struct Build {
    pub(crate) s: Sched,
    pub(crate) g: Arc<HostGroups>,
    /// Bytes of the data every message carries.
    pub(crate) len: usize,
}

impl Build {
    pub(crate) fn new(team: &Team, seq: u64, h: Header, g: Arc<HostGroups>, len: usize) -> Self {
        Build {
            s: Sched::new(team, seq, h),
            g,
            len,
        }
    }

    /// Leaders.
    pub(crate) fn nl(&self) -> usize {
        self.g.layout.leaders.len()
    }

    /// This member's team rank.
    fn me(&self) -> usize {
        self.g.group[self.g.gme]
    }

    fn send(&mut self, to: usize, tag: u64) {
        self.s.steps.push_back(Step::Send {
            to,
            tag,
            src: Buf::Out,
            at: 0,
            len: self.len,
        });
    }

    fn recv(&mut self, from: usize, tag: u64, fold: Fold, hops: u32) {
        self.s.steps.push_back(Step::Recv {
            from,
            tag,
            dst: Buf::Out,
            at: 0,
            len: self.len,
            fold,
            hops,
        });
    }

    /// A leader takes its members' parts (`fold`: combined in team-rank
    /// order, or only awaited).
    fn gather_up(&mut self, fold: Fold) {
        for j in 1..self.g.group.len() {
            let from = self.g.group[j];
            self.recv(from, UP, fold, 0);
        }
    }

    /// A leader sends the result to its members (but `skip`).
    fn fan_out(&mut self, skip: Option<usize>) {
        for j in 1..self.g.group.len() {
            let to = self.g.group[j];
            if Some(to) != skip {
                self.send(to, DOWN);
            }
        }
    }

    /// The wait of a member for its leader's result, after `before`
    /// rounds among leaders.
    fn await_leader(&mut self, before: u32) {
        let leader = self.g.group[0];
        self.recv(leader, DOWN, Fold::Copy, FANOUT_LATER + before);
    }

    /// Receive `len` bytes from team rank `from` into `dst` at `at`.
    pub(crate) fn recv_into(
        &mut self,
        from: usize,
        tag: u64,
        (dst, at, len): (Buf, usize, usize),
        hops: u32,
    ) {
        self.s.recv_part(from, tag, (dst, at, len), hops);
    }

    /// Receive group `gi`'s packed parts (`kw` bytes per member, group
    /// order) from `from` and place each at its member's `t * kw` of
    /// `Out`.
    fn recv_group(&mut self, from: usize, tag: u64, gi: usize, kw: usize, hops: u32) {
        let members = self.g.layout.members_of(gi);
        self.recv_into(from, tag, (Buf::Scratch, 0, members.len() * kw), hops);
        for (j, t) in members.into_iter().enumerate() {
            self.s.steps.push_back(Step::Place {
                src: Buf::Scratch,
                from: j * kw,
                dst: Buf::Out,
                at: t * kw,
                len: kw,
            });
        }
    }

    /// A leader packs its group's parts (`kw` bytes each, its own first
    /// in `Work`) into `Work` and places them at their members' `t * kw`
    /// of `Out`.
    fn pack_group(&mut self, kw: usize) {
        let group = self.g.group.clone();
        for (j, &t) in group.iter().enumerate().skip(1) {
            self.recv_into(t, UP, (Buf::Work, j * kw, kw), 0);
        }
        for (j, &t) in group.iter().enumerate() {
            self.s.steps.push_back(Step::Place {
                src: Buf::Work,
                from: j * kw,
                dst: Buf::Out,
                at: t * kw,
                len: kw,
            });
        }
    }

    /// Send `len` bytes of `src` to team rank `to`.
    pub(crate) fn send_from(&mut self, to: usize, tag: u64, src: Buf, len: usize) {
        self.s.send_part(to, tag, (src, 0, len));
    }

    /// Binomial reduction among leaders to leader `root` (this member
    /// leads `li`), children combined in increasing distance.
    fn lreduce(&mut self, li: usize, root: usize) {
        let n = self.nl();
        let v = (li + n - root) % n;
        for c in children(v, n) {
            let from = self.g.layout.leaders[(c + root) % n];
            self.recv(from, LEAD, Fold::After, LEADER_LATER + height(c, n));
        }
        if v != 0 {
            let to = self.g.layout.leaders[(parent(v) + root) % n];
            self.send(to, LEAD);
        }
    }

    /// Binomial broadcast among leaders from leader `root`, tag `tag`,
    /// after `before` rounds.
    fn lbcast(&mut self, li: usize, root: usize, tag: u64, before: u32) {
        let n = self.nl();
        let v = (li + n - root) % n;
        if v != 0 {
            let p = parent(v);
            let from = self.g.layout.leaders[(p + root) % n];
            self.recv(
                from,
                tag,
                Fold::Copy,
                LEADER_LATER + before + p.count_ones(),
            );
        }
        for c in children(v, n) {
            let to = self.g.layout.leaders[(c + root) % n];
            self.send(to, tag);
        }
    }
}

impl Team {
    /// The host groups if this team's collectives run hierarchically
    /// (agreed by an earlier blocking collective; see the module docs).
    pub(crate) fn nb_hier(&self) -> Option<Arc<HostGroups>> {
        self.inner.counters.hier.get().cloned().flatten()
    }

    /// `barrier_nb` hierarchically: each member tells its leader, the
    /// leaders run a dissemination barrier (⌈log2 L⌉ messages each across
    /// hosts), each leader releases its members.
    pub(crate) fn barrier_nb_hier(
        &self,
        seq: u64,
        h: Header,
        g: Arc<HostGroups>,
    ) -> TeamRequest<'static> {
        let mut b = Build::new(self, seq, h, g, 0);
        let nl = b.nl();
        match b.g.leader_index() {
            None => {
                b.send(b.g.group[0], UP);
                b.await_leader(rounds(nl));
            }
            Some(li) => {
                b.gather_up(Fold::Copy);
                let (mut d, mut t) = (1, 0u64);
                while d < nl {
                    let to = b.g.layout.leaders[(li + d) % nl];
                    let from = b.g.layout.leaders[(li + nl - d) % nl];
                    b.send(to, LEAD | t);
                    b.recv(from, LEAD | t, Fold::Copy, LEADER_LATER + t as u32);
                    d <<= 1;
                    t += 1;
                }
                b.fan_out(None);
            }
        }
        TeamRequest::start(b.s, &mut [])
    }

    /// `broadcast_nb` hierarchically from team rank `root`: the root's
    /// data goes to its leader (unless it leads), down the leaders'
    /// binomial tree from the root's leader (L - 1 messages across
    /// hosts), and from each leader to its members.
    pub(crate) fn broadcast_nb_hier<'a, T: Pod>(
        &self,
        (seq, h, g): (u64, Header, Arc<HostGroups>),
        root: usize,
        data: &'a mut [T],
    ) -> TeamRequest<'a> {
        let mut b = Build::new(self, seq, h, g, std::mem::size_of_val(data));
        let (me, nl) = (b.me(), b.nl());
        let rg = b.g.layout.group_of[root];
        let before = rounds(nl);
        if me == root {
            // the data goes out from a copy; the caller's is the result
            b.s.out = bytes_of(data);
        } else {
            b.s.out = vec![0; b.len];
            b.s.copy_out = true;
        }
        match b.g.leader_index() {
            None if me == root => b.send(b.g.group[0], UP),
            None => b.await_leader(before + 1),
            Some(li) => {
                if li == rg && me != root {
                    b.recv(root, UP, Fold::Copy, 0);
                }
                b.lbcast(li, rg, LEAD, 1);
                b.fan_out(Some(root));
            }
        }
        TeamRequest::start(b.s, bytemuck::cast_slice_mut(data))
    }

    /// `reduce_nb` (`root: Some`) or `allreduce_nb` (`None`)
    /// hierarchically: each leader combines its members' data in team-rank
    /// order, the leaders reduce along a binomial tree to the root's
    /// leader (the first leader for allreduce, which then broadcasts the
    /// result back along the tree: L - 1, or 2 (L - 1), messages across
    /// hosts), and the result goes to the root (or every member).
    pub(crate) fn reduce_nb_hier<'a, T: Reduce>(
        &self,
        (seq, h, g): (u64, Header, Arc<HostGroups>),
        root: Option<usize>,
        data: &'a mut [T],
        op: Op,
    ) -> TeamRequest<'a> {
        let mut b = Build::new(self, seq, h, g, std::mem::size_of_val(data));
        let (me, nl) = (b.me(), b.nl());
        let rg = root.map_or(0, |r| b.g.layout.group_of[r]);
        b.s.out = bytes_of(data);
        b.s.combine = Some((combine_bytes::<T>, op));
        // every member's result for allreduce, the root's for reduce
        b.s.copy_out = root.is_none_or(|r| r == me);
        let before = 1 + rounds(nl) * if root.is_none() { 2 } else { 1 };
        match b.g.leader_index() {
            None => {
                b.send(b.g.group[0], UP);
                if b.s.copy_out {
                    b.await_leader(before);
                }
            }
            Some(li) => {
                b.gather_up(Fold::After);
                b.lreduce(li, rg);
                match root {
                    None => {
                        b.lbcast(li, rg, LEAD2, 1 + rounds(nl));
                        b.fan_out(None);
                    }
                    Some(r) if li == rg && r != me => b.send(r, DOWN),
                    Some(_) => {}
                }
            }
        }
        TeamRequest::start(b.s, bytemuck::cast_slice_mut(data))
    }
}

impl Team {
    /// `gather_nb` (`root: Some`) or `allgather_nb` (`None`)
    /// hierarchically, `send` of `kw` bytes per member: a gather's members
    /// of the root's host send their part to the root, the other hosts'
    /// to their leader, which sends its host's parts to the root in one
    /// message (L - 1 across hosts); an allgather's leaders collect their
    /// host's parts, send them to every other leader (L (L - 1)) and send
    /// all n parts to their members.
    pub(crate) fn gather_nb_hier<'a, T: Pod>(
        &self,
        (seq, h, g): (u64, Header, Arc<HostGroups>),
        root: Option<usize>,
        send: &[T],
        recv: &'a mut [T],
    ) -> TeamRequest<'a> {
        let kw = std::mem::size_of_val(send);
        let mut b = Build::new(self, seq, h, g, kw);
        let (me, nl) = (b.me(), b.nl());
        let n = b.g.layout.group_of.len();
        let gsize = |l: &Layout, gi: usize| l.members_of(gi).len();
        let mine = b.g.my_group();
        // `Out`: the n parts where they are gathered (else this member's
        // part); `Work`: a leader's host's parts, packed in group order
        // (its own first)
        if root.is_none_or(|r| r == me) {
            b.s.out = vec![0; n * kw];
            b.s.out[me * kw..][..kw].copy_from_slice(bytemuck::cast_slice(send));
            b.s.copy_out = true;
        } else {
            b.s.out = bytes_of(send);
        }
        match (root, b.g.leader_index()) {
            (Some(r), _) => {
                let rg = b.g.layout.group_of[r];
                if me == r {
                    for t in b.g.group.clone().into_iter().filter(|&t| t != me) {
                        b.recv_into(t, UP, (Buf::Out, t * kw, kw), 0);
                    }
                    for gi in (0..nl).filter(|&gi| gi != rg) {
                        let from = b.g.layout.leaders[gi];
                        b.recv_group(from, LEAD, gi, kw, LEADER_LATER + 1);
                    }
                } else if mine == rg {
                    b.send(r, UP);
                } else if b.g.gme == 0 {
                    b.s.work = vec![0; gsize(&b.g.layout, mine) * kw];
                    b.s.work[..kw].copy_from_slice(bytemuck::cast_slice(send));
                    let group = b.g.group.clone();
                    for (j, &t) in group.iter().enumerate().skip(1) {
                        b.recv_into(t, UP, (Buf::Work, j * kw, kw), 0);
                    }
                    b.send_from(r, LEAD, Buf::Work, group.len() * kw);
                } else {
                    b.send(b.g.group[0], UP);
                }
            }
            (None, None) => {
                b.s.steps.push_back(Step::Send {
                    to: b.g.group[0],
                    tag: UP,
                    src: Buf::Out,
                    at: me * kw,
                    len: kw,
                });
                let hops = FANOUT_LATER + 2;
                b.recv_into(b.g.group[0], DOWN, (Buf::Out, 0, n * kw), hops);
            }
            (None, Some(li)) => {
                let gl = b.g.group.len() * kw;
                b.s.work = vec![0; gl];
                b.s.work[..kw].copy_from_slice(bytemuck::cast_slice(send));
                b.pack_group(kw);
                for s in 1..nl {
                    let to = b.g.layout.leaders[(li + s) % nl];
                    b.send_from(to, LEAD, Buf::Work, gl);
                }
                for s in 1..nl {
                    let gi = (li + nl - s) % nl;
                    let from = b.g.layout.leaders[gi];
                    b.recv_group(from, LEAD, gi, kw, LEADER_LATER + 1);
                }
                for t in b.g.group.clone().into_iter().skip(1) {
                    b.send_from(t, DOWN, Buf::Out, n * kw);
                }
            }
        }
        TeamRequest::start(b.s, bytemuck::cast_slice_mut(recv))
    }
}
