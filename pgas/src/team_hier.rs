//! Hierarchical team collectives: for a team spanning hosts with more
//! than one member on some host (native path), the blocking barrier,
//! broadcast, reduce, allreduce, gather and allgather (and alltoall,
//! reduce_scatter and the scans, in `team_hier_a2a.rs` and
//! `team_hier_scan.rs`) combine within each
//! host through shared memory, run the message algorithm among one **leader** per host
//! (the host's lowest team rank), and fan the result out through shared
//! memory again. Messages cross hosts only between leaders, except in the
//! scans (the hosts' last members send the doubling and offset messages:
//! `team_hier_nb_scan.rs`).
//!
//! The grouping is agreed at the team's first blocking collective that
//! cannot go through one shared-memory area (`team_shm.rs`): every member
//! sends every other its report (`team_hosts.rs`: which members it maps,
//! where its host group's block is, whether it may take part; n - 1
//! messages of 32 B per member, once per team) as part of that
//! collective (same number and header, so a mismatched call or a member
//! that never calls is named as for any collective), and every member
//! decides alike from the same reports (`team_hosts::plan`). If any
//! member cannot take part (the AM path, `SPLITRT_TEAM_HIER=0`, no room
//! for a block) or the reports disagree, every member keeps the flat
//! message algorithms (`team_coll.rs`).
//!
//! Each local step is a step of the group's area (`ShmCall::sync`: the
//! header compared with every group member's, the hang report naming the
//! group members that have not arrived); leaders' messages carry the
//! collective's number and header like the flat ones, with tags no
//! non-blocking schedule uses (so a blocking collective never matches a
//! non-blocking one).
//!
//! | collective | algorithm | messages between hosts (L hosts, d = ⌈log2 L⌉) |
//! |---|---|---|
//! | barrier | arrive in the host group; dissemination among leaders; release in the group | d per leader |
//! | broadcast | the root's group reads the root's data; binomial tree among leaders from the root's leader; each other leader publishes it to its group | L - 1 |
//! | reduce | each leader combines its group's data in team-rank order; binomial tree among leaders to the root's leader; the root reads the result | L - 1 |
//! | allreduce | as reduce, to the first host's leader, then binomial broadcast back among leaders, each publishing the result to its group | 2 (L - 1) |
//! | gather | the root collects its group's parts, each other leader its group's and sends them to the root | L - 1 |
//! | allgather | each leader collects its group's parts and sends them to every other leader, then publishes all n parts to its group (a step carries ⌊32 KiB / (n · element size)⌋ elements per member) | L (L - 1) |
//! | alltoall, reduce_scatter | `team_hier_a2a.rs`: one aggregated message per leader pair | L (L - 1) |
//! | alltoallv | `team_hier_a2av.rs`: counts through the area, then a counts and a data message per leader pair | 2 L (L - 1) |
//! | scan_inclusive / _exclusive | `team_hier_scan.rs`: by messages from lower to higher team ranks (host-local prefix along each host, the hosts' last members exclusive-scan the totals, each host's offset to its leader and members), pipelined | ≤ (L - 1) (1 + ⌈log2 (L - 1)⌉) |
//!
//! Reductions: within a host in increasing team rank, then the hosts'
//! partial results along the leaders' binomial tree (children in
//! increasing distance), a fixed order: the result does not depend on
//! timing and allreduce gives every member the same bits; floating-point
//! results may differ in the last bit from the flat forms' (another
//! order).

use crate::reduce::{Op, Reduce};
use crate::team::{op_code, Team};
use crate::team_area::{TeamArea, TEAM_HALF};
use crate::team_coll::height;
use crate::team_hosts::{plan, HostGroups, Layout, Report, NO_BLOCK};
use crate::team_mail::{CollKind, Header};
use crate::team_shm::{alloc_block, free_block, steps, ShmCall};
use bytemuck::Pod;
use splitrt_am::{Error, Result};
use splitrt_runtime::config::{self, RmaPath};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Tags of the leaders' messages (never a non-blocking schedule's).
pub(crate) const HIER: u64 = 1 << 61;
/// The tag of the set-up's reports.
const SETUP: u64 = 1 << 62;
/// Seconds a leader's message waits add to the hang report's delay, so
/// that a member that never calls is named by its own host's members
/// first (they report after 0 to 2 s).
pub(crate) const LEADER_LATER: u32 = 3;
/// Seconds the fan-out step's waits add (they wait for their leader,
/// which waits for the other leaders).
pub(crate) const FANOUT_LATER: u64 = 8;

/// `SPLITRT_TEAM_HIER`: on unless set to an off word, read as every
/// splitrt switch ([`splitrt_runtime::config::parse_switch`]); anything
/// else is an error naming the variable.
fn hier_setting() -> std::result::Result<bool, String> {
    config::env_switch(config::ENV_TEAM_HIER, true).map_err(|e| e.to_string())
}

/// Number of bits of `v` (0 for 0).
fn bitlen(v: usize) -> u32 {
    usize::BITS - v.leading_zeros()
}

/// The tag of step `phase` of chunk `c` among leaders.
pub(crate) fn tag(c: usize, phase: u64) -> u64 {
    HIER | (c as u64) << 8 | phase
}

/// `acc[i] = acc[i] op b[i]` (the op was checked to apply).
pub(crate) fn combine<T: Reduce>(op: Op, acc: &mut [T], b: &[T]) {
    for (a, b) in acc.iter_mut().zip(b) {
        *a = T::combine(op, *a, *b).unwrap_or(*a);
    }
}

/// Whether collective `kind` of `count` elements of `T` a member runs
/// hierarchically on a team grouped as `layout` (the same on every
/// member; the non-blocking forms follow it too, `team_hier_nb_a2a.rs`).
pub(crate) fn hier_fits<T>(kind: CollKind, count: usize, layout: &Layout) -> bool {
    // an allgather's fan-out step carries every member's elements;
    // alltoall, reduce_scatter and the scans: see `Layout::alltoall_width`
    let n = layout.group_of.len();
    let wide = match kind {
        CollKind::Allgather | CollKind::ReduceScatter => Some(n),
        // only an alltoall that one step holds: larger ones go
        // flat (pairwise messages stream; the leaders' lock-step
        // rounds made NPB FT W on 2 + 2 ranks 1.8x slower)
        CollKind::Alltoall => Some(layout.alltoall_width().saturating_mul(count.max(1))),
        // the counts step: every member's send and recv counts
        CollKind::Alltoallv => (16 * n <= TEAM_HALF).then_some(1),
        CollKind::ScanInclusive | CollKind::ScanExclusive => layout.contiguous().then_some(1),
        _ => Some(1),
    };
    wide.is_some_and(|w| std::mem::size_of::<T>().saturating_mul(w) <= TEAM_HALF)
}

/// One hierarchical collective in progress.
pub(crate) struct HierCall<'a> {
    pub(crate) team: &'a Team,
    pub(crate) g: Arc<HostGroups>,
    pub(crate) seq: u64,
    pub(crate) h: Header,
}

impl Team {
    /// Start collective `kind` hierarchically if the team can: `None` to
    /// go by the flat messages. Call after the local argument checks and
    /// after `shm_call` said no, right before `call` (the set-up, on the
    /// team's first such collective, takes the collective's number and
    /// leaves it to `call` when the team goes flat).
    pub(crate) fn hier_call<T>(
        &self,
        kind: CollKind,
        op: Option<Op>,
        root: Option<usize>,
        count: usize,
    ) -> Result<Option<HierCall<'_>>> {
        let c = &self.inner.counters;
        if self.inner.me.is_none() || matches!(c.shm.get(), Some(Some(_))) {
            return Ok(None);
        }
        let h = Header {
            kind: kind as u64,
            op: op.map_or(0, op_code),
            root: root.map_or(u64::MAX, |r| r as u64),
            count: count as u64,
            esize: std::mem::size_of::<T>() as u64,
        };
        let fits = |g: &HostGroups| hier_fits::<T>(kind, count, &g.layout);
        let (g, seq) = match c.hier.get() {
            Some(g) => (g.clone(), None),
            // two hosts and two members on one take three members: every
            // member knows the size, so no set-up is needed to agree
            None if self.size() < 3 => {
                let _ = c.hier.set(None);
                (None, None)
            }
            None => {
                let seq = self.next_seq();
                let g = self.set_up_hier(seq, &h)?.map(Arc::new);
                let _ = c.hier.set(g);
                (c.hier.get().cloned().flatten(), Some(seq))
            }
        };
        match (g, seq) {
            (Some(g), seq) if fits(&g) => Ok(Some(HierCall {
                team: self,
                g,
                seq: seq.unwrap_or_else(|| self.next_seq()),
                h,
            })),
            (_, Some(seq)) => {
                // this collective goes flat with the number the set-up took
                c.held_seq.store(seq, Ordering::Relaxed);
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    /// Exchange the reports and decide (see the module docs).
    fn set_up_hier(&self, seq: u64, h: &Header) -> Result<Option<HostGroups>> {
        let i = &self.pgas().inner;
        let Some(me) = self.inner.me else {
            return Ok(None);
        };
        let (members, n) = (&self.inner.members, self.size());
        let enabled = match hier_setting() {
            Ok(on) => on,
            Err(why) => {
                // every member reads it; one that cannot must not leave
                // the others waiting
                i.ep.abort(&why);
                return Err(Error::usage(why).at_rank(i.rank));
            }
        };
        let native = i.path == RmaPath::Native && enabled;
        let mapped: Vec<usize> = (0..n)
            .filter(|&j| j == me || !i.direct[members.at(j)].is_empty())
            .collect();
        let count = mapped.len();
        let block = if native && count > 1 && count < n {
            alloc_block(self)
        } else {
            None
        };
        let mine = Report {
            key: mapped[0] as u64,
            count: count as u64,
            off: block.unwrap_or(NO_BLOCK),
            willing: native && (count == 1 || block.is_some()),
        };
        let mut reports = vec![mine; n];
        let exchanged = (|| -> Result<()> {
            let words = mine.words();
            for s in 1..n {
                self.send(seq, SETUP, h, (me + s) % n, bytemuck::cast_slice(&words))?;
            }
            for s in 1..n {
                let j = (me + n - s) % n;
                let mut w = [0u64; 4];
                self.recv(seq, SETUP, h, j, bytemuck::cast_slice_mut(&mut w), 0)?;
                reports[j] = Report::from_words(&w);
            }
            Ok(())
        })();
        let layout = match exchanged {
            Ok(()) => plan(&reports),
            Err(e) => {
                if let Some(off) = block {
                    free_block(self, off);
                }
                return Err(e);
            }
        };
        let Some(layout) = layout else {
            if let Some(off) = block {
                free_block(self, off);
            }
            return Ok(None);
        };
        let group = layout.members_of(layout.group_of[me]);
        let gme = group.iter().position(|&t| t == me).unwrap_or(0);
        let area = match (group.len(), block) {
            (1, _) => None,
            (_, Some(off)) => {
                let segs = group.iter().map(|&t| i.direct[members.at(t)]).collect();
                let offs = group.iter().map(|&t| reports[t].off as usize).collect();
                let own = Some((off, i.team_areas.clone()));
                match TeamArea::new(segs, offs, gme, TEAM_HALF, self.inner.id, own) {
                    Some(a) => Some(Arc::new(a.counted())),
                    None => return Err(self.inconsistent(&group)),
                }
            }
            (_, None) => return Err(self.inconsistent(&group)),
        };
        Ok(Some(HostGroups {
            layout,
            group,
            gme,
            area,
        }))
    }

    /// The members agreed on a host group whose blocks this member cannot
    /// use (a peer's offset outside its segment): end the job (the others
    /// would wait for it).
    fn inconsistent(&self, group: &[usize]) -> Error {
        let i = &self.pgas().inner;
        let world: Vec<usize> = group.iter().map(|&t| self.inner.members.at(t)).collect();
        let why = format!(
            "team {:#x}: the hierarchical set-up grouped world ranks {:?} on one host, but rank \
             {} cannot use their shared-memory blocks",
            self.inner.id, world, i.rank
        );
        i.ep.abort(&why);
        Error::usage(why).at_rank(i.rank)
    }

    /// Whether this team's blocking collectives run hierarchically
    /// (shared memory within each host, messages between one leader per
    /// host): `Some(true)` or `Some(false)` once its first blocking
    /// collective that could not go through one shared-memory area
    /// decided it (every member decides alike), `None` before that (or
    /// if they all go through one host's shared memory).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// let world = pg.world();
    /// let mut x = [1u64];
    /// world.allreduce(&mut x, splitrt_pgas::Op::Sum)?;
    /// println!("hierarchical: {:?}", world.is_hierarchical());
    /// # Ok(()) }
    /// ```
    pub fn is_hierarchical(&self) -> Option<bool> {
        self.inner.counters.hier.get().map(Option::is_some)
    }

    /// Team messages (Medium-sized chunks) this rank has sent for this
    /// team's collectives to members whose segment is not mapped here:
    /// members on other hosts (on the AM path, every member). Read it
    /// before and after a collective to see what the collective sent
    /// across hosts (hierarchically only leaders send across hosts).
    ///
    /// ```no_run
    /// # fn f(team: &splitrt_pgas::Team) -> splitrt_am::Result<()> {
    /// let before = team.off_host_messages();
    /// team.barrier()?;
    /// println!("{} messages to other hosts", team.off_host_messages() - before);
    /// # Ok(()) }
    /// ```
    pub fn off_host_messages(&self) -> u64 {
        self.inner.counters.off_host.load(Ordering::Relaxed)
    }
}

impl HierCall<'_> {
    /// One step of this member's group area: write `data` (if any) into
    /// it, publish, wait for the group. Returns the area and the step to
    /// read from (then `TeamArea::finish`), `None` for a group of one.
    pub(crate) fn step(&self, later: u64, data: Option<&[u8]>) -> Result<Option<(&TeamArea, u64)>> {
        let Some(a) = &self.g.area else {
            return Ok(None);
        };
        let k = a.begin();
        if let Some(d) = data {
            a.write(k, 0, d);
        }
        let s = ShmCall::of_group(
            self.team,
            a.clone(),
            self.seq,
            self.h,
            (self.g.gme, &self.g.group),
            later,
        );
        s.sync(k)?;
        Ok(Some((a, k)))
    }

    /// A step with nothing to read.
    fn step_only(&self, later: u64, data: Option<&[u8]>) -> Result<()> {
        if let Some((a, k)) = self.step(later, data)? {
            a.finish(k);
        }
        Ok(())
    }

    /// Leaders.
    pub(crate) fn nl(&self) -> usize {
        self.g.layout.leaders.len()
    }

    pub(crate) fn lsend<T: Pod>(&self, tag: u64, to: usize, data: &[T]) -> Result<()> {
        let t = self.g.layout.leaders[to];
        self.team
            .send(self.seq, tag, &self.h, t, bytemuck::cast_slice(data))
    }

    pub(crate) fn lrecv<T: Pod>(
        &self,
        tag: u64,
        from: usize,
        out: &mut [T],
        hops: u32,
    ) -> Result<()> {
        let t = self.g.layout.leaders[from];
        let hops = hops + LEADER_LATER;
        self.team.recv(
            self.seq,
            tag,
            &self.h,
            t,
            bytemuck::cast_slice_mut(out),
            hops,
        )
    }

    /// Binomial-tree broadcast of `buf` among leaders from leader `root`
    /// (this member leads `li`).
    fn lbcast<T: Pod>(&self, tag: u64, li: usize, root: usize, buf: &mut [T]) -> Result<()> {
        let n = self.nl();
        let v = (li + n - root) % n;
        if v != 0 {
            let parent = v & !(1usize << (bitlen(v) - 1));
            self.lrecv(tag, (parent + root) % n, buf, parent.count_ones())?;
        }
        let mut k = bitlen(v);
        while k < usize::BITS && (v | 1 << k) < n {
            self.lsend(tag, ((v | 1 << k) + root) % n, buf)?;
            k += 1;
        }
        Ok(())
    }

    /// Binomial-tree reduction of `acc` among leaders to leader `root`
    /// (children combined in increasing distance), as `Call::reduce_to`.
    fn lreduce<T: Reduce>(
        &self,
        tag: u64,
        (li, root): (usize, usize),
        acc: &mut [T],
        op: Op,
    ) -> Result<()> {
        let n = self.nl();
        let v = (li + n - root) % n;
        let mut tmp = vec![T::zeroed(); acc.len()];
        let mut k = bitlen(v);
        while k < usize::BITS && (v | 1 << k) < n {
            let c = v | 1 << k;
            self.lrecv(tag, (c + root) % n, &mut tmp, height(c, n))?;
            combine(op, acc, &tmp);
            k += 1;
        }
        if v != 0 {
            let parent = v & !(1usize << (bitlen(v) - 1));
            self.lsend(tag, (parent + root) % n, acc)?;
        }
        Ok(())
    }

    /// Elements of `T` a step carries.
    fn per<T>() -> usize {
        (TEAM_HALF / std::mem::size_of::<T>().max(1)).max(1)
    }

    /// Barrier: arrive in the group, dissemination among leaders, release.
    pub(crate) fn barrier(self) -> Result<()> {
        self.step_only(0, None)?;
        if let Some(li) = self.g.leader_index() {
            let n = self.nl();
            let (mut d, mut t) = (1, 0u64);
            while d < n {
                self.lsend::<u8>(tag(0, t), (li + d) % n, &[])?;
                self.lrecv::<u8>(tag(0, t), (li + n - d) % n, &mut [], t as u32)?;
                d <<= 1;
                t += 1;
            }
        }
        self.step_only(FANOUT_LATER, None)
    }

    /// Team rank `root`'s `data` to every member: the root's group reads
    /// it from the root, the leaders pass it on, each other leader
    /// publishes it to its group.
    pub(crate) fn broadcast<T: Pod>(self, root: usize, data: &mut [T]) -> Result<()> {
        let g = self.g.clone();
        let rg = g.layout.group_of[root];
        let mine = g.my_group();
        let me = g.group[g.gme];
        let leader = g.gme == 0;
        let at_root = g.group.iter().position(|&t| t == root).unwrap_or(0);
        for (c, r) in steps(data.len(), Self::per::<T>()).enumerate() {
            let chunk = &mut data[r];
            if mine == rg {
                let mine = (me == root).then(|| bytemuck::cast_slice(&*chunk));
                if let Some((a, k)) = self.step(0, mine)? {
                    if me != root {
                        a.read(at_root, k, 0, bytemuck::cast_slice_mut(chunk));
                    }
                    a.finish(k);
                }
            }
            if let Some(li) = g.leader_index() {
                self.lbcast(tag(c, 1), li, rg, chunk)?;
            }
            if mine != rg {
                let mine = leader.then(|| bytemuck::cast_slice(&*chunk));
                if let Some((a, k)) = self.step(FANOUT_LATER, mine)? {
                    if !leader {
                        a.read(0, k, 0, bytemuck::cast_slice_mut(chunk));
                    }
                    a.finish(k);
                }
            }
        }
        Ok(())
    }

    /// Every member's `data` combined with `op` (see the module docs for
    /// the order) into `root`'s (or every member's, for `None`); other
    /// members' `data` is left unchanged.
    pub(crate) fn reduce<T: Reduce>(
        self,
        root: Option<usize>,
        data: &mut [T],
        op: Op,
    ) -> Result<()> {
        let g = self.g.clone();
        let mine = g.my_group();
        let leader = g.gme == 0;
        let me = g.group[g.gme];
        // the leaders' root: the root's group, or the first for allreduce
        let rg = root.map_or(0, |r| g.layout.group_of[r]);
        let per = Self::per::<T>();
        let mut tmp = vec![T::zeroed(); per.min(data.len())];
        let mut acc = tmp.clone();
        for (c, r) in steps(data.len(), per).enumerate() {
            let m = r.len();
            let acc = &mut acc[..m];
            // within the host: the leader combines in team-rank order
            match self.step(0, Some(bytemuck::cast_slice(&data[r.clone()])))? {
                Some((a, k)) => {
                    if leader {
                        acc.copy_from_slice(&data[r.clone()]);
                        for j in 1..g.group.len() {
                            a.read(j, k, 0, bytemuck::cast_slice_mut(&mut tmp[..m]));
                            combine(op, acc, &tmp[..m]);
                        }
                    }
                    a.finish(k);
                }
                None => acc.copy_from_slice(&data[r.clone()]),
            }
            // among the leaders
            if let Some(li) = g.leader_index() {
                self.lreduce(tag(c, 1), (li, rg), acc, op)?;
                if root.is_none() {
                    self.lbcast(tag(c, 2), li, rg, acc)?;
                }
            }
            // out to the root (reduce) or every member (allreduce)
            match root {
                Some(rt) if mine == rg => {
                    if me == rt && leader {
                        data[r].copy_from_slice(acc);
                    } else if rt != g.group[0] {
                        let out = leader.then(|| bytemuck::cast_slice(&*acc));
                        if let Some((a, k)) = self.step(FANOUT_LATER, out)? {
                            if me == rt {
                                a.read(0, k, 0, bytemuck::cast_slice_mut(&mut data[r]));
                            }
                            a.finish(k);
                        }
                    }
                }
                Some(_) => {}
                None => {
                    let out = leader.then(|| bytemuck::cast_slice(&*acc));
                    if let Some((a, k)) = self.step(FANOUT_LATER, out)? {
                        if !leader {
                            a.read(0, k, 0, bytemuck::cast_slice_mut(&mut data[r.clone()]));
                        }
                        a.finish(k);
                    }
                    if leader {
                        data[r].copy_from_slice(acc);
                    }
                }
            }
        }
        Ok(())
    }

    /// This member's group's parts of elements `r` of every member's
    /// `send` (step A: every member publishes; the collector reads), in
    /// group order, `m` elements each; `None` on members that do not
    /// collect.
    fn collect<T: Pod>(&self, send: &[T], collects: bool) -> Result<Option<Vec<T>>> {
        let g = &self.g;
        let m = send.len();
        let mut out = collects.then(|| vec![T::zeroed(); g.group.len() * m]);
        match self.step(0, Some(bytemuck::cast_slice(send)))? {
            Some((a, k)) => {
                if let Some(out) = &mut out {
                    for j in 0..g.group.len() {
                        let to = &mut out[j * m..(j + 1) * m];
                        if j == g.gme {
                            to.copy_from_slice(send);
                        } else {
                            a.read(j, k, 0, bytemuck::cast_slice_mut(to));
                        }
                    }
                }
                a.finish(k);
            }
            None => {
                if let Some(out) = &mut out {
                    out.copy_from_slice(send);
                }
            }
        }
        Ok(out)
    }

    /// Place group `gi`'s parts `parts` (group order, `m` elements each)
    /// of elements `r` into `recv` (member t's at t * kk).
    fn place<T: Pod>(&self, gi: usize, parts: &[T], recv: &mut [T], kk: usize, r: &Range<usize>) {
        let m = r.len();
        let members = self.g.layout.members_of(gi);
        for (j, &t) in members.iter().enumerate() {
            recv[t * kk + r.start..t * kk + r.end].copy_from_slice(&parts[j * m..(j + 1) * m]);
        }
    }

    /// Every member's `send` (kk elements) into `recv` (n * kk) of `root`
    /// (or of every member, for `None`): each host's parts are collected
    /// through its group's area (by the root in its own group, else by
    /// the leader); a gather's leaders send them to the root, an
    /// allgather's to every other leader, which publishes all n parts to
    /// its group.
    pub(crate) fn gather<T: Pod>(
        self,
        root: Option<usize>,
        send: &[T],
        recv: &mut [T],
    ) -> Result<()> {
        let g = self.g.clone();
        let (nl, mine, me) = (self.nl(), g.my_group(), g.group[g.gme]);
        let n = g.layout.group_of.len();
        let kk = send.len();
        let per = match root {
            Some(_) => Self::per::<T>(),
            None => (TEAM_HALF / (std::mem::size_of::<T>().max(1) * n)).max(1),
        };
        for (c, r) in steps(kk, per).enumerate() {
            let m = r.len();
            match root {
                Some(rt) => {
                    let rg = g.layout.group_of[rt];
                    // the root collects its own group; the other leaders theirs
                    let collects = if mine == rg { me == rt } else { g.gme == 0 };
                    let parts = self.collect(&send[r.clone()], collects)?;
                    if me == rt {
                        if let Some(p) = &parts {
                            self.place(mine, p, recv, kk, &r);
                        }
                        for gi in (0..nl).filter(|&gi| gi != rg) {
                            let mut p = vec![T::zeroed(); g.layout.members_of(gi).len() * m];
                            let from = g.layout.leaders[gi];
                            self.team.recv(
                                self.seq,
                                tag(c, 1),
                                &self.h,
                                from,
                                bytemuck::cast_slice_mut(&mut p),
                                LEADER_LATER,
                            )?;
                            self.place(gi, &p, recv, kk, &r);
                        }
                    } else if let (Some(p), true) = (&parts, mine != rg) {
                        self.team.send(
                            self.seq,
                            tag(c, 1),
                            &self.h,
                            rt,
                            bytemuck::cast_slice(p),
                        )?;
                    }
                }
                None => {
                    let leader = g.gme == 0;
                    let parts = self.collect(&send[r.clone()], leader)?;
                    // the leader assembles all n parts of these elements
                    // (member t's at t * m), then publishes them
                    let mut all = vec![T::zeroed(); if leader { n * m } else { 0 }];
                    if let (Some(p), Some(li)) = (&parts, g.leader_index()) {
                        for s in 1..nl {
                            self.lsend(tag(c, 1), (li + s) % nl, p)?;
                        }
                        let mut put = |gi: usize, p: &[T]| {
                            for (j, &t) in g.layout.members_of(gi).iter().enumerate() {
                                all[t * m..(t + 1) * m].copy_from_slice(&p[j * m..(j + 1) * m]);
                            }
                        };
                        put(li, p);
                        for s in 1..nl {
                            let gi = (li + nl - s) % nl;
                            let mut q = vec![T::zeroed(); g.layout.members_of(gi).len() * m];
                            self.lrecv(tag(c, 1), gi, &mut q, 0)?;
                            put(gi, &q);
                        }
                    }
                    let out = leader.then(|| bytemuck::cast_slice(&all[..]));
                    match self.step(FANOUT_LATER, out)? {
                        Some((a, k)) => {
                            for t in 0..n {
                                let to = &mut recv[t * kk + r.start..t * kk + r.end];
                                if leader {
                                    to.copy_from_slice(&all[t * m..(t + 1) * m]);
                                } else {
                                    let at = t * m * std::mem::size_of::<T>();
                                    a.read(0, k, at, bytemuck::cast_slice_mut(to));
                                }
                            }
                            a.finish(k);
                        }
                        None => {
                            for t in 0..n {
                                recv[t * kk + r.start..t * kk + r.end]
                                    .copy_from_slice(&all[t * m..(t + 1) * m]);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
