//! The schedule of a non-blocking team collective, and its progress in
//! the background.
//!
//! A schedule is the collective's steps for this member (the flat
//! blocking form's algorithm and messages, see `team_coll.rs`, or the
//! hierarchical stages of `team_hier_nb.rs` and `team_hier_nb_a2a.rs`): a
//! send of a range of one of its buffers to a member, a receive from one
//! (copied into a buffer, or combined with what is there), a local
//! copy / combine between its buffers, or a continuation
//! ([`Step::Then`], `team_hier_nb_a2a.rs`'s `alltoallv_nb`: steps whose
//! lengths depend on counts received first). A continuation runs where
//! its schedule advances (its request's wait or test, or a sweep, under
//! the lock of the rank's pending schedules), may append steps at the
//! back of its own schedule only, and an error it returns ends the
//! schedule with that error (as a failed receive does). It owns its buffers (`out`, the
//! result, copied into the caller's buffer when the request completes;
//! `work`, a partial result; `scratch`, the last message combined or
//! the last packed message, placed part by part), so it
//! can be advanced by whoever makes progress on the rank's team
//! collectives, not only by its own request: every team wait, `test` and
//! poll sweeps every pending schedule of the rank in start order
//! ([`Mailbox::sweep`](crate::team_mail::Mailbox::sweep)). So requests
//! may be completed in any order on each member, a blocking collective
//! started after a pending request does not starve it, and a request
//! dropped before completion finishes its part in the background
//! (see `team_nb.rs`).

use crate::reduce::{Op, Reduce};
use crate::team::Team;
use crate::team_mail::{Background, Header, Key};
use crate::team_mates::Mates;
use parking_lot::Mutex;
use splitrt_am::Result;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One of a schedule's buffers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Buf {
    /// The result (copied into the caller's buffer at completion when
    /// `copy_out`).
    Out,
    /// A partial result of the schedule's own.
    Work,
    /// The last message received with a fold other than `Copy`, or a
    /// packed message (a host's parts, `team_hier_nb.rs`) received into
    /// it to be placed part by part (`Step::Place`).
    Scratch,
}

/// How received (or local) bytes meet the destination.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Fold {
    /// Copied in.
    Copy,
    /// `dst = dst op src` (the source is from higher team ranks).
    After,
    /// `dst = src op dst` (the source is from lower team ranks).
    Before,
}

/// One step of a schedule.
#[derive(Debug)]
pub(crate) enum Step {
    /// Send `len` bytes of `src` at `at` to team rank `to`.
    Send {
        to: usize,
        tag: u64,
        src: Buf,
        at: usize,
        len: usize,
    },
    /// Receive `len` bytes from team rank `from` into `dst` at `at`
    /// (`fold`: copied, or combined through `Scratch`).
    Recv {
        from: usize,
        tag: u64,
        dst: Buf,
        at: usize,
        len: usize,
        fold: Fold,
        /// Receives the sender makes before sending (see `Team::hang_watch`).
        hops: u32,
    },
    /// Copy or combine `len` bytes of `src` at 0 into `dst` at `at`.
    Apply {
        src: Buf,
        dst: Buf,
        at: usize,
        len: usize,
        fold: Fold,
    },
    /// Copy `len` bytes of `src` at `from` into `dst` at `at` (one
    /// member's part of a message that packs several: `team_hier_nb.rs`).
    Place {
        src: Buf,
        from: usize,
        dst: Buf,
        at: usize,
        len: usize,
    },
    /// Run a continuation on the schedule, which may append steps built
    /// from what it received so far (a message whose length the counts
    /// received before decide: `team_hier_nb_a2a.rs`); an error ends the
    /// schedule with it.
    Then(Then),
}

/// The work of a [`Step::Then`].
pub(crate) type Continue = dyn FnOnce(&mut Sched) -> Result<()> + Send;

/// A [`Step::Then`] continuation.
pub(crate) struct Then(pub Box<Continue>);

impl std::fmt::Debug for Then {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Then(..)")
    }
}

/// Combines bytes of elements (see [`combine_bytes`]).
pub(crate) type Combine = fn(Op, &mut [u8], &[u8], bool);

/// `acc op b` (`b op acc` if `b_first`) element-wise over the bytes of
/// `T`s (unaligned: the buffers are bytes).
pub(crate) fn combine_bytes<T: Reduce>(op: Op, acc: &mut [u8], b: &[u8], b_first: bool) {
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

/// A collective's schedule on this member (see the module docs).
pub(crate) struct Sched {
    /// The host-mates whose shared-memory steps its waits look at (a
    /// hierarchical scan's, `team_mates.rs`): one that called another
    /// collective as this one's number ends it with the mismatch.
    ///
    /// Declared before `team` so that it drops first (fields drop in
    /// declaration order): it holds the team's host-group area, and when
    /// this schedule holds the team's last handle, `Drop for Team` marks
    /// the area's block DROPPED only if its own `Arc` of the area is the
    /// last one (else the block is retired unmarked when `mates` goes and
    /// marked only at this rank's next team set-up, while host-mates keep
    /// their blocks).
    pub mates: Option<Arc<Mates>>,
    pub team: Team,
    pub seq: u64,
    pub h: Header,
    pub steps: VecDeque<Step>,
    pub out: Vec<u8>,
    pub work: Vec<u8>,
    scratch: Vec<u8>,
    pub combine: Option<(Combine, Op)>,
    /// Copy `out` into the caller's buffer at completion.
    pub copy_out: bool,
    /// The message the next step waits for: key, sender, hops.
    pub waiting: Option<(Key, usize, u32)>,
    /// How it ended (taken by the request when it reports it).
    pub done: Option<Result<()>>,
    /// It ended (`done` may have been taken since).
    pub ended: bool,
    /// Its request was dropped before it ended.
    pub orphan: bool,
}

impl Sched {
    /// An empty schedule of collective `seq` (header `h`) on `team`.
    pub(crate) fn new(team: &Team, seq: u64, h: Header) -> Self {
        Sched {
            team: team.clone(),
            seq,
            h,
            steps: VecDeque::new(),
            out: Vec::new(),
            work: Vec::new(),
            scratch: Vec::new(),
            combine: None,
            copy_out: false,
            waiting: None,
            done: None,
            ended: false,
            orphan: false,
            mates: None,
        }
    }

    /// Append a send of `len` bytes of `src` at `at` to team rank `to`.
    pub(crate) fn send_part(&mut self, to: usize, tag: u64, (src, at, len): (Buf, usize, usize)) {
        self.steps.push_back(Step::Send {
            to,
            tag,
            src,
            at,
            len,
        });
    }

    /// Append a receive of `len` bytes from team rank `from`, copied
    /// into `dst` at `at`.
    pub(crate) fn recv_part(
        &mut self,
        from: usize,
        tag: u64,
        (dst, at, len): (Buf, usize, usize),
        hops: u32,
    ) {
        self.steps.push_back(Step::Recv {
            from,
            tag,
            dst,
            at,
            len,
            fold: Fold::Copy,
            hops,
        });
    }

    /// `len` bytes at `at` of `b`, for reading.
    fn get(&self, b: Buf, at: usize, len: usize) -> &[u8] {
        let v = match b {
            Buf::Out => &self.out,
            Buf::Work => &self.work,
            Buf::Scratch => &self.scratch,
        };
        &v[at..at + len]
    }

    /// Copy or combine `len` bytes of `src` (at 0) into `dst` at `at`.
    fn apply(&mut self, src: Buf, dst: Buf, at: usize, len: usize, fold: Fold) {
        let (s, d) = match (src, dst) {
            (Buf::Out, Buf::Work) => (&self.out, &mut self.work),
            (Buf::Work, Buf::Out) => (&self.work, &mut self.out),
            (Buf::Scratch, Buf::Out) => (&self.scratch, &mut self.out),
            (Buf::Scratch, Buf::Work) => (&self.scratch, &mut self.work),
            // never built (a buffer onto itself, or into the scratch)
            _ => return,
        };
        let (s, d) = (&s[..len], &mut d[at..at + len]);
        match (fold, self.combine) {
            (Fold::Copy, _) | (_, None) => d.copy_from_slice(s),
            (f, Some((c, op))) => c(op, d, s, f == Fold::Before),
        }
    }

    /// Copy `len` bytes of `src` at `from` into `dst` at `at`.
    fn place(&mut self, src: Buf, from: usize, dst: Buf, at: usize, len: usize) {
        let (s, d) = match (src, dst) {
            (Buf::Work, Buf::Out) => (&self.work, &mut self.out),
            (Buf::Scratch, Buf::Out) => (&self.scratch, &mut self.out),
            (Buf::Scratch, Buf::Work) => (&self.scratch, &mut self.work),
            // never built
            _ => return,
        };
        d[at..at + len].copy_from_slice(&s[from..from + len]);
    }

    /// Run steps until one waits for a message not in yet: `Ok(Some)`
    /// with its key, sender and hops, `Ok(None)` when every step ran.
    fn advance(&mut self) -> Result<Option<(Key, usize, u32)>> {
        while let Some(step) = self.steps.front() {
            if matches!(step, Step::Then(_)) {
                if let Some(Step::Then(f)) = self.steps.pop_front() {
                    (f.0)(self)?;
                }
                continue;
            }
            match *step {
                Step::Send {
                    to,
                    tag,
                    src,
                    at,
                    len,
                } => {
                    let data = self.get(src, at, len);
                    self.team.send(self.seq, tag, &self.h, to, data)?;
                }
                Step::Recv {
                    from,
                    tag,
                    dst,
                    at,
                    len,
                    fold,
                    hops,
                } => {
                    let key = self.team.key(self.seq, tag, from);
                    let got = if fold == Fold::Copy && dst != Buf::Scratch {
                        let out = match dst {
                            Buf::Work => &mut self.work[at..at + len],
                            _ => &mut self.out[at..at + len],
                        };
                        self.team.try_take(key, &self.h, out)?
                    } else {
                        self.scratch.resize(len, 0);
                        let got = self.team.try_take(key, &self.h, &mut self.scratch)?;
                        if got && dst != Buf::Scratch {
                            self.apply(Buf::Scratch, dst, at, len, fold);
                        }
                        got
                    };
                    if !got {
                        if let Some(m) = &self.mates {
                            if let Some((t, w)) = m.mismatch(self.seq, &self.h) {
                                return Err(self.team.step_mismatch(self.seq, t, w, &self.h));
                            }
                        }
                        return Ok(Some((key, from, hops)));
                    }
                }
                Step::Apply {
                    src,
                    dst,
                    at,
                    len,
                    fold,
                } => self.apply(src, dst, at, len, fold),
                Step::Place {
                    src,
                    from,
                    dst,
                    at,
                    len,
                } => self.place(src, from, dst, at, len),
                Step::Then(_) => {}
            }
            self.steps.pop_front();
        }
        Ok(None)
    }

    /// Advance, remembering how it ended; true once it has.
    pub(crate) fn run(&mut self) -> bool {
        if self.ended {
            return true;
        }
        match self.advance() {
            Ok(Some(w)) => {
                self.waiting = Some(w);
                return false;
            }
            Ok(None) => self.done = Some(Ok(())),
            Err(e) => {
                // whatever else of this collective arrives is reclaimed
                let mail = &self.team.pgas().inner.team_mail;
                mail.abandon(self.team.inner.id, self.seq);
                self.done = Some(Err(e));
            }
        }
        self.ended = true;
        self.waiting = None;
        self.steps.clear();
        if self.orphan {
            // nobody will copy the result out
            self.out = Vec::new();
            self.done = None;
        }
        true
    }
}

/// A schedule shared by its request and the rank's sweep.
pub(crate) struct Pending(pub Mutex<Sched>);

impl Background for Pending {
    fn advance(&self) -> bool {
        let mut s = self.0.lock();
        let was_orphan = s.orphan;
        let ended = s.run();
        if ended && was_orphan {
            let mail = &s.team.pgas().inner.team_mail;
            mail.orphans.fetch_sub(1, Ordering::AcqRel);
            s.orphan = false;
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::team_area::{TeamArea, DROPPED};
    use crate::team_core::{Members, TeamInner};
    use crate::team_mail::{CollKind, TeamCounters};
    use splitrt_runtime::fabric::SegmentRef;
    use std::sync::atomic::AtomicU64;

    /// Words of one small team-area block (256 B of control words, two
    /// halves of 64 B), 64-byte aligned.
    #[repr(C, align(64))]
    struct Block([AtomicU64; 48]);

    use crate::test_rank::one_rank_over_model as one_rank;

    /// Review of h12-teamdrop (the closing note's first lingering case):
    /// a split team's last handle goes while a dropped request's schedule
    /// still holds the team's host-group area (through its scan's
    /// `mates`). The schedule's drop drops that last handle; with `team`
    /// declared before `mates`, `Drop for Team` ran first, found the area
    /// still held by `mates` (nothing retired, nothing marked), and the
    /// area was retired unmarked right after, when `mates` went: this
    /// member's block was marked DROPPED only at its next team set-up, so
    /// host-mates kept theirs meanwhile. Now `mates` goes first and the
    /// team's drop marks the block.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "attaches a verbs-model endpoint (a bootstrap and its threads)"
    )]
    fn teamdrop_a_schedules_area_is_marked_when_it_drops_the_last_handle() {
        // `blocks` before `pg` (and `reg`, `area`): locals drop in reverse,
        // so the registry holding the area goes before the blocks even
        // when an assertion below fails and the test unwinds
        let blocks: Vec<Block> = (0..2)
            .map(|_| Block(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect();
        let pg = one_rank("sched");
        let segs: Vec<SegmentRef> = blocks
            .iter()
            // SAFETY: `blocks` outlives the area and its retired copy in
            // `pg`'s registry (emptied below, before the end of the test,
            // once the host-mate's block says DROPPED too; on a failed
            // assertion `pg`, declared after `blocks`, drops first), and the area
            // touches only its control words, atomically (no step writes
            // or reads a data half here).
            .map(|b| unsafe { SegmentRef::new(b.0.as_ptr() as *mut u8, 48 * 8) })
            .collect();
        // this rank's block: a real allocation, freed once reclaimed
        let off = pg.inner.heap.lock().alloc_local(64).expect("a block");
        let reg = pg.inner.team_areas.clone();
        reg.held.fetch_add(1, Ordering::Relaxed);
        let area = TeamArea::new(segs, vec![0, 0], 0, 64, 9, Some((off, reg.clone())));
        let area = Arc::new(area.expect("an area"));
        area.reset_own();
        // the host-mate's block is this team's (its tag) and in use
        blocks[1].0[2].store(9, Ordering::Relaxed);
        // a split team of this rank (and the host-mate) holding the area
        let counters = TeamCounters::default();
        assert!(counters.shm.set(Some(area.clone())).is_ok());
        let team = Team {
            inner: Arc::new(TeamInner {
                id: 0x77,
                members: Members::List(vec![0]),
                me: Some(0),
                counters: Arc::new(counters),
                pgas_names: false,
            }),
            pg: pg.clone(),
        };
        // a scan's schedule: its `mates` hold the area too
        let h = Header {
            kind: CollKind::ScanInclusive as u64,
            op: 1,
            root: u64::MAX,
            count: 1,
            esize: 8,
        };
        let mut s = Sched::new(&team, 1, h);
        s.mates = Some(Arc::new(Mates::new(area, &[0, 1], 0)));
        let done = |j: usize| blocks[j].0[1].load(Ordering::Relaxed);
        // the user drops the team: the schedule holds the last handle
        drop(team);
        assert_eq!(done(0), 0);
        assert!(reg.list.lock().is_empty());
        // the request and its schedule go: the last handle's drop marks
        drop(s);
        assert_eq!(
            done(0),
            DROPPED,
            "a schedule's area was not marked when it dropped the last handle"
        );
        assert_eq!(
            reg.list.lock().len(),
            1,
            "freed while the host-mate holds it"
        );
        // the host-mate drops it too: the block is freed at the next look
        blocks[1].0[1].store(DROPPED, Ordering::Relaxed);
        let mut freed = Vec::new();
        reg.reclaim(|o| freed.push(o));
        assert_eq!(freed, [off]);
        assert!(pg.inner.heap.lock().free_local(off).is_ok());
        assert!(reg.list.lock().is_empty());
    }
}
