//! The non-blocking forms of the team collectives that `team_nb.rs` does
//! not have: `reduce_nb`, `gather_nb`, `alltoallv_nb`,
//! `reduce_scatter_nb`, `scan_inclusive_nb` and `scan_exclusive_nb`.
//! Each is its blocking form's algorithm and messages (`team_coll.rs`)
//! as a schedule (`team_sched.rs`), with the same argument checks (made
//! before the collective takes its number, so a usage error leaves the
//! team usable) and the same header, so a mismatch across members is
//! detected and named as for the blocking forms. A non-blocking form
//! never matches a blocking one (as in MPI): where the members share a
//! host the blocking form runs over shared memory (`team_shm.rs`).

use crate::reduce::{Op, Reduce};
use crate::team::Team;
use crate::team_coll::height;
use crate::team_hier_nb_scan::{reduce_scatter_nb_fits, RS_HIER_MAX_BYTES};
use crate::team_hosts::HostGroups;
use crate::team_mail::CollKind;
use crate::team_nb::{bytes_of, TeamRequest};
use crate::team_sched::{combine_bytes, Buf, Fold, Sched, Step};
use bytemuck::Pod;
use splitrt_am::Result;
use std::sync::Arc;

/// Number of bits of `v` (0 for 0).
fn bitlen(v: usize) -> u32 {
    usize::BITS - v.leading_zeros()
}

impl Team {
    /// The checks that consume nothing (as the blocking forms'
    /// `precheck`): this rank is a member and `root` a team rank.
    /// Returns (this member's team rank, team size).
    fn nb_precheck(&self, kind: CollKind, root: Option<usize>) -> Result<(usize, usize)> {
        let me = self.member(kind.name())?;
        let n = self.size();
        if let Some(r) = root.filter(|&r| r >= n) {
            return Err(self.usage(kind, format!("root {r} is not a team rank (team of {n})")));
        }
        Ok((me, n))
    }

    /// `op` applies to `T`.
    fn nb_check_op<T: Reduce>(&self, kind: CollKind, op: Op) -> Result<()> {
        if T::combine(op, T::zeroed(), T::zeroed()).is_none() {
            return Err(self.usage(
                kind,
                format!("{op:?} does not apply to {}", std::any::type_name::<T>()),
            ));
        }
        Ok(())
    }

    /// `got` elements where `want` are needed, as an error.
    fn nb_check_len(&self, kind: CollKind, what: &str, got: usize, want: usize) -> Result<()> {
        if got != want {
            return Err(self.usage(
                kind,
                format!(
                    "{what} holds {got} elements, {want} expected (team of {})",
                    self.size()
                ),
            ));
        }
        Ok(())
    }

    /// Non-blocking [`reduce`](Self::reduce): every member's `data`
    /// combined element-wise with `op` into team rank `root`'s `data`
    /// (the same binomial tree and combining order, so the same bits);
    /// the other members' `data` is left unchanged. Flat, a leaf's part
    /// goes out before this returns; hierarchically a non-leader's goes
    /// to its host's leader then, and a leader's (combined with its
    /// members') once they have come. Across hosts hierarchical (L - 1
    /// messages across L hosts) once the team's blocking collectives are
    /// (see `docs/teams.md`).
    ///
    /// ```no_run
    /// # fn f(team: &splitrt_pgas::Team) -> splitrt_am::Result<()> {
    /// let mut x = [team.rank().unwrap() as u64, 1];
    /// let r = team.reduce_nb(0, &mut x, splitrt_pgas::Op::Sum)?;
    /// // ... compute meanwhile ...
    /// r.wait()?; // on team rank 0: x = [0 + 1 + ... + (n-1), n]
    /// # Ok(()) }
    /// ```
    pub fn reduce_nb<'a, T: Reduce>(
        &self,
        root: usize,
        data: &'a mut [T],
        op: Op,
    ) -> Result<TeamRequest<'a>> {
        let kind = CollKind::Reduce;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        self.nb_check_op::<T>(kind, op)?;
        let (me, seq, h) = self.start::<T>(kind, Some(op), Some(root), data.len())?;
        // across hosts as the blocking form (team_hier_nb.rs)
        if let Some(g) = self.nb_hier() {
            return Ok(self.reduce_nb_hier((seq, h, g), Some(root), data, op));
        }
        let n = self.size();
        let len = std::mem::size_of_val(data);
        let mut r = Sched::new(self, seq, h);
        r.out = bytes_of(data);
        r.copy_out = me == root;
        r.combine = Some((combine_bytes::<T>, op));
        let v = (me + n - root) % n;
        let mut k = bitlen(v);
        while k < usize::BITS && (v | 1 << k) < n {
            let c = v | 1 << k;
            r.steps.push_back(Step::Recv {
                from: (c + root) % n,
                tag: 0,
                dst: Buf::Out,
                at: 0,
                len,
                fold: Fold::After,
                hops: height(c, n),
            });
            k += 1;
        }
        if v != 0 {
            let parent = v & !(1usize << (bitlen(v) - 1));
            r.steps.push_back(Step::Send {
                to: (parent + root) % n,
                tag: 0,
                src: Buf::Out,
                at: 0,
                len,
            });
        }
        Ok(TeamRequest::start(r, bytemuck::cast_slice_mut(data)))
    }

    /// Non-blocking [`gather`](Self::gather): every member's `send` (k
    /// elements) into team rank `root`'s `recv` (n * k elements, member
    /// i's at i * k; other members pass `&mut []`). A non-root's `send`
    /// goes out before this returns. Across hosts hierarchical (L - 1
    /// messages across L hosts) once the team's blocking collectives are
    /// (see `docs/teams.md`): then a host leader's part goes with its
    /// host's (copied at the call: `send` is free on return either way).
    ///
    /// ```no_run
    /// # fn f(team: &splitrt_pgas::Team) -> splitrt_am::Result<()> {
    /// let me = team.rank().unwrap() as u32;
    /// let mut all = if me == 0 { vec![0u32; team.size()] } else { Vec::new() };
    /// team.gather_nb(0, &[me], &mut all)?.wait()?; // on 0: all[i] == i
    /// # Ok(()) }
    /// ```
    pub fn gather_nb<'a, T: Pod>(
        &self,
        root: usize,
        send: &[T],
        recv: &'a mut [T],
    ) -> Result<TeamRequest<'a>> {
        let kind = CollKind::Gather;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        let k = send.len();
        let (me, n) = self.nb_precheck(kind, Some(root))?;
        if me == root {
            self.nb_check_len(kind, "recv", recv.len(), n * k)?;
        }
        let (me, seq, h) = self.start::<T>(kind, None, Some(root), k)?;
        // across hosts as the blocking form (team_hier_nb.rs)
        if let Some(g) = self.nb_hier() {
            return Ok(self.gather_nb_hier((seq, h, g), Some(root), send, recv));
        }
        let mut r = Sched::new(self, seq, h);
        if me != root {
            self.send(seq, 0, &h, root, bytemuck::cast_slice(send))?;
            return Ok(TeamRequest::start(r, &mut []));
        }
        let kw = std::mem::size_of_val(send);
        r.out = vec![0; n * kw];
        r.out[me * kw..][..kw].copy_from_slice(bytemuck::cast_slice(send));
        r.copy_out = true;
        for j in (0..n).filter(|&j| j != me) {
            r.steps.push_back(Step::Recv {
                from: j,
                tag: 0,
                dst: Buf::Out,
                at: j * kw,
                len: kw,
                fold: Fold::Copy,
                hops: 0,
            });
        }
        Ok(TeamRequest::start(r, bytemuck::cast_slice_mut(recv)))
    }

    /// Non-blocking [`alltoallv`](Self::alltoallv): `send_counts[j]`
    /// elements of `send` go to team rank j before this returns (so
    /// `send` may be reused at once); `recv_counts[j]` elements from team
    /// rank j land in `recv` by completion. A member whose
    /// `send_counts[me]` differs from this member's `recv_counts[j]` is
    /// an error naming both, as for the blocking form. Across hosts
    /// hierarchical as the blocking form (counts, then at most one data
    /// message per leader pair: 2 L (L - 1) across L hosts) once the
    /// team's blocking collectives are (decided at its first blocking
    /// collective across hosts, any but `split`: see `docs/teams.md`);
    /// `send` is
    /// then copied at the call (if it does not fit one shared-memory
    /// step, the decision is flat and its blocks go out at the call
    /// instead, uncopied), and a counts difference is named by the
    /// leaders with both members' counts.
    ///
    /// ```no_run
    /// # fn f(team: &splitrt_pgas::Team) -> splitrt_am::Result<()> {
    /// let n = team.size();
    /// let me = team.rank().unwrap();
    /// // j + 1 elements to team rank j; me + 1 from everyone
    /// let send_counts: Vec<usize> = (0..n).map(|j| j + 1).collect();
    /// let recv_counts = vec![me + 1; n];
    /// let send = vec![me as u16; send_counts.iter().sum()];
    /// let mut recv = vec![0u16; n * (me + 1)];
    /// team.alltoallv_nb(&send, &send_counts, &mut recv, &recv_counts)?.wait()?;
    /// # Ok(()) }
    /// ```
    pub fn alltoallv_nb<'a, T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &'a mut [T],
        recv_counts: &[usize],
    ) -> Result<TeamRequest<'a>> {
        let kind = CollKind::Alltoallv;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        let (me, n) = self.nb_precheck(kind, None)?;
        self.nb_check_len(kind, "send_counts", send_counts.len(), n)?;
        self.nb_check_len(kind, "recv_counts", recv_counts.len(), n)?;
        let offsets = |counts: &[usize], total: usize, what: &str| -> Result<Vec<usize>> {
            let mut at = Vec::with_capacity(counts.len());
            let mut sum = 0usize;
            for &x in counts {
                at.push(sum);
                sum = sum.saturating_add(x);
            }
            if sum != total {
                return Err(self.usage(
                    kind,
                    format!("{what} add up to {sum} elements, the buffer holds {total}"),
                ));
            }
            Ok(at)
        };
        let so = offsets(send_counts, send.len(), "send_counts")?;
        let ro = offsets(recv_counts, recv.len(), "recv_counts")?;
        if send_counts[me] != recv_counts[me] {
            return Err(self.usage(
                kind,
                format!(
                    "send_counts[{0}] = {1} but recv_counts[{0}] = {2} (this member's own block)",
                    me, send_counts[me], recv_counts[me]
                ),
            ));
        }
        let (me, seq, h) = self.start::<T>(kind, None, None, 0)?;
        // across hosts as the blocking form (team_hier_nb_a2a.rs)
        if let Some(g) = self.alltoallv_nb_groups::<T>() {
            let (send, recv) = ((send, send_counts), (recv, recv_counts));
            return self.alltoallv_nb_hier((seq, h, g), send, recv);
        }
        for s in 1..n {
            let j = (me + s) % n;
            let block = &send[so[j]..][..send_counts[j]];
            self.send(seq, 0, &h, j, bytemuck::cast_slice(block))?;
        }
        let w = std::mem::size_of::<T>();
        let mut r = Sched::new(self, seq, h);
        r.out = vec![0; std::mem::size_of_val(recv)];
        r.out[ro[me] * w..][..recv_counts[me] * w]
            .copy_from_slice(bytemuck::cast_slice(&send[so[me]..][..send_counts[me]]));
        r.copy_out = true;
        for s in 1..n {
            let j = (me + n - s) % n;
            r.steps.push_back(Step::Recv {
                from: j,
                tag: 0,
                dst: Buf::Out,
                at: ro[j] * w,
                len: recv_counts[j] * w,
                fold: Fold::Copy,
                hops: 0,
            });
        }
        Ok(TeamRequest::start(r, bytemuck::cast_slice_mut(recv)))
    }

    /// Non-blocking [`reduce_scatter`](Self::reduce_scatter): the blocks
    /// of `send` (n blocks of k elements, block j for team rank j) go to
    /// their owners before this returns; `recv` (k elements) gets the
    /// element-wise `op` of every member's block for this member,
    /// combined in team-rank order, by completion. Across hosts
    /// hierarchical (each member's n blocks to its host's leader, one
    /// message per leader pair: L (L - 1) across L hosts, the blocking
    /// hierarchical form's bits) once the team's blocking collectives are
    /// (see `docs/teams.md`).
    ///
    /// ```no_run
    /// # fn f(team: &splitrt_pgas::Team) -> splitrt_am::Result<()> {
    /// let send = vec![1u64; 2 * team.size()];
    /// let mut mine = [0u64; 2];
    /// team.reduce_scatter_nb(&send, &mut mine, splitrt_pgas::Op::Sum)?.wait()?;
    /// assert_eq!(mine, [team.size() as u64; 2]);
    /// # Ok(()) }
    /// ```
    pub fn reduce_scatter_nb<'a, T: Reduce>(
        &self,
        send: &[T],
        recv: &'a mut [T],
        op: Op,
    ) -> Result<TeamRequest<'a>> {
        let kind = CollKind::ReduceScatter;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        self.nb_check_op::<T>(kind, op)?;
        let k = recv.len();
        let (_, n) = self.nb_precheck(kind, None)?;
        self.nb_check_len(kind, "send", send.len(), n * k)?;
        let (me, seq, h) = self.start::<T>(kind, Some(op), None, k)?;
        // across hosts as the blocking form (team_hier_nb_scan.rs), when
        // it fits: a leader holds its members' n blocks each
        let fits =
            |g: &Arc<HostGroups>| reduce_scatter_nb_fits::<T>(k, &g.layout, RS_HIER_MAX_BYTES);
        if let Some(g) = self.nb_hier().filter(fits) {
            return Ok(self.reduce_scatter_nb_hier((seq, h, g), send, recv, op));
        }
        for s in 1..n {
            let j = (me + s) % n;
            self.send(seq, 0, &h, j, bytemuck::cast_slice(&send[j * k..][..k]))?;
        }
        let len = std::mem::size_of_val(recv);
        let mut r = Sched::new(self, seq, h);
        r.out = vec![0; len];
        r.work = bytes_of(&send[me * k..][..k]);
        r.copy_out = true;
        r.combine = Some((combine_bytes::<T>, op));
        for j in 0..n {
            let fold = if j == 0 { Fold::Copy } else { Fold::After };
            r.steps.push_back(if j == me {
                Step::Apply {
                    src: Buf::Work,
                    dst: Buf::Out,
                    at: 0,
                    len,
                    fold,
                }
            } else {
                Step::Recv {
                    from: j,
                    tag: 0,
                    dst: Buf::Out,
                    at: 0,
                    len,
                    fold,
                    hops: 0,
                }
            });
        }
        Ok(TeamRequest::start(r, bytemuck::cast_slice_mut(recv)))
    }

    /// Non-blocking [`scan_inclusive`](Self::scan_inclusive): team rank
    /// r's `data` becomes `data_0 op ... op data_r` by completion (the
    /// same recursive doubling and combining order, so the same bits).
    /// Across hosts hierarchical when each host's members are
    /// consecutive team ranks, once the team's blocking collectives are
    /// (the blocking hierarchical scan's messages and bits: see
    /// `docs/teams.md`).
    ///
    /// ```no_run
    /// # fn f(team: &splitrt_pgas::Team) -> splitrt_am::Result<()> {
    /// let mut x = [1u64];
    /// team.scan_inclusive_nb(&mut x, splitrt_pgas::Op::Sum)?.wait()?;
    /// assert_eq!(x[0], team.rank().unwrap() as u64 + 1);
    /// # Ok(()) }
    /// ```
    pub fn scan_inclusive_nb<'a, T: Reduce>(
        &self,
        data: &'a mut [T],
        op: Op,
    ) -> Result<TeamRequest<'a>> {
        self.scan_nb(CollKind::ScanInclusive, data, op)
    }

    /// Non-blocking [`scan_exclusive`](Self::scan_exclusive): team rank
    /// r's `data` becomes `data_0 op ... op data_(r-1)` (team rank 0's
    /// becomes zeros) by completion. Across hosts as
    /// [`scan_inclusive_nb`](Self::scan_inclusive_nb).
    ///
    /// ```no_run
    /// # fn f(team: &splitrt_pgas::Team) -> splitrt_am::Result<()> {
    /// let mut x = [1u64];
    /// let r = team.scan_exclusive_nb(&mut x, splitrt_pgas::Op::Sum)?;
    /// r.wait()?;
    /// assert_eq!(x[0], team.rank().unwrap() as u64);
    /// # Ok(()) }
    /// ```
    pub fn scan_exclusive_nb<'a, T: Reduce>(
        &self,
        data: &'a mut [T],
        op: Op,
    ) -> Result<TeamRequest<'a>> {
        self.scan_nb(CollKind::ScanExclusive, data, op)
    }

    fn scan_nb<'a, T: Reduce>(
        &self,
        kind: CollKind,
        data: &'a mut [T],
        op: Op,
    ) -> Result<TeamRequest<'a>> {
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        self.nb_check_op::<T>(kind, op)?;
        let (me, seq, h) = self.start::<T>(kind, Some(op), None, data.len())?;
        // across hosts as the blocking form, when each host's members are
        // consecutive team ranks (team_hier_nb_scan.rs)
        if let Some(g) = self.nb_hier().filter(|g| g.layout.contiguous()) {
            let inclusive = kind == CollKind::ScanInclusive;
            return Ok(self.scan_nb_hier((seq, h, g), inclusive, data, op));
        }
        let n = self.size();
        let len = std::mem::size_of_val(data);
        let mut r = Sched::new(self, seq, h);
        r.out = bytes_of(data);
        // below: the data of team ranks [0, me) so far (zeros on rank 0)
        r.work = vec![0; len];
        r.copy_out = true;
        r.combine = Some((combine_bytes::<T>, op));
        let (mut d, mut tag, mut first) = (1usize, 0u64, true);
        while d < n {
            if me + d < n {
                r.steps.push_back(Step::Send {
                    to: me + d,
                    tag,
                    src: Buf::Out,
                    at: 0,
                    len,
                });
            }
            if me >= d {
                // what came from below goes on the left, of both
                r.steps.push_back(Step::Recv {
                    from: me - d,
                    tag,
                    dst: Buf::Out,
                    at: 0,
                    len,
                    fold: Fold::Before,
                    hops: tag as u32,
                });
                r.steps.push_back(Step::Apply {
                    src: Buf::Scratch,
                    dst: Buf::Work,
                    at: 0,
                    len,
                    fold: if first { Fold::Copy } else { Fold::Before },
                });
                first = false;
            }
            d <<= 1;
            tag += 1;
        }
        if kind == CollKind::ScanExclusive {
            r.steps.push_back(Step::Apply {
                src: Buf::Work,
                dst: Buf::Out,
                at: 0,
                len,
                fold: Fold::Copy,
            });
        }
        Ok(TeamRequest::start(r, bytemuck::cast_slice_mut(data)))
    }
}
