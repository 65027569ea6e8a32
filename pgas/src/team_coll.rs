//! Collectives on a [`Team`]: barrier, broadcast, reduce, allreduce,
//! gather, allgather, alltoall, alltoallv, reduce_scatter and inclusive /
//! exclusive scans.
//!
//! Where every member's segment is mapped here on the native path (the
//! members share a host), all but alltoallv go through shared memory
//! (`team_shm.rs`: one wait per step of up to a half of the team's area,
//! no message; the blocking functions here dispatch to it). A team
//! spanning hosts runs the blocking barrier, broadcast, reduce,
//! allreduce, gather, allgather, alltoall, reduce_scatter and the scans
//! hierarchically where it can (`team_hier.rs`: shared memory
//! within each host, messages between host leaders). Otherwise
//! every step is a team message (see `team_mail.rs`): an Active Message
//! Medium from one member to another, so the same code runs on every
//! fabric (shm rings, UDP, ibverbs) and on both RMA paths. The algorithms
//! and the messages each member sends (n = team size, d = ⌈log2 n⌉; a
//! message longer than the fabric's Medium is sent in Medium-sized chunks):
//!
//! | collective | algorithm | messages sent per member |
//! |---|---|---|
//! | barrier | dissemination (the world team: `Pgas::barrier`'s, a shared counter or AMs counted at rank 0) | d (world: 1, rank 0: n - 1; shared counter: 0) |
//! | broadcast | binomial tree from the root | ≤ d (root), ≤ d - 1 (others); each member receives 1 |
//! | reduce | binomial tree to the root | 1 (non-root), 0 (root, which receives ≤ d) |
//! | allreduce | recursive doubling (members past the largest power of two fold in first and get the result after) | ≤ d + 1 |
//! | gather | direct to the root | 1 (non-root); the root receives n - 1 |
//! | allgather | direct to every member | n - 1 |
//! | alltoall(v) | pairwise (member r sends to r+1, r+2, ...) | n - 1 |
//! | reduce_scatter | pairwise, each block to its owner | n - 1 |
//! | scan_inclusive / _exclusive | Hillis–Steele (recursive doubling) | ≤ d |
//!
//! Reductions combine in a fixed order (reduce: the binomial tree's,
//! members in increasing team rank below each node; allreduce: lower team
//! ranks' partial result first at every step;
//! reduce_scatter and scans: increasing team rank), so results do not
//! depend on timing, and allreduce gives every member the same bits.
//!
//! Every message carries what its sender called (collective, root, op,
//! length, element size): a member that receives a message of the same
//! collective number with different arguments ends the job with an error
//! naming both ranks and both calls. A member that never calls is named
//! by the hang report of the members waiting for it
//! (`SPLITRT_HANG_REPORT`; with `SPLITRT_HANG_ABORT=1` the job ends).

use crate::reduce::{Op, Reduce};
use crate::team::{op_code, Team, WORLD_ID};
use crate::team_mail::{CollKind, Header};
use bytemuck::Pod;
use splitrt_am::Result;

/// The header of collective `kind` over elements of `T`.
fn header<T>(kind: CollKind, op: Option<Op>, root: Option<usize>, count: usize) -> Header {
    Header {
        kind: kind as u64,
        op: op.map_or(0, op_code),
        root: root.map_or(u64::MAX, |r| r as u64),
        count: count as u64,
        esize: std::mem::size_of::<T>() as u64,
    }
}

/// Number of bits of `v` (0 for 0).
fn bitlen(v: usize) -> u32 {
    usize::BITS - v.leading_zeros()
}

/// Levels of the binomial subtree under relative rank `v` of `n` (0: a
/// leaf): the receives before `v` sends up in a reduction.
pub(crate) fn height(v: usize, n: usize) -> u32 {
    let mut h = 0;
    let mut k = bitlen(v);
    while k < usize::BITS && (v | 1 << k) < n {
        h = h.max(1 + height(v | 1 << k, n));
        k += 1;
    }
    h
}

/// One collective in progress on a team: its number, header and this
/// member's place.
struct Call<'a> {
    team: &'a Team,
    seq: u64,
    h: Header,
    me: usize,
    n: usize,
}

impl Call<'_> {
    fn send<T: Pod>(&self, tag: u64, to: usize, data: &[T]) -> Result<()> {
        self.team
            .send(self.seq, tag, &self.h, to, bytemuck::cast_slice(data))
    }

    /// Receive step `tag` from team rank `from`, which sends it after
    /// `hops` receives of its own (see `Team::hang_watch`).
    fn recv<T: Pod>(&self, tag: u64, from: usize, out: &mut [T], hops: u32) -> Result<()> {
        self.team.recv(
            self.seq,
            tag,
            &self.h,
            from,
            bytemuck::cast_slice_mut(out),
            hops,
        )
    }

    /// Binomial-tree broadcast of `buf` from team rank `root` (step `tag`;
    /// the root sends after `base` hops).
    fn bcast<T: Pod>(&self, tag: u64, root: usize, buf: &mut [T], base: u32) -> Result<()> {
        let n = self.n;
        let v = (self.me + n - root) % n;
        if v != 0 {
            let parent = v & !(1usize << (bitlen(v) - 1));
            self.recv(tag, (parent + root) % n, buf, base + parent.count_ones())?;
        }
        let mut k = bitlen(v);
        while k < usize::BITS && (v | 1 << k) < n {
            self.send(tag, ((v | 1 << k) + root) % n, buf)?;
            k += 1;
        }
        Ok(())
    }

    /// Binomial-tree reduction of `acc` to team rank `root` (step `tag`):
    /// at the root, `acc` ends as the team's result; elsewhere as a
    /// partial one.
    fn reduce_to<T: Reduce>(&self, tag: u64, root: usize, acc: &mut [T], op: Op) -> Result<()> {
        let n = self.n;
        let v = (self.me + n - root) % n;
        let mut tmp = vec![T::zeroed(); acc.len()];
        let mut k = bitlen(v);
        while k < usize::BITS && (v | 1 << k) < n {
            let c = v | 1 << k;
            self.recv(tag, (c + root) % n, &mut tmp, height(c, n))?;
            combine(op, acc, &tmp);
            k += 1;
        }
        if v != 0 {
            let parent = v & !(1usize << (bitlen(v) - 1));
            self.send(tag, (parent + root) % n, acc)?;
        }
        Ok(())
    }
}

/// `acc[i] = acc[i] op b[i]` (the op was checked to apply).
fn combine<T: Reduce>(op: Op, acc: &mut [T], b: &[T]) {
    for (a, b) in acc.iter_mut().zip(b) {
        *a = T::combine(op, *a, *b).unwrap_or(*a);
    }
}

impl Team {
    /// Start collective `kind`: this member's place and the collective's
    /// number (and the rank's one-collective-at-a-time guard, held by the
    /// caller).
    fn call<T>(
        &self,
        kind: CollKind,
        op: Option<Op>,
        root: Option<usize>,
        count: usize,
    ) -> Result<Call<'_>> {
        let (me, n) = self.precheck(kind, root)?;
        Ok(Call {
            team: self,
            seq: self.next_seq(),
            h: header::<T>(kind, op, root, count),
            me,
            n,
        })
    }

    /// The checks of `call` that consume nothing: this rank is a member
    /// and `root` a team rank. Returns (this member's team rank, team
    /// size). A blocking collective checks its local arguments between
    /// this and `call`, so a usage error leaves the team's collective
    /// numbers in step (the other members are not left waiting).
    fn precheck(&self, kind: CollKind, root: Option<usize>) -> Result<(usize, usize)> {
        let me = self.member(kind.name())?;
        let n = self.size();
        if let Some(r) = root {
            if r >= n {
                return Err(self.usage(kind, format!("root {r} is not a team rank (team of {n})")));
            }
        }
        Ok((me, n))
    }

    /// Start collective `kind` for a non-blocking form: this member's
    /// team rank, the collective's number and its header.
    pub(crate) fn start<T>(
        &self,
        kind: CollKind,
        op: Option<Op>,
        root: Option<usize>,
        count: usize,
    ) -> Result<(usize, u64, Header)> {
        let c = self.call::<T>(kind, op, root, count)?;
        Ok((c.me, c.seq, c.h))
    }

    fn check_op<T: Reduce>(&self, kind: CollKind, op: Op) -> Result<()> {
        if T::combine(op, T::zeroed(), T::zeroed()).is_none() {
            return Err(self.usage(
                kind,
                format!("{op:?} does not apply to {}", std::any::type_name::<T>()),
            ));
        }
        Ok(())
    }

    /// Wait until every member has entered the barrier: through shared
    /// memory when the members share a host on the native path (one step
    /// of `team_shm.rs`: no message), else dissemination (⌈log2 n⌉
    /// messages per member).
    ///
    /// The world team's barrier is [`Pgas::barrier`](crate::Pgas::barrier)
    /// (which calls this): on every path the world collectives' barrier
    /// (through shared memory a counter in rank 0's segment, else AMs
    /// counted at rank 0), and one collective sequence, so one rank may
    /// call `pg.barrier()` while another calls `pg.world().barrier()`.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// // the same collective: ranks may mix the two
    /// if pg.rank() % 2 == 0 { pg.barrier()? } else { pg.world().barrier()? }
    /// # Ok(()) }
    /// ```
    pub fn barrier(&self) -> Result<()> {
        let _one = self
            .pgas()
            .enter_collective(self.shown(CollKind::Barrier))?;
        if self.inner.id == WORLD_ID {
            // the world collectives' barrier, on every path: one sequence
            // with `Pgas::barrier` and the internal collectives' barriers
            self.precheck(CollKind::Barrier, None)?;
            self.pgas().barrier_of(crate::coll::Coll::Barrier)?;
            // numbered once it completed: a barrier whose wait failed is
            // completed by the next call (see `barrier_of`), which must
            // not count twice
            self.next_seq();
            return Ok(());
        }
        if let Some(s) = self.shm_call::<u8>(CollKind::Barrier, None, None, 0)? {
            return s.barrier();
        }
        if let Some(s) = self.hier_call::<u8>(CollKind::Barrier, None, None, 0)? {
            return s.barrier();
        }
        let c = self.call::<u8>(CollKind::Barrier, None, None, 0)?;
        let (mut d, mut tag) = (1, 0);
        while d < c.n {
            c.send::<u8>(tag, (c.me + d) % c.n, &[])?;
            c.recv::<u8>(tag, (c.me + c.n - d) % c.n, &mut [], tag as u32)?;
            d <<= 1;
            tag += 1;
        }
        Ok(())
    }

    /// Copy `data` from team rank `root` to every member (binomial tree).
    /// Every member passes the same `root` and length.
    pub fn broadcast<T: Pod>(&self, root: usize, data: &mut [T]) -> Result<()> {
        let _one = self
            .pgas()
            .enter_collective(self.shown(CollKind::Broadcast))?;
        self.precheck(CollKind::Broadcast, Some(root))?;
        if let Some(s) = self.shm_call::<T>(CollKind::Broadcast, None, Some(root), data.len())? {
            return s.broadcast(root, data);
        }
        if let Some(s) = self.hier_call::<T>(CollKind::Broadcast, None, Some(root), data.len())? {
            return s.broadcast(root, data);
        }
        let c = self.call::<T>(CollKind::Broadcast, None, Some(root), data.len())?;
        c.bcast(0, root, data, 0)
    }

    /// Combine every member's `data` element-wise with `op` into team rank
    /// `root`'s `data` (binomial tree); other members' `data` is left
    /// unchanged.
    pub fn reduce<T: Reduce>(&self, root: usize, data: &mut [T], op: Op) -> Result<()> {
        let _one = self.pgas().enter_collective(self.shown(CollKind::Reduce))?;
        self.check_op::<T>(CollKind::Reduce, op)?;
        self.precheck(CollKind::Reduce, Some(root))?;
        if let Some(s) = self.shm_call::<T>(CollKind::Reduce, Some(op), Some(root), data.len())? {
            return s.reduce(Some(root), data, op);
        }
        if let Some(s) = self.hier_call::<T>(CollKind::Reduce, Some(op), Some(root), data.len())? {
            return s.reduce(Some(root), data, op);
        }
        let c = self.call::<T>(CollKind::Reduce, Some(op), Some(root), data.len())?;
        if c.me == root {
            c.reduce_to(0, root, data, op)
        } else {
            let mut acc = data.to_vec();
            c.reduce_to(0, root, &mut acc, op)
        }
    }

    /// Every member's `send` (k elements, the same k everywhere) into team
    /// rank `root`'s `recv` (n * k elements, member i's at i * k); `recv`
    /// is not used on other members (pass `&mut []`).
    pub fn gather<T: Pod>(&self, root: usize, send: &[T], recv: &mut [T]) -> Result<()> {
        let kind = CollKind::Gather;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        let k = send.len();
        let (me, n) = self.precheck(kind, Some(root))?;
        if me == root {
            check_len(self, kind, "recv", recv.len(), n * k)?;
        }
        if let Some(s) = self.shm_call::<T>(kind, None, Some(root), k)? {
            return s.gather(Some(root), send, recv);
        }
        if let Some(s) = self.hier_call::<T>(kind, None, Some(root), k)? {
            return s.gather(Some(root), send, recv);
        }
        let c = self.call::<T>(kind, None, Some(root), k)?;
        if c.me != root {
            return c.send(0, root, send);
        }
        recv[c.me * k..][..k].copy_from_slice(send);
        for j in (0..c.n).filter(|&j| j != c.me) {
            c.recv(0, j, &mut recv[j * k..][..k], 0)?;
        }
        Ok(())
    }

    /// Every member's `send` (k elements, the same k everywhere) into
    /// every member's `recv` (n * k elements, member i's at i * k).
    pub fn allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let kind = CollKind::Allgather;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        let (_, n) = self.precheck(kind, None)?;
        check_len(self, kind, "recv", recv.len(), n * send.len())?;
        if let Some(s) = self.shm_call::<T>(kind, None, None, send.len())? {
            return s.gather(None, send, recv);
        }
        if let Some(s) = self.hier_call::<T>(kind, None, None, send.len())? {
            return s.gather(None, send, recv);
        }
        self.allgather_as(kind, send, recv)
    }

    /// [`allgather`](Self::allgather) as part of collective `kind` (a
    /// split exchanges its arguments so).
    pub(crate) fn allgather_as<T: Pod>(
        &self,
        kind: CollKind,
        send: &[T],
        recv: &mut [T],
    ) -> Result<()> {
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        let k = send.len();
        let (_, n) = self.precheck(kind, None)?;
        check_len(self, kind, "recv", recv.len(), n * k)?;
        let c = self.call::<T>(kind, None, None, k)?;
        for s in 1..c.n {
            c.send(0, (c.me + s) % c.n, send)?;
        }
        recv[c.me * k..][..k].copy_from_slice(send);
        for s in 1..c.n {
            let j = (c.me + c.n - s) % c.n;
            c.recv(0, j, &mut recv[j * k..][..k], 0)?;
        }
        Ok(())
    }

    /// All-to-all personalised exchange: `send` holds n blocks of k
    /// elements (block j for team rank j); member j's block for this
    /// member lands at `recv[j * k..][..k]`. `send` and `recv` both hold
    /// n * k elements, with the same k on every member (k = 0 is fine).
    /// Blocks that arrive before this member asks for them wait in its
    /// team mailbox, which holds at most 1 GiB: larger exchanges go in
    /// several calls.
    ///
    /// ```no_run
    /// # fn f(team: &splitrt_pgas::Team) -> splitrt_am::Result<()> {
    /// let n = team.size();
    /// let me = team.rank().expect("a member") as u64;
    /// let send: Vec<u64> = (0..n as u64).map(|j| me * 100 + j).collect();
    /// let mut recv = vec![0u64; n];
    /// team.alltoall(&send, &mut recv)?;  // recv[j] == j * 100 + me
    /// # Ok(()) }
    /// ```
    pub fn alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let kind = CollKind::Alltoall;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        let n = self.size().max(1);
        if !send.len().is_multiple_of(n) {
            return Err(self.usage(
                kind,
                format!(
                    "send holds {} elements, not a multiple of the team size {n}",
                    send.len()
                ),
            ));
        }
        let k = send.len() / n;
        self.precheck(kind, None)?;
        check_len(self, kind, "recv", recv.len(), send.len())?;
        if let Some(s) = self.shm_call::<T>(kind, None, None, k)? {
            return s.alltoall(send, recv);
        }
        if let Some(s) = self.hier_call::<T>(kind, None, None, k)? {
            return s.alltoall(send, recv);
        }
        let c = self.call::<T>(kind, None, None, k)?;
        for s in 1..c.n {
            let j = (c.me + s) % c.n;
            c.send(0, j, &send[j * k..][..k])?;
        }
        recv[c.me * k..][..k].copy_from_slice(&send[c.me * k..][..k]);
        for s in 1..c.n {
            let j = (c.me + c.n - s) % c.n;
            c.recv(0, j, &mut recv[j * k..][..k], 0)?;
        }
        Ok(())
    }

    /// All-to-all with a length per pair: `send_counts[j]` elements of
    /// `send` (consecutive, in team-rank order) go to team rank j, and
    /// `recv_counts[j]` elements from team rank j land in `recv` (likewise
    /// consecutive). Member j's `send_counts[me]` must equal this member's
    /// `recv_counts[j]` (a difference is an error naming both).
    pub fn alltoallv<T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<()> {
        let kind = CollKind::Alltoallv;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        let (me, n) = self.precheck(kind, None)?;
        check_len(self, kind, "send_counts", send_counts.len(), n)?;
        check_len(self, kind, "recv_counts", recv_counts.len(), n)?;
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
        if let Some(s) = self.hier_call::<T>(kind, None, None, 0)? {
            return s.alltoallv((send, send_counts), (recv, recv_counts));
        }
        let c = self.call::<T>(kind, None, None, 0)?;
        for s in 1..c.n {
            let j = (c.me + s) % c.n;
            c.send(0, j, &send[so[j]..][..send_counts[j]])?;
        }
        recv[ro[c.me]..][..recv_counts[c.me]]
            .copy_from_slice(&send[so[c.me]..][..send_counts[c.me]]);
        for s in 1..c.n {
            let j = (c.me + c.n - s) % c.n;
            c.recv(0, j, &mut recv[ro[j]..][..recv_counts[j]], 0)?;
        }
        Ok(())
    }

    /// Reduce then scatter: `send` holds n blocks of k elements (block j
    /// for team rank j); `recv` (k elements) gets the element-wise `op` of
    /// every member's block for this member, combined in team-rank order.
    pub fn reduce_scatter<T: Reduce>(&self, send: &[T], recv: &mut [T], op: Op) -> Result<()> {
        let kind = CollKind::ReduceScatter;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        self.check_op::<T>(kind, op)?;
        let k = recv.len();
        let (_, n) = self.precheck(kind, None)?;
        check_len(self, kind, "send", send.len(), n * k)?;
        if let Some(s) = self.shm_call::<T>(kind, Some(op), None, k)? {
            return s.reduce_scatter(send, recv, op);
        }
        if let Some(s) = self.hier_call::<T>(kind, Some(op), None, k)? {
            return s.reduce_scatter(send, recv, op);
        }
        let c = self.call::<T>(kind, Some(op), None, k)?;
        for s in 1..c.n {
            let j = (c.me + s) % c.n;
            c.send(0, j, &send[j * k..][..k])?;
        }
        let mut tmp = vec![T::zeroed(); k];
        for j in 0..c.n {
            let block: &[T] = if j == c.me {
                &send[j * k..][..k]
            } else {
                c.recv(0, j, &mut tmp, 0)?;
                &tmp
            };
            if j == 0 {
                recv.copy_from_slice(block);
            } else {
                combine(op, recv, block);
            }
        }
        Ok(())
    }

    /// Inclusive prefix reduction (OpenSHMEM `sum_inscan` for `Op::Sum`):
    /// team rank r's `data` becomes `data_0 op data_1 op ... op data_r`
    /// (recursive doubling, ⌈log2 n⌉ steps).
    pub fn scan_inclusive<T: Reduce>(&self, data: &mut [T], op: Op) -> Result<()> {
        self.scan(CollKind::ScanInclusive, data, op)
    }

    /// Exclusive prefix reduction (OpenSHMEM `sum_exscan` for `Op::Sum`):
    /// team rank r's `data` becomes `data_0 op ... op data_(r-1)`; team
    /// rank 0's becomes zeros (as OpenSHMEM's).
    pub fn scan_exclusive<T: Reduce>(&self, data: &mut [T], op: Op) -> Result<()> {
        self.scan(CollKind::ScanExclusive, data, op)
    }

    fn scan<T: Reduce>(&self, kind: CollKind, data: &mut [T], op: Op) -> Result<()> {
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        self.check_op::<T>(kind, op)?;
        self.precheck(kind, None)?;
        if let Some(s) = self.shm_call::<T>(kind, Some(op), None, data.len())? {
            return s.scan(kind == CollKind::ScanInclusive, data, op);
        }
        if let Some(s) = self.hier_call::<T>(kind, Some(op), None, data.len())? {
            return s.scan(kind == CollKind::ScanInclusive, data, op);
        }
        let c = self.call::<T>(kind, Some(op), None, data.len())?;
        // partial: data of members (me - 2^s, me]; below: of [0, me) so far
        let mut below: Option<Vec<T>> = None;
        let mut tmp = vec![T::zeroed(); data.len()];
        let (mut d, mut tag) = (1, 0);
        while d < c.n {
            if c.me + d < c.n {
                c.send(tag, c.me + d, data)?;
            }
            if c.me >= d {
                c.recv(tag, c.me - d, &mut tmp, tag as u32)?;
                // what came from below goes on the left
                match &mut below {
                    None => below = Some(tmp.clone()),
                    Some(b) => {
                        let mut x = tmp.clone();
                        combine(op, &mut x, b);
                        *b = x;
                    }
                }
                let mut x = tmp.clone();
                combine(op, &mut x, data);
                data.copy_from_slice(&x);
            }
            d <<= 1;
            tag += 1;
        }
        if kind == CollKind::ScanExclusive {
            match below {
                Some(b) => data.copy_from_slice(&b),
                None => data.fill(T::zeroed()),
            }
        }
        Ok(())
    }
}

fn check_len(t: &Team, kind: CollKind, what: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(t.usage(
            kind,
            format!(
                "{what} holds {got} elements, {want} expected (team of {})",
                t.size()
            ),
        ));
    }
    Ok(())
}
