//! Non-blocking team collectives: `Team::alltoall_nb`,
//! `Team::allreduce_nb`, `Team::allgather_nb`, `Team::broadcast_nb` and
//! `Team::barrier_nb` here, `reduce_nb`, `gather_nb`, `alltoallv_nb`,
//! `reduce_scatter_nb`, `scan_inclusive_nb` and `scan_exclusive_nb` in
//! `team_nb_forms.rs`, start the collective and return a [`TeamRequest`],
//! a handle that borrows the result buffer and completes by `wait()`,
//! `test()` or `.await`.
//!
//! A request is the collective's schedule (`team_sched.rs`: the flat
//! blocking form's algorithm and messages, or on a hierarchical team the
//! three stages of `team_hier_nb.rs`, whose messages within a host are
//! not the blocking form's shared-memory steps). Starting it sends what
//! needs nothing first (all of an alltoall's blocks, straight from the
//! caller's buffer) and registers the rest with the rank's team mailbox,
//! whose sweep (run by every team wait, `test` and poll on the rank)
//! advances every pending schedule in start order: requests may be
//! completed in any order, on each member independently. As a future it
//! never spins: when pending it registers its waker in the team mailbox
//! (woken by the handler that files the next team message) and with the
//! endpoint's doorbell bridge (so that traffic gets the endpoint polled),
//! as `Get` futures do.
//!
//! Dropping a pending request does not abandon the collective: its
//! schedule finishes this member's part in the background (the result
//! is discarded), so the other members complete theirs and no message of
//! it stays in the mailbox. At most [`MAX_ORPHANS`] dropped requests are
//! pending per rank: dropping one more waits (serving traffic) until the
//! oldest has finished, which bounds the memory of a loop that drops
//! requests.

use crate::reduce::{Op, Reduce};
use crate::team::Team;
use crate::team_mail::{CollKind, Key};
use crate::team_sched::{combine_bytes, Buf, Fold, Pending, Sched, Step};
use bytemuck::Pod;
use parking_lot::Mutex;
use splitrt_am::{Result, TrafficKey};
use splitrt_runtime::hang::HangWatch;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Dropped requests that may still be finishing in the background on a
/// rank; dropping one more waits for the oldest.
pub const MAX_ORPHANS: usize = 1024;

/// A non-blocking team collective in progress (see the module docs).
/// It borrows the result buffer until it completes; [`wait`](Self::wait)
/// blocks (serving traffic, with hang reports), [`test`](Self::test)
/// advances it without blocking, and as a `Future` it completes with the
/// collective's result. The result is in the buffer once one of them has
/// returned `Ok` (`Ok(true)` for `test`).
///
/// Several requests may be pending on one team (and on several teams) at
/// once, and be completed in any order: every wait on the rank advances
/// them all, in the order they were started.
///
/// As in MPI, a non-blocking collective never matches a blocking one:
/// every member calls the same form. (Where the members share a host the
/// blocking forms run over shared memory and the non-blocking ones by
/// messages; a floating-point reduction may then differ in its last bit
/// between the two forms, never between members.)
///
/// Dropping a pending request does not cancel the collective (a team
/// collective cannot be taken back: the other members wait for this
/// one's part, as an MPI non-blocking collective's request cannot be
/// freed): this member's part finishes in the background, advanced by
/// the rank's later team calls and waits (and by [`Pgas::finish`]), and
/// its result is discarded. At most [`MAX_ORPHANS`] dropped requests are
/// pending per rank; dropping one more blocks until the oldest finishes.
/// (`std::mem::forget` on a request is the same as dropping it.)
///
/// [`Pgas::finish`]: crate::Pgas::finish
///
/// ```no_run
/// # fn f(team: &splitrt_pgas::Team) -> splitrt_am::Result<()> {
/// let n = team.size();
/// let send = vec![1u64; n * 4];
/// let mut recv = vec![0u64; n * 4];
/// let mut sum = [2.5f64];
/// let a = team.alltoall_nb(&send, &mut recv)?;      // both in flight
/// let s = team.allreduce_nb(&mut sum, splitrt_pgas::Op::Sum)?;
/// s.wait()?;                                        // any order
/// a.wait()?;
/// # Ok(()) }
/// ```
#[must_use = "a team request does nothing more unless waited, tested or awaited"]
pub struct TeamRequest<'a> {
    team: Team,
    p: Arc<Pending>,
    /// The caller's result buffer (filled from the schedule's `out`).
    dest: &'a mut [u8],
    /// The mailbox waker id and the doorbell-bridge key while pending.
    waiter: u64,
    key: Option<TrafficKey>,
    /// The outcome was returned to the caller.
    reported: bool,
}

impl<'a> TeamRequest<'a> {
    /// Register schedule `s` with the rank's sweep and advance it (and
    /// the older ones): what depends on no message goes out before the
    /// request is returned.
    pub(crate) fn start(s: Sched, dest: &'a mut [u8]) -> Self {
        let (team, seq) = (s.team.clone(), s.seq);
        let p = Arc::new(Pending(Mutex::new(s)));
        let mail = &team.pgas().inner.team_mail;
        mail.push_background(team.inner.id, seq, p.clone());
        mail.sweep();
        TeamRequest {
            waiter: mail.waiter_id(),
            team,
            p,
            dest,
            key: None,
            reported: false,
        }
    }

    /// The outcome if the schedule ended (the result copied into the
    /// caller's buffer): `None` while pending.
    fn outcome(&mut self) -> Option<Result<()>> {
        let mut s = self.p.0.lock();
        if !s.ended {
            return None;
        }
        let r = s.done.take().unwrap_or_else(|| {
            Err(splitrt_am::Error::usage(
                "this team request failed earlier (its error was returned then)",
            ))
        });
        if r.is_ok() && s.copy_out {
            let n = self.dest.len().min(s.out.len());
            self.dest[..n].copy_from_slice(&s.out[..n]);
        }
        s.out = Vec::new();
        s.work = Vec::new();
        self.reported = true;
        Some(r)
    }

    /// Block until the collective completes (serving traffic; a member
    /// that does not take part is named by the hang report).
    pub fn wait(mut self) -> Result<()> {
        let mail = self.team.pgas().inner.team_mail.clone();
        // one hang watch while the request waits for the same message
        // (re-armed waits go on counting), a new one for the next
        let mut watch: Option<(Key, usize, HangWatch)> = None;
        // a hierarchical scan's host-mates (`team_mates.rs`): a step they
        // publish wakes the wait, and the sweep advances the schedule,
        // whose wait looks at it
        let (seq, mates) = {
            let s = self.p.0.lock();
            (s.seq, s.mates.clone())
        };
        let moved = || mates.as_ref().is_some_and(|m| m.moved());
        loop {
            mail.sweep();
            if let Some(r) = self.outcome() {
                return r;
            }
            let waiting = self.p.0.lock().waiting;
            match waiting {
                Some((key, from, hops)) => {
                    let h = self.p.0.lock().h;
                    let got = mail.filed(key);
                    let w = match &mut watch {
                        Some((k, g, w)) if *k == key => {
                            if *g != got {
                                *g = got;
                                w.progress();
                            }
                            w
                        }
                        _ => &mut watch.insert((key, got, self.team.hang_watch(hops))).2,
                    };
                    self.team.wait_watched(key, &h, from, w, &moved)?;
                    if moved() {
                        mail.touch(self.team.inner.id, seq);
                    }
                }
                // another thread is sweeping
                None => std::thread::yield_now(),
            }
        }
    }

    /// Advance without blocking (runs the handlers of what has arrived):
    /// `Ok(true)` once the collective is complete.
    pub fn test(&mut self) -> Result<bool> {
        if self.reported {
            return Ok(true);
        }
        let pg = self.team.pgas().clone();
        pg.endpoint().poll()?;
        pg.inner.team_mail.sweep();
        match self.outcome() {
            None => Ok(false),
            Some(r) => r.map(|()| true),
        }
    }

    fn forget(&mut self) {
        let pg = self.team.pgas();
        pg.inner.team_mail.forget_waker(self.waiter);
        if let Some(k) = self.key.take() {
            pg.endpoint().forget_traffic_wake(&k);
        }
    }
}

impl Future for TeamRequest<'_> {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.reported {
            return Poll::Ready(Ok(()));
        }
        let pg = this.team.pgas().clone();
        // the doorbell's count before the look at the host-mates' steps
        // (a hierarchical scan's, below): they write their `ready` words
        // straight into their segments and count the ring
        // (`TeamArea::publish`), so a step after the look moves the count
        // and the bridge wakes this task even if the ring came before it
        // slept (`Endpoint::wake_on_traffic_since`)
        let tseq = pg.endpoint().traffic_seq();
        if let Err(e) = pg.endpoint().poll() {
            this.forget();
            return Poll::Ready(Err(e));
        }
        let mail = &pg.inner.team_mail;
        mail.sweep();
        if let Some(r) = this.outcome() {
            this.forget();
            return Poll::Ready(r);
        }
        let mates = this.p.0.lock().mates.clone();
        // woken by the handler that files the next team message ...
        mail.wake_on_message(this.waiter, cx.waker());
        // ... and by traffic, so that someone polls the endpoint (and,
        // for a scan with host-mates, by a counted ring since `tseq`)
        let ep = pg.endpoint();
        let k = this.key.get_or_insert_with(|| ep.traffic_key());
        let registered = if mates.is_some() {
            ep.wake_on_traffic_since(k, cx.waker(), tseq)
        } else {
            ep.wake_on_traffic_as(k, cx.waker())
        };
        if let Err(e) = registered {
            this.forget();
            return Poll::Ready(Err(e));
        }
        // a message filed between the sweep and the registration
        let (waiting, h, seq) = {
            let s = this.p.0.lock();
            (s.waiting, s.h, s.seq)
        };
        // a hierarchical scan's host-mates: a step of theirs is no team
        // message (the mailbox does not wake the task), looked at here,
        // when the task's executor polls it: woken by the bridge thread
        // on a counted ring, as above
        if mates.is_some_and(|m| m.moved()) {
            mail.touch(this.team.inner.id, seq);
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let ready = waiting.is_none_or(|(key, _, _)| mail.ready(key, &h));
        if ready || mail.background_due() {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl Drop for TeamRequest<'_> {
    fn drop(&mut self) {
        self.forget();
        if self.reported {
            return;
        }
        let pg = self.team.pgas().clone();
        let mail = &pg.inner.team_mail;
        let orphans = {
            let mut s = self.p.0.lock();
            if s.ended {
                return;
            }
            // finishes in the background (see the type's docs); counted
            // under the lock, as the sweep that finishes it uncounts it
            s.orphan = true;
            s.copy_out = false;
            mail.orphans.fetch_add(1, Ordering::AcqRel) + 1
        };
        if orphans <= MAX_ORPHANS || std::thread::panicking() {
            return;
        }
        // bounded: wait for the oldest dropped requests to finish
        let what = || {
            format!(
                "dropping a team request with {MAX_ORPHANS} dropped requests still finishing \
                 in the background on team {:#x} (or others): waiting for the oldest",
                self.team.inner.id
            )
        };
        loop {
            mail.sweep();
            if mail.orphans.load(Ordering::Acquire) <= MAX_ORPHANS {
                return;
            }
            let due =
                || mail.background_due() || mail.orphans.load(Ordering::Acquire) <= MAX_ORPHANS;
            if pg
                .endpoint()
                .wait_reporting(&what, std::time::Duration::ZERO, due)
                .is_err()
            {
                return;
            }
        }
    }
}

impl std::fmt::Debug for TeamRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.p.0.lock();
        let kind = CollKind::from_code(s.h.kind).map_or("?", CollKind::name);
        f.debug_struct("TeamRequest")
            .field("collective", &kind)
            .field("seq", &s.seq)
            .field("steps_left", &s.steps.len())
            .finish()
    }
}

/// The bytes of `v`, owned.
pub(crate) fn bytes_of<T: Pod>(v: &[T]) -> Vec<u8> {
    bytemuck::cast_slice::<T, u8>(v).to_vec()
}

impl Team {
    /// Non-blocking [`alltoall`](Self::alltoall): `send` may be reused
    /// at once (flat, every block goes out before this returns); the
    /// blocks from the other members land in `recv` by the time the
    /// returned request completes. Across hosts hierarchical (L (L - 1)
    /// messages across L hosts: one per leader pair) where the blocking
    /// form is, once the team's blocking collectives are (decided at its
    /// first blocking collective across hosts, any but `split`: see
    /// `docs/teams.md`); the blocks are then copied at the call.
    ///
    /// ```no_run
    /// # fn f(team: &splitrt_pgas::Team) -> splitrt_am::Result<()> {
    /// let me = team.rank().unwrap() as u64;
    /// let send: Vec<u64> = (0..team.size() as u64).map(|j| me * 100 + j).collect();
    /// let mut recv = vec![0u64; team.size()];
    /// team.alltoall_nb(&send, &mut recv)?.wait()?; // recv[j] == j * 100 + me
    /// # Ok(()) }
    /// ```
    pub fn alltoall_nb<'a, T: Pod>(
        &self,
        send: &[T],
        recv: &'a mut [T],
    ) -> Result<TeamRequest<'a>> {
        let kind = CollKind::Alltoall;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        let n = self.size().max(1);
        if !send.len().is_multiple_of(n) || recv.len() != send.len() {
            return Err(self.usage(
                kind,
                format!(
                    "send holds {} and recv {} elements: both must be n * k (team of {n})",
                    send.len(),
                    recv.len()
                ),
            ));
        }
        let k = send.len() / n;
        let (me, seq, h) = self.start::<T>(kind, None, None, k)?;
        let n = self.size();
        let w = std::mem::size_of::<T>();
        // across hosts as the blocking form (team_hier_nb_a2a.rs)
        if let Some(g) = self.alltoall_nb_groups::<T>(k) {
            let (send, recv) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
            return Ok(self.alltoall_nb_hier((seq, h, g), send, k * w, recv));
        }
        for s in 1..n {
            let j = (me + s) % n;
            self.send(seq, 0, &h, j, bytemuck::cast_slice(&send[j * k..][..k]))?;
        }
        let mut s = Sched::new(self, seq, h);
        s.out = vec![0; std::mem::size_of_val(send)];
        s.out[me * k * w..][..k * w].copy_from_slice(bytemuck::cast_slice(&send[me * k..][..k]));
        s.copy_out = true;
        for i in 1..n {
            let j = (me + n - i) % n;
            s.steps.push_back(Step::Recv {
                from: j,
                tag: 0,
                dst: Buf::Out,
                at: j * k * w,
                len: k * w,
                fold: Fold::Copy,
                hops: 0,
            });
        }
        Ok(TeamRequest::start(s, bytemuck::cast_slice_mut(recv)))
    }

    /// Combine every member's `data` element-wise with `op`; every member
    /// gets the result, bit-identical: recursive doubling over the largest
    /// power of two p ≤ n members (at step s, members r and r xor 2^s
    /// swap their partial results and both combine them lower team ranks
    /// first), the n - p others folding their data into members 0.. first
    /// and getting the result back after: ⌈log2 n⌉ (+ 1) messages per
    /// member.
    ///
    /// ```no_run
    /// # fn f(team: &splitrt_pgas::Team) -> splitrt_am::Result<()> {
    /// let mut x = [1.5f64, 2.0];
    /// team.allreduce(&mut x, splitrt_pgas::Op::Max)?;
    /// # Ok(()) }
    /// ```
    pub fn allreduce<T: Reduce>(&self, data: &mut [T], op: Op) -> Result<()> {
        let _one = self
            .pgas()
            .enter_collective(self.shown(CollKind::Allreduce))?;
        // through shared memory where the members share a host (team_shm.rs)
        if T::combine(op, T::zeroed(), T::zeroed()).is_some() {
            if let Some(s) = self.shm_call::<T>(CollKind::Allreduce, Some(op), None, data.len())? {
                return s.reduce(None, data, op);
            }
            // hierarchically across hosts (team_hier.rs)
            if let Some(s) = self.hier_call::<T>(CollKind::Allreduce, Some(op), None, data.len())? {
                return s.reduce(None, data, op);
            }
        }
        self.allreduce_nb(data, op)?.wait()
    }

    /// Non-blocking [`allreduce`](Self::allreduce) in place on `data`
    /// (flat: the same algorithm, messages and result). Across hosts
    /// hierarchical (members to their host's leader, the leaders, back:
    /// 2 (L - 1) messages across L hosts, the blocking form's bits) once
    /// the team's blocking collectives are (see `docs/teams.md`).
    pub fn allreduce_nb<'a, T: Reduce>(
        &self,
        data: &'a mut [T],
        op: Op,
    ) -> Result<TeamRequest<'a>> {
        let kind = CollKind::Allreduce;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        if T::combine(op, T::zeroed(), T::zeroed()).is_none() {
            return Err(self.usage(
                kind,
                format!("{op:?} does not apply to {}", std::any::type_name::<T>()),
            ));
        }
        let (me, seq, h) = self.start::<T>(kind, Some(op), None, data.len())?;
        // across hosts as the blocking form (team_hier_nb.rs)
        if let Some(g) = self.nb_hier() {
            return Ok(self.reduce_nb_hier((seq, h, g), None, data, op));
        }
        let n = self.size();
        let len = std::mem::size_of_val(data);
        let mut r = Sched::new(self, seq, h);
        r.out = bytes_of(data);
        r.copy_out = true;
        r.combine = Some((combine_bytes::<T>, op));
        // p: the largest power of two <= n; members p.. fold into 0..
        let p = 1usize << (usize::BITS - 1 - n.max(1).leading_zeros());
        let (rem, rounds) = (n - p, p.trailing_zeros());
        let extra = u32::from(rem > 0);
        const RESULT: u64 = 1 << 32;
        let recv = |from, tag, fold, hops| Step::Recv {
            from,
            tag,
            dst: Buf::Out,
            at: 0,
            len,
            fold,
            hops,
        };
        let send = |to, tag| Step::Send {
            to,
            tag,
            src: Buf::Out,
            at: 0,
            len,
        };
        if me >= p {
            r.steps.push_back(send(me - p, 0));
            r.steps
                .push_back(recv(me - p, RESULT, Fold::Copy, rounds + extra));
        } else {
            if me < rem {
                r.steps.push_back(recv(me + p, 0, Fold::After, 0));
            }
            for s in 0..rounds {
                let partner = me ^ (1 << s);
                let fold = if partner < me {
                    Fold::Before
                } else {
                    Fold::After
                };
                r.steps.push_back(send(partner, 1 + u64::from(s)));
                r.steps
                    .push_back(recv(partner, 1 + u64::from(s), fold, s + extra));
            }
            if me < rem {
                r.steps.push_back(send(me + p, RESULT));
            }
        }
        Ok(TeamRequest::start(r, bytemuck::cast_slice_mut(data)))
    }

    /// Non-blocking [`barrier`](Self::barrier) (dissemination by team
    /// messages, also on shared memory): complete once every member has
    /// started it. Across hosts hierarchical (dissemination among one
    /// leader per host) once the team's blocking collectives are (see
    /// `docs/teams.md`).
    pub fn barrier_nb(&self) -> Result<TeamRequest<'static>> {
        let kind = CollKind::Barrier;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        let (me, seq, h) = self.start::<u8>(kind, None, None, 0)?;
        // across hosts as the blocking form (team_hier_nb.rs)
        if let Some(g) = self.nb_hier() {
            return Ok(self.barrier_nb_hier(seq, h, g));
        }
        let n = self.size();
        let mut r = Sched::new(self, seq, h);
        let (mut d, mut tag) = (1, 0u64);
        while d < n {
            r.steps.push_back(Step::Send {
                to: (me + d) % n,
                tag,
                src: Buf::Out,
                at: 0,
                len: 0,
            });
            r.steps.push_back(Step::Recv {
                from: (me + n - d) % n,
                tag,
                dst: Buf::Out,
                at: 0,
                len: 0,
                fold: Fold::Copy,
                hops: tag as u32,
            });
            d <<= 1;
            tag += 1;
        }
        Ok(TeamRequest::start(r, &mut []))
    }

    /// Non-blocking [`broadcast`](Self::broadcast) of `data` from team
    /// rank `root` (the same binomial tree): the root's messages go out
    /// before this returns. Across hosts hierarchical (L - 1 messages
    /// across L hosts) once the team's blocking collectives are (see
    /// `docs/teams.md`).
    pub fn broadcast_nb<'a, T: Pod>(
        &self,
        root: usize,
        data: &'a mut [T],
    ) -> Result<TeamRequest<'a>> {
        let kind = CollKind::Broadcast;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        let (me, seq, h) = self.start::<T>(kind, None, Some(root), data.len())?;
        // across hosts as the blocking form (team_hier_nb.rs)
        if let Some(g) = self.nb_hier() {
            return Ok(self.broadcast_nb_hier((seq, h, g), root, data));
        }
        let n = self.size();
        let len = std::mem::size_of_val(data);
        let mut r = Sched::new(self, seq, h);
        let bits = |v: usize| usize::BITS - v.leading_zeros();
        let v = (me + n - root) % n;
        let mut k = bits(v);
        if v == 0 {
            // the root's data goes out now, straight from its buffer
            while k < usize::BITS && (v | 1 << k) < n {
                let to = ((v | 1 << k) + root) % n;
                self.send(seq, 0, &h, to, bytemuck::cast_slice(data))?;
                k += 1;
            }
        } else {
            let parent = v & !(1usize << (bits(v) - 1));
            r.out = vec![0; len];
            r.copy_out = true;
            r.steps.push_back(Step::Recv {
                from: (parent + root) % n,
                tag: 0,
                dst: Buf::Out,
                at: 0,
                len,
                fold: Fold::Copy,
                hops: parent.count_ones(),
            });
            while k < usize::BITS && (v | 1 << k) < n {
                r.steps.push_back(Step::Send {
                    to: ((v | 1 << k) + root) % n,
                    tag: 0,
                    src: Buf::Out,
                    at: 0,
                    len,
                });
                k += 1;
            }
        }
        Ok(TeamRequest::start(r, bytemuck::cast_slice_mut(data)))
    }

    /// Non-blocking [`allgather`](Self::allgather): `send` is copied
    /// before this returns (it may be reused at once) and, flat, goes to
    /// every member then; hierarchically a non-leader's goes to its
    /// host's leader then, and a leader's goes with its host's packed
    /// parts once they are in. The others' land in `recv` (n * k
    /// elements) by completion. Across hosts
    /// hierarchical (L (L - 1) messages across L hosts) once the team's
    /// blocking collectives are (see `docs/teams.md`).
    pub fn allgather_nb<'a, T: Pod>(
        &self,
        send: &[T],
        recv: &'a mut [T],
    ) -> Result<TeamRequest<'a>> {
        let kind = CollKind::Allgather;
        let _one = self.pgas().enter_collective(self.shown(kind))?;
        let k = send.len();
        let n = self.size();
        if recv.len() != n * k {
            return Err(self.usage(
                kind,
                format!(
                    "recv holds {} elements, {} expected (team of {n})",
                    recv.len(),
                    n * k
                ),
            ));
        }
        let (me, seq, h) = self.start::<T>(kind, None, None, k)?;
        // across hosts as the blocking form (team_hier_nb.rs)
        if let Some(g) = self.nb_hier() {
            return Ok(self.gather_nb_hier((seq, h, g), None, send, recv));
        }
        for s in 1..n {
            self.send(seq, 0, &h, (me + s) % n, bytemuck::cast_slice(send))?;
        }
        let kw = std::mem::size_of_val(send);
        let mut r = Sched::new(self, seq, h);
        r.out = vec![0; n * kw];
        r.out[me * kw..][..kw].copy_from_slice(bytemuck::cast_slice(send));
        r.copy_out = true;
        for s in 1..n {
            let j = (me + n - s) % n;
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
}
