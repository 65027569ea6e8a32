//! Non-blocking team collectives: `Team::alltoall_nb`,
//! `Team::allreduce_nb`, `Team::allgather_nb`, `Team::broadcast_nb` and
//! `Team::barrier_nb` start the collective and return a
//! [`TeamRequest`], a handle that borrows the result buffer and completes
//! by `wait()`, `test()` or `.await`.
//!
//! A request is the collective's schedule (the same algorithm and
//! messages as the blocking form, see `team_coll.rs`): a list of steps,
//! each a send of the buffer to a member or a receive from one (copied
//! in, or combined in). Starting it sends what needs nothing first (all
//! of an alltoall's blocks); each advance runs steps until a receive's
//! message is not in yet. As a future it never spins: when pending it
//! registers its waker in the team mailbox (woken by the handler that
//! files the next team message) and with the endpoint's doorbell bridge
//! (so that traffic gets the endpoint polled), as `Get` futures do.

use crate::reduce::{Op, Reduce};
use crate::team::Team;
use crate::team_mail::{CollKind, Header, Key};
use bytemuck::Pod;
use splitrt_am::{Result, TrafficKey};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// One step of a schedule.
enum Step {
    /// Send the whole buffer to team rank `to`.
    Send { to: usize, tag: u64 },
    /// Receive from team rank `from` into `len` bytes of the buffer at
    /// `at`, copying or combining with what is there (`fold`).
    Recv {
        from: usize,
        tag: u64,
        at: usize,
        len: usize,
        fold: Fold,
        /// Receives the sender makes before sending (see `Team::wait_for`).
        hops: u32,
    },
}

/// How a received message meets the buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fold {
    /// Copied in.
    Copy,
    /// `buf = buf op msg` (the message is from higher team ranks).
    After,
    /// `buf = msg op buf` (the message is from lower team ranks).
    Before,
}

/// Combines received bytes into the buffer's (see [`combine_bytes`]).
type Combine = fn(Op, &mut [u8], &[u8], bool);

/// `acc op b` (`b op acc` if `b_first`) element-wise over the bytes of
/// `T`s (unaligned: the receive buffer is bytes).
fn combine_bytes<T: Reduce>(op: Op, acc: &mut [u8], b: &[u8], b_first: bool) {
    let w = std::mem::size_of::<T>();
    for (a, b) in acc.chunks_exact_mut(w).zip(b.chunks_exact(w)) {
        let (mut x, mut y): (T, T) = (
            bytemuck::pod_read_unaligned(a),
            bytemuck::pod_read_unaligned(b),
        );
        if b_first {
            std::mem::swap(&mut x, &mut y);
        }
        let z = T::combine(op, x, y).unwrap_or(x);
        a.copy_from_slice(bytemuck::bytes_of(&z));
    }
}

/// A non-blocking team collective in progress (see the module docs).
/// It borrows the result buffer until it completes; [`wait`](Self::wait)
/// blocks (serving traffic, with hang reports), [`test`](Self::test)
/// advances it without blocking, and as a `Future` it completes with the
/// collective's result.
///
/// Dropping a pending request abandons this member's part: members
/// waiting for its later messages wait on (their hang report names this
/// rank). Complete every request.
///
/// ```no_run
/// # fn f(team: &splitrt_pgas::Team) -> splitrt_am::Result<()> {
/// let n = team.size();
/// let send = vec![1u64; n * 4];
/// let mut recv = vec![0u64; n * 4];
/// let mut sum = [2.5f64];
/// let a = team.alltoall_nb(&send, &mut recv)?;      // both in flight
/// let s = team.allreduce_nb(&mut sum, splitrt_pgas::Op::Sum)?;
/// a.wait()?;
/// s.wait()?;
/// # Ok(()) }
/// ```
#[must_use = "a team request does nothing more unless waited, tested or awaited"]
pub struct TeamRequest<'a> {
    team: Team,
    seq: u64,
    h: Header,
    steps: VecDeque<Step>,
    buf: &'a mut [u8],
    tmp: Vec<u8>,
    combine: Option<(Combine, Op)>,
    /// The mailbox waker id and the doorbell-bridge key while pending.
    waiter: u64,
    key: Option<TrafficKey>,
    /// The request ended (with this error, or `Ok`).
    done: Option<Result<()>>,
}

impl<'a> TeamRequest<'a> {
    fn new(team: &Team, seq: u64, h: Header, buf: &'a mut [u8]) -> Self {
        TeamRequest {
            team: team.clone(),
            seq,
            h,
            steps: VecDeque::new(),
            buf,
            tmp: Vec::new(),
            combine: None,
            waiter: team.pgas().inner.team_mail.waiter_id(),
            key: None,
            done: None,
        }
    }

    /// Run steps until one waits for a message not in yet: `Ok(Some)`
    /// with its key and sender, `Ok(None)` when every step ran.
    fn advance(&mut self) -> Result<Option<(Key, usize, u32)>> {
        while let Some(step) = self.steps.front() {
            match *step {
                Step::Send { to, tag } => {
                    self.team.send(self.seq, tag, &self.h, to, self.buf)?;
                }
                Step::Recv {
                    from,
                    tag,
                    at,
                    len,
                    fold,
                    hops,
                } => {
                    let key = self.team.key(self.seq, tag, from);
                    let got = if fold != Fold::Copy {
                        self.tmp.resize(len, 0);
                        let got = self.team.try_take(key, &self.h, &mut self.tmp)?;
                        if got {
                            if let Some((f, op)) = self.combine {
                                let before = fold == Fold::Before;
                                f(op, &mut self.buf[at..at + len], &self.tmp, before);
                            }
                        }
                        got
                    } else {
                        self.team
                            .try_take(key, &self.h, &mut self.buf[at..at + len])?
                    };
                    if !got {
                        return Ok(Some((key, from, hops)));
                    }
                }
            }
            self.steps.pop_front();
        }
        Ok(None)
    }

    /// Run the sends at the head of the schedule (at the start: what
    /// depends on no message goes out before the request is returned).
    fn run_sends(&mut self) -> Result<()> {
        while let Some(&Step::Send { to, tag }) = self.steps.front() {
            self.team.send(self.seq, tag, &self.h, to, self.buf)?;
            self.steps.pop_front();
        }
        Ok(())
    }

    /// Advance, remembering how it ended.
    fn step(&mut self) -> Option<(Key, usize, u32)> {
        if self.done.is_some() {
            return None;
        }
        match self.advance() {
            Ok(Some(w)) => Some(w),
            Ok(None) => {
                self.done = Some(Ok(()));
                None
            }
            Err(e) => {
                self.done = Some(Err(e));
                None
            }
        }
    }

    /// Block until the collective completes (serving traffic; a member
    /// that does not take part is named by the hang report).
    pub fn wait(mut self) -> Result<()> {
        loop {
            if let Some((key, from, hops)) = self.step() {
                if let Err(e) = self.team.wait_for(key, &self.h, from, hops) {
                    self.done = Some(Err(e));
                }
                continue;
            }
            return self.done.take().unwrap_or(Ok(()));
        }
    }

    /// Advance without blocking (runs the handlers of what has arrived):
    /// `Ok(true)` once the collective is complete.
    pub fn test(&mut self) -> Result<bool> {
        self.team.pgas().endpoint().poll()?;
        if self.step().is_some() {
            return Ok(false);
        }
        match self.done.take() {
            Some(Err(e)) => {
                // reported once; later calls say so
                self.done = Some(Err(splitrt_am::Error::usage(
                    "this team request failed earlier (its error was returned then)",
                )));
                Err(e)
            }
            d => {
                self.done = d;
                Ok(true)
            }
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
        if this.done.is_none() {
            if let Err(e) = this.team.pgas().endpoint().poll() {
                this.done = Some(Err(e));
            }
        }
        let Some((key, _, _)) = this.step() else {
            this.forget();
            return Poll::Ready(this.done.take().unwrap_or(Ok(())));
        };
        let pg = this.team.pgas().clone();
        let mail = &pg.inner.team_mail;
        // woken by the handler that files the next team message ...
        mail.wake_on_message(this.waiter, cx.waker());
        // ... and by traffic, so that someone polls the endpoint
        let k = this.key.get_or_insert_with(|| pg.endpoint().traffic_key());
        if let Err(e) = pg.endpoint().wake_on_traffic_as(k, cx.waker()) {
            this.forget();
            return Poll::Ready(Err(e));
        }
        // a message filed between the advance and the registration
        if mail.ready(key, &this.h) {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl Drop for TeamRequest<'_> {
    fn drop(&mut self) {
        self.forget();
    }
}

impl std::fmt::Debug for TeamRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = CollKind::from_code(self.h.kind).map_or("?", CollKind::name);
        f.debug_struct("TeamRequest")
            .field("collective", &kind)
            .field("seq", &self.seq)
            .field("steps_left", &self.steps.len())
            .finish()
    }
}

impl Team {
    /// Non-blocking [`alltoall`](Self::alltoall): every block goes out
    /// before this returns (so `send` may be reused at once); the blocks
    /// from the other members land in `recv` by the time the returned
    /// request completes.
    pub fn alltoall_nb<'a, T: Pod>(
        &self,
        send: &[T],
        recv: &'a mut [T],
    ) -> Result<TeamRequest<'a>> {
        let kind = CollKind::Alltoall;
        let _one = self.pgas().enter_collective(kind.name())?;
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
        let c = self.start::<T>(kind, None, None, k)?;
        let (me, n) = (c.0, self.size());
        let w = std::mem::size_of::<T>();
        for s in 1..n {
            let j = (me + s) % n;
            self.send(c.1, 0, &c.2, j, bytemuck::cast_slice(&send[j * k..][..k]))?;
        }
        recv[me * k..][..k].copy_from_slice(&send[me * k..][..k]);
        let mut r = TeamRequest::new(self, c.1, c.2, bytemuck::cast_slice_mut(recv));
        for s in 1..n {
            let j = (me + n - s) % n;
            r.steps.push_back(Step::Recv {
                from: j,
                tag: 0,
                at: j * k * w,
                len: k * w,
                fold: Fold::Copy,
                hops: 0,
            });
        }
        Ok(r)
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
        let _one = self.pgas().enter_collective(CollKind::Allreduce.name())?;
        // through shared memory where the members share a host (team_shm.rs)
        if T::combine(op, T::zeroed(), T::zeroed()).is_some() {
            if let Some(s) = self.shm_call::<T>(CollKind::Allreduce, Some(op), None, data.len())? {
                return s.reduce(None, data, op);
            }
        }
        self.allreduce_nb(data, op)?.wait()
    }

    /// Non-blocking [`allreduce`](Self::allreduce) in place on `data`
    /// (the same algorithm, messages and result).
    pub fn allreduce_nb<'a, T: Reduce>(
        &self,
        data: &'a mut [T],
        op: Op,
    ) -> Result<TeamRequest<'a>> {
        let kind = CollKind::Allreduce;
        let _one = self.pgas().enter_collective(kind.name())?;
        if T::combine(op, T::zeroed(), T::zeroed()).is_none() {
            return Err(self.usage(
                kind,
                format!("{op:?} does not apply to {}", std::any::type_name::<T>()),
            ));
        }
        let c = self.start::<T>(kind, Some(op), None, data.len())?;
        let (me, n) = (c.0, self.size());
        let len = std::mem::size_of_val(data);
        let mut r = TeamRequest::new(self, c.1, c.2, bytemuck::cast_slice_mut(data));
        r.combine = Some((combine_bytes::<T>, op));
        // p: the largest power of two <= n; members p.. fold into 0..
        let p = 1usize << (usize::BITS - 1 - n.max(1).leading_zeros());
        let (rem, rounds) = (n - p, p.trailing_zeros());
        let extra = u32::from(rem > 0);
        const RESULT: u64 = 1 << 32;
        let recv = |from, tag, fold, hops| Step::Recv {
            from,
            tag,
            at: 0,
            len,
            fold,
            hops,
        };
        if me >= p {
            r.steps.push_back(Step::Send { to: me - p, tag: 0 });
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
                r.steps.push_back(Step::Send {
                    to: partner,
                    tag: 1 + u64::from(s),
                });
                r.steps
                    .push_back(recv(partner, 1 + u64::from(s), fold, s + extra));
            }
            if me < rem {
                r.steps.push_back(Step::Send {
                    to: me + p,
                    tag: RESULT,
                });
            }
        }
        // what depends on no message goes out now
        r.run_sends()?;
        Ok(r)
    }

    /// Non-blocking [`barrier`](Self::barrier) (dissemination by team
    /// messages, also on shared memory): complete once every member has
    /// started it.
    pub fn barrier_nb(&self) -> Result<TeamRequest<'static>> {
        let kind = CollKind::Barrier;
        let _one = self.pgas().enter_collective(kind.name())?;
        let (me, seq, h) = self.start::<u8>(kind, None, None, 0)?;
        let n = self.size();
        let mut r = TeamRequest::new(self, seq, h, &mut []);
        let (mut d, mut tag) = (1, 0u64);
        while d < n {
            r.steps.push_back(Step::Send {
                to: (me + d) % n,
                tag,
            });
            r.steps.push_back(Step::Recv {
                from: (me + n - d) % n,
                tag,
                at: 0,
                len: 0,
                fold: Fold::Copy,
                hops: tag as u32,
            });
            d <<= 1;
            tag += 1;
        }
        // the first step's message goes out now
        r.run_sends()?;
        Ok(r)
    }

    /// Non-blocking [`broadcast`](Self::broadcast) of `data` from team
    /// rank `root` (the same binomial tree): the root's messages go out
    /// before this returns.
    pub fn broadcast_nb<'a, T: Pod>(
        &self,
        root: usize,
        data: &'a mut [T],
    ) -> Result<TeamRequest<'a>> {
        let kind = CollKind::Broadcast;
        let _one = self.pgas().enter_collective(kind.name())?;
        let (me, seq, h) = self.start::<T>(kind, None, Some(root), data.len())?;
        let n = self.size();
        let len = std::mem::size_of_val(data);
        let mut r = TeamRequest::new(self, seq, h, bytemuck::cast_slice_mut(data));
        let bits = |v: usize| usize::BITS - v.leading_zeros();
        let v = (me + n - root) % n;
        if v != 0 {
            let parent = v & !(1usize << (bits(v) - 1));
            r.steps.push_back(Step::Recv {
                from: (parent + root) % n,
                tag: 0,
                at: 0,
                len,
                fold: Fold::Copy,
                hops: parent.count_ones(),
            });
        }
        let mut k = bits(v);
        while k < usize::BITS && (v | 1 << k) < n {
            r.steps.push_back(Step::Send {
                to: ((v | 1 << k) + root) % n,
                tag: 0,
            });
            k += 1;
        }
        r.run_sends()?;
        Ok(r)
    }

    /// Non-blocking [`allgather`](Self::allgather): `send` goes to every
    /// member before this returns (it may be reused at once); the others'
    /// land in `recv` (n * k elements) by completion.
    pub fn allgather_nb<'a, T: Pod>(
        &self,
        send: &[T],
        recv: &'a mut [T],
    ) -> Result<TeamRequest<'a>> {
        let kind = CollKind::Allgather;
        let _one = self.pgas().enter_collective(kind.name())?;
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
        for s in 1..n {
            self.send(seq, 0, &h, (me + s) % n, bytemuck::cast_slice(send))?;
        }
        recv[me * k..][..k].copy_from_slice(send);
        let w = std::mem::size_of::<T>();
        let mut r = TeamRequest::new(self, seq, h, bytemuck::cast_slice_mut(recv));
        for s in 1..n {
            let j = (me + n - s) % n;
            r.steps.push_back(Step::Recv {
                from: j,
                tag: 0,
                at: j * k * w,
                len: std::mem::size_of_val(send),
                fold: Fold::Copy,
                hops: 0,
            });
        }
        Ok(r)
    }
}
