//! Teams: ordered subsets of the job's ranks that run collectives among
//! themselves (OpenSHMEM teams, MPI communicators, GASNet-EX teams, UPC++
//! and Lamellar teams). [`Pgas::world`] is every rank; a team is split
//! into smaller ones by a collective over it (`split_strided`,
//! `split_2d`, `split`: see `team_split.rs`), and its collectives are in
//! `team_coll.rs`.
//!
//! A team's members are numbered 0..size in team order; `world_rank(i)`
//! and `team_rank_of(w)` translate. Every rank of the parent gets a
//! [`Team`] from a split, members and non-members alike; a non-member's
//! team ops are errors naming the rank ([`Team::is_member`] tells).
//!
//! This module has the plumbing the collectives share: a collective's
//! number on the team, sending one step's data to a member (in chunks of
//! the fabric's Medium size) and waiting for a member's, with a hang
//! report that says what is awaited and an error naming both sides when
//! two members called different things.

use crate::context::Pgas;
use crate::reduce::Op;
use crate::team_mail::{self, CollKind, Found, Header, Key};
use splitrt_am::{Error, Payload, Result};
use splitrt_runtime::hang::HangWatch;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) use crate::team_core::{TeamInner, WORLD_ID};

/// A team: an ordered subset of the job's ranks (see the module docs).
/// Cheap to clone; clones share the team's collective sequence, so a
/// rank's collectives on a team must still come one at a time.
///
/// ```no_run
/// use splitrt_pgas::{Op, Pgas};
/// # fn main() -> splitrt_am::Result<()> {
/// let pg = Pgas::attach()?;
/// let world = pg.world();
/// // even and odd world ranks, as two teams
/// let half = world.split(Some(pg.rank() as u32 % 2), 0)?;
/// let mut x = [pg.rank() as u64];
/// half.allreduce(&mut x, Op::Sum)?;   // sum over my half only
/// half.barrier()?;
/// pg.finish()
/// # }
/// ```
#[derive(Clone)]
pub struct Team {
    /// What every handle of the team shares (the world's is made once, at
    /// attach: see `team_core.rs`).
    pub(crate) inner: Arc<TeamInner>,
    pub(crate) pg: Pgas,
}

impl Pgas {
    /// The team of every rank (team rank = world rank). Every handle of it
    /// shares one collective sequence. Allocates nothing (the world team
    /// is made at attach).
    pub fn world(&self) -> Team {
        Team {
            inner: self.inner.world_teams[0].clone(),
            pg: self.clone(),
        }
    }

    /// The world team as the world collectives (`Pgas::barrier`,
    /// `broadcast`, `reduce`, `allreduce`) use it: the same team and
    /// sequence, with reports naming the `Pgas` call. Allocates nothing.
    pub(crate) fn world_for_pgas(&self) -> Team {
        Team {
            inner: self.inner.world_teams[1].clone(),
            pg: self.clone(),
        }
    }
}

impl Drop for Team {
    /// The last handle of a split team marks the team dropped in this
    /// rank's blocks of it at once (`TeamCounters::drop_areas`), so its
    /// host-mates may free theirs even if this rank sets up no other team.
    /// The world team's description is also held by the context, so no
    /// handle of it is ever the last: its areas are held until the job's
    /// end (its host-group area is dropped with the context, after the
    /// endpoint, and marks nothing). Two threads dropping a split team's
    /// last two handles at once both see the other's: then the areas are
    /// marked at this rank's next team set-up.
    fn drop(&mut self) {
        if self.inner.id == WORLD_ID {
            return;
        }
        // `get_mut` succeeds only for the one handle (no other Arc, no
        // Weak) of the description and of its counters: no other thread
        // can reach them, so nothing reads the area being retired here
        let Some(c) = Arc::get_mut(&mut self.inner).and_then(|t| Arc::get_mut(&mut t.counters))
        else {
            return;
        };
        // Mapped: `reclaim` stores into this rank's blocks and loads from
        // host-mates' through the retired areas' `SegmentRef`s, all taken
        // from `self.pg`'s endpoint (`Inner::direct`). `self.pg` holds an
        // `Arc` of the context, which owns the endpoint, which owns the
        // fabric holding the mappings (`Endpoint::finish` unmaps nothing;
        // the fabric goes with the endpoint's last handle), and `self.pg`
        // is dropped only after this body returns: every segment is mapped
        // throughout.
        let i = &self.pg.inner;
        c.drop_areas(&i.team_areas, |off| {
            let _ = i.heap.lock().free_local(off);
        });
    }
}

/// The name of reduction operator code `c` (see [`op_code`]).
pub(crate) fn op_name(c: u64) -> String {
    match c {
        1 => "Sum",
        2 => "Prod",
        3 => "Min",
        4 => "Max",
        5 => "BitAnd",
        6 => "BitOr",
        7 => "BitXor",
        _ => "unknown",
    }
    .into()
}

/// The wire code of `op` (never 0: 0 is "no op").
pub(crate) fn op_code(op: Op) -> u64 {
    match op {
        Op::Sum => 1,
        Op::Prod => 2,
        Op::Min => 3,
        Op::Max => 4,
        Op::BitAnd => 5,
        Op::BitOr => 6,
        Op::BitXor => 7,
    }
}

impl Team {
    /// This rank's team rank, or `None` if it is not a member.
    pub fn rank(&self) -> Option<usize> {
        self.inner.me
    }

    /// Whether this rank is a member.
    pub fn is_member(&self) -> bool {
        self.inner.me.is_some()
    }

    /// Members of the team (0 for a non-member's handle of a team it
    /// knows nothing of: a `split` with no color).
    pub fn size(&self) -> usize {
        self.inner.members.len()
    }

    /// The world rank of team rank `i`, if `i` is a team rank.
    pub fn world_rank(&self, i: usize) -> Option<usize> {
        self.inner.members.get(i)
    }

    /// The team rank of world rank `world`, if it is a member.
    pub fn team_rank_of(&self, world: usize) -> Option<usize> {
        self.inner.members.position(world)
    }

    /// Every member's world rank, in team order.
    pub fn members(&self) -> &[usize] {
        self.inner.members.as_slice()
    }

    /// The PGAS context the team belongs to.
    pub fn pgas(&self) -> &Pgas {
        &self.pg
    }

    /// This rank's team rank, or an error naming it for `what` called by
    /// a non-member.
    pub(crate) fn member(&self, what: &str) -> Result<usize> {
        let pg = &self.pg;
        self.inner.me.ok_or_else(|| {
            Error::usage(format!(
                "{what} called by rank {}, which is not a member of team {:#x} (members: {})",
                pg.rank(),
                self.inner.id,
                short_list(self.inner.members.as_slice())
            ))
            .at_rank(pg.rank())
        })
    }

    /// The number of the collective starting now on this team.
    pub(crate) fn next_seq(&self) -> u64 {
        // taken by the hierarchical set-up of this very collective
        // (`team_hier.rs`), which then went by messages
        let held = self.inner.counters.held_seq.swap(0, Ordering::Relaxed);
        if held != 0 {
            return held;
        }
        self.inner.counters.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A usage error of `what` at this rank.
    pub(crate) fn usage(&self, what: CollKind, why: impl std::fmt::Display) -> Error {
        Error::usage(format!("{}: {why}", what.name())).at_rank(self.pg.rank())
    }

    /// Send step `tag` of collective `seq` (header `h`) to team rank `to`.
    pub(crate) fn send(
        &self,
        seq: u64,
        tag: u64,
        h: &Header,
        to: usize,
        data: &[u8],
    ) -> Result<()> {
        let i = &self.pg.inner;
        let peer = self.inner.members.at(to);
        let chunk = i.ep.max_medium(peer)?.max(1);
        let total = data.len() as u64;
        let mut off = 0usize;
        loop {
            let end = (off + chunk).min(data.len());
            let a = team_mail::args(self.inner.id, seq, tag, h, off as u64, total);
            i.ep.request(peer, i.team_h, &a, Payload::Medium(&data[off..end]))?;
            if i.direct[peer].is_empty() {
                // another host's (or the AM path): `Team::off_host_messages`
                self.inner.counters.off_host.fetch_add(1, Ordering::Relaxed);
            }
            off = end;
            if off >= data.len() {
                return Ok(());
            }
        }
    }

    /// Wait for step `tag` of collective `seq` from team rank `from` and
    /// copy its data into `out` (whose length the data must have). A
    /// message of this collective whose sender called something else than
    /// `h` is an error naming both ranks and both calls; it ends the job
    /// (the other members would wait forever).
    pub(crate) fn recv(
        &self,
        seq: u64,
        tag: u64,
        h: &Header,
        from: usize,
        out: &mut [u8],
        hops: u32,
    ) -> Result<()> {
        let key = self.key(seq, tag, from);
        let mail = &self.pg.inner.team_mail;
        // one hang watch for the whole wait (re-armed waits go on
        // counting); progress is this message's chunks arriving
        let mut watch = self.hang_watch(hops);
        let mut got = 0;
        loop {
            // pending non-blocking collectives progress meanwhile
            // (`team_sched.rs`): a member may wait for their messages
            mail.sweep();
            if self.try_take(key, h, out)? {
                return Ok(());
            }
            let now = mail.filed(key);
            if now != got {
                got = now;
                watch.progress();
            }
            self.wait_watched(key, h, from, &mut watch, &|| false)?;
        }
    }

    /// The mailbox key of step `tag` of collective `seq` from team rank
    /// `from`.
    pub(crate) fn key(&self, seq: u64, tag: u64, from: usize) -> Key {
        (self.inner.id, seq, tag, self.inner.members.at(from))
    }

    /// What a member waiting for `key` waits for (the hang report's words).
    pub(crate) fn awaiting(&self, key: Key, h: &Header, from: usize) -> String {
        let kind = CollKind::from_code(h.kind).map_or("a team collective", CollKind::name);
        format!(
            "in {kind} #{} on team {:#x} ({} members), waiting for team rank {from} \
             (world rank {}) to send its part",
            key.1,
            self.inner.id,
            self.inner.members.len(),
            key.3
        )
    }

    /// The hang watch of a wait for a message `hops` hops away, to keep
    /// across re-armed waits ([`wait_watched`](Self::wait_watched)).
    ///
    /// `hops`: how many messages the sender must receive, one after the
    /// other, before it sends this one (0: it sends it on entering the
    /// collective). The hang report comes `hops` seconds later than
    /// configured, so that when a member never calls, the member waiting
    /// for its first message (0 hops: it names the missing member) reports
    /// before those waiting for members that wait for it in turn.
    pub(crate) fn hang_watch(&self, hops: u32) -> HangWatch {
        let later = std::time::Duration::from_secs(u64::from(hops));
        HangWatch::new(self.pg.inner.ep.config()).patient(later)
    }

    /// Wait (serving traffic, with hang reports) until message `key` from
    /// team rank `from` is in, or something is wrong with the collective,
    /// or a message arrived for a pending non-blocking collective (the
    /// caller then sweeps them: `Mailbox::sweep`), or `also` (something
    /// else the caller looks at: a hierarchical scan's host-mates' steps,
    /// `team_mates.rs`).
    ///
    /// `watch` ([`hang_watch`](Self::hang_watch)) is the caller's, which
    /// only the caller tells of progress (of the collective it waits for):
    /// unrelated traffic served meanwhile, and waking for a background
    /// message and waiting again, do not restart it, so a member that
    /// never arrives is reported in the configured time however busy the
    /// rank is with other messages.
    pub(crate) fn wait_watched(
        &self,
        key: Key,
        h: &Header,
        from: usize,
        watch: &mut HangWatch,
        also: &dyn Fn() -> bool,
    ) -> Result<()> {
        let i = &self.pg.inner;
        let mail = &i.team_mail;
        let what = || self.awaiting(key, h, from);
        i.ep.wait_watched(&what, watch, || {
            mail.ready(key, h) || mail.background_due() || also()
        })
    }

    /// Take message `key` into `out` if it is in: `Ok(false)` if not yet.
    /// A mismatching message of the same collective is an error naming
    /// both calls, which ends the job.
    pub(crate) fn try_take(&self, key: Key, h: &Header, out: &mut [u8]) -> Result<bool> {
        let i = &self.pg.inner;
        let (seq, src) = (key.1, key.3);
        let kind = CollKind::from_code(h.kind).map_or("a team collective", CollKind::name);
        match i.team_mail.take(key, h, out) {
            Found::Done => Ok(true),
            Found::Waiting => Ok(false),
            Found::Failed(why) => Err(Error::usage(why).at_rank(i.rank)),
            Found::BadLength(n) => {
                let why = format!(
                    "team collective mismatch on team {:#x}, collective #{seq} ({kind}): rank \
                     {src} sent {n} B where rank {} expected {} B (alltoallv: the sender's \
                     send_counts and the receiver's recv_counts disagree)",
                    self.inner.id,
                    i.rank,
                    out.len()
                );
                // the sender went on; the others may wait for us: end the job
                i.ep.abort(&why);
                Err(Error::usage(why).at_rank(i.rank))
            }
            Found::Mismatch(k, theirs) => Err(self.mismatch(k, &theirs, h)),
        }
    }

    /// Message `k` (of collective `k.1`) came from a member that called
    /// `theirs` where this one called `h`: the error naming both ranks
    /// and both calls. It ends the job (the other members would wait
    /// forever).
    pub(crate) fn mismatch(&self, k: Key, theirs: &Header, h: &Header) -> Error {
        let i = &self.pg.inner;
        let why = format!(
            "team collective mismatch on team {:#x}, collective #{}: rank {} (team rank {}) \
             called {} while rank {} (team rank {}) called {} (every member must call the \
             same collectives in the same order, with the same root, op and lengths)",
            self.inner.id,
            k.1,
            k.3,
            self.team_rank_of(k.3).map_or("?".into(), |r| r.to_string()),
            theirs.describe(&op_name),
            i.rank,
            self.inner.me.map_or("?".into(), |r| r.to_string()),
            h.describe(&op_name)
        );
        i.ep.abort(&why);
        Error::usage(why).at_rank(i.rank)
    }
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("id", &self.inner.id)
            .field("rank", &self.inner.me)
            .field("members", &self.inner.members.as_slice())
            .finish()
    }
}

/// A list of ranks, shortened past 16.
pub(crate) fn short_list(r: &[usize]) -> String {
    let mut s: Vec<String> = r.iter().take(16).map(|x| x.to_string()).collect();
    if r.len() > 16 {
        s.push(format!("... ({} in all)", r.len()));
    }
    if s.is_empty() {
        return "none".into();
    }
    s.join(", ")
}
