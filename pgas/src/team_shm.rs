//! Team collectives through shared memory: when every member's segment
//! is mapped here on the native path (the members share a host), a
//! team's barrier, broadcast, reduce, allreduce, gather, allgather,
//! alltoall, reduce_scatter and scans run through the team's area
//! (`team_area.rs`) instead of team messages: each member copies its part
//! into its own block, publishes the step, waits until every member
//! published it, and copies what it needs out of the others' blocks. One
//! wait per step (a step carries up to one half of the block: 32 KiB per
//! member for a split team, 128 KiB for the world team, whose area is the
//! collectives' scratch block); no message at all.
//!
//! A split team's area is set up by its first collective that can use
//! it: each member allocates a block from its segment's local heap and
//! the members exchange the offsets (one allgather by messages); if any
//! member cannot (no room, or `MAX_AREAS` blocks held), every member
//! keeps the messages. A dropped team's block is freed once every member
//! marked the team dropped in its block (`team_area.rs`): a member marks
//! it when the team's last handle there is dropped (a request's schedule
//! holding that handle drops its host-mates' area first: `Sched.mates`),
//! or else (two threads dropping the last two handles at once) at its
//! next team set-up.
//!
//! Every step publishes what its member called (collective number,
//! collective, op, root, length, element size): a member whose header
//! differs ends the job with an error naming both ranks and both calls,
//! and a wait names the members that have not arrived.

use crate::heap::SCRATCH;
use crate::reduce::{Op, Reduce};
use crate::team::{op_code, op_name, Team, WORLD_ID};
use crate::team_area::{TeamArea, DATA_OFF, HDR_WORDS, MAX_AREAS, TEAM_AREA, TEAM_HALF};
use crate::team_mail::{CollKind, Header};
use bytemuck::Pod;
use splitrt_am::{Error, Result};
use splitrt_runtime::config::RmaPath;
use splitrt_runtime::hang::rank_list;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One team collective in progress through shared memory.
pub(crate) struct ShmCall<'a> {
    team: &'a Team,
    a: Arc<TeamArea>,
    seq: u64,
    h: Header,
    me: usize,
    n: usize,
    /// The team ranks of the area's members, when the area is a host
    /// group's (`team_hier.rs`); `None`: member j is team rank j.
    ranks: Option<&'a [usize]>,
    /// Seconds added to the hang report's delay.
    later: u64,
}

/// The element ranges of the steps of a collective over `len` elements,
/// `per` a step: at least one step (an empty one for no elements), so
/// every call synchronises and is checked.
pub(crate) fn steps(len: usize, per: usize) -> impl Iterator<Item = Range<usize>> {
    let per = per.max(1);
    let n = len.div_ceil(per).max(1);
    (0..n).map(move |s| (s * per).min(len)..((s + 1) * per).min(len))
}

/// `acc[i] = acc[i] op b[i]` (the op was checked to apply).
fn combine<T: Reduce>(op: Op, acc: &mut [T], b: &[T]) {
    for (a, b) in acc.iter_mut().zip(b) {
        *a = T::combine(op, *a, *b).unwrap_or(*a);
    }
}

impl Team {
    /// Team rank `them` published a step of its area as collective `w[0]`
    /// with header `w[1..]` where this member called `h` as collective
    /// `seq`: the error naming both ranks and both calls. It ends the job
    /// (the other members would wait for this one forever).
    pub(crate) fn step_mismatch(
        &self,
        seq: u64,
        them: usize,
        w: [u64; HDR_WORDS],
        h: &Header,
    ) -> Error {
        let i = &self.pgas().inner;
        let theirs = Header {
            kind: w[1],
            op: w[2],
            root: w[3],
            count: w[4],
            esize: w[5],
        };
        let why = format!(
            "team collective mismatch on team {:#x}, collective #{seq}: rank {} (team rank \
             {them}) called {} as collective #{} while rank {} (team rank {}) called {} (every \
             member must call the same collectives in the same order, with the same root, op \
             and lengths)",
            self.inner.id,
            self.inner.members.at(them),
            theirs.describe(&op_name),
            w[0],
            i.rank,
            self.inner.me.map_or("?".into(), |r| r.to_string()),
            h.describe(&op_name)
        );
        i.ep.abort(&why);
        Error::usage(why).at_rank(i.rank)
    }

    /// The name of collective `kind` in reports: the world collectives'
    /// (`Pgas::allreduce`, ...) when called through them.
    pub(crate) fn shown(&self, kind: CollKind) -> &'static str {
        if !self.inner.pgas_names {
            return kind.name();
        }
        match kind {
            CollKind::Barrier => "Pgas::barrier",
            CollKind::Broadcast => "Pgas::broadcast",
            CollKind::Reduce => "Pgas::reduce",
            CollKind::Allreduce => "Pgas::allreduce",
            k => k.name(),
        }
    }

    /// Start collective `kind` through shared memory if the team can:
    /// `None` to go by messages (members spanning hosts, the AM path, a
    /// team whose members could not set up its area, elements too large
    /// for a step). Every member decides alike. Call after the local
    /// argument checks: it may set the area up (a collective) and takes
    /// the collective's number.
    pub(crate) fn shm_call<T>(
        &self,
        kind: CollKind,
        op: Option<Op>,
        root: Option<usize>,
        count: usize,
    ) -> Result<Option<ShmCall<'_>>> {
        let (Some(me), n) = (self.inner.me, self.size()) else {
            return Ok(None);
        };
        let esize = std::mem::size_of::<T>();
        let Some(a) = self.shm_area()? else {
            return Ok(None);
        };
        let wide = matches!(kind, CollKind::Alltoall | CollKind::ReduceScatter);
        let need = if wide { esize.saturating_mul(n) } else { esize };
        if need > a.half() {
            return Ok(None);
        }
        Ok(Some(ShmCall {
            team: self,
            a,
            seq: self.next_seq(),
            h: Header {
                kind: kind as u64,
                op: op.map_or(0, op_code),
                root: root.map_or(u64::MAX, |r| r as u64),
                count: count as u64,
                esize: esize as u64,
            },
            me,
            n,
            ranks: None,
            later: 0,
        }))
    }

    /// The team's area, set up on first use (see the module docs).
    fn shm_area(&self) -> Result<Option<Arc<TeamArea>>> {
        let slot = &self.inner.counters.shm;
        if let Some(a) = slot.get() {
            return Ok(a.clone());
        }
        let a = self.set_up_area()?.map(Arc::new);
        let _ = slot.set(a);
        Ok(slot.get().cloned().flatten())
    }

    fn set_up_area(&self) -> Result<Option<TeamArea>> {
        let i = &self.pgas().inner;
        let Some(me) = self.inner.me else {
            return Ok(None);
        };
        let members = self.inner.members.as_slice();
        if i.path != RmaPath::Native || members.iter().any(|&w| i.direct[w].is_empty()) {
            return Ok(None);
        }
        let segs: Vec<_> = members.iter().map(|&w| i.direct[w]).collect();
        if self.inner.id == WORLD_ID {
            // the collectives' scratch block, the same offset everywhere
            // (every rank decides alike: every segment is mapped)
            let half = (SCRATCH as usize - DATA_OFF) / 2 / 64 * 64;
            let offs = vec![i.scratch as usize; members.len()];
            let a = TeamArea::new(segs, offs, me, half, WORLD_ID, None);
            if let Some(a) = &a {
                a.reset_own();
            }
            return Ok(a);
        }
        let reg = &i.team_areas;
        reclaim(self, reg);
        let mine = in_a_slot(&reg.held, || {
            i.heap.lock().alloc_local(TEAM_AREA as u64).ok()
        });
        let own_seg = i.direct[members[me]];
        if let Some(off) = mine {
            // zero and tag it before anyone learns where it is
            if let Some(one) = TeamArea::new(
                vec![own_seg],
                vec![off as usize],
                0,
                TEAM_HALF,
                self.inner.id,
                None,
            ) {
                one.reset_own();
            }
        }
        let mut offs = vec![0u64; members.len()];
        let exchanged =
            self.allgather_as(CollKind::ShmSetup, &[mine.unwrap_or(u64::MAX)], &mut offs);
        let area = match (&exchanged, mine) {
            (Ok(()), Some(off)) if !offs.contains(&u64::MAX) => TeamArea::new(
                segs,
                offs.iter().map(|&o| o as usize).collect(),
                me,
                TEAM_HALF,
                self.inner.id,
                Some((off, reg.clone())),
            ),
            _ => None,
        };
        if area.is_none() {
            // nobody reads this block: free it at once
            if let Some(off) = mine {
                let _ = i.heap.lock().free_local(off);
                reg.held.fetch_sub(1, Ordering::Relaxed);
            }
        }
        exchanged?;
        Ok(area)
    }
}

/// Allocate and tag a split-team-sized block for `t` in this rank's
/// segment (for its host group's area, `team_hier.rs`): its offset, or
/// `None` if there is no room or `MAX_AREAS` blocks are held.
pub(crate) fn alloc_block(t: &Team) -> Option<u64> {
    let i = &t.pgas().inner;
    let reg = &i.team_areas;
    reclaim(t, reg);
    let off = in_a_slot(&reg.held, || {
        i.heap.lock().alloc_local(TEAM_AREA as u64).ok()
    })?;
    let own_seg = i.direct[i.rank];
    // zero and tag it before anyone learns where it is
    if let Some(one) = TeamArea::new(
        vec![own_seg],
        vec![off as usize],
        0,
        TEAM_HALF,
        t.inner.id,
        None,
    ) {
        one.reset_own();
    }
    Some(off)
}

/// Take one of the `MAX_AREAS` slots `held` counts and run `alloc` in it:
/// its offset, or `None` if every slot is held or `alloc` found no room
/// (the slot given back). The slot is taken first, by one
/// read-modify-write, so two threads cannot both pass the bound at
/// `MAX_AREAS - 1`.
fn in_a_slot(
    held: &std::sync::atomic::AtomicUsize,
    alloc: impl FnOnce() -> Option<u64>,
) -> Option<u64> {
    held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
        (h < MAX_AREAS).then_some(h + 1)
    })
    .ok()?;
    let off = alloc();
    if off.is_none() {
        held.fetch_sub(1, Ordering::Relaxed);
    }
    off
}

/// Free a block of `alloc_block` that no member learnt of.
pub(crate) fn free_block(t: &Team, off: u64) {
    let i = &t.pgas().inner;
    let _ = i.heap.lock().free_local(off);
    i.team_areas.held.fetch_sub(1, Ordering::Relaxed);
}

/// Free the retired blocks whose teams' members all dropped them (see
/// [`Retired::reclaim`](crate::team_area::Retired::reclaim)).
fn reclaim(t: &Team, reg: &crate::team_area::Retired) {
    let i = &t.pgas().inner;
    reg.reclaim(|off| {
        let _ = i.heap.lock().free_local(off);
    });
}

impl<'a> ShmCall<'a> {
    /// A step of collective `seq` (header `h`) through the area `a` of a
    /// host group of `team` (`team_hier.rs`): its members are team ranks
    /// `ranks`, this member is `ranks[me]`; hang reports come `later`
    /// seconds after the configured delay.
    pub(crate) fn of_group(
        team: &'a Team,
        a: Arc<TeamArea>,
        seq: u64,
        h: Header,
        (me, ranks): (usize, &'a [usize]),
        later: u64,
    ) -> ShmCall<'a> {
        ShmCall {
            team,
            a,
            seq,
            h,
            me,
            n: ranks.len(),
            ranks: Some(ranks),
            later,
        }
    }

    /// The team rank of the area's member `j`.
    fn team_rank(&self, j: usize) -> usize {
        self.ranks.map_or(j, |r| r[j])
    }

    fn words(&self) -> [u64; HDR_WORDS] {
        let h = &self.h;
        [self.seq, h.kind, h.op, h.root, h.count, h.esize]
    }

    /// Publish step `k` (its data written), wait until every member
    /// published it, and check their calls against ours.
    pub(crate) fn sync(&self, k: u64) -> Result<()> {
        let (a, team) = (&self.a, self.team);
        a.publish(k, self.words());
        let i = &team.pgas().inner;
        let kind = CollKind::from_code(self.h.kind).map_or("a team collective", |k| team.shown(k));
        let what = || {
            let missing: Vec<usize> = a.missing(k).iter().map(|&j| self.team_rank(j)).collect();
            let world: Vec<usize> = missing.iter().map(|&j| team.inner.members.at(j)).collect();
            let (one, s) = if missing.len() == 1 {
                ("", " its part")
            } else {
                ("(s)", " their parts")
            };
            format!(
                "in {kind} #{} on team {:#x} ({} members) for rank(s) {}, which have not \
                 arrived: waiting for team rank{one} {} (world rank{one} {}) to send{s} \
                 (shared memory, step {k})",
                self.seq,
                team.inner.id,
                team.size(),
                rank_list(&world),
                rank_list(&missing),
                rank_list(&world),
            )
        };
        // every member knows who is missing: team rank 0 reports first
        let extra = std::time::Duration::from_secs(self.later + if self.me == 0 { 0 } else { 2 });
        // pending non-blocking collectives (messages, `team_sched.rs`)
        // progress meanwhile: a member may wait for their messages before
        // it arrives here
        let mail = &i.team_mail;
        // one hang watch for the whole wait (re-armed waits go on
        // counting); progress is another member publishing this step
        let mut watch = splitrt_runtime::hang::HangWatch::new(i.ep.config()).patient(extra);
        let mut seen = 0;
        // `mail.arrivals` when its messages were last looked at
        let mut heard = None;
        loop {
            mail.sweep();
            let ready = (0..self.n).filter(|&j| a.ready(j, k)).count();
            if ready == self.n {
                break;
            }
            if ready != seen {
                seen = ready;
                watch.progress();
            }
            // A member that called another collective as this number
            // (a hierarchical scan: its messages go to higher team ranks
            // only, never through the area) may have sent this one its
            // messages, and never publishes this step: named here.
            let now = mail.arrivals.load(Ordering::Acquire);
            if heard != Some(now) {
                heard = Some(now);
                if let Some((key, theirs)) = mail.mismatch(team.inner.id, self.seq, &self.h) {
                    return Err(team.mismatch(key, &theirs, &self.h));
                }
            }
            i.ep.wait_watched(&what, &mut watch, || {
                (0..self.n).all(|j| a.ready(j, k))
                    || mail.background_due()
                    || mail.arrivals.load(Ordering::Acquire) != now
            })?;
        }
        let mine = self.words();
        for j in (0..self.n).filter(|&j| j != self.me) {
            let w = a.header(j, k);
            if w != mine {
                return Err(team.step_mismatch(self.seq, self.team_rank(j), w, &self.h));
            }
        }
        Ok(())
    }

    /// Elements of `T` a step carries (per member, or per block of a
    /// wide collective).
    fn per<T>(&self, wide: bool) -> usize {
        let e = std::mem::size_of::<T>().max(1) * if wide { self.n } else { 1 };
        (self.a.half() / e).max(1)
    }

    /// A barrier: one step without data.
    pub(crate) fn barrier(self) -> Result<()> {
        let k = self.a.begin();
        self.sync(k)?;
        self.a.finish(k);
        Ok(())
    }

    /// Team rank `root`'s `data` to every member.
    pub(crate) fn broadcast<T: Pod>(self, root: usize, data: &mut [T]) -> Result<()> {
        for r in steps(data.len(), self.per::<T>(false)) {
            let k = self.a.begin();
            if self.me == root {
                self.a.write(k, 0, bytemuck::cast_slice(&data[r.clone()]));
            }
            self.sync(k)?;
            if self.me != root {
                self.a
                    .read(root, k, 0, bytemuck::cast_slice_mut(&mut data[r]));
            }
            self.a.finish(k);
        }
        Ok(())
    }

    /// Every member's `data` combined with `op` in team-rank order, into
    /// `root`'s (or every member's, for `None`).
    pub(crate) fn reduce<T: Reduce>(
        self,
        root: Option<usize>,
        data: &mut [T],
        op: Op,
    ) -> Result<()> {
        let per = self.per::<T>(false);
        let mut tmp = vec![T::zeroed(); per.min(data.len())];
        let mut acc = tmp.clone();
        for r in steps(data.len(), per) {
            let m = r.len();
            let k = self.a.begin();
            self.a.write(k, 0, bytemuck::cast_slice(&data[r.clone()]));
            self.sync(k)?;
            if root.is_none_or(|x| x == self.me) {
                for j in 0..self.n {
                    let part: &[T] = if j == self.me {
                        &data[r.clone()]
                    } else {
                        self.a
                            .read(j, k, 0, bytemuck::cast_slice_mut(&mut tmp[..m]));
                        &tmp[..m]
                    };
                    if j == 0 {
                        acc[..m].copy_from_slice(part);
                    } else {
                        combine(op, &mut acc[..m], part);
                    }
                }
                data[r].copy_from_slice(&acc[..m]);
            }
            self.a.finish(k);
        }
        Ok(())
    }

    /// Every member's `send` (kk elements) into `recv` (n * kk, member j's
    /// at j * kk) of `root` (or of every member, for `None`).
    pub(crate) fn gather<T: Pod>(
        self,
        root: Option<usize>,
        send: &[T],
        recv: &mut [T],
    ) -> Result<()> {
        let kk = send.len();
        for r in steps(kk, self.per::<T>(false)) {
            let k = self.a.begin();
            self.a.write(k, 0, bytemuck::cast_slice(&send[r.clone()]));
            self.sync(k)?;
            if root.is_none_or(|x| x == self.me) {
                for j in 0..self.n {
                    let to = &mut recv[j * kk + r.start..j * kk + r.end];
                    if j == self.me {
                        to.copy_from_slice(&send[r.clone()]);
                    } else {
                        self.a.read(j, k, 0, bytemuck::cast_slice_mut(to));
                    }
                }
            }
            self.a.finish(k);
        }
        Ok(())
    }

    /// Write this member's blocks of elements `r` of each of the n
    /// blocks of `send` (kk elements each) into step `k`'s half.
    fn post_blocks<T: Pod>(&self, k: u64, send: &[T], kk: usize, r: &Range<usize>) {
        let bytes = r.len() * std::mem::size_of::<T>();
        for j in 0..self.n {
            let from = &send[j * kk + r.start..j * kk + r.end];
            self.a.write(k, j * bytes, bytemuck::cast_slice(from));
        }
    }

    /// `send` holds n blocks of kk elements, block j for team rank j:
    /// member j's block for this member goes to `recv[j * kk..]`.
    pub(crate) fn alltoall<T: Pod>(self, send: &[T], recv: &mut [T]) -> Result<()> {
        let kk = send.len() / self.n.max(1);
        for r in steps(kk, self.per::<T>(true)) {
            let at = self.me * r.len() * std::mem::size_of::<T>();
            let k = self.a.begin();
            self.post_blocks(k, send, kk, &r);
            self.sync(k)?;
            for j in 0..self.n {
                let to = &mut recv[j * kk + r.start..j * kk + r.end];
                if j == self.me {
                    to.copy_from_slice(&send[j * kk + r.start..j * kk + r.end]);
                } else {
                    self.a.read(j, k, at, bytemuck::cast_slice_mut(to));
                }
            }
            self.a.finish(k);
        }
        Ok(())
    }

    /// `send` holds n blocks of kk elements, block j for team rank j:
    /// every member's block for this member is combined with `op` in
    /// team-rank order into `recv` (kk elements).
    pub(crate) fn reduce_scatter<T: Reduce>(
        self,
        send: &[T],
        recv: &mut [T],
        op: Op,
    ) -> Result<()> {
        let kk = recv.len();
        let per = self.per::<T>(true);
        let mut tmp = vec![T::zeroed(); per.min(kk)];
        for r in steps(kk, per) {
            let m = r.len();
            let at = self.me * m * std::mem::size_of::<T>();
            let k = self.a.begin();
            self.post_blocks(k, send, kk, &r);
            self.sync(k)?;
            for j in 0..self.n {
                let part: &[T] = if j == self.me {
                    &send[j * kk + r.start..j * kk + r.end]
                } else {
                    self.a
                        .read(j, k, at, bytemuck::cast_slice_mut(&mut tmp[..m]));
                    &tmp[..m]
                };
                if j == 0 {
                    recv[r.clone()].copy_from_slice(part);
                } else {
                    combine(op, &mut recv[r.clone()], part);
                }
            }
            self.a.finish(k);
        }
        Ok(())
    }

    /// Prefix reduction in team-rank order: inclusive (members 0..=me) or
    /// exclusive (0..me; zeros on team rank 0).
    pub(crate) fn scan<T: Reduce>(self, inclusive: bool, data: &mut [T], op: Op) -> Result<()> {
        let per = self.per::<T>(false);
        let mut tmp = vec![T::zeroed(); per.min(data.len())];
        let mut acc = tmp.clone();
        let upto = if inclusive { self.me + 1 } else { self.me };
        for r in steps(data.len(), per) {
            let m = r.len();
            let k = self.a.begin();
            self.a.write(k, 0, bytemuck::cast_slice(&data[r.clone()]));
            self.sync(k)?;
            acc[..m].fill(T::zeroed());
            for j in 0..upto {
                let part: &[T] = if j == self.me {
                    &data[r.clone()]
                } else {
                    self.a
                        .read(j, k, 0, bytemuck::cast_slice_mut(&mut tmp[..m]));
                    &tmp[..m]
                };
                if j == 0 {
                    acc[..m].copy_from_slice(part);
                } else {
                    combine(op, &mut acc[..m], part);
                }
            }
            data[r].copy_from_slice(&acc[..m]);
            self.a.finish(k);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::steps;

    #[test]
    fn teamshm_steps_cover_every_element_once_and_at_least_one_step() {
        assert_eq!(steps(0, 4).collect::<Vec<_>>(), vec![0..0]);
        assert_eq!(steps(8, 4).collect::<Vec<_>>(), vec![0..4, 4..8]);
        assert_eq!(steps(9, 4).collect::<Vec<_>>(), vec![0..4, 4..8, 8..9]);
        assert_eq!(steps(3, 0).collect::<Vec<_>>(), vec![0..1, 1..2, 2..3]);
    }

    /// Self-review fixes (session 10): `alloc_block`'s bound. Threads
    /// that meet at `MAX_AREAS - 1` blocks held, each allocating (a
    /// heap lock held a moment), take exactly one slot between them: the
    /// check and the count were separate (read, allocate, add), and every
    /// thread that read before the first add passed the bound. A slot
    /// whose allocation fails is given back.
    #[test]
    fn fixes_alloc_block_slots_stay_within_the_bound() {
        use super::{in_a_slot, MAX_AREAS};
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::{Barrier, Mutex};
        const THREADS: usize = 8;
        for round in 0..20 {
            let held = AtomicUsize::new(MAX_AREAS - 1);
            let heap = Mutex::new(0u64);
            let start = Barrier::new(THREADS);
            let got: usize = std::thread::scope(|s| {
                let hs: Vec<_> = (0..THREADS)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            in_a_slot(&held, || {
                                let mut h = heap.lock().unwrap();
                                std::thread::yield_now();
                                *h += 1;
                                Some(*h)
                            })
                            .is_some() as usize
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).sum()
            });
            assert_eq!(got, 1, "round {round}: blocks allocated at MAX_AREAS - 1");
            assert_eq!(held.load(Ordering::Relaxed), MAX_AREAS, "round {round}");
        }
        // no room: the slot is given back
        let held = AtomicUsize::new(0);
        assert_eq!(in_a_slot(&held, || None), None);
        assert_eq!(held.load(Ordering::Relaxed), 0);
    }
}
